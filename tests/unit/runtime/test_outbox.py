"""A batch's state is written only after its outputs are delivered; failed sends are sent
again; graded trials leave the pending table for the markers."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from faust.streams import current_event

from services.runtime.graded import KeyedStates
from services.runtime.outbox import Outbox, handling
from services.runtime.ticks import table_value


class Event:
    def __init__(self, partition: int) -> None:
        self.message = type("Message", (), {"partition": partition})()


class Topic:
    """Sends resolve when the test says so; the first `fail` sends fail once delivered."""

    def __init__(self, fail: int = 0) -> None:
        self.futures: list[asyncio.Future[None]] = []
        self.delivered: list[bytes] = []
        self.fail = fail

    @property
    def app(self) -> Any:  # what Outbox.send uses: the app's producer, by topic name
        async def send(topic: str, key: bytes | None, value: bytes, **_: Any) -> Any:
            assert topic == self.get_topic_name()
            return await self.send(key, value)

        return type("App", (), {"producer": type("Producer", (), {"send": staticmethod(send)})})

    def get_topic_name(self) -> str:
        return "outputs"

    async def send(self, key: bytes | None, value: bytes) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.futures.append(fut)

        async def land() -> None:
            await asyncio.sleep(0.01)
            if self.fail:
                self.fail -= 1
                fut.set_exception(ConnectionError("broker went away"))
            else:
                self.delivered.append(value)
                fut.set_result(None)

        asyncio.get_running_loop().create_task(land())
        return fut


def test_state_is_written_after_the_outputs_are_delivered_each_as_its_event() -> None:
    async def scenario() -> None:
        topic = Topic()
        table: dict[str, Any] = {}
        written_after: list[tuple[str, int, int]] = []

        def apply(key: str, value: Any) -> None:
            event = current_event()
            assert event is not None
            written_after.append((key, len(topic.delivered), event.message.partition))
            table[key] = value

        outbox = Outbox("test", table.get, apply)
        for partition, key in ((3, "a"), (5, "b")):
            with handling(Event(partition)):  # type: ignore[arg-type]
                await outbox.send(topic, key.encode(), f"out-{key}".encode())  # type: ignore[arg-type]
                outbox.put(key, {"n": partition})
        # held back, yet visible to the batch's own reads
        assert table == {} and outbox.get("a") == {"n": 3}
        await outbox.deliver()
        assert sorted(topic.delivered) == [b"out-a", b"out-b"]
        assert sorted(written_after) == [("a", 2, 3), ("b", 2, 5)]
        assert outbox.pending() == 0

    asyncio.run(scenario())


def test_a_send_that_fails_is_sent_again_before_the_state_is_written() -> None:
    async def scenario() -> None:
        topic = Topic(fail=1)
        table: dict[str, Any] = {}
        outbox = Outbox("test", table.get, lambda k, v: table.__setitem__(k, v))
        with handling(Event(0)):  # type: ignore[arg-type]
            await outbox.send(topic, b"k", b"out")  # type: ignore[arg-type]
            outbox.put("k", 1)
        await outbox.deliver()
        assert topic.delivered == [b"out"] and len(topic.futures) == 2
        assert table == {"k": 1}

    asyncio.run(scenario())


def test_graded_trials_leave_ram_for_the_markers_and_expire_with_the_retention() -> None:
    pending: dict[str, Any] = {}
    graded: dict[str, Any] = {}
    scheduled: dict[str, float | None] = {}
    states = KeyedStates(
        pending,
        graded,
        scheduled.__setitem__,  # type: ignore[arg-type]
        marked_at=lambda s: s["graded_at"],
        retention_s=60.0,
    )
    now = time.time()
    states.apply("s1", table_value({"graded_at": None}, now + 30))
    assert "s1" in pending and scheduled["s1"] == now + 30 and not graded
    states.apply("s1", table_value({"graded_at": now}, None))
    assert "s1" not in pending and "s1" in graded and scheduled["s1"] is None
    assert states.read("s1") == graded["s1"]
    graded["old"] = table_value({"graded_at": now - 61.0}, None)
    assert states.read("old") is None  # past the retention: as if never seen
    states.apply("s1", None)
    assert states.read("s2") is None
