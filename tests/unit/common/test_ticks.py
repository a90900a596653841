from __future__ import annotations

from services.common.ticks import StreamClock

S = ("s", 0)


def test_a_partition_read_to_a_probed_end_is_at_that_probe_s_time() -> None:
    c = StreamClock()
    c.observe("s", 0, offset=4, timestamp=900.0)
    c.probed({S: 5}, at=1000.0)
    assert c.now("s", 0) == 1000.0


def test_a_backlog_runs_on_the_newest_timestamp_read() -> None:
    c = StreamClock()
    c.probed({S: 50}, at=1000.0)
    c.observe("s", 0, offset=9, timestamp=900.0)
    c.observe("s", 0, offset=10, timestamp=880.0)  # out-of-order timestamps never go back
    assert c.now("s", 0) == 900.0


def test_an_older_probe_whose_end_was_read_still_counts() -> None:
    c = StreamClock()
    c.probed({S: 10}, at=1000.0)
    c.probed({S: 20}, at=1005.0)
    c.observe("s", 0, offset=12, timestamp=990.0)
    assert c.now("s", 0) == 1000.0  # everything before 1000 was read; not yet all before 1005
    c.observe("s", 0, offset=19, timestamp=1001.0)
    assert c.now("s", 0) == 1005.0


def test_without_a_probe_time_stands_still_on_what_was_read() -> None:
    """A broker outage: no probe succeeds, so no deadline runs out on unread records."""
    c = StreamClock()
    c.probed({S: 5}, at=1000.0)
    c.observe("s", 0, offset=4, timestamp=990.0)
    assert c.now("s", 0) == 1000.0
    assert c.now("s", 0) == 1000.0  # however long the wall clock runs, until the next probe


def test_nothing_read_since_start_is_behind_until_the_commit_shows_all_was_done() -> None:
    c = StreamClock()
    c.probed({("s", 0): 7, ("s", 1): 0}, at=1000.0)
    assert c.now("s", 0) == 0.0  # records exist, none read, commit unknown
    assert c.now("s", 1) == 1000.0  # an empty partition is caught up
    c.set_committed({("s", 0): 5})
    assert c.now("s", 0) == 0.0
    c.set_committed({("s", 0): 7})
    assert c.now("s", 0) == 1000.0


def test_records_of_a_partition_awaiting_its_seek_are_not_observed() -> None:
    waiting = {S}
    c = StreamClock(awaiting_seek=lambda t, p: (t, p) in waiting)
    c.probed({S: 511}, at=1000.0)
    c.observe("s", 0, offset=510, timestamp=999.0)  # fetched before the seek back to 494
    assert c.now("s", 0) == 0.0  # 494..509 are still unread: not caught up
    waiting.clear()
    c.observe("s", 0, offset=494, timestamp=950.0)
    assert c.now("s", 0) == 950.0


def test_the_slowest_input_decides() -> None:
    c = StreamClock()
    c.probed({("a", 2): 1, ("b", 2): 10}, at=1000.0)
    c.observe("a", 2, offset=0, timestamp=990.0)
    c.observe("b", 2, offset=3, timestamp=950.0)
    assert c.now_for(("a", "b"), 2) == 950.0
