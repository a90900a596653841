"""Which trials `passk regrade` asks for, as which attempt, and what each request holds."""

from __future__ import annotations

from datetime import UTC, datetime

from schemas.events import TrialIdentity
from services.regrade.log import partition_of
from services.regrade.plan import FoundInputs, Target, regraded, request_for, targets
from services.storage.records import TrialAttemptRecord, TrialRecord
from tests.unit.factories import conversation, session

WHEN = datetime(2026, 12, 1, tzinfo=UTC)


def trial(trial_id: str, outcome: str) -> TrialRecord:
    return TrialRecord(
        trial_id=trial_id,
        run_id="r",
        scenario_id="sc",
        scenario_version="v1",
        session_id=f"s-{trial_id}",
        k=3,
        outcome=outcome,
        verdict_at=WHEN,
        event_id=f"verdict:{trial_id}",
    )


def attempt(trial_id: str, n: int, outcome: str) -> TrialAttemptRecord:
    return TrialAttemptRecord(
        trial_id=trial_id,
        attempt=n,
        run_id="r",
        scenario_id="sc",
        scenario_version="v1",
        outcome=outcome,
        verdict_at=WHEN,
        event_id=f"verdict:{trial_id}:{n}",
    )


def errored(trial_id: str, *, version: str = "v1", attempt: int = 1) -> Target:
    """A target of an errored trial of run r, scenario sc, session s-<trial_id>."""
    return Target(
        TrialIdentity(
            trial_id=trial_id,
            run_id="r",
            scenario_id="sc",
            scenario_version=version,
            session_id=f"s-{trial_id}",
        ),
        "error",
        attempt,
    )


TRIALS = [trial("t3", "error"), trial("t1", "passed"), trial("t2", "error")]
HISTORY = [
    attempt("t1", 1, "passed"),
    attempt("t2", 1, "error"),
    attempt("t3", 1, "error"),
    attempt("t3", 2, "error"),
]


def test_errors_only_picks_the_errored_trials_with_their_newest_attempt() -> None:
    chosen = targets(TRIALS, HISTORY, errors_only=True)
    assert [(t.identity.trial_id, t.attempt) for t in chosen] == [("t2", 1), ("t3", 2)]


def test_without_errors_only_every_trial_is_picked() -> None:
    chosen = targets(TRIALS, HISTORY, errors_only=False)
    assert [t.identity.trial_id for t in chosen] == ["t1", "t2", "t3"]


def test_a_trial_without_history_rows_is_at_attempt_one() -> None:
    (only,) = targets([trial("old", "error")], [], errors_only=True)
    assert only.attempt == 1


def test_the_request_is_the_next_attempt_with_the_inputs_found() -> None:
    target = errored("t1", attempt=2)
    conv, sess = conversation("t1", session_id="s-t1"), session("t1", session_id="s-t1")
    request = request_for(target, FoundInputs({"t1": conv}, {"s-t1": sess}), reason="why")
    assert request is not None
    assert (request.attempt, request.event_id) == (3, "regrade:t1:3")
    assert request.conversation == conv and request.session == sess
    assert request.scenario_version == "v1"
    # no session in the log: asked for anyway (the gate fails it as a missing session)
    alone = request_for(target, FoundInputs({"t1": conv}, {}), reason="why")
    assert alone is not None and alone.session is None
    # no conversation: nothing can be graded
    assert request_for(target, FoundInputs({}, {"s-t1": sess}), reason="why") is None


def test_a_regrade_is_done_when_the_history_holds_its_attempt() -> None:
    sent = targets(TRIALS, HISTORY, errors_only=True)  # t2 at 1, t3 at 2
    assert regraded(sent, HISTORY) == {}
    later = [*HISTORY, attempt("t2", 2, "passed"), attempt("t3", 2, "error")]
    assert regraded(sent, later) == {"t2": "passed"}  # t3 needs attempt 3


def test_partition_of_matches_kafka_pythons_default_partitioner() -> None:
    """The producer SDK sends with kafka-python's DefaultPartitioner: ask it directly."""
    from kafka.partitioner.default import DefaultPartitioner

    class Cluster:
        def topics(self) -> set[str]:
            return {"t"}

        def partitions_for_topic(self, topic: str) -> set[int]:
            return set(range(8))

        available_partitions_for_topic = partitions_for_topic

    for key in ("s-1", "session-42", "ü-7", "x" * 40):
        expected = DefaultPartitioner().partition("t", key, key.encode(), None, None, Cluster())
        assert partition_of(key, 8) == expected
    assert {partition_of(f"s-{i}", 8) for i in range(100)} == set(range(8))


def test_prepare_says_why_a_trial_cannot_be_asked_for() -> None:
    from schemas.events import RegradeRequest
    from services.contract.codec import decode
    from services.regrade.plan import prepare

    conv = conversation("t1", session_id="s-t1")
    chosen = [errored("t1"), errored("t2"), errored("t3", version="unknown")]
    found = FoundInputs({"t1": conv, "t3": conversation("t3")}, {})
    sent, missing, versionless = prepare(chosen, found, reason="r", max_bytes=1_000_000)
    assert sent.status == "sent" and sent.payload is not None
    request = decode(sent.payload, RegradeRequest)
    assert isinstance(request, RegradeRequest) and request.attempt == 2
    assert missing.payload is None and "conversation is not in the log" in missing.status
    assert versionless.payload is None and "no scenario version" in versionless.status
    (big,) = prepare(chosen[:1], found, reason="r", max_bytes=100)
    assert big.payload is None and "above PASSK_MAX_EVENT_BYTES (100)" in big.status


def test_sample_backfills_only_the_trials_the_sample_left_out() -> None:
    from services.grading.sampling import in_sample
    from services.regrade.plan import left_out
    from services.storage.records import judge_record
    from tests.unit.storage import factories as f

    ids = [f"{i:032x}" for i in range(60)]
    rows = [
        judge_record(f.judge(t, "polite", "not_sampled" if not in_sample(t, 0.1) else "passed"))
        for t in ids
    ]
    assert left_out(rows, 1.0) == {t for t in ids if not in_sample(t, 0.1)}
    half = left_out(rows, 0.5)
    assert half == {t for t in ids if in_sample(t, 0.5) and not in_sample(t, 0.1)}
    chosen = targets([trial(t, "passed") for t in ids], [], errors_only=False, only=half)
    assert [c.identity.trial_id for c in chosen] == sorted(half)
    found = FoundInputs({t: conversation(t) for t in ids}, {})
    request = request_for(chosen[0], found, reason="backfill", sample_rate=0.5)
    assert request is not None and request.sample_rate == 0.5 and request.attempt == 2
