from __future__ import annotations

from services.runtime.ticks import StreamClock

WALL = 1_000.0


def clock(highwaters: dict[tuple[str, int], int | None]) -> StreamClock:
    return StreamClock(lambda t, p: highwaters[(t, p)], wall=lambda: WALL)


def test_caught_up_partition_runs_on_the_wall_clock() -> None:
    c = clock({("s", 0): 5})
    c.observe("s", 0, offset=4, timestamp=900.0)
    assert c.now("s", 0) == WALL


def test_a_backlog_runs_on_the_newest_timestamp_read() -> None:
    c = clock({("s", 0): 50})
    c.observe("s", 0, offset=9, timestamp=900.0)
    c.observe("s", 0, offset=10, timestamp=880.0)  # out-of-order timestamps never go back
    assert c.now("s", 0) == 900.0


def test_nothing_read_since_start_is_behind_until_the_commit_shows_all_was_done() -> None:
    c = clock({("s", 0): 7, ("s", 1): 0})
    assert c.now("s", 0) == 0.0  # records exist, none read, commit unknown
    assert c.now("s", 1) == WALL  # an empty partition is caught up
    c.set_committed({("s", 0): 5})
    assert c.now("s", 0) == 0.0
    c.set_committed({("s", 0): 7})
    assert c.now("s", 0) == WALL


def test_unknown_highwater_is_not_caught_up() -> None:
    c = StreamClock(
        lambda t, p: (_ for _ in ()).throw(RuntimeError("not assigned")), wall=lambda: WALL
    )
    c.observe("s", 0, offset=3, timestamp=123.0)
    assert c.now("s", 0) == 123.0


def test_the_slowest_input_decides() -> None:
    c = clock({("a", 2): 1, ("b", 2): 10})
    c.observe("a", 2, offset=0, timestamp=990.0)
    c.observe("b", 2, offset=3, timestamp=950.0)
    assert c.now_for(("a", "b"), 2) == 950.0


def test_while_the_broker_does_not_answer_time_stands_still() -> None:
    """An outage: the offsets were last read at 970, so nothing proves the highwater is
    still the end of the log; a deadline cannot run out on records not yet fetchable."""
    c = clock({("s", 0): 5})
    c.observe("s", 0, offset=4, timestamp=900.0)
    c.set_committed({}, at=970.0)
    assert c.now("s", 0) == 970.0 + 10.0 < WALL  # trusted for two read intervals, no more
    c.set_committed({}, at=WALL)  # the broker answers again
    assert c.now("s", 0) == WALL


def test_records_of_a_partition_awaiting_its_seek_are_not_observed() -> None:
    waiting = {("s", 0)}
    c = StreamClock(
        lambda t, p: 511, wall=lambda: WALL, awaiting_seek=lambda t, p: (t, p) in waiting
    )
    c.observe("s", 0, offset=510, timestamp=999.0)  # fetched before the seek back to 494
    assert c.now("s", 0) == 0.0  # 494..509 are still unread: not caught up
    waiting.clear()
    c.observe("s", 0, offset=494, timestamp=950.0)
    assert c.now("s", 0) == 950.0
