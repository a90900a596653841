"""Event time bounded, not believed (issue 21, item 1)."""

from __future__ import annotations

from datetime import UTC, datetime

from services.contract.eventtime import REASON, bounded, in_future, reference_time
from services.runtime.ticks import StreamClock

WALL = datetime(2026, 12, 1, 12, 0, tzinfo=UTC).timestamp()


def test_a_date_past_the_skew_is_refused_naming_the_setting() -> None:
    rejection = in_future(datetime(2099, 1, 1, tzinfo=UTC), WALL, 300.0)
    assert rejection is not None and rejection.reason == REASON == "occurred_at_in_future"
    assert "PASSK_MAX_CLOCK_SKEW_S" in rejection.detail and "2099-01-01" in rejection.detail


def test_within_the_skew_and_any_past_date_are_believed() -> None:
    assert in_future(datetime.fromtimestamp(WALL + 299, UTC), WALL, 300.0) is None
    assert in_future(datetime.fromtimestamp(WALL + 301, UTC), WALL, 300.0) is not None
    assert in_future(datetime(1970, 1, 1, tzinfo=UTC), WALL, 300.0) is None


def test_the_reference_is_the_brokers_arrival_never_later_than_the_wall() -> None:
    # Gate and judge read the same record at different moments: same arrival time, same
    # decision; a replay of the log next month decides as the first reading did.
    assert reference_time(WALL - 10, WALL) == WALL - 10
    assert reference_time(WALL - 10, WALL + 86400 * 30) == WALL - 10
    assert reference_time(WALL + 86400, WALL) == WALL  # a producer's CreateTime in 2099
    assert reference_time(None, WALL) == WALL
    assert reference_time(-1, WALL) == WALL


def test_bounded() -> None:
    assert bounded(WALL + 10, WALL, 300) == WALL + 10
    assert bounded(datetime(2099, 1, 1, tzinfo=UTC).timestamp(), WALL, 300) == WALL + 300


def test_a_stream_clock_never_runs_past_the_wall_on_a_record_dated_2099() -> None:
    clock = StreamClock(lambda t, p: 100, wall=lambda: WALL, max_skew_s=300)
    clock.observe("in", 0, 5, datetime(2099, 1, 1, tzinfo=UTC).timestamp())
    assert clock.now("in", 0) == WALL + 300  # behind (offset 5 of 100): its newest timestamp
    clock.observe("in", 0, 6, WALL - 5)
    assert clock.now("in", 0) == WALL + 300
