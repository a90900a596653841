"""Helpers shared by integration and e2e tests: real broker, real topics, no sleeping-and-hoping."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, TypeVar

from kafka import KafkaConsumer, TopicPartition

from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.kafka.kafka_client import kafka_client_kwargs

ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")
Record = tuple[bytes | None, dict[str, Any], int]  # a record read back: key, JSON value, partition

# Where tests may put the ports they listen on. Unset: 20000-32000, below the kernel's
# ephemeral range (32768 up here), so no outgoing connection (every Kafka client makes
# many) takes a port between our check and the bind. On a machine shared by several
# engineers, each sets their own block (e.g. PASSK_TEST_PORTS=17000-18999).
TEST_PORTS_ENV = "PASSK_TEST_PORTS"


def test_port_range() -> tuple[int, int]:
    """[low, high) from PASSK_TEST_PORTS ("LOW-HIGH", both included), else 20000-32000;
    under pytest-xdist, this worker's own slice of it (see xdist_slice)."""
    spec = os.environ.get(TEST_PORTS_ENV, "").strip()
    if not spec:
        return xdist_slice(20_000, 32_000)
    low, _, high = spec.partition("-")
    if not (low.isdigit() and high.isdigit() and int(low) < int(high)):
        raise ValueError(f"{TEST_PORTS_ENV}={spec!r}: expected LOW-HIGH, e.g. 17000-18999")
    return xdist_slice(int(low), int(high) + 1)


def xdist_slice(low: int, high: int) -> tuple[int, int]:
    """Worker gwN of M gets the N-th of M equal parts of [low, high): two workers never draw
    the same port between one's check and its bind. Outside xdist, the whole range."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if not worker.startswith("gw") or count <= 1:
        return low, high
    size = (high - low) // count
    index = int(worker[2:])
    return low + index * size, low + (index + 1) * size


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


# The ports handed out lately in this process. A port is free until its server binds it,
# and a test draws several before starting any server: without this, two draws of one test
# could return the same free port (seen: Prometheus and Alertmanager both given one port).
# Bounded: far more than any one test draws, far fewer than a worker's slice of the range.
_HANDED: deque[int] = deque(maxlen=512)


def free_ports(count: int, *, stride: int = 1, groups: int = 1) -> int:
    """A base port such that base + g*stride + i is free for every i < count, g < groups
    (consecutive ports for workers' /metrics; brokers and, `stride` up, their controllers),
    drawn at random from the test port range, none of them handed out lately."""
    low, high = test_port_range()
    span = count + (groups - 1) * stride
    if high - low < span:
        raise RuntimeError(f"the test port range {low}-{high - 1} is smaller than {span}")
    rng = random.Random()
    for _ in range(500):
        base = rng.randrange(low, high - span + 1)
        ports = [base + g * stride + i for g in range(groups) for i in range(count)]
        if not set(ports) & set(_HANDED) and all(port_is_free(p) for p in ports):
            _HANDED.extend(ports)
            return base
    raise RuntimeError(f"no {count} free ports (x{groups}) in {low}-{high - 1}")


def _checked(condition: Callable[[], T], deadline: float, timeout: float, what: str) -> T:
    """The condition's value; past the deadline, a falsy value fails the test."""
    value = condition()
    if not value and time.monotonic() >= deadline:
        raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {value!r})")
    return value


def stacks_of(pid: int) -> str:
    """What a live worker's threads are doing (py-spy, installed with the dev extras), for
    a failure that waited on the worker in vain."""
    spy = Path(sys.executable).with_name("py-spy")
    done = subprocess.run(
        [str(spy), "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=60
    )
    return (done.stdout + done.stderr)[-6000:]


def tasks_of(pid: int, log: Path, *, timeout: float = 30.0) -> str:
    """What each of a live worker's asyncio tasks awaits, followed to the innermost await:
    SIGUSR2 makes the worker log it (services/runtime/awaiting.py); this returns that part
    of its log. py-spy sees threads, not which coroutine waits on what: a stuck agent is
    an idle thread to it."""
    start = log.stat().st_size
    os.kill(pid, signal.SIGUSR2)

    def dumped() -> str | None:
        with open(log, "rb") as f:
            f.seek(start)
            added = f.read().decode(errors="replace")
        begin = added.find("asyncio tasks and what each awaits")
        end = added.find("end of tasks", begin)
        return added[begin:end] if begin >= 0 and end >= 0 else None

    return wait_for(dumped, timeout=timeout, interval=0.5, what=f"pid {pid}'s task dump")


def wait_for(
    condition: Callable[[], T], *, timeout: float, interval: float = 0.2, what: str = "condition"
) -> T:
    """Poll `condition` until it returns something truthy, or fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := _checked(condition, deadline, timeout, what)):
        time.sleep(interval)
    return value


async def await_condition(
    condition: Callable[[], T], *, timeout: float, interval: float = 0.02, what: str = "condition"
) -> T:
    """`wait_for` inside an event loop: poll without blocking the tasks under test."""
    deadline = time.monotonic() + timeout
    while not (value := _checked(condition, deadline, timeout, what)):
        await asyncio.sleep(interval)
    return value


def isolated_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The environment for a subprocess that talks to this test's topics only."""
    env = dict(os.environ)
    env.update(
        KAFKA_BOOTSTRAP_SERVERS=settings.kafka_bootstrap_servers,
        PASSK_TOPIC_PREFIX=settings.topic_prefix,
        PASSK_DATABASE_URL=settings.database_url,
        PASSK_SESSION_WAIT_S=str(settings.session_wait_s),
        PASSK_JUDGE_WAIT_S=str(settings.judge_wait_s),
        PASSK_DATA_DIR=str(settings.data_dir),
        PASSK_UNCALIBRATED_JUDGES=settings.uncalibrated_judges,
        PYTHONUNBUFFERED="1",
    )
    env.update(kafka_security_env(settings))
    if settings.openai_base_url:
        env["OPENAI_BASE_URL"] = settings.openai_base_url
    if settings.openai_api_key:
        env["OPENAI_API_KEY"] = settings.openai_api_key
    env.update(extra)
    return env


def delete_topics_with_prefix(settings: Settings) -> None:
    """Delete every topic a test made (ours and the ones Faust makes under the app id).

    A broker holds a few open files and memory maps per partition, and the process limit
    on open files here is 20,000: a whole suite that kept its topics (a dozen topics of
    eight partitions per test) took the shared broker past it and killed it."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    try:
        admin = KafkaAdminClient(**kafka_client_kwargs(settings), request_timeout_ms=30000)
    except KafkaError:
        return  # a test that stopped the broker: nothing left to tidy there
    try:
        names = [t for t in admin.list_topics() if t.startswith(settings.topic_prefix)]
        if names:
            admin.delete_topics(names, timeout_ms=30000)
    except KafkaError:
        pass  # best effort: tidying must not fail a test that passed
    finally:
        admin.close()


def kafka_security_env(settings: Settings) -> dict[str, str]:
    """The Kafka security variables of these settings, for a subprocess."""
    env = {
        "KAFKA_SECURITY_PROTOCOL": settings.kafka_security_protocol,
        "KAFKA_SASL_MECHANISM": settings.kafka_sasl_mechanism,
    }
    if settings.kafka_sasl_username:
        env["KAFKA_SASL_USERNAME"] = settings.kafka_sasl_username
    if settings.kafka_sasl_password is not None:
        env["KAFKA_SASL_PASSWORD"] = settings.kafka_sasl_password.get_secret_value()
    if settings.kafka_ssl_cafile is not None:
        env["KAFKA_SSL_CAFILE"] = str(settings.kafka_ssl_cafile)
    return env


def new_prefix() -> str:
    return f"passk.t{uuid.uuid4().hex[:10]}."


def read_topic(
    settings: Settings, topic: Topic, *, min_count: int = 0, timeout: float = 30.0
) -> list[tuple[bytes | None, dict[str, Any], int]]:
    """Every record of a topic as (key, json value, partition), waiting until at least min_count."""
    name = topic_name(topic, settings)

    def fetch() -> list[tuple[bytes | None, dict[str, Any], int]]:
        consumer = KafkaConsumer(
            **kafka_client_kwargs(settings),
            enable_auto_commit=False,
            consumer_timeout_ms=1500,
        )
        try:
            parts = consumer.partitions_for_topic(name) or set()
            tps = [TopicPartition(name, p) for p in parts]
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
            end = consumer.end_offsets(tps)
            out = []
            while any(consumer.position(tp) < end[tp] for tp in tps):
                for records in consumer.poll(timeout_ms=1000).values():
                    for r in records:
                        # a tombstone (a compacted table's deleted key) reads as None
                        out.append(
                            (r.key, None if r.value is None else json.loads(r.value), r.partition)
                        )
            return out
        finally:
            consumer.close()

    if min_count == 0:
        return fetch()
    return wait_for(
        lambda: (lambda rows: rows if len(rows) >= min_count else None)(fetch()),
        timeout=timeout,
        interval=1.0,
        what=f"{min_count} records on {name}",
    )


@contextmanager
def running(
    args: list[str], env: dict[str, str], log: Path, ready: Callable[[], Any] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """Run a passk process for the duration of a block; always stopped afterwards."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "services.cli", *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            start_new_session=True,
        )
    try:
        if ready is not None:
            wait_for(ready, timeout=60, what=f"{' '.join(args)} ready")
        yield proc
    finally:
        stop(proc)


@contextmanager
def workers(
    settings: Settings,
    processors: list[str],
    env: dict[str, str],
    log: Path,
    *,
    extra: Mapping[str, Mapping[str, str]] | None = None,
    timeout: float = 120,
) -> Iterator[None]:
    """`passk worker <p>` for each processor (env, plus `extra[p]` for that one), for the
    duration of a block that starts once every group has settled; stopped last-first."""
    with ExitStack() as stack:
        for p in processors:
            stack.enter_context(running(["worker", p], {**env, **(extra or {}).get(p, {})}, log))
        wait_for(lambda: settled(settings, processors), timeout=timeout, what="workers joined")
        yield


def passk(
    settings: Settings, *args: str, timeout: float = 120, **env: str
) -> subprocess.CompletedProcess[str]:
    """`passk <args>` as an operator runs it against this test's topics, output captured."""
    return subprocess.run(
        [sys.executable, "-m", "services.cli", *args],
        env=isolated_env(settings, **{"COLUMNS": "200", **env}),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def letter_key(letter: dict[str, Any]) -> str:
    """The key of the record a dead letter holds, as text."""
    return base64.b64decode(letter["key_b64"]).decode()


def reasons_by_key(dead: list[Record]) -> defaultdict[str, dict[str, str]]:
    """Dead letters as read from their topic, as {record key: {processor: reason}}."""
    out: defaultdict[str, dict[str, str]] = defaultdict(dict)
    for _, d, _ in dead:
        out[letter_key(d)][d["processor"]] = d["reason"]
    return out


def stop(proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def produce(settings: Settings, topic: Topic, records: list[tuple[str | None, bytes]]) -> None:
    """Send (key, raw value) records with kafka-python, acks=all, and wait for every ack."""
    from kafka import KafkaProducer

    producer = KafkaProducer(**kafka_client_kwargs(settings), acks="all")
    try:
        futures = [
            producer.send(topic_name(topic, settings), key=k.encode() if k else None, value=v)
            for k, v in records
        ]
        producer.flush()
        for f in futures:
            f.get(timeout=30)
    finally:
        producer.close()


def publish_scenarios(settings: Settings, scenarios: list[Any]) -> None:
    """Put versioned scenarios on the compacted topic exactly as `passk scenarios publish` does."""
    produce(
        settings,
        Topic.SCENARIOS,
        [(s.id, s.model_dump_json().encode()) for s in scenarios],
    )


def settled(settings: Settings, processors: list[str]) -> bool:
    """Every processor's group is stable and has consumed everything on its inputs."""
    from services.cli.status import processor_status

    return all(s.settled for s in processor_status(processors, settings))


@contextmanager
def serve_in_thread(app: Any, port: int) -> Iterator[None]:
    """Serve an aiohttp `app` on 127.0.0.1:port from its own event loop in its own thread,
    so that sync and async tests alike can talk to it; stopped on exit."""
    import asyncio
    import threading

    from aiohttp import web

    loop = asyncio.new_event_loop()
    ready = threading.Event()
    runner = web.AppRunner(app, access_log=None)

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    if not ready.wait(10):
        raise RuntimeError(f"test server on 127.0.0.1:{port} did not start within 10 s")
    try:
        yield
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


def installed_tool(name: str, package: str) -> str:
    """The path of a tool from Debian's packages a test runs (promtool, amtool, chromium).
    Absent: the test is skipped with the reason, so `make test-unit` runs on a machine
    without them; with PASSK_REQUIRE_TOOLS=1 (.ci/run sets it) it fails instead, so CI
    can never pass by skipping them."""
    import shutil

    import pytest

    path = shutil.which(name)
    if path is None:
        why = f"{name} not found: apt-get install {package} (.ci/run does)"
        if os.environ.get("PASSK_REQUIRE_TOOLS") == "1":
            pytest.fail(why)
        pytest.skip(why)
    return path
