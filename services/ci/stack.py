"""What `passk ci` needs running, and stopping exactly what it started.

A broker that answers at KAFKA_BOOTSTRAP_SERVERS is used (the stack's, `make up`'s or the
CI service's); otherwise one of ci's own is started from the cached jars with the same
script an operator uses (infra/kafka/kafka-up.sh), on free ports, its data in a temporary
directory. Of the processors the gate's answer depends on (gate, judge, verdict, sink),
those whose consumer group has no member are started as `passk worker X` subprocesses;
with no model configured, the judge stand-in is started beside them for the judge they
start. Nothing else (no supervisord, no Prometheus, no aggregate or calibration worker:
nothing the deploy gate reads).

Every process ci starts is the leader of its own process group (so a Ctrl-C at the
terminal reaches ci alone, which then stops them in order) and is stopped by its group:
SIGTERM, then SIGKILL after a grace. A broker that ci did not start is never touched.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.contract.exits import Unreachable
from services.contract.settings import PROJECT_ROOT, Settings

# What the deploy gate's answer depends on: trials graded, judged, decided, projected.
CI_PROCESSORS: tuple[str, ...] = ("gate", "judge", "verdict", "sink")
KAFKA_UP = PROJECT_ROOT / "infra" / "kafka" / "kafka-up.sh"
BROKER_START_S = 180.0  # kafka-up.sh's own readiness wait, and then some
# The throw-away broker: one partition per topic (a pull request's few dozen trials need
# no parallelism, and every partition is one more to create, assign and fetch), and so
# for the internal topics: the first transactional publish otherwise waits for the
# broker to create its 50 transaction-log partitions.
OWN_PARTITIONS = 1
OWN_BROKER_PROPS = "\n".join(
    ["transaction.state.log.num.partitions=1", "offsets.topic.num.partitions=1", "num.partitions=1"]
)
# A broker that lives a few minutes: the quick JIT only (C2's compiler threads would take
# the CPU the workers start on), one GC thread of each kind, no perf-data file.
OWN_BROKER_JVM = (
    "-XX:TieredStopAtLevel=1 -XX:ParallelGCThreads=1 -XX:ConcGCThreads=1 -XX:-UsePerfData"
)
WORKER_GRACE_S = 10.0  # a worker's clean stop (its last commit) before SIGKILL
Say = Callable[[str], None]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def answers(settings: Settings, within_s: float = 1.0) -> bool:
    """Whether a broker listens at KAFKA_BOOTSTRAP_SERVERS (a wrong password is exit 5
    there and then, not a reason to start another broker)."""
    from services.kafka.reach import require_broker

    try:
        require_broker(within_s, settings)
    except Unreachable:
        return False
    return True


@dataclass
class Started:
    """A process ci started: the leader of its own process group."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.popen.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def group_alive(self) -> bool:
        try:
            os.killpg(self.popen.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        self.popen.poll()  # reap the leader, so a group of zombies reads as gone
        try:
            os.killpg(self.popen.pid, 0)
        except ProcessLookupError:
            return False
        return not self._only_zombies()

    def _only_zombies(self) -> bool:
        """/proc says whether every member of the group is a zombie (already exited)."""
        members = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[2]) == self.popen.pid:  # the process group id
                members.append(fields[0])
        return all(state == "Z" for state in members)

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def stop_all(processes: Sequence[Started], grace_s: float) -> None:
    """SIGTERM to every group at once, SIGKILL to those still there after the grace."""
    for p in processes:
        p.signal_group(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    left = list(processes)
    while left and time.monotonic() < deadline:
        left = [p for p in left if p.group_alive()]
        if left:
            time.sleep(0.05)
    for p in left:
        p.signal_group(signal.SIGKILL)
    deadline = time.monotonic() + 10
    while any(p.group_alive() for p in left) and time.monotonic() < deadline:
        time.sleep(0.05)
    for p in processes:
        try:
            p.popen.wait(timeout=1)
        except subprocess.TimeoutExpired:
            pass


@dataclass
class Stack:
    settings: Settings  # what ci's own clients use
    env: dict[str, str]  # what the processes it starts get
    workdir: Path  # logs, and the own broker's data: removed at the end
    own_broker: bool = False
    broker: Started | None = None
    workers: list[Started] = field(default_factory=list)
    standin: Started | None = None
    standin_url: str | None = None
    reused: list[str] = field(default_factory=list)  # processors already running
    formatted_reused: bool = False  # the own broker started from the kept formatted storage
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def started(self) -> list[Started]:
        return [p for p in (self.broker, self.standin, *self.workers) if p is not None]

    def check(self) -> None:
        """Unreachable when a worker ci started has exited (its log's last lines said)."""
        for p in self.workers:
            code = p.popen.poll()
            if code is not None:
                raise Unreachable(f"passk worker {p.name} exited with {code}:\n{p.tail()}")
        if self.broker is not None and self.broker.popen.poll() not in (None, 0):
            raise Unreachable(
                f"the broker ci started failed (kafka-up.sh: exit "
                f"{self.broker.popen.returncode}):\n{self.broker.tail()}"
            )

    def stop(self) -> None:
        """Workers first (their last commit needs the broker), the stand-in, the broker."""
        began = time.monotonic()
        # A second Ctrl-C must not cut the stopping short: both signals wait until it is done.
        held = _hold_signals()
        try:
            if self.own_broker:
                # Everything here is thrown away with its data: no clean stop to wait for
                # (the verdicts are in the projection already).
                stop_all(self.started, 0.0)
            else:
                stop_all(
                    [p for p in (*self.workers, self.standin) if p is not None], WORKER_GRACE_S
                )
            shutil.rmtree(self.workdir, ignore_errors=True)
        finally:
            for sig, handler in held.items():
                signal.signal(sig, handler)
        self.timings["teardown_s"] = time.monotonic() - began


def _hold_signals() -> dict[int, Any]:
    """Ignore SIGINT and SIGTERM (main thread only); what to restore after."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return {}
    held: dict[int, Any] = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        held[sig] = signal.getsignal(sig)
        signal.signal(sig, signal.SIG_IGN)
    return held


def _spawn(name: str, args: list[str], env: dict[str, str], log: Path) -> Started:
    with open(log, "ab") as out:
        popen = subprocess.Popen(
            args,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=PROJECT_ROOT,
            start_new_session=True,
        )
    return Started(name, popen, log)


def _spawn_broker(stack: Stack, say: Say) -> int:
    """kafka-up.sh on free ports, not waited for; its port."""
    data = stack.workdir / "kafka"
    port, controller = free_port(), free_port()
    bootstrap = f"127.0.0.1:{port}"
    stack.own_broker = True
    stack.settings = stack.settings.model_copy(
        update={
            "kafka_bootstrap_servers": bootstrap,
            "topic_replication": 1,
            "topic_partitions": OWN_PARTITIONS,
        }
    )
    for key in [k for k in stack.env if k.startswith("KAFKA_")]:
        del stack.env[key]  # the own broker is plaintext, whatever the environment said
    stack.env.update(
        KAFKA_BOOTSTRAP_SERVERS=bootstrap,
        PASSK_DATA_DIR=str(stack.workdir),
        PASSK_TOPIC_REPLICATION="1",
        PASSK_TOPIC_PARTITIONS=str(OWN_PARTITIONS),
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_")}
    env.update(
        PASSK_KAFKA_DIR=str(data),
        PASSK_KAFKA_PORT=str(port),
        PASSK_KAFKA_CONTROLLER_PORT=str(controller),
        PASSK_KAFKA_BROKERS="1",
        PASSK_KAFKA_SECURITY="plaintext",
        PASSK_KAFKA_HEAP="512m",
        PASSK_KAFKA_READY_S=str(int(BROKER_START_S)),
        PYTHON=sys.executable,
        PASSK_KAFKA_SERVER_PROPS=OWN_BROKER_PROPS,
        PASSK_KAFKA_JAVA_OPTS=OWN_BROKER_JVM,
    )
    env.pop("PASSK_KAFKA_STARTED_MARK", None)
    formatted = _formatted_template()
    reused = _place_formatted(formatted, data / "log")
    say(f"ci: starting a broker of its own on 127.0.0.1:{port} ({data})")
    # kafka-up.sh leaves the broker in its process group: stopping the group stops it.
    stack.broker = _spawn("kafka", ["bash", str(KAFKA_UP)], env, stack.workdir / "kafka.log")
    stack.formatted_reused = reused
    return port


def _await_broker(
    stack: Stack, say: Say, processors: Sequence[str], port: int, began: float
) -> None:
    """Until the broker takes passk's topics; then the workers, at once, so their start
    (imports, group joins) overlaps the publish and the conversations. Not waiting for
    kafka-up.sh's own readiness check: a broker that took the topics serves (the script's
    exit is looked at by Stack.check)."""
    assert stack.broker is not None
    data = stack.workdir / "kafka"
    formatted = _formatted_template()
    deadline = began + BROKER_START_S + 30
    while True:
        code = stack.broker.popen.poll()
        if code not in (None, 0):
            raise Unreachable(
                f"ci could not start a broker (kafka-up.sh: exit {code}):\n{stack.broker.tail()}"
            )
        if time.monotonic() > deadline:
            raise Unreachable(
                f"ci could not start a broker within {BROKER_START_S:g} s:\n{stack.broker.tail()}"
            )
        if _listens(port):
            stack.timings.setdefault("broker_listening_s", time.monotonic() - began)
            if not stack.formatted_reused:
                _keep_formatted(data / "log", formatted)
            if _topics_created(stack.settings):
                break
        time.sleep(0.1)
    stack.timings["topics_created_s"] = time.monotonic() - began
    start_workers(stack, say, processors)


def _topics_created(settings: Settings) -> bool:
    """passk's topics on a broker that has just started listening: False while it cannot
    take them yet (it is still electing itself, registering)."""
    from kafka.errors import KafkaError

    from services.kafka.admin import create_topics_retrying

    try:
        create_topics_retrying(settings, deadline_s=5.0)
    except KafkaError:
        return False
    return True


def _formatted_template() -> Path:
    """Where the first own broker's freshly formatted storage is kept, per Kafka version:
    `StorageTool format` writes two files (meta.properties, bootstrap.checkpoint) that
    name no port, so every later throw-away broker starts from a copy of them and
    kafka-up.sh skips formatting (a JVM start of its own)."""
    pom = (PROJECT_ROOT / "infra" / "kafka" / "pom.xml").read_text()
    version = pom.split("<kafka.version>", 1)[1].split("</kafka.version>", 1)[0]
    cache = Path(os.environ.get("PASSK_CACHE_DIR") or Path.home() / ".cache" / "passk")
    return cache / f"kafka-{version}" / "ci-formatted"


FORMATTED = ("meta.properties", "bootstrap.checkpoint")


def _place_formatted(template: Path, log: Path) -> bool:
    if not all((template / name).is_file() for name in FORMATTED):
        return False
    log.mkdir(parents=True, exist_ok=True)
    for name in FORMATTED:
        shutil.copyfile(template / name, log / name)
    return True


def _keep_formatted(log: Path, template: Path) -> None:
    """Copy the formatted files aside once (into a fresh directory, renamed into place, so
    a reader never sees half of them); a failure only costs the next run a format."""
    if template.exists() or not all((log / name).is_file() for name in FORMATTED):
        return
    fresh: Path | None = None
    try:
        template.parent.mkdir(parents=True, exist_ok=True)
        fresh = Path(tempfile.mkdtemp(prefix=".ci-formatted-", dir=template.parent))
        for name in FORMATTED:
            shutil.copyfile(log / name, fresh / name)
        fresh.rename(template)
    except OSError:
        if fresh is not None:
            shutil.rmtree(fresh, ignore_errors=True)


def _listens(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
    except OSError:
        return False
    return True


def _running_processors(settings: Settings, processors: Sequence[str]) -> list[str]:
    """The processors whose consumer group has a member now (a running stack's)."""
    from services.kafka.admin import ask_admin

    groups = {p: f"{settings.topic_prefix}{p}" for p in processors}
    described = ask_admin(settings, lambda admin: admin.describe_groups(list(groups.values())))
    return [p for p, group in groups.items() if (described.get(group) or {}).get("members")]


def _start_standin(stack: Stack, say: Say) -> None:
    port = free_port()
    stack.standin = _spawn(
        "judge-standin",
        [
            sys.executable,
            "-m",
            "services.cli",
            "judge-standin",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stack.env,
        stack.workdir / "judge-standin.log",
    )
    stack.standin_url = f"http://127.0.0.1:{port}/v1"
    say(
        f"ci: no model configured; judges use the offline stand-in (not a model) at "
        f"{stack.standin_url}"
    )


def wait_listening(url_port: int, started: Started, within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", url_port), timeout=0.5).close()
            return
        except OSError:
            if started.popen.poll() is not None:
                raise Unreachable(
                    f"{started.name} exited with {started.popen.returncode}:\n{started.tail()}"
                ) from None
            if time.monotonic() > deadline:
                raise Unreachable(
                    f"{started.name} did not listen within {within_s:g} s:\n{started.tail()}"
                ) from None
            time.sleep(0.1)


@contextmanager
def stack_for(
    settings: Settings,
    *,
    say: Say = lambda line: None,
    processors: Sequence[str] = CI_PROCESSORS,
    meanwhile: Callable[[], None] = lambda: None,
) -> Iterator[Stack]:
    """The broker (used, or started), then the topics; stopped at the end of the block,
    however it ends (`meanwhile` runs while a broker of its own boots: what raises there
    stops it too). With its own broker the workers are started as soon as it serves;
    beside a running one, by `start_workers` once the caller has published."""
    workdir = Path(tempfile.mkdtemp(prefix="passk-ci-"))
    stack = Stack(settings=settings, env=dict(os.environ), workdir=workdir)
    began = time.monotonic()
    try:
        if answers(settings):
            say(f"ci: using the broker at {settings.kafka_bootstrap_servers}")
            meanwhile()
            from services.kafka.admin import create_topics_retrying

            create_topics_retrying(stack.settings)
        else:
            port = _spawn_broker(stack, say)
            meanwhile()
            _await_broker(stack, say, processors, port, began)
        stack.timings["broker_s"] = time.monotonic() - began
        yield stack
    finally:
        stack.stop()


def start_workers(
    stack: Stack, say: Say = lambda line: None, processors: Sequence[str] = CI_PROCESSORS
) -> None:
    """`passk worker X` for each processor without a running member; the judge stand-in
    first when no model is configured and ci starts the judge."""
    if stack.workers or stack.standin:
        return  # started already (with the own broker, as soon as it listened)
    began = time.monotonic()
    running = [] if stack.own_broker else _running_processors(stack.settings, processors)
    stack.reused = running
    if running:
        say(f"ci: using the running {', '.join(running)}")
    wanted = [p for p in processors if p not in running]
    no_model = not stack.settings.openai_api_key and not stack.settings.openai_base_url
    if "judge" in wanted and no_model:
        _start_standin(stack, say)
        stack.env.update(OPENAI_BASE_URL=stack.standin_url or "", OPENAI_API_KEY="stand-in")
    stack.env.setdefault("PYTHONUNBUFFERED", "1")
    stack.env["PASSK_METRICS_PORT"] = "0"  # no /metrics port to collide with the stack's
    for name in wanted:
        stack.workers.append(
            _spawn(
                name,
                [sys.executable, "-m", "services.cli", "worker", name],
                stack.env,
                stack.workdir / f"{name}.log",
            )
        )
        say(f"ci: started passk worker {name} (pid {stack.workers[-1].pid})")
    if stack.standin is not None:
        say(f"ci: started judge-standin (pid {stack.standin.pid})")
    if stack.broker is not None:
        say(f"ci: started kafka (process group {stack.broker.pid})")
    stack.timings["workers_spawn_s"] = time.monotonic() - began
