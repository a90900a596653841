"""Window arithmetic: epoch-aligned tumbling windows, sizes as configured."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from services.contract.settings import Settings
from services.grading.windows import WindowSize, parse_windows, rfc3339


def ts(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("1h,1d", [("1h", 3600), ("1d", 86400)]),
        ("15m", [("15m", 900)]),
        (" 30s , 1w ", [("30s", 30), ("1w", 604800)]),
        ("1h,60m", [("1h", 3600)]),  # the same size twice is one window
    ],
)
def test_parse_windows(spec: str, expected: list[tuple[str, int]]) -> None:
    assert [(w.label, w.seconds) for w in parse_windows(spec)] == expected


@pytest.mark.parametrize("spec", ["", "1x", "h", "0h", "1.5h", "1h,,"])
def test_bad_window_specs_are_refused(spec: str) -> None:
    if spec == "1h,,":  # empty parts are ignored, not an error
        assert [w.label for w in parse_windows(spec)] == ["1h"]
        return
    with pytest.raises(ValueError):
        parse_windows(spec)


def test_settings_refuse_a_bad_window_list() -> None:
    with pytest.raises(ValueError, match="PASSK_WINDOWS"):
        Settings(PASSK_WINDOWS="1h,soon")  # type: ignore[call-arg]
    assert Settings(PASSK_WINDOWS="1h, 1d").windows == "1h,1d"  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("at", "size", "start", "end"),
    [
        (
            "2026-11-30T11:59:59",
            WindowSize("1h", 3600),
            "2026-11-30T11:00:00Z",
            "2026-11-30T12:00:00Z",
        ),
        (
            "2026-11-30T12:00:00",
            WindowSize("1h", 3600),
            "2026-11-30T12:00:00Z",
            "2026-11-30T13:00:00Z",
        ),  # windows are [start, end)
        (
            "2026-11-30T23:30:00",
            WindowSize("1d", 86400),
            "2026-11-30T00:00:00Z",
            "2026-12-01T00:00:00Z",
        ),
        (
            "2026-11-30T11:07:30",
            WindowSize("15m", 900),
            "2026-11-30T11:00:00Z",
            "2026-11-30T11:15:00Z",
        ),
        (
            "1969-12-31T23:30:00",
            WindowSize("1h", 3600),
            "1969-12-31T23:00:00Z",
            "1970-01-01T00:00:00Z",
        ),  # before the epoch: still aligned, not truncated to zero
    ],
)
def test_window_holding_a_time(at: str, size: WindowSize, start: str, end: str) -> None:
    s = size.start(ts(at))
    assert (rfc3339(s), rfc3339(size.end(s))) == (start, end)


@pytest.mark.parametrize("at", [0.0, 1764496800.0, 1764496800.5, 1764500399.9, -1800.0, 86399.0])
@pytest.mark.parametrize("seconds", [30, 900, 3600, 86400])
def test_windows_start_where_faust_tumbling_windows_start(at: float, seconds: int) -> None:
    from faust.windows import TumblingWindow

    ((faust_start, _),) = TumblingWindow(seconds).ranges(at)
    assert WindowSize("w", seconds).start(at) == faust_start
