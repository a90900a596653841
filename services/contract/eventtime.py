"""Event time that cannot be trusted, bounded: pure, no Faust.

A producer's clock can be wrong by decades (a trial dated 2099 or 1970). Believed, one
such date moved the aggregate's watermark to 2099 and blinded a partition's windows
until then (issue 21). So:

- an input event dated more than the skew (PASSK_MAX_CLOCK_SKEW_S) after the moment it
  reached the broker is refused (`occurred_at_in_future`). The reference is the record's
  broker timestamp (topics use LogAppendTime), capped by the reader's wall clock: both
  readers of conversation-finished (gate and judge) therefore take the same decision
  for the same record, and so does a worker reading the log again next month;
- wherever a clock advances on event time, it is `bounded` by the wall clock plus the
  skew, whatever got through.

Old dates are not refused: a replay of last year is legitimate.
"""

from __future__ import annotations

from datetime import datetime

from services.contract.codec import Rejection

REASON = "occurred_at_in_future"


def reference_time(broker_ts: float | None, wall: float) -> float:
    """When the record arrived, as far as passk can tell: the broker's timestamp, never
    later than the wall clock (a topic created with CreateTime carries the producer's)."""
    if broker_ts is None or broker_ts <= 0:
        return wall
    return min(broker_ts, wall)


def in_future(occurred_at: datetime, reference: float, skew_s: float) -> Rejection | None:
    """A rejection when `occurred_at` is more than `skew_s` after `reference`."""
    ahead = occurred_at.timestamp() - reference
    if ahead <= skew_s:
        return None
    return Rejection(
        REASON,
        (
            f"occurred_at {occurred_at.isoformat()} is {ahead:.0f} s ahead of the time the event "
            f"reached the broker; more than {skew_s:g} s (PASSK_MAX_CLOCK_SKEW_S) is a producer "
            "with a wrong clock, and is not believed"
        ),
    )


def bounded(t: float, wall: float, skew_s: float) -> float:
    """An event-time clock reading, never further than the skew past the wall clock."""
    return min(t, wall + skew_s)
