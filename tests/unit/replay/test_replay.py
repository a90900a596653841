from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.kafka.delivery import DeliveryReport, Ledger
from services.replay.replay import (
    Pacer,
    ReplayLine,
    SkippedLine,
    count_lines,
    parse_line,
    replay_file,
)

CONV: dict[str, Any] = {
    "event_id": "cf-1",
    "type": "conversation_finished",
    "schema_version": 1,
    "occurred_at": "2026-11-30T12:00:00Z",
    "run_id": "r",
    "scenario_id": "s",
    "trial_id": "t1",
    "session_id": "sess-ü1",
    "exit_reason": "product_closed",
    "transcript": [{"role": "user", "content": "hi"}],
}
SESS: dict[str, Any] = {
    "event_id": "sp-1",
    "type": "session_persisted",
    "occurred_at": "2026-11-30T12:00:01Z",
    "session_id": "sess-ü1",
    "state": {"a": 1},
}


def line(body: dict[str, Any] | str) -> bytes:
    return (body if isinstance(body, str) else json.dumps(body)).encode() + b"\n"


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"not json\n", "invalid_json"),
        (b"\xff\xfe{}\n", "invalid_utf8"),
        (b"[1, 2]\n", "not_an_object"),
        (line({"type": "label", "event_id": "x"}), "unknown_type"),
        (line({"event_id": "x"}), "unknown_type"),
        (line({**SESS, "state": None}), "invalid_field"),
        (line({k: v for k, v in CONV.items() if k != "session_id"}), "missing_field"),
        (line({**CONV, "schema_version": 2}), "unknown_schema_version"),
        (line({**CONV, "occurred_at": "yesterday"}), "invalid_field"),
    ],
)
def test_unusable_lines_are_skipped_with_their_number_and_reason(raw: bytes, reason: str) -> None:
    parsed = parse_line(7, raw)
    assert isinstance(parsed, SkippedLine)
    assert parsed.lineno == 7 and parsed.reason == reason
    assert str(parsed).startswith(f"line 7: {reason}: ")


@pytest.mark.parametrize("raw", [b"\n", b"   \r\n", b""])
def test_blank_lines_are_not_events(raw: bytes) -> None:
    assert parse_line(1, raw) is None


@pytest.mark.parametrize(
    ("body", "topic"),
    [(CONV, Topic.CONVERSATION_FINISHED), (SESS, Topic.SESSION_PERSISTED)],
)
def test_valid_lines_go_to_their_topic_keyed_by_session(body: dict[str, Any], topic: Topic) -> None:
    raw = line(body)
    parsed = parse_line(3, raw)
    assert isinstance(parsed, ReplayLine)
    assert parsed.topic is topic
    assert parsed.key == "sess-ü1".encode()
    assert parsed.value == raw.strip()  # the line as written, not a re-encoding
    assert parsed.event.event_id == body["event_id"]


def test_oversized_line_is_skipped() -> None:
    big = line({**SESS, "state": {"blob": "x" * 2000}})
    parsed = parse_line(1, big, max_bytes=1000)
    assert isinstance(parsed, SkippedLine) and parsed.reason == "oversized"


def test_unknown_fields_are_kept() -> None:
    parsed = parse_line(1, line({**CONV, "harness": "v2"}))
    assert isinstance(parsed, ReplayLine) and b'"harness"' in parsed.value


# ------------------------------------------------------------------ the file


@dataclass
class Recorder:
    """Stands in for the producer to test the file logic alone (the broker is tested apart)."""

    fail_refs: set[str] = field(default_factory=set)
    silent_refs: set[str] = field(default_factory=set)  # never acknowledged, never failed
    sent: list[tuple[str, bytes | None, bytes, str]] = field(default_factory=list)
    ledger: Ledger = field(default_factory=Ledger)
    settled: list[float | None] = field(default_factory=list)

    def send_raw(self, topic: str, key: bytes | None, value: bytes, *, ref: str = "") -> None:
        self.sent.append((topic, key, value, ref))
        number = self.ledger.sent(ref, topic)
        if ref in self.fail_refs:
            self.ledger.failed(number, "KafkaTimeoutError: boom")
        elif ref not in self.silent_refs:
            self.ledger.acknowledged(number)

    def settle(self, timeout_s: float | None = None) -> bool:
        self.settled.append(timeout_s)
        return self.ledger.waiting == 0

    def report(self) -> DeliveryReport:
        return self.ledger.report("not acknowledged by the broker")


@pytest.fixture
def traffic_file(tmp_path: Path) -> Path:
    path = tmp_path / "traffic.jsonl"
    path.write_bytes(
        line(SESS)  # 1: session first: must stay first
        + line(CONV)  # 2
        + b"\n"  # 3: blank
        + b"{oops\n"  # 4
        + line({**CONV, "event_id": "cf-2", "trial_id": "t2", "session_id": "s2"})  # 5
        + line({"type": "label"})  # 6
        + line({**SESS, "event_id": "sp-2", "session_id": "s2"}).rstrip(b"\n")  # 7, no newline
    )
    return path


def test_replay_sends_valid_lines_in_file_order_and_reports_the_rest(traffic_file: Path) -> None:
    settings = Settings(PASSK_TOPIC_PREFIX="x.")  # type: ignore[call-arg]
    recorder = Recorder()
    seen: list[int] = []
    summary = replay_file(traffic_file, sender=recorder, settings=settings, on_line=seen.append)
    assert seen == [1, 2, 3, 4, 5, 6, 7] and count_lines(traffic_file) == 7
    assert [ref for *_, ref in recorder.sent] == ["line 1", "line 2", "line 5", "line 7"]
    conv, sess = (
        topic_name(Topic.CONVERSATION_FINISHED, settings),
        topic_name(Topic.SESSION_PERSISTED, settings),
    )
    assert [t for t, *_ in recorder.sent] == [sess, conv, conv, sess]
    assert summary.lines == 7 and summary.blank == 1
    skipped = [(s.lineno, s.reason) for s in summary.skipped]
    assert skipped == [(4, "invalid_json"), (6, "unknown_type")]
    assert summary.valid == Counter({conv: 2, sess: 2}) and summary.sent == {conv: 2, sess: 2}
    assert recorder.settled == [None]  # the sender's own deadline
    assert summary.exit_code == 0  # skipped lines only warn


def test_a_failed_send_makes_the_exit_code_4_naming_the_line(traffic_file: Path) -> None:
    recorder = Recorder(fail_refs={"line 5"})
    summary = replay_file(traffic_file, sender=recorder, settings=Settings())
    assert summary.exit_code == 4
    [undelivered] = summary.undelivered
    assert (undelivered.ref, undelivered.why) == ("line 5", "KafkaTimeoutError: boom")


def test_unacknowledged_sends_count_as_not_delivered_first_line_first(traffic_file: Path) -> None:
    recorder = Recorder(fail_refs={"line 7"}, silent_refs={"line 2", "line 5"})
    summary = replay_file(traffic_file, sender=recorder, settings=Settings(), settle_timeout_s=3.0)
    assert recorder.settled == [3.0]  # waited once, bounded
    assert [u.ref for u in summary.undelivered] == ["line 2", "line 5", "line 7"]
    assert summary.undelivered[0].why == "not acknowledged by the broker"
    assert summary.delivered == 1 and summary.exit_code == 4


class Interrupting(Recorder):
    """SIGINT arrives while the line numbered `at` is being sent (before it is handed over)."""

    at: str = "line 5"

    def send_raw(self, topic: str, key: bytes | None, value: bytes, *, ref: str = "") -> None:
        if ref == self.at:
            raise KeyboardInterrupt
        super().send_raw(topic, key, value, ref=ref)


def test_sigint_stops_the_sending_and_the_summary_says_what_was_delivered(
    traffic_file: Path,
) -> None:
    recorder = Interrupting(silent_refs={"line 2"})
    summary = replay_file(traffic_file, sender=recorder, settings=Settings(), stop_grace_s=2.0)
    assert summary.interrupted and summary.exit_code == 130
    assert [ref for *_, ref in recorder.sent] == ["line 1", "line 2"]  # nothing after line 5
    assert recorder.settled == [2.0]  # the short grace, not the full deadline
    assert summary.last_line == 4 and summary.delivered == 1
    assert [u.ref for u in summary.undelivered] == ["line 2"]


def test_a_second_sigint_ends_the_wait_and_still_reports(traffic_file: Path) -> None:
    class Impatient(Interrupting):
        def settle(self, timeout_s: float | None = None) -> bool:
            raise KeyboardInterrupt

    recorder = Impatient(silent_refs={"line 1"})
    summary = replay_file(traffic_file, sender=recorder, settings=Settings())
    assert summary.exit_code == 130 and [u.ref for u in summary.undelivered] == ["line 1"]


def test_dry_run_validates_without_sending(traffic_file: Path) -> None:
    summary = replay_file(traffic_file, sender=None, settings=Settings())
    assert summary.dry_run and summary.total_valid == 4 and summary.sent == {}
    assert len(summary.skipped) == 2 and summary.exit_code == 0


# ------------------------------------------------------------------ pacing


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 6))
        self.now += seconds


def test_pacer_spaces_sends_at_the_rate() -> None:
    clock = FakeClock()
    pacer = Pacer(4.0, clock=clock, sleep=clock.sleep)
    for _ in range(5):
        pacer.wait()
    assert clock.slept == [0.25, 0.25, 0.25, 0.25]
    assert clock.now == pytest.approx(101.0)


def test_pacer_does_not_sleep_when_the_sender_is_already_slow() -> None:
    clock = FakeClock()
    pacer = Pacer(10.0, clock=clock, sleep=clock.sleep)
    for _ in range(3):
        pacer.wait()
        clock.now += 0.5  # each send takes longer than the slot
    assert clock.slept == []


def test_pacer_without_rate_never_waits_and_rejects_nonsense() -> None:
    clock = FakeClock()
    Pacer(None, clock=clock, sleep=clock.sleep).wait()
    assert clock.slept == []
    with pytest.raises(ValueError):
        Pacer(0)


# ------------------------------------------------------------------ bounded memory


def test_an_overlong_line_is_skipped_by_number_without_being_read_whole(tmp_path: Path) -> None:
    from services.replay.replay import OverlongLine, read_lines

    path = tmp_path / "big.jsonl"
    path.write_bytes(line(CONV) + b"x" * 5000 + b"\n" + b"y" * 1000 + line(SESS) + b"z" * 999)
    got = list(read_lines(path, max_line_bytes=1000))
    assert [n for n, _ in got] == [1, 2, 3, 4]
    assert got[0][1] == line(CONV)
    assert got[1][1] == OverlongLine(5001)
    assert got[2][1] == OverlongLine(1000 + len(line(SESS)))
    assert got[3][1] == b"z" * 999  # the last line, no newline, within the limit
    assert count_lines(path) == 4


def test_replay_reports_an_overlong_line_and_sends_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    path.write_bytes(b"0" * 5000 + b"\n" + line(CONV))
    small = Settings(PASSK_MAX_EVENT_BYTES=2000)  # type: ignore[call-arg]
    recorder = Recorder()
    summary = replay_file(path, sender=recorder, settings=small)
    assert [(s.lineno, s.reason) for s in summary.skipped] == [(1, "oversized")]
    assert "5001 bytes" in summary.skipped[0].detail
    assert [ref for *_, ref in recorder.sent] == ["line 2"] and summary.exit_code == 0


def test_a_file_with_no_valid_line_exits_3(tmp_path: Path) -> None:
    path = tmp_path / "junk.jsonl"
    path.write_bytes(b"{oops\n" + line({"type": "label"}))
    summary = replay_file(path, sender=Recorder(), settings=Settings())
    assert summary.total_valid == 0 and summary.exit_code == 3
