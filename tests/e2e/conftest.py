"""The whole pipeline as an operator runs it: real broker, the stand-in judge over HTTP,
every processor as its own `passk worker` process, and the CLI for everything else."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from services.cli.status import processor_status
from services.contract.processors import PROCESSORS as REGISTRY
from services.contract.processors import WORKERS, metrics_ports
from services.contract.settings import Settings
from services.contract.topics import Topic
from services.storage.store import Store
from tests.conftest import make_settings
from tests.support import (
    ROOT,
    delete_topics_with_prefix,
    free_ports,
    isolated_env,
    read_topic,
    settled,
    stacks_of,
    stop,
    tasks_of,
    wait_for,
)

PROCESSORS = list(WORKERS)
# Ports a pipeline keeps for /metrics: one per processor of the registry, servers too (the
# auditor a test starts serves on base + its offset, as under `make up`).
METRICS_BLOCK = max(spec.metrics_offset for spec in REGISTRY.values()) + 1
BIN = Path(sys.executable).parent  # supervisord and supervisorctl, installed with passk


def supervise_config(conf: Path, logs: Path, env: dict[str, str], *args: str) -> None:
    """`passk supervise config` as `make up` writes it: conf for the workers, logs in logs."""
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "services.cli",
            "supervise",
            "config",
            "--out",
            str(conf),
            "--log-dir",
            str(logs),
            *args,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr


@contextmanager
def supervisord(conf: Path, env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    """supervisord running conf for the duration of a block; shut down afterwards."""
    daemon = subprocess.Popen(
        [str(BIN / "supervisord"), "-n", "-c", str(conf)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    try:
        yield daemon
    finally:
        subprocess.run(
            [str(BIN / "supervisorctl"), "-c", str(conf), "shutdown"],
            capture_output=True,
            timeout=120,
        )
        stop(daemon, timeout=60)


def supervised_pid(conf: Path, program: str) -> int | None:
    """The pid of a RUNNING program under supervisord, else None."""
    out = subprocess.run(
        [str(BIN / "supervisorctl"), "-c", str(conf), "status", program],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    return int(out.split("pid ")[1].split(",")[0]) if "RUNNING" in out else None


def free_port() -> int:
    """A free port in the test port range (`PASSK_TEST_PORTS`, see tests.support)."""
    return free_ports(1)


def free_port_block(size: int) -> int:
    """The first of `size` consecutive free ports: workers serve /metrics on base + i, the
    rule `make up` and the rendered Prometheus config follow."""
    return free_ports(size)


def _or_why_not(part: Callable[[], str]) -> str:
    """A part of a failure's explanation, or why it could not be had: explaining must not
    replace the failure it explains with one of its own (a broker down, a worker gone)."""
    try:
        return part()
    except Exception as exc:  # any reason is shown, none raised
        return f"(not available: {type(exc).__name__}: {exc})"


@dataclass
class Pipeline:
    settings: Settings
    env: dict[str, str]
    logs: Path
    # each worker serves /metrics on metrics_base + its registry offset; 0: none serves it
    metrics_base: int = 0
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    last_status: str = ""
    # Per-processor additions to env (a secured broker: each processor its own user).
    worker_env: dict[str, dict[str, str]] = field(default_factory=dict)

    def start(self, name: str, *args: str, env: dict[str, str] | None = None) -> None:
        log = open(self.logs / f"{name}.log", "ab")  # lives with the process
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "services.cli", *args],
            env={**self.env, **(env or {})},
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def metrics_port(self, name: str) -> int:
        # Without a base, ports 1..5 would be bound: two such pipelines at once (another
        # test run on the machine) crashed each other's workers with "Address already in use".
        return metrics_ports([name], self.metrics_base)[name] if self.metrics_base else 0

    def start_worker(self, name: str, instance: str | None = None) -> None:
        """Start a worker of processor `name`; `instance` names a second or third one
        (which serves no /metrics: the port is the first instance's, and keeps its state in
        a data dir of its own, as a worker on another machine would: RocksDB locks a
        partition's store to one process)."""
        env = dict(self.worker_env.get(name) or {})
        if instance is None:
            env.setdefault("PASSK_METRICS_PORT", str(self.metrics_port(name)))
        else:
            env.setdefault("PASSK_DATA_DIR", str(self.logs.parent / "data" / instance))
        self.start(instance or name, "worker", name, env=env)

    def publish_and_generate(
        self,
        scenarios: Path,
        out: Path,
        run_id: str,
        *generate: str,
        trials: int,
        seed: int,
        pass_prob: float,
    ) -> tuple[Path, dict]:
        """Publish `scenarios` and generate a run's traffic in `out` (with more `generate`
        options, if any): the traffic file and the expected outcomes (the generator's,
        independent of the pipeline), which stay in out/expected.json."""
        traffic, expected_file = out / "traffic.jsonl", out / "expected.json"
        assert self.passk("scenarios", "publish", str(scenarios)).returncode == 0
        gen = self.passk(
            "generate",
            "--scenarios",
            str(scenarios),
            "--run-id",
            run_id,
            "--out",
            str(traffic),
            "--expected",
            str(expected_file),
            "--trials",
            str(trials),
            "--seed",
            str(seed),
            "--default-pass-prob",
            str(pass_prob),
            *generate,
        )
        assert gen.returncode == 0, gen.stderr
        return traffic, json.loads(expected_file.read_text())

    @contextmanager
    def replaying(self, traffic: Path, rate: int) -> Iterator[subprocess.Popen[bytes]]:
        """`passk replay` of `traffic`, `rate` events a second, running in the background
        while the block runs; still running when it ends (a failing test), it is killed."""
        replay = subprocess.Popen(
            [sys.executable, "-m", "services.cli", "replay", str(traffic), "--rate", str(rate)],
            env=self.env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        try:
            yield replay
        finally:
            if replay.poll() is None:
                replay.kill()

    @contextmanager
    def auditing(self, **env: str) -> Iterator[int]:
        """`passk worker audit` (the continuous auditor `make up` supervises) on this
        pipeline for the duration of a block, with `env` added (PASSK_AUDIT_*); yields its
        /metrics port. Stopped after the block, so a shared pipeline keeps nothing of it."""
        port = self.metrics_port("audit")
        self.start("audit", "worker", "audit", env={"PASSK_METRICS_PORT": str(port), **env})
        try:
            yield port
        finally:
            proc = self.procs.pop("audit")
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)

    def kill(self, name: str) -> None:
        """SIGKILL, as a crash: no shutdown hooks, no final commit."""
        proc = self.procs.pop(name)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def passk(
        self, *args: str, timeout: float = 600, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "services.cli", *args],
            env={**self.env, **(env or {})},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def stacks(self, name: str) -> str:
        """What worker `name`'s threads are doing now (py-spy, installed with the dev
        extras), for a failure that waited on a worker in vain."""
        return stacks_of(self.procs[name].pid)

    def explain(self, name: str) -> str:
        """For a failure that waited on worker `name` in vain: every group's state, members
        and lag, the end of the worker's log and what its threads are doing."""
        parts = {
            "processors": self.status_line,
            f"{name}'s log": lambda: (self.logs / f"{name}.log").read_text(errors="replace")[
                -4000:
            ],
            f"{name}'s threads": lambda: self.stacks(name),
            f"{name}'s asyncio tasks": lambda: tasks_of(
                self.procs[name].pid, self.logs / f"{name}.log"
            ),
        }
        return "\n".join(f"{what}:\n{_or_why_not(part)}" for what, part in parts.items())

    def status_line(self, statuses: list | None = None) -> str:
        """Each processor's group state, members and lag, on one line (for failures)."""
        statuses = statuses or processor_status(PROCESSORS, self.settings)
        return "; ".join(f"{s.processor}: {s.state}/{s.members}/lag {s.lag}" for s in statuses)

    def wait_settled(self, timeout: float = 120, processors: list[str] | None = None) -> None:
        def check() -> bool | str:
            statuses = processor_status(processors or PROCESSORS, self.settings)
            if all(s.settled for s in statuses):
                return True
            self.last_status = self.status_line(statuses)
            return False

        self.last_status = ""
        try:
            wait_for(
                check, timeout=timeout, interval=1.0, what="every processor consumed its inputs"
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}; processors: {self.last_status}") from None

    def stop_all(self, timeout: float = 20.0) -> None:
        """SIGTERM to every process at once, then wait for each (SIGKILL past `timeout`):
        each shuts down as it would alone, in the time of the slowest, not of them all."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + timeout
        for proc in self.procs.values():
            try:
                proc.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        self.procs.clear()


def trials_in(store: Store, run_id: str) -> int:
    """How many trials of `run_id` the projection holds (none before the sink made it)."""
    return len(store.trials(run_id)) if store.has_schema() else 0


def assert_replayed(replay: subprocess.Popen[bytes], timeout: float) -> None:
    """The replay ends within `timeout` seconds, and ends well (else its output says why)."""
    assert replay.wait(timeout) == 0, replay.stdout.read() if replay.stdout else ""


def assert_each_trial_once_as_expected(
    store: Store, settings: Settings, run_id: str, expected: dict, *, read_timeout: float = 30.0
) -> dict[str, str]:
    """Every generated trial is in the projection once, with the generator's expected
    outcome, and the verdict log names each with one outcome (a redelivered verdict may sit
    there twice, never with two outcomes). Returns each trial's outcome."""
    rows = store.trials(run_id)
    assert Counter(r.trial_id for r in rows) == Counter(t["trial_id"] for t in expected["trials"])
    outcome = {r.trial_id: r.outcome for r in rows}
    wrong = [t for t in expected["trials"] if outcome[t["trial_id"]] != t["expected_outcome"]]
    assert not wrong, f"{len(wrong)} trials got another outcome, e.g. {wrong[:3]}"
    logged: dict[str, set[str]] = defaultdict(set)
    for _, v, _ in read_topic(settings, Topic.TRIAL_VERDICTS, timeout=read_timeout):
        logged[v["trial_id"]].add(v["outcome"])
    assert set(logged) == set(outcome)
    assert all(len(o) == 1 for o in logged.values())
    return outcome


@contextmanager
def running_pipeline(
    settings: Settings,
    tmp_path: Path,
    processors: list[str],
    *,
    worker_env: dict[str, dict[str, str]] | None = None,
    second_instances: tuple[str, ...] = (),
    settle_timeout: float = 120,
    **extra_env: str,
) -> Iterator[Pipeline]:
    """The stand-in and a worker of each of `processors` (`worker_env[p]` added to p's
    environment), and a second one (`<p>-2`) of each of `second_instances`, every group
    settled, for the duration of a block. All start at once: a group settles once, not
    once per instance."""
    port = free_port()
    env = isolated_env(
        settings,
        OPENAI_BASE_URL=f"http://127.0.0.1:{port}/v1",
        OPENAI_API_KEY="stand-in",
        PASSK_JUDGE_MODEL="passk-standin",
        **extra_env,
    )
    logs = tmp_path / "logs"
    logs.mkdir(exist_ok=True)
    p = Pipeline(
        settings,
        env,
        logs,
        metrics_base=free_port_block(METRICS_BLOCK),
        worker_env={name: dict(extra) for name, extra in (worker_env or {}).items()},
    )
    p.start("judge-standin", "judge-standin", "--host", "127.0.0.1", "--port", str(port))
    for name in processors:
        p.start_worker(name)
    for name in second_instances:
        p.start_worker(name, f"{name}-2")
    try:
        wait_for(
            lambda: (
                all(proc.poll() is None for proc in p.procs.values())
                and settled(settings, processors)
            ),
            timeout=settle_timeout,
            interval=1.0,
            what="stand-in and every worker up",
        )
        yield p
    finally:
        p.stop_all()


@pytest.fixture
def pipeline(settings: Settings, tmp_path: Path) -> Iterator[Pipeline]:
    with running_pipeline(settings, tmp_path, PROCESSORS) as p:
        yield p


# ------------------------------------------------------------------ the shared pipeline
# Starting every worker and the stand-in takes most of a short e2e test. The tests that only
# publish traffic and read results (none kills a worker, stops a broker, changes settings
# or starts a stack) share one started pipeline through the `shared_pipeline` fixture: one
# topic prefix, and in it each test its own run ids and scenario ids, so none sees another's
# trials, windows or verdicts. They run one after another (see pytest_collection_modifyitems)
# and the pipeline stops after the last of them, so it never idles under the tests that
# start their own.
SHARED = "shared_pipeline"


class _SharedPipeline:
    def __init__(self) -> None:
        self.stack: ExitStack | None = None
        self.pipeline: Pipeline | None = None
        self.failed: str | None = None

    def get(self, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Pipeline:
        if self.failed:  # one failed start fails each sharing test at once, not each in 120 s
            pytest.fail(f"the shared pipeline did not start: {self.failed}")
        if self.pipeline is None:
            directory = tmp_path_factory.mktemp("shared-pipeline")
            stack = ExitStack()
            try:
                settings = make_settings(kafka_bootstrap, directory)
                stack.callback(delete_topics_with_prefix, settings)
                self.pipeline = stack.enter_context(
                    running_pipeline(settings, directory, PROCESSORS)
                )
            except BaseException as exc:
                self.failed = str(exc)[:2000]
                stack.close()
                raise
            self.stack = stack
        # A worker that died under an earlier test fails the next one, with its log.
        dead = {
            n: (p.returncode, (self.pipeline.logs / f"{n}.log").read_text()[-2000:])
            for n, p in self.pipeline.procs.items()
            if p.poll() is not None
        }
        assert not dead, f"shared pipeline: exited {dead}"
        return self.pipeline

    def close(self) -> None:
        if self.stack is not None:
            self.stack.close()
        self.stack = self.pipeline = None


_SHARED = _SharedPipeline()


@pytest.fixture
def shared_pipeline(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Pipeline:
    """The pipeline the traffic-only tests share (see above). A test on it uses its own run
    ids and scenario ids, and starts nothing in it that outlives the test."""
    return _SHARED.get(kafka_bootstrap, tmp_path_factory)


def _shares(item: pytest.Item) -> bool:
    return SHARED in getattr(item, "fixturenames", ())


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The sharing tests run together, where the first of them was, and under pytest-xdist
    in one group (one worker, one pipeline); the rest keep their order."""
    first = next((i for i, item in enumerate(items) if _shares(item)), None)
    if first is None:
        return
    for item in items:
        if _shares(item):
            item.add_marker(pytest.mark.xdist_group(SHARED))
    rest = [item for item in items if not _shares(item)]
    items[:] = rest[:first] + [item for item in items if _shares(item)] + rest[first:]


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if _shares(item) and (nextitem is None or not _shares(nextitem)):
        _SHARED.close()


def pytest_sessionfinish(session: pytest.Session) -> None:
    _SHARED.close()  # stopped early (-x, Ctrl-C): the workers still go


def own_scenarios(source: Path, out: Path, prefix: str) -> Path:
    """The scenarios of `source` with ids `prefix + id`, in `out`: on the shared pipeline a
    test's scenarios, and the windows and figures kept per scenario, are its own."""
    out.mkdir(parents=True, exist_ok=True)
    for file in sorted(source.glob("*.yaml")):
        raw = yaml.safe_load(file.read_text())
        raw["id"] = prefix + raw["id"]
        (out / f"{prefix}{file.name}").write_text(yaml.safe_dump(raw, sort_keys=False))
    return out
