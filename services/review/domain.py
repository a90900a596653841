"""The review queue's rules, pure: which trials each queue holds, who still has to label
an item, and how much two reviewers agree (Cohen's kappa).

A queue item is a graded trial with at least one LLM judge verdict a person can label
(passed or failed). Queues, each newest first:

- `disagreements`: an LLM judge failed a trial whose gates passed, or passed one whose
  state gate failed;
- `uncalibrated`: an LLM judge of the trial has fewer than `min_labelled` labels in its
  latest calibration, or that calibration is below the bar (or it has none);
- `sampled`: a production trial (its run id matches the production glob) in the sample of
  the review rate, by the sampling hash (services/grading/sampling.py);
- `alerting`: a trial of a scenario whose drop alert condition holds now.

An item leaves a queue once enough reviewers are done with it: one, or two for the items in
the overlap (a fixed fraction, by the same hash over another key), whose pairs of labels
give the kappa between reviewers. A reviewer is done with an item once they labelled every
LLM judge of it that the queue asks about (`asked`).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from schemas.events import JudgeCalibration, Label
from services.grading.calibration import Bar, decide, matrix_of
from services.grading.estimators import ReliabilityTally, drop_alert_holds
from services.grading.sampling import sampled

QUEUES: tuple[str, ...] = ("disagreements", "uncalibrated", "sampled", "alerting")
LABELLABLE = ("passed", "failed")


@dataclass(frozen=True)
class JudgeSeen:
    """One judge's verdict on a trial, as the projection kept it."""

    judge_id: str
    kind: str
    result: str
    reason: str = ""

    @property
    def labellable(self) -> bool:
        return self.kind == "llm" and self.result in LABELLABLE


@dataclass(frozen=True)
class Candidate:
    """A graded trial the queues look at."""

    trial_id: str
    run_id: str
    scenario_id: str
    outcome: str
    verdict_at: datetime
    gates_passed: bool  # the exit gate and (when the trial has one) the state gate passed
    state_failed: bool  # the state gate failed
    judges: tuple[JudgeSeen, ...] = ()

    @property
    def llm_judges(self) -> tuple[JudgeSeen, ...]:
        return tuple(j for j in self.judges if j.labellable)


def candidate(
    trial_id: str,
    run_id: str,
    scenario_id: str,
    outcome: str,
    verdict_at: datetime,
    checks_passed: Iterable[str],
    failed_checks: Iterable[str],
    judges: Iterable[JudgeSeen],
) -> Candidate:
    """A candidate from a trial's passed and failed check names (`gate:exit`, `gate:state`)."""
    passed, failed = set(checks_passed), set(failed_checks)
    gates = {"gate:exit", "gate:state"}
    return Candidate(
        trial_id=trial_id,
        run_id=run_id,
        scenario_id=scenario_id,
        outcome=outcome,
        verdict_at=verdict_at,
        gates_passed="gate:exit" in passed and not (gates & failed),
        state_failed="gate:state" in failed,
        judges=tuple(sorted(judges, key=lambda j: j.judge_id)),
    )


# ------------------------------------------------------------------- calibrations


def latest_by_judge(calibrations: Iterable[JudgeCalibration]) -> dict[str, JudgeCalibration]:
    """Each judge id's most recent calibration (of whichever version): what the queue and
    the agreement page take as the judge's live figures."""
    out: dict[str, JudgeCalibration] = {}
    for c in calibrations:
        seen = out.get(c.judge_id)
        if seen is None or c.occurred_at >= seen.occurred_at:
            out[c.judge_id] = c
    return out


def judge_gates(calibration: JudgeCalibration | None, bar: Bar) -> tuple[bool, str]:
    """Whether a calibrated LLM judge gates under this bar, and why (uncalibrated: no)."""
    if calibration is None:
        return False, "uncalibrated"
    return decide(matrix_of(calibration), bar)


def uncalibrated(judge_id: str, calibrations: Mapping[str, JudgeCalibration], bar: Bar) -> bool:
    """Fewer than `min_labelled` labels, below the bar, or no calibration at all."""
    return not judge_gates(calibrations.get(judge_id), bar)[0]


# ------------------------------------------------------------------- windows


@dataclass(frozen=True)
class WindowFigures:
    """The newest window of one size of one scenario: the figures the drop alert reads,
    those of the window's sampled trials (every check ran; every trial without sampling)."""

    scenario_id: str
    window: str
    window_start: datetime
    k: int
    n_sampled: int
    passed_sampled: int
    errors_sampled: int
    alert_min_pass_hat_k: float | None = None
    alert_min_trials: int | None = None

    @property
    def sampled(self) -> ReliabilityTally:
        failed = self.n_sampled - self.passed_sampled - self.errors_sampled
        return ReliabilityTally(
            k=self.k, passed=self.passed_sampled, failed=failed, errors=self.errors_sampled
        )


def alerting_scenarios(
    windows: Iterable[WindowFigures], *, default_min_pass_hat_k: float, default_min_trials: int
) -> set[str]:
    """Scenarios whose drop alert condition (infra/prometheus/alerts.yml,
    PasskScenarioReliabilityDrop; services/grading/estimators.py `drop_alert_holds`) holds
    on the newest window of some size: over the window's sampled trials that were judged
    (errors out), the upper bound of pass^k is below the scenario's target, with at least
    its minimum of judged trials (and at least k), and errors are not most of the sampled
    trials. A window that carries no targets (a row from before they were recorded) is
    asked against the defaults."""
    newest: dict[tuple[str, str], WindowFigures] = {}
    for w in windows:
        key = (w.scenario_id, w.window)
        if key not in newest or w.window_start >= newest[key].window_start:
            newest[key] = w
    out = set()
    for w in newest.values():
        target = (
            w.alert_min_pass_hat_k if w.alert_min_pass_hat_k is not None else default_min_pass_hat_k
        )
        least = w.alert_min_trials if w.alert_min_trials is not None else default_min_trials
        if drop_alert_holds(w.sampled, target, least):
            out.add(w.scenario_id)
    return out


# ------------------------------------------------------------------- labels


@dataclass(frozen=True)
class Given:
    passed: bool
    note: str | None = None


@dataclass
class LabelBook:
    """Who said what: (trial, judge) -> labeller -> their latest label, labellers in the
    order of their first label."""

    by_item: dict[tuple[str, str], dict[str, Given]] = field(default_factory=dict)

    @classmethod
    def of(cls, labels: Iterable[Label]) -> LabelBook:
        book = cls()
        for label in labels:
            book.add(label)
        return book

    def add(self, label: Label) -> None:
        who = label.labeller or "(unnamed)"
        self.by_item.setdefault((label.trial_id, label.judge_id), {})[who] = Given(
            label.passed, label.note
        )

    def finished(self, trial_id: str, judge_ids: Iterable[str]) -> set[str]:
        """The reviewers who labelled every one of these judges of the trial (none when
        there is no judge to label)."""
        who = [set(self.by_item.get((trial_id, j), {})) for j in judge_ids]
        return set.intersection(*who) if who else set()

    def given(self, trial_id: str, judge_id: str, reviewer: str) -> Given | None:
        return self.by_item.get((trial_id, judge_id), {}).get(reviewer)


def reviewers_needed(trial_id: str, overlap: float) -> int:
    """Two for the items in the overlap (fraction `overlap`, by the sampling hash over a
    key of its own, so the overlap is independent of the production sample), else one."""
    return 2 if sampled(f"review-overlap\x1f{trial_id}", overlap) else 1


# ------------------------------------------------------------------- queues


@dataclass(frozen=True)
class QueueRules:
    bar: Bar
    calibrations: Mapping[str, JudgeCalibration]  # judge id -> latest calibration
    sample_rate: float
    production_runs: str  # a glob over run ids
    alerting: frozenset[str]  # scenarios whose drop alert holds now


def asked(queue: str, c: Candidate, rules: QueueRules) -> tuple[JudgeSeen, ...]:
    """The LLM judges of the candidate the queue asks reviewers about: in `disagreements`
    those that disagree with the gates, in `uncalibrated` those not yet calibrated, in
    `sampled` and `alerting` every LLM judge with a verdict to label; none when the queue's
    rule does not take the candidate."""
    judges = c.llm_judges
    if queue == "disagreements":
        return tuple(
            j
            for j in judges
            if (j.result == "failed" and c.gates_passed)
            or (j.result == "passed" and c.state_failed)
        )
    if queue == "uncalibrated":
        return tuple(j for j in judges if uncalibrated(j.judge_id, rules.calibrations, rules.bar))
    if queue == "sampled":
        taken = fnmatch.fnmatchcase(c.run_id, rules.production_runs) and sampled(
            c.trial_id, rules.sample_rate
        )
        return judges if taken else ()
    if queue == "alerting":
        return judges if c.scenario_id in rules.alerting else ()
    raise ValueError(f"unknown queue {queue!r}; one of {', '.join(QUEUES)}")


def holds(queue: str, c: Candidate, rules: QueueRules) -> bool:
    """Whether the queue's rule takes the candidate (one with an LLM judge to label)."""
    return bool(asked(queue, c, rules))


def done_by(c: Candidate, judges: Iterable[JudgeSeen], book: LabelBook) -> set[str]:
    """The reviewers who are done with the item: each labelled every one of `judges` (the
    ones its queue asks about). Someone who labelled only some of them is not, and may
    come back to it; so an item in the overlap leaves only once two people labelled each
    judge, which gives every judge its pair for the kappa."""
    return book.finished(c.trial_id, (j.judge_id for j in judges))


def queue_items(
    queue: str,
    candidates: Iterable[Candidate],
    rules: QueueRules,
    book: LabelBook,
    overlap: float,
    reviewer: str | None = None,
) -> list[Candidate]:
    """The queue, newest first: the candidates its rule takes that still wait for a
    reviewer, and (given a reviewer) that this reviewer is not done with."""
    out = []
    for c in candidates:
        judges = asked(queue, c, rules)
        if not judges:
            continue
        done = done_by(c, judges, book)
        if len(done) >= reviewers_needed(c.trial_id, overlap) or reviewer in done:
            continue
        out.append(c)
    return sorted(out, key=lambda c: (c.verdict_at, c.trial_id), reverse=True)


# ------------------------------------------------------------------- agreement


def cohen_kappa(pairs: Sequence[tuple[bool, bool]]) -> float | None:
    """Cohen's kappa of two raters' pass/fail labels on the same items:
    (p_o - p_e) / (1 - p_e); None with no pair, or when chance agreement is certain (both
    raters gave one and the same label throughout: kappa is 0/0)."""
    n = len(pairs)
    if n == 0:
        return None
    observed = sum(1 for a, b in pairs if a == b) / n
    a_pass = sum(1 for a, _ in pairs if a) / n
    b_pass = sum(1 for _, b in pairs if b) / n
    chance = a_pass * b_pass + (1 - a_pass) * (1 - b_pass)
    if chance == 1:
        return None
    return (observed - chance) / (1 - chance)


def reviewer_pairs(book: LabelBook, judge_id: str) -> list[tuple[bool, bool]]:
    """(first reviewer's label, second reviewer's label) on each trial two or more people
    labelled for the judge (the first two to label it, in the order they did)."""
    pairs = []
    for (_trial, j), who in sorted(book.by_item.items(), key=lambda kv: kv[0]):
        if j != judge_id or len(who) < 2:
            continue
        first, second = list(who.values())[:2]
        pairs.append((first.passed, second.passed))
    return pairs


@dataclass(frozen=True)
class AgreementRow:
    judge_id: str
    calibration: JudgeCalibration | None
    gating: bool
    why: str
    kappa: float | None
    pairs: int


def agreement(
    judge_ids: Iterable[str],
    calibrations: Mapping[str, JudgeCalibration],
    book: LabelBook,
    bar: Bar,
) -> list[AgreementRow]:
    """One row per judge: its live calibration, whether it gates, and the kappa between
    reviewers on the items two of them labelled."""
    rows = []
    for judge_id in sorted(set(judge_ids) | set(calibrations)):
        c = calibrations.get(judge_id)
        gating, why = judge_gates(c, bar)
        pairs = reviewer_pairs(book, judge_id)
        rows.append(AgreementRow(judge_id, c, gating, why, cohen_kappa(pairs), len(pairs)))
    return rows
