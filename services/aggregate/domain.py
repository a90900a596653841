"""Counting trial verdicts per run and per event-time window: (state, verdict) -> writes.

All of a scenario's state sits in one table partition (the verdicts are re-keyed by
scenario), under these keys:

    t|<scenario>|<trial>            what was counted for a trial (TrialMemory)
    b|<scenario>|run|<run>          a run's counts (Bucket)
    b|<scenario>|w|<size>|<start>   a window's counts (Bucket)
    l|<scenario>|<size>             the scenario's most recent window of that size
    p|<partition>                   the partition's event-time watermark (PartitionClock)

Event time is bounded, not believed (issue 21): the watermark never runs past the wall
clock plus the skew (PASSK_MAX_CLOCK_SKEW_S), even read back from a table that holds one
in 2099; a verdict dated past that bound, or older than the retention, counts in its run
only (no window keeps it), so a run's figures always hold every trial `passk report`
shows.

A trial is counted once per bucket: a repeat of its verdict changes nothing, and a
re-grade (a higher `attempt`) with a new outcome moves its count from the old outcome
to the new one. A crash can cut the table's changelog after any write, so the writes
are ordered (a trial's memory before the buckets it changes) and numbered: each bucket
carries the sequence number of its last change, the memory the number each bucket got
from this trial, and a verdict read again finishes whatever its first reading did not.
The writes of a batch of verdicts are applied coalesced (batch.py), so a crash may have
lost the changes of several trials to one bucket: each is finished, in the order they
were made, when the verdict that made it is read again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from schemas.events import ScenarioReliability, TrialVerdict
from schemas.events import TrialOutcome as Outcome
from services.grading.estimators import ReliabilityTally, pass_hat_k, pass_hat_k_interval
from services.grading.windows import WindowSize, as_datetime, rfc3339

Read = Callable[[str], dict[str, Any] | None]


@dataclass(frozen=True)
class Config:
    sizes: tuple[WindowSize, ...]
    retention_s: float  # how far behind the watermark a window (and a trial) is kept
    max_skew_s: float = 300.0  # how far ahead of the wall clock event time is believed

    @property
    def sweep_every_s(self) -> int:
        return min(s.seconds for s in self.sizes)


class TrialMemory(BaseModel):
    attempt: int
    outcome: Outcome
    prev_outcome: Outcome | None = None  # what the last change moved the count from
    run_id: str
    k: int
    scenario_version: str | None = None
    finished_at: float | None = None
    # Set for a trial counted in its run only (older than the retention, or dated in the
    # future): the watermark then, from which its memory is kept a retention.
    kept_from: float | None = None
    seqs: dict[str, int] = Field(default_factory=dict)  # bucket key -> its seq after this trial
    # Buckets the last change added the trial to rather than moved it within (a re-grade
    # of a trial first counted in its run only, or a window size added since): a change
    # finished after a crash must gain them too, not move an outcome they never held.
    gained: list[str] = Field(default_factory=list)
    partition: int
    # Whether every check of the trial ran (a production trial outside its scenario's
    # LLM-judge sample did not), now and before the last change.
    sampled: bool = True
    prev_sampled: bool | None = None


class Bucket(BaseModel):
    scenario_id: str
    scenario_version: str | None = None
    k: int
    passed: int = 0
    failed: int = 0
    errors: int = 0
    # Trials the simulated user spoiled (outcome `invalid`): out of n, counted apart.
    invalid: int = 0
    seq: int = 0  # changes so far; numbers the published records
    partition: int
    run_id: str | None = None
    window: str | None = None
    window_start: int | None = None
    window_end: int | None = None
    # The sampled trials (every check ran, LLM judges included): None means every trial
    # counted so far was (a bucket from before sampling, or built without it).
    n_sampled: int | None = None
    passed_sampled: int | None = None
    errors_sampled: int | None = None

    @property
    def sampled_counts(self) -> tuple[int, int, int]:
        """(n, passed, errors) of the sampled trials."""
        if self.n_sampled is None:
            return self.passed + self.failed + self.errors, self.passed, self.errors
        return self.n_sampled, self.passed_sampled or 0, self.errors_sampled or 0

    def moved(
        self,
        before: Outcome | None,
        after: Outcome,
        *,
        was_sampled: bool | None = True,
        sampled: bool = True,
    ) -> Bucket:
        counts: dict[str, int] = {
            "passed": self.passed,
            "failed": self.failed,
            "errors": self.errors,
            "invalid": self.invalid,
        }
        n_s, p_s, e_s = self.sampled_counts
        # an invalid trial (the simulated user spoiled it) is out of n, sampled or not
        if before is not None:
            counts[_field(before)] -= 1
            if was_sampled is not False and before != "invalid":
                n_s, p_s, e_s = n_s - 1, p_s - (before == "passed"), e_s - (before == "error")
        counts[_field(after)] += 1
        if sampled and after != "invalid":
            n_s, p_s, e_s = n_s + 1, p_s + (after == "passed"), e_s + (after == "error")
        judged = counts["passed"] + counts["failed"] + counts["errors"]
        if self.n_sampled is None and n_s == judged:
            return self.model_copy(update=counts)  # every trial sampled: nothing apart
        return self.model_copy(
            update={**counts, "n_sampled": n_s, "passed_sampled": p_s, "errors_sampled": e_s}
        )


class PartitionClock(BaseModel):
    watermark: float  # newest finished_at read on the partition
    swept_at: float  # watermark at the last sweep of expired state


def ceiling(config: Config, now: float | None) -> float:
    """The furthest event time believed: the wall clock plus the skew."""
    return (time.time() if now is None else now) + config.max_skew_s


def partition_clock(raw: dict[str, Any] | None, limit: float) -> PartitionClock | None:
    """The clock as stored, never past `limit`: a watermark a bad date put in 2099 (in a
    changelogged table, so a restart brought it back) heals on read."""
    if not raw:
        return None
    clock = PartitionClock.model_validate(raw)
    watermark = min(clock.watermark, limit)
    return PartitionClock(watermark=watermark, swept_at=min(clock.swept_at, watermark))


def memory_expires_from(memory: dict[str, Any]) -> float | None:
    kept_from = memory.get("kept_from")
    return kept_from if kept_from is not None else memory.get("finished_at")


def _field(outcome: Outcome) -> str:
    return "errors" if outcome == "error" else outcome


# ------------------------------------------------------------------------- keys


def trial_key(scenario_id: str, trial_id: str) -> str:
    return f"t|{scenario_id}|{trial_id}"


def run_key(scenario_id: str, run_id: str) -> str:
    return f"b|{scenario_id}|run|{run_id}"


def window_key(scenario_id: str, label: str, start: int) -> str:
    return f"b|{scenario_id}|w|{label}|{start}"


def latest_key(scenario_id: str, label: str) -> str:
    return f"l|{scenario_id}|{label}"


def clock_key(partition: int) -> str:
    return f"p|{partition}"


# ------------------------------------------------------------------------ steps


@dataclass
class Step:
    # counted | regraded | duplicate | superseded | late | future: late and future are
    # trials counted (for the first time) in their run only, older than the retention or
    # dated past the wall clock plus the skew
    note: str
    writes: list[tuple[str, dict[str, Any] | None]] = field(default_factory=list)
    figures: list[Bucket] = field(default_factory=list)  # to publish (see `record`)
    latest: list[Bucket] = field(default_factory=list)  # buckets now their size's most recent
    sweep: bool = False  # the watermark moved far enough to look for expired state

    @property
    def records(self) -> list[ScenarioReliability]:
        return [record(b) for b in self.figures]


def _empty_buckets(
    verdict: TrialVerdict, config: Config, partition: int, windowed: bool
) -> dict[str, Bucket]:
    base = {"scenario_id": verdict.scenario_id, "k": verdict.k, "partition": partition}
    out = {run_key(verdict.scenario_id, verdict.run_id): Bucket(**base, run_id=verdict.run_id)}
    if verdict.finished_at is not None and windowed:
        at = verdict.finished_at.timestamp()
        for size in config.sizes:
            start = size.start(at)
            out[window_key(verdict.scenario_id, size.label, start)] = Bucket(
                **base, window=size.label, window_start=start, window_end=size.end(start)
            )
    return out


@dataclass(frozen=True)
class _When:
    """Where a verdict falls in event time on its partition."""

    limit: float  # the furthest event time believed (`ceiling`)
    clock: PartitionClock | None  # the partition's clock, bounded by `limit`
    healed: bool  # the stored clock was past `limit`, and is bounded now
    finished: float | None  # the trial's finished_at
    # None: counted in its windows too; "late": older than the retention, "future": dated
    # past the bound, counted in its run only
    untimed: str | None


def _when(
    read: Read, verdict: TrialVerdict, partition: int, config: Config, now: float | None
) -> _When:
    limit = ceiling(config, now)
    raw_clock = read(clock_key(partition))
    clock = partition_clock(raw_clock, limit)
    healed = (
        raw_clock is not None
        and clock is not None
        and (raw_clock["watermark"] != clock.watermark or raw_clock["swept_at"] != clock.swept_at)
    )
    finished = verdict.finished_at.timestamp() if verdict.finished_at else None
    cutoff = clock.watermark - config.retention_s if clock else None
    # A trial whose windows are gone (older than the retention) or cannot exist yet (dated
    # past the bound) still counts in its run: run scope equals `passk report`.
    untimed: str | None = None
    if finished is not None and finished > limit:
        untimed = "future"
    elif cutoff is not None and finished is not None and finished < cutoff:
        untimed = "late"
    return _When(limit, clock, healed, finished, untimed)


def _read_buckets(
    read: Read, verdict: TrialVerdict, config: Config, partition: int, windowed: bool
) -> tuple[dict[str, Bucket], set[str]]:
    """This verdict's buckets (its run's, its windows'), stored or blank; which were
    stored."""
    buckets: dict[str, Bucket] = {}
    stored: set[str] = set()
    for key, blank in _empty_buckets(verdict, config, partition, windowed).items():
        raw = read(key)
        if raw:
            stored.add(key)
        buckets[key] = Bucket.model_validate(raw) if raw else blank
    return buckets, stored


def _finish_cut_change(
    memory: TrialMemory, buckets: dict[str, Bucket], stored: set[str], verdict: TrialVerdict
) -> dict[str, Bucket]:
    """A crash may have cut this trial's last change short: the buckets it had not
    reached yet, moved now."""
    changed: dict[str, Bucket] = {}
    for key, seq in memory.seqs.items():
        bucket = buckets.get(key)
        if bucket is None or bucket.seq >= seq:
            continue  # applied (or not a bucket of this verdict)
        if bucket.seq != seq - 1 and (key not in stored or verdict.attempt != memory.attempt):
            # An earlier change of another trial is missing too. Read from a verdict
            # of an earlier attempt, this change waits: the verdict that made the
            # missing one may still come before the one that made this. (A bucket
            # not stored was changed before by other trials and expired since.)
            continue
        # Read from the attempt that made it, behind by more than this change: the
        # verdict that made the missing one came before this one on the partition,
        # so it was read again first, or not at all (a record skipped on a restart:
        # run 10 of the outage experiment, docs/known-limits.md). Waiting for it
        # would stall every later change of the bucket for good, and let new trials
        # take their numbers: this one is finished, and the missing one is lost
        # alone (if it ever comes, it finds its number passed).
        source = None if key in memory.gained else memory.prev_outcome
        changed[key] = bucket.moved(
            source, memory.outcome, was_sampled=memory.prev_sampled, sampled=memory.sampled
        ).model_copy(
            update={"seq": seq, "k": memory.k, "scenario_version": memory.scenario_version}
        )
    return changed


def _note(
    memory: TrialMemory | None, verdict: TrialVerdict, untimed: str | None
) -> tuple[str, Outcome | None]:
    """What this verdict is to the trial (Step.note), and the outcome it replaces."""
    if memory is None:
        return untimed or "counted", None
    if verdict.attempt > memory.attempt:
        return "regraded", memory.outcome
    return ("duplicate" if verdict.attempt == memory.attempt else "superseded"), None


def _move(
    verdict: TrialVerdict,
    memory: TrialMemory | None,
    before: Outcome | None,
    buckets: dict[str, Bucket],
    changed: dict[str, Bucket],
    when: _When,
    partition: int,
) -> TrialMemory:
    """The trial counted (or moved) in every bucket of this verdict (into `changed`), and
    the trial's memory of it."""
    seqs = dict(memory.seqs) if memory else {}
    gained: list[str] = []
    for key, bucket in buckets.items():
        # A bucket this trial was never counted in (say, a window size added since)
        # gains it; the others move it.
        source = before if key in seqs else None
        if source is None and before is not None:
            gained.append(key)
        moved = bucket.moved(
            source,
            verdict.outcome,
            was_sampled=memory.sampled if memory else True,
            sampled=verdict.sampled,
        ).model_copy(
            update={
                "seq": bucket.seq + 1,
                "k": verdict.k,
                "scenario_version": verdict.scenario_version,
            }
        )
        changed[key] = moved
        seqs[key] = moved.seq
    clock, finished, limit = when.clock, when.finished, when.limit
    return TrialMemory(
        attempt=verdict.attempt,
        outcome=verdict.outcome,
        prev_outcome=before,
        run_id=verdict.run_id,
        k=verdict.k,
        scenario_version=verdict.scenario_version,
        finished_at=finished,
        seqs=seqs,
        gained=gained,
        partition=partition,
        sampled=verdict.sampled,
        prev_sampled=memory.sampled if memory else None,
        kept_from=(memory.kept_from if memory else None)
        if when.untimed is None
        else (clock.watermark if clock else min(finished or limit, limit)),
    )


def _latest(
    read: Read,
    step: Step,
    buckets: dict[str, Bucket],
    changed: dict[str, Bucket],
    limit: float,
    partition: int,
) -> None:
    """The most recent window of each size: from every window of this verdict, not only
    the changed ones, since a crash may have cut this write after the counts'."""
    for key in buckets:
        bucket = changed.get(key, buckets[key])
        if bucket.window is None or bucket.window_start is None or bucket.seq == 0:
            continue
        lkey = latest_key(bucket.scenario_id, bucket.window)
        current = read(lkey)
        if current is not None and current["window_start"] > limit:
            current = None  # a window a bad date opened before event time was bounded
        if current is None or bucket.window_start > current["window_start"]:
            step.writes.append(
                (lkey, {"window_start": bucket.window_start, "partition": partition})
            )
        if current is None or bucket.window_start >= current["window_start"]:
            step.latest.append(bucket)


def _advance_clock(step: Step, when: _When, partition: int, config: Config) -> None:
    """The partition's watermark moved by a timed trial past it (or written back bounded,
    when it healed), and whether to sweep."""
    clock, finished = when.clock, when.finished
    if (
        when.untimed is None
        and finished is not None
        and (clock is None or finished > clock.watermark)
    ):
        swept_at = clock.swept_at if clock else finished
        step.writes.append(
            (
                clock_key(partition),
                PartitionClock(watermark=finished, swept_at=swept_at).model_dump(),
            )
        )
        step.sweep = finished - swept_at >= config.sweep_every_s
    elif when.healed and clock is not None:
        # Written back bounded, and swept: the windows past the bound go (see `expired`).
        step.writes.append((clock_key(partition), clock.model_dump()))
        step.sweep = True


def apply(
    read: Read, verdict: TrialVerdict, partition: int, config: Config, now: float | None = None
) -> Step:
    """What one verdict (new, repeated, re-graded or read again after a crash) changes.
    `now`: the wall clock (None: read it), which bounds event time."""
    when = _when(read, verdict, partition, config, now)
    buckets, stored = _read_buckets(read, verdict, config, partition, windowed=when.untimed is None)
    mkey = trial_key(verdict.scenario_id, verdict.trial_id)
    raw_memory = read(mkey)
    memory = TrialMemory.model_validate(raw_memory) if raw_memory else None
    if memory is None and when.untimed == "late" and verdict.attempt > 1:
        # A re-grade of a trial forgotten past the retention: its first attempt was
        # counted then, with an outcome no longer known, so nothing can be moved, and
        # counting it again would count the trial twice.
        return Step("late")

    changed: dict[str, Bucket] = {}
    if memory is not None:
        changed = _finish_cut_change(memory, buckets, stored, verdict)
        buckets.update(changed)
    note, before = _note(memory, verdict, when.untimed)

    writes: list[tuple[str, dict[str, Any] | None]] = []
    moves = note in ("counted", "late", "future") or (
        note == "regraded"
        and memory is not None
        and (before != verdict.outcome or memory.sampled != verdict.sampled)
    )
    if moves:
        memory = _move(verdict, memory, before, buckets, changed, when, partition)
        writes.append((mkey, memory.model_dump()))
    elif note == "regraded" and memory is not None:  # same outcome: only the attempt moves
        writes.append((mkey, memory.model_copy(update={"attempt": verdict.attempt}).model_dump()))
    writes.extend((key, bucket.model_dump()) for key, bucket in changed.items())

    # Figures to publish: every changed bucket; for a repeat, the current figures again
    # (same event ids), since the first reading may have crashed before they were sent.
    published = dict(changed)
    if note == "duplicate" and memory is not None:
        for key in memory.seqs:
            if key not in published and key in stored:
                published[key] = buckets[key]
    step = Step(note, writes, [b for b in published.values() if b.seq > 0])
    _latest(read, step, buckets, changed, when.limit, partition)
    _advance_clock(step, when, partition, config)
    return step


def expired(
    items: Iterable[tuple[str, Any]],
    partition: int,
    watermark: float,
    config: Config,
    now: float | None = None,
) -> tuple[list[str], list[tuple[str, str]]]:
    """Keys of this partition's state past retention, or windows past the event-time bound
    (opened by a bad date before it was bounded), and the (scenario, size) whose most
    recent window went with them (their gauges must go too). Runs are kept."""
    limit = ceiling(config, now)
    cutoff = min(watermark, limit) - config.retention_s
    keys: list[str] = []
    gone: list[tuple[str, str]] = []
    for key, value in items:
        if not isinstance(value, dict) or value.get("partition") != partition:
            continue
        kind = key[:2]
        if kind == "t|":
            since = memory_expires_from(value)
            if since is not None and since < cutoff:
                keys.append(key)
        elif (
            kind == "b|"
            and value.get("window_end") is not None
            and (value["window_end"] < cutoff or value["window_start"] > limit)
        ):
            keys.append(key)
        elif kind == "l|":
            size = next((s for s in config.sizes if key.endswith(f"|{s.label}")), None)
            if (
                size is None
                or size.end(value["window_start"]) < cutoff
                or value["window_start"] > limit
            ):
                keys.append(key)
                _, scenario_id, label = key.split("|", 2)
                gone.append((scenario_id, label))
    return keys, gone


def swept(watermark: float) -> dict[str, Any]:
    return PartitionClock(watermark=watermark, swept_at=watermark).model_dump()


def most_recent(
    items: Iterable[tuple[str, Any]], read: Read, config: Config, now: float | None = None
) -> list[Bucket]:
    """Each scenario's most recent window of each size, as the table holds them (to set
    the gauges again after a restart); never one past the event-time bound."""
    limit = ceiling(config, now)
    out = []
    for key, value in items:
        if key.startswith("l|") and isinstance(value, dict) and value["window_start"] <= limit:
            _, scenario_id, label = key.split("|", 2)
            raw = read(window_key(scenario_id, label, value["window_start"]))
            if raw is not None:
                out.append(Bucket.model_validate(raw))
    return out


def record(bucket: Bucket, target: tuple[float, int] | None = None) -> ScenarioReliability:
    """The bucket's figures; a window record carries `target` (min pass^k, min trials)."""
    tally = ReliabilityTally(
        k=bucket.k,
        passed=bucket.passed,
        failed=bucket.failed,
        errors=bucket.errors,
        invalid=bucket.invalid,
    )
    lower, upper = pass_hat_k_interval(tally.n, tally.passed, tally.k)
    if bucket.window is None:
        scope = f"run:{bucket.run_id}"
        window: dict[str, Any] = {"run_id": bucket.run_id}
    else:
        assert bucket.window_start is not None and bucket.window_end is not None
        scope = f"{bucket.window}:{rfc3339(bucket.window_start)}"
        window = {
            "window": bucket.window,
            "window_start": as_datetime(bucket.window_start),
            "window_end": as_datetime(bucket.window_end),
        }
        if target is not None:
            window["alert_min_pass_hat_k"], window["alert_min_trials"] = target
    return ScenarioReliability(
        event_id=f"reliability:{bucket.scenario_id}:{scope}:{bucket.seq}",
        scenario_id=bucket.scenario_id,
        scenario_version=bucket.scenario_version,
        **tally.figures(),
        pass_hat_k_lower=lower,
        pass_hat_k_upper=upper,
        **window,
        **sampled_figures(bucket),
    )


def sampled_figures(bucket: Bucket) -> dict[str, Any]:
    """The record's figures over the sampled trials (every check ran): n_sampled,
    passed_sampled, errors_sampled, pass_hat_k_sampled and its 90% interval."""
    n, passed, errors = bucket.sampled_counts
    lower, upper = pass_hat_k_interval(n, passed, bucket.k)
    return {
        "n_sampled": n,
        "passed_sampled": passed,
        "errors_sampled": errors,
        "pass_hat_k_sampled": pass_hat_k(n, passed, bucket.k),
        "pass_hat_k_sampled_lower": lower,
        "pass_hat_k_sampled_upper": upper,
    }
