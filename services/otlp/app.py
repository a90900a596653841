"""`passk worker otlp`: the OTLP/HTTP trace receiver, and (with PASSK_OTLP_EXPORT_ENDPOINT)
the exporter of evaluations, in one supervised process with its own /metrics."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from pathlib import Path

from aiohttp import web
from prometheus_client import REGISTRY

from schemas.scenario import Scenario
from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.kafka.catalog import CatalogUnavailable, ScenarioCatalog
from services.kafka.producer import TrafficProducer
from services.otlp.export import run_exporter
from services.otlp.guard import Guard
from services.otlp.importer import Probe
from services.otlp.metrics import OtlpMetrics
from services.otlp.publish import KafkaPublisher
from services.otlp.receiver import Receiver, make_app
from services.otlp.settings import OtlpSettings
from services.runtime.metrics import serve_metrics

log = logging.getLogger("passk.otlp")


async def run(
    settings: Settings,
    otlp: OtlpSettings,
    metrics: OtlpMetrics,
    open_probe: Callable[[], Probe] | None = None,
) -> None:
    publisher = KafkaPublisher(
        lambda: TrafficProducer(settings, max_block_ms=int(otlp.publish_timeout_s * 1000)),
        otlp.publish_timeout_s,
        topic_name(Topic.DEAD_LETTERS, settings),
    )
    catalog = ScenarioCatalog(settings)
    catalog_task = asyncio.create_task(_follow_catalog(catalog))

    def scenarios() -> list[Scenario] | None:
        # Until the catalog is read, a plain trace is skipped (no_passk_ids), never guessed.
        return list(catalog.latest().values()) if catalog.is_ready else None

    probe = open_probe() if open_probe is not None else None
    receiver = Receiver(otlp, publisher, metrics, scenarios=scenarios, probe=probe)
    app = make_app(receiver)
    guards: list[Guard] = []

    async def rearm(request: web.Request, _response: web.StreamResponse) -> None:
        for guard in guards:
            guard.response_sent(request.transport)

    app.on_response_prepare.append(rearm)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    assert runner.server is not None
    # Not web.TCPSite: the guard bounds connections and times request headers first.
    guard = Guard(
        runner.server,
        max_connections=otlp.max_connections,
        header_timeout_s=otlp.header_timeout_s,
        metrics=metrics,
        say=receiver.flood.say,
    )
    guards.append(guard)
    server = await asyncio.get_running_loop().create_server(
        guard, otlp.host, otlp.port, reuse_address=True, backlog=min(otlp.max_connections, 1024)
    )
    log.warning("otlp: receiving traces on http://%s:%s/v1/traces", otlp.host, otlp.port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    exporter = None
    if otlp.export_endpoint:
        exporter = asyncio.create_task(run_exporter(settings, otlp, metrics, stop))
    await stop.wait()
    server.close()
    await runner.cleanup()
    if exporter is not None:
        await exporter
    await publisher.close()
    if probe is not None:
        await probe.close()
    catalog_task.cancel()
    await catalog.stop()


async def _follow_catalog(catalog: ScenarioCatalog) -> None:
    """Read the scenarios (their match rules) and follow them; a broker or topic that is
    not there yet is asked again every few seconds."""
    while True:
        try:
            await catalog.ready(timeout=30.0)
            return
        except CatalogUnavailable as exc:
            log.warning(
                "otlp: scenario catalog not read yet (%s); plain traces are skipped until it is",
                exc,
            )
            await asyncio.sleep(5.0)


class OncePerMinute(logging.Filter):
    """aiohttp's own server log: a client's broken body (answered 400 already) makes aiohttp
    log a traceback when it drains the rest; a flood of them is said once a minute."""

    def __init__(self, every_s: float = 60.0) -> None:
        super().__init__()
        self.every_s = every_s
        self._last: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        import time

        now = time.monotonic()
        key = str(record.msg)[:80]
        if now - self._last.get(key, -self.every_s) < self.every_s:
            return False
        self._last[key] = now
        return True


class OtlpWorker:
    """What `passk worker otlp` runs (the Faust workers' `app.main()` shape)."""

    def __init__(
        self, settings: Settings, otlp: OtlpSettings, open_probe: Callable[[], Probe] | None = None
    ) -> None:
        self.settings = settings
        self.otlp = otlp
        self.open_probe = open_probe

    def main(self) -> None:
        level = self.settings.log_level.upper()
        logging.basicConfig(level=level if level in logging._nameToLevel else "WARNING")
        logging.getLogger("aiohttp.server").addFilter(OncePerMinute())
        if self.settings.metrics_port:
            serve_metrics(self.settings.metrics_port, REGISTRY)
        asyncio.run(run(self.settings, self.otlp, OtlpMetrics(REGISTRY), self.open_probe))


def build(
    settings: Settings, *, state_probe: Callable[[Path], Callable[[], Probe]] | None = None
) -> OtlpWorker:
    """The receiver (and exporter) worker from `settings`; its own settings, the
    PASSK_OTLP_* variables, are read here, once, when the worker is built.
    `state_probe(path)`: opens a target file's state probe (the harness's, handed over by
    the CLI: services/cli/wiring.py), used when PASSK_OTLP_STATE_PROBE names a file."""
    otlp = OtlpSettings()
    open_probe = None
    if otlp.state_probe:
        if state_probe is None:
            raise RuntimeError("PASSK_OTLP_STATE_PROBE is set but no state probe was handed")
        open_probe = state_probe(Path(otlp.state_probe))
    return OtlpWorker(settings, otlp, open_probe)
