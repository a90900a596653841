"""Which topics each processor reads and writes: the facts behind lag (status), ACLs
(a secured broker) and the co-partitioning check a worker makes before it starts."""

from __future__ import annotations

from services.contract.topics import PROCESSOR_INPUTS as _PROCESSOR_INPUTS
from services.contract.topics import Topic

# What each processor reads is declared once, beside the topics.
PROCESSOR_INPUTS = _PROCESSOR_INPUTS

# What each processor writes, besides its own Faust-internal topics ("<group>-...").
PROCESSOR_OUTPUTS: dict[str, tuple[Topic, ...]] = {
    "gate": (Topic.GATE_RESULTS, Topic.GATE_TICKS, Topic.GATE_JOINS_CHANGELOG,
             Topic.GATE_GRADED_CHANGELOG, Topic.JUDGE_REQUESTS, Topic.DEAD_LETTERS),
    "verdict": (Topic.TRIAL_VERDICTS, Topic.VERDICT_TICKS, Topic.VERDICT_TRIALS_CHANGELOG,
                Topic.VERDICT_GRADED_CHANGELOG, Topic.DEAD_LETTERS),
    "judge": (Topic.JUDGE_VERDICTS, Topic.DEAD_LETTERS),
    "sink": (Topic.DEAD_LETTERS,),
    "aggregate": (Topic.AGGREGATE_BY_SCENARIO, Topic.SCENARIO_RELIABILITY,
                  Topic.AGGREGATE_STATE_CHANGELOG, Topic.DEAD_LETTERS),
    "calibration": (Topic.LABELLED_VERDICTS, Topic.JUDGE_CALIBRATIONS,
                    Topic.CALIBRATION_JOINS_CHANGELOG, Topic.CALIBRATION_MATRICES_CHANGELOG,
                    Topic.DEAD_LETTERS),
    "otlp": (Topic.CONVERSATION_FINISHED, Topic.SESSION_PERSISTED),
}

# What each processor reads besides its inputs: every one keeps the scenario catalog, and
# a processor with deadlines or a table reads back its ticks and its changelog.
PROCESSOR_READS_BACK: dict[str, tuple[Topic, ...]] = {
    "gate": (Topic.SCENARIOS, Topic.GATE_TICKS, Topic.GATE_JOINS_CHANGELOG,
             Topic.GATE_GRADED_CHANGELOG),
    "verdict": (Topic.SCENARIOS, Topic.VERDICT_TICKS, Topic.VERDICT_TRIALS_CHANGELOG,
                Topic.VERDICT_GRADED_CHANGELOG, Topic.JUDGE_CALIBRATIONS),
    "judge": (Topic.SCENARIOS,),
    "sink": (Topic.SCENARIOS,),
    "aggregate": (Topic.SCENARIOS, Topic.AGGREGATE_STATE_CHANGELOG),
    "calibration": (Topic.SCENARIOS, Topic.CALIBRATION_JOINS_CHANGELOG,
                    Topic.CALIBRATION_MATRICES_CHANGELOG),
    "otlp": (),
}

# Topics one agent reads as one stream, joined by key: a key must land on the same
# partition number in each, so their partition counts must be equal.
CO_PARTITIONED: dict[str, tuple[Topic, ...]] = {
    "gate": (Topic.CONVERSATION_FINISHED, Topic.SESSION_PERSISTED, Topic.GATE_TICKS,
             Topic.GATE_JOINS_CHANGELOG, Topic.GATE_GRADED_CHANGELOG),
    "verdict": (Topic.GATE_RESULTS, Topic.JUDGE_VERDICTS, Topic.VERDICT_TICKS,
                Topic.VERDICT_TRIALS_CHANGELOG, Topic.VERDICT_GRADED_CHANGELOG),
    # the aggregate re-keys verdicts by scenario onto its own topic, and keeps its table
    "aggregate": (Topic.AGGREGATE_BY_SCENARIO, Topic.AGGREGATE_STATE_CHANGELOG),
    # the calibration joins labels with verdicts by trial, then folds per judge
    "calibration": (Topic.LABELS, Topic.JUDGE_VERDICTS, Topic.CALIBRATION_JOINS_CHANGELOG,
                    Topic.LABELLED_VERDICTS, Topic.JUDGE_CALIBRATIONS,
                    Topic.CALIBRATION_MATRICES_CHANGELOG),
}


def co_partitioning_problem(processor: str, counts: dict[Topic, int | None]) -> str | None:
    """Why `processor` must not run on topics with these partition counts (None: it may)."""
    topics = CO_PARTITIONED.get(processor, ())
    missing = [t.value for t in topics if not counts.get(t)]
    if missing:
        return f"{processor}: input topic(s) missing: {', '.join(missing)}"
    distinct = {counts[t] for t in topics}
    if len(distinct) <= 1:
        return None
    listed = ", ".join(f"{t.value}={counts[t]}" for t in topics)
    return (
        f"{processor} joins its inputs by key, so they must have equal partition counts; "
        f"found {listed}. Recreate them with one count (PASSK_TOPIC_PARTITIONS) or add "
        "partitions to the smaller ones before starting the worker."
    )
