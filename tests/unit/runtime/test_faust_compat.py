"""The Faust compatibility layer against the real pinned faust-streaming wheel: the version
check, each patch installed once and still calling the library's own method, and each
private name passk reaches for really there and doing what passk relies on. Nothing of
faust's internals is stubbed; where a network edge is in the way, only it is replaced."""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import faust
import pytest
from faust.stores.memory import Store as MemoryStore
from faust.stores.rocksdb import Store as RocksDBStore
from faust.transport import consumer as faust_consumer
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread
from faust.transport.producer import ProducerBuffer
from faust.types import TP
from faust.worker import Worker

from services.runtime import faust_compat
from services.runtime.faust_compat import controller, seek_guard, worker_log
from services.runtime.faust_compat.internals import new_store

ROOT = Path(__file__).resolve().parents[3]
T = TP("passk.compat.t", 0)

faust_compat.apply()  # what make_app does before building an app


def real_consumer(name: str = "passk-compat") -> Any:
    return faust.App(name, broker="kafka://127.0.0.1:1").consumer


# --- the version check ---------------------------------------------------------------


def test_the_pinned_version_is_the_installed_and_the_locked_one() -> None:
    assert faust.__version__ == faust_compat.PINNED_VERSION
    lock = (ROOT / "requirements.lock").read_text()
    assert f"faust-streaming=={faust_compat.PINNED_VERSION}\n" in lock
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f"faust-streaming=={faust_compat.PINNED_VERSION}" in deps


@pytest.mark.parametrize("version", ["0.15.4", "0.16.0", "0.15", "1.0.0"])
def test_another_version_is_refused_with_a_pointer_to_the_docs(version: str) -> None:
    with pytest.raises(faust_compat.FaustVersionError) as refused:
        faust_compat.check_version(version)
    message = str(refused.value)
    assert f"faust-streaming 0.15.3, but {version} is installed" in message
    assert "docs/faust.md" in message and "requirements.lock" in message


def test_the_pinned_version_passes() -> None:
    faust_compat.check_version("0.15.3")


def test_make_app_refuses_another_installed_faust(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from services.contract.settings import Settings
    from services.runtime.app import make_app

    monkeypatch.setattr(faust, "__version__", "0.16.0")
    settings = Settings(PASSK_TOPIC_PREFIX="compat.", PASSK_DATA_DIR=str(tmp_path))  # type: ignore[call-arg]
    with pytest.raises(faust_compat.FaustVersionError, match="0.16.0 is installed"):
        make_app("refused", settings)


# --- each patch installed once -----------------------------------------------------------


def patched_methods() -> dict[str, Any]:
    return {
        "Consumer.__init__": faust_consumer.Consumer.__init__,
        "Consumer._add_gap": faust_consumer.Consumer._add_gap,
        "Consumer.seek": faust_consumer.Consumer.seek,
        "ThreadDelegateConsumer.seek_to_committed": (
            faust_consumer.ThreadDelegateConsumer.seek_to_committed
        ),
        "ProducerBuffer.flush": ProducerBuffer.flush,
        "ProducerBuffer.put": ProducerBuffer.put,
        "ProducerBuffer._send_pending": ProducerBuffer._send_pending,
        "AIOKafkaConsumerThread._create_worker_consumer": (
            AIOKafkaConsumerThread._create_worker_consumer
        ),
        "Transport._get_controller_node": faust_aiokafka.Transport._get_controller_node,
        "Worker._setup_spinner_handler": Worker._setup_spinner_handler,
        "Producer._settings_extra": faust_aiokafka.Producer._settings_extra,
        "Producer.send": faust_aiokafka.Producer.send,
        "Producer.flush": faust_aiokafka.Producer.flush,
    }


def test_every_patch_is_installed_and_applying_again_changes_nothing() -> None:
    assert faust_compat.applied() == {name: True for name, _ in faust_compat.PATCHES}
    before = patched_methods()
    for name, method in before.items():
        assert method.__module__.startswith("services.runtime.faust_compat."), name
    faust_compat.apply()
    faust_compat.apply()
    assert patched_methods() == before  # not wrapped a second time
    assert faust.__version__ == "0.15.3"


def test_perform_seek_is_fausts_own() -> None:
    """The seek guard wraps seek_to_committed, not a copy of perform_seek."""
    assert faust_consumer.Consumer.perform_seek.__module__ == "faust.transport.consumer"


# --- each wrapper still calls the library's own method ---------------------------------


async def test_the_guarded_seek_runs_fausts_seek() -> None:
    c = real_consumer()
    sought: list[tuple[TP, int]] = []

    async def _seek(tp: TP, offset: int) -> None:  # the network edge of faust's seek
        sought.append((tp, offset))

    c._seek = _seek
    await c.seek(T, 30)
    assert sought == [(T, 30)]  # faust's seek ran ...
    assert faust_compat.awaiting_seek(c, T)  # ... and the guard now waits for 30


async def test_a_gap_is_still_recorded_by_faust_when_no_seek_is_pending() -> None:
    c = real_consumer()
    await c._add_gap(T, 5, 7)
    assert [(i.begin, i.end) for i in c._gap[T]] == [(5, 8)]  # faust's own _add_gap ran
    c._read_offset.expect(T, 10)
    await c._add_gap(T, 11, 12)  # read before a seek: not a hole in the log
    assert [(i.begin, i.end) for i in c._gap[T]] == [(5, 8)]


async def test_a_consumer_without_the_guard_gets_fausts_seek_to_committed() -> None:
    from collections import defaultdict

    c = real_consumer()
    c._read_offset = defaultdict(lambda: None)
    calls: list[str] = []

    async def thread_seek_to_committed() -> dict[TP, int]:
        calls.append("thread")
        return {T: 3}

    c._thread.seek_to_committed = thread_seek_to_committed  # the consumer thread's edge
    assert await c.seek_to_committed() == {T: 3}
    assert calls == ["thread"]


def test_perform_seek_awaits_nothing_after_seek_to_committed() -> None:
    """What the seek guard's wrapper relies on: in this faust-streaming, perform_seek's one
    await is seek_to_committed, and the seek points are recorded after it in the same
    step (an await added there would let the drain loop read in between)."""
    source = inspect.getsource(faust_consumer.Consumer.perform_seek)
    assert re.findall(r"await [\w.]+\(", source) == ["await self.seek_to_committed("]
    body = source.split("await self.seek_to_committed()", 1)[1]
    assert "read_offset.update" in body and "self._committed_offset.update" in body


async def test_the_flush_falls_back_to_fausts_own_when_threaded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    flushed: list[Any] = []

    async def flush_atmost(self: Any, max_messages: int | None) -> int:
        flushed.append(max_messages)
        return 0

    monkeypatch.setattr(ProducerBuffer, "flush_atmost", flush_atmost)
    buf = ProducerBuffer()
    buf.app = SimpleNamespace(conf=SimpleNamespace(producer_threaded=True))  # type: ignore[assignment]
    await buf.flush()
    assert flushed == [None]  # faust's flush: flush_atmost(None)


def test_the_fetch_wrapper_builds_fausts_consumer(tmp_path: Path) -> None:
    app = faust.App("passk-compat-fetch", broker="kafka://127.0.0.1:1")
    faust_compat.set_fetch(app, 4096, 200)

    async def build() -> tuple[Any, int, int]:
        made = app.consumer._thread._create_worker_consumer(app.transport)
        try:
            return type(made), made._fetch_min_bytes, made._fetch_max_wait_ms
        finally:
            await made.stop()

    kind, min_bytes, max_wait_ms = asyncio.run(build())
    import aiokafka

    assert issubclass(kind, aiokafka.AIOKafkaConsumer)
    assert (min_bytes, max_wait_ms) == (4096, 200)


@dataclass(frozen=True)
class Broker:
    nodeId: int  # aiokafka's name


class Metadata:
    def __init__(self, controller_id: int) -> None:
        self.controller_id = controller_id


class Client:
    """The network edge: brokers 1 and 2; broker 1 refuses; 2 names 2 the controller."""

    def __init__(self) -> None:
        self.requests: list[tuple[int, Any]] = []
        self.cluster = SimpleNamespace(brokers=lambda: {Broker(2), Broker(1)})

    async def send(self, node_id: int, request: Any) -> Any:
        self.requests.append((node_id, request))
        if node_id == 1:
            raise ConnectionError("node 1: refused")
        return Metadata(2)

    async def ready(self, node_id: int) -> bool:
        return node_id == 2


class Owner:
    def __init__(self, stopped: bool = False) -> None:
        self.stopped = stopped
        self.said: list[str] = []
        self.log = SimpleNamespace(info=self.said.append)

    async def wait(self, coro: Any, timeout: float) -> Any:
        return SimpleNamespace(stopped=self.stopped, result=await coro)


def test_the_controller_lookup_asks_each_broker_with_fausts_own_request() -> None:
    client = Client()
    found = asyncio.run(faust_aiokafka.Transport._get_controller_node(None, Owner(), client))
    assert found == 2
    assert [node for node, _ in client.requests] == [1, 2]
    request_types = {type(r).__name__ for _, r in client.requests}
    assert request_types <= {"MetadataRequest_v1", "MetadataRequest"}  # built by faust's code
    assert controller._ORIGINAL["lookup"].__module__ == "faust.transport.drivers.aiokafka"


def test_a_stopping_owner_ends_the_lookup_as_faust_does() -> None:
    owner = Owner(stopped=True)
    client = Client()
    client.cluster = SimpleNamespace(brokers=lambda: {Broker(2)})
    assert asyncio.run(faust_aiokafka.Transport._get_controller_node(None, owner, client)) is None
    assert owner.said == ["Shutting down - skipping creation."]  # faust's own message


def test_fausts_spinner_handler_lowers_the_root_logger_and_the_patch_does_not() -> None:
    worker = SimpleNamespace(spinner=object())  # a worker with its terminal spinner
    for setup, expected in (
        (worker_log._ORIGINAL["setup"], logging.DEBUG),
        (Worker._setup_spinner_handler, logging.WARNING),
    ):
        logger = logging.Logger("passk-compat-root", logging.WARNING)
        logger.addHandler(logging.StreamHandler())
        setup(worker, logger, logging.WARNING)
        assert logger.level == expected
        assert len(logger.handlers) == (2 if expected == logging.DEBUG else 1)


# --- private access: really there, doing what passk relies on ----------------------------


def test_pausing_keeps_the_fetched_records_handed_out_and_resuming_clears_both() -> None:
    c = real_consumer()
    assert isinstance(c._paused_partitions, set) and isinstance(c._buffered_partitions, set)
    faust_compat.pause_keeping_fetched(c, T)
    assert T in faust_compat.paused_partitions(c) and T in c._buffered_partitions
    faust_compat.resume_paused(c, T)
    assert T not in faust_compat.paused_partitions(c) and T not in c._buffered_partitions
    faust_compat.pause_keeping_fetched(c, T)
    c.resume_partitions({T})  # faust resumes by itself after a rebalance's recovery
    assert T not in faust_compat.paused_partitions(c) and T in c._buffered_partitions
    faust_compat.forget_paused(c, T)
    assert T not in c._buffered_partitions


def test_fausts_getmany_reads_the_buffered_set() -> None:
    assert "_buffered_partitions" in inspect.getsource(faust_consumer.Consumer.getmany)


class Event:
    """What faust keeps a weak reference to as the current event."""

    message = SimpleNamespace(partition=4)


def test_an_event_made_current_is_the_one_faust_sees() -> None:
    event: Any = Event()
    assert faust.streams.current_event() is None
    with faust_compat.as_current_event(event):
        assert faust.streams.current_event() is event
        assert faust_compat.current_event() is event
    assert faust.streams.current_event() is None


def test_the_seek_guard_replaces_fausts_read_offsets_on_every_consumer() -> None:
    c = real_consumer()
    assert isinstance(c._read_offset, seek_guard.SeekGuardedReadOffsets)
    assert not faust_compat.awaiting_seek(c, T)
    c._read_offset.expect(T, 5)
    assert faust_compat.awaiting_seek(c, T)
    c._read_offset[T] = 5
    assert not faust_compat.awaiting_seek(c, T)


def test_a_table_asked_for_rocksdb_is_in_memory_and_on_disk_table_is_not(tmp_path: Path) -> None:
    app = faust.App(
        "passk-compat-store", broker="kafka://127.0.0.1:1", store="memory://", datadir=str(tmp_path)
    )
    asked = app.Table("asked", store="rocksdb://")
    assert isinstance(new_store(asked), MemoryStore)  # the yarl URL is falsy: app's store
    on_disk = faust_compat.on_disk_table(app, name="on-disk", default=None)
    assert isinstance(new_store(on_disk), RocksDBStore)


async def test_recovery_steps_run_after_the_stores_recovery_in_the_declared_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = faust.App("passk-compat-recovery", broker="kafka://127.0.0.1:1")
    table = app.Table("joins", default=None)
    ran: list[str] = []
    store_recovered = MemoryStore.on_recovery_completed

    async def store_recovery(self: Any, active: Any, standby: Any) -> None:
        ran.append("store")
        await store_recovered(self, active, standby)

    monkeypatch.setattr(MemoryStore, "on_recovery_completed", store_recovery)
    # registered in the opposite order to the declared one
    faust_compat.on_recovery_completed(table, "join_flow", lambda: ran.append("join_flow"))
    faust_compat.on_recovery_completed(table, "deadlines", lambda: ran.append("deadlines"))
    assert "on_recovery_completed" not in vars(table)  # faust's own method, not replaced
    assert len(table._recover_callbacks) == 1  # one public on_recover callback
    await table.on_recovery_completed(set(), set())
    assert ran == ["store", "deadlines", "join_flow"]
    assert faust_compat.RECOVERY_ORDER == ("deadlines", "join_flow")


def test_an_undeclared_or_repeated_recovery_step_is_refused() -> None:
    app = faust.App("passk-compat-recovery-2", broker="kafka://127.0.0.1:1")
    table = app.Table("joins", default=None)
    with pytest.raises(ValueError, match="unknown recovery step 'other'"):
        faust_compat.on_recovery_completed(table, "other", lambda: None)
    faust_compat.on_recovery_completed(table, "deadlines", lambda: None)
    with pytest.raises(ValueError, match="already set"):
        faust_compat.on_recovery_completed(table, "deadlines", lambda: None)


def test_no_code_outside_the_layer_names_a_private_faust_attribute() -> None:
    """The names the layer wraps appear nowhere else in services/."""
    private = (
        "_paused_partitions",
        "_buffered_partitions",
        "_current_event",
        "_new_store",
        "_read_offset",
        "_get_controller_node",
        "_setup_spinner_handler",
        "_create_worker_consumer",
        "_send_pending",
        "_add_gap",
    )
    layer = ROOT / "services" / "runtime" / "faust_compat"
    offenders = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in (ROOT / "services").rglob("*.py")
        if layer not in path.parents
        for name in private
        if re.search(rf"(?<!\w){name}\b", path.read_text())
    ]
    assert offenders == []
    assert not any(
        re.search(r"\.on_recovery_completed\s*=", p.read_text())
        for p in (ROOT / "services").rglob("*.py")
    )
