"""The review queue's pure rules: the sampling hash, each queue's rule, who still has to
label an item, the alert condition, and Cohen's kappa."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from schemas.events import JudgeCalibration, Label
from services.grading.calibration import Bar
from services.grading.estimators import pass_hat_k_interval
from services.grading.sampling import sample_point, sampled
from services.review import domain as d
from services.review.app import windows_from
from services.storage.records import WindowRecord

T0 = datetime(2026, 1, 1, tzinfo=UTC)
BAR = Bar(0.8, 10)


def cand(
    trial_id: str,
    *,
    gates: bool = True,
    state_failed: bool = False,
    judges: tuple[tuple[str, str], ...] = (("j", "failed"),),
    run_id: str = "r",
    scenario_id: str = "s",
    at: int = 0,
    kind: str = "llm",
) -> d.Candidate:
    passed = ["gate:exit"] + ([] if state_failed else ["gate:state"])
    failed = ([] if gates else ["gate:exit"]) + (["gate:state"] if state_failed else [])
    if not gates:
        passed.remove("gate:exit")
    return d.candidate(
        trial_id,
        run_id,
        scenario_id,
        "failed",
        T0 + timedelta(seconds=at),
        passed,
        failed,
        [d.JudgeSeen(j, kind, r) for j, r in judges],
    )


def calibration(
    judge_id: str, tp: int, fp: int, fn: int, tn: int, at: int = 0, version: str = "v1"
) -> JudgeCalibration:
    n = tp + fp + fn + tn
    return JudgeCalibration(
        event_id=f"c-{judge_id}-{at}-{version}",
        occurred_at=T0 + timedelta(seconds=at),
        judge_id=judge_id,
        judge_version=version,
        tp=tp,
        fp=fp,
        fn=fn,
        tn=tn,
        errors=0,
        n=n,
        precision=tp / (tp + fp) if tp + fp else None,
        recall=tp / (tp + fn) if tp + fn else None,
        bar=0.8,
        min_labelled=10,
        gating=False,
        reason="",
    )


def rules(
    calibrations: dict[str, JudgeCalibration] | None = None,
    rate: float = 1.0,
    alerting: frozenset[str] = frozenset(),
) -> d.QueueRules:
    return d.QueueRules(
        bar=BAR,
        calibrations=calibrations or {},
        sample_rate=rate,
        production_runs="production-*",
        alerting=alerting,
    )


def label(trial: str, judge: str, who: str, passed: bool) -> Label:
    return Label(
        event_id=f"l-{trial}-{judge}-{who}-{passed}",
        trial_id=trial,
        judge_id=judge,
        passed=passed,
        labeller=who,
    )


# ------------------------------------------------------------------ sampling


@pytest.mark.parametrize("trial_id", ["t1", "4bf92f3577b34da6a3ce929d0e0e4736", "ü:x:001"])
def test_the_sampling_hash_is_the_contracts(trial_id: str) -> None:
    expected = int(hashlib.sha256(trial_id.encode("utf-8")).hexdigest()[:8], 16)
    assert sample_point(trial_id) == expected
    assert sampled(trial_id, 1.0) and not sampled(trial_id, 0.0)
    assert sampled(trial_id, (expected + 1) / 2**32)
    assert not sampled(trial_id, expected / 2**32)


def test_samples_are_nested_and_near_their_rate() -> None:
    ids = [f"trial-{i}" for i in range(4000)]
    tenth = {t for t in ids if sampled(t, 0.1)}
    fifth = {t for t in ids if sampled(t, 0.2)}
    assert tenth <= fifth
    assert 300 < len(tenth) < 500 and 650 < len(fifth) < 950


# ------------------------------------------------------------------ queue rules


@pytest.mark.parametrize(
    "c, held",
    [
        (cand("a", gates=True, judges=(("j", "failed"),)), True),  # failed, gates passed
        (cand("b", gates=True, judges=(("j", "passed"),)), False),  # agrees with the gates
        (cand("c", gates=False, judges=(("j", "failed"),)), False),  # exit gate failed too
        (cand("d", state_failed=True, judges=(("j", "passed"),)), True),  # passed a bad state
        (cand("e", state_failed=True, judges=(("j", "failed"),)), False),
        (cand("f", judges=(("j", "error"),)), False),  # nothing to label
        (cand("g", judges=(("j", "failed"),), kind="regex"), False),  # not an LLM judge
    ],
)
def test_disagreements(c: d.Candidate, held: bool) -> None:
    assert d.holds("disagreements", c, rules()) is held


def test_uncalibrated_is_too_few_labels_below_the_bar_or_none() -> None:
    c = cand("a", judges=(("good", "passed"), ("few", "passed")))
    good = calibration("good", 9, 1, 0, 5)
    few = calibration("few", 5, 0, 0, 4)  # 9 labels < 10
    low = calibration("few", 6, 4, 0, 5)  # 15 labels, precision 0.6
    assert d.holds("uncalibrated", c, rules({"good": good, "few": few}))
    assert d.holds("uncalibrated", c, rules({"good": good, "few": low}))
    assert d.holds("uncalibrated", c, rules({"good": good}))
    assert not d.holds("uncalibrated", c, rules({"good": good, "few": good}))


def test_latest_calibration_of_a_judge_wins_whatever_its_version() -> None:
    old, new = calibration("j", 1, 1, 0, 0, at=1), calibration("j", 9, 0, 0, 3, at=2, version="v2")
    assert d.latest_by_judge([new, old])["j"] == new


def test_sampled_takes_production_runs_by_the_hash() -> None:
    ids = [f"{i:032x}" for i in range(400)]
    prod = [cand(t, run_id="production-2026-01-01") for t in ids]
    taken = {c.trial_id for c in prod if d.holds("sampled", c, rules(rate=0.25))}
    assert taken == {t for t in ids if sampled(t, 0.25)}
    assert not d.holds("sampled", cand(ids[0], run_id="ci-1"), rules(rate=1.0))


@dataclass(frozen=True)
class Win:
    """A window as a test writes it: all its trials, and its sampled ones (None: all)."""

    scenario: str
    passed: int
    failed: int
    errors: int
    sampled: tuple[int, int, int] | None = None  # (n, passed, errors) of the sampled trials
    start: int = 0
    own_target: float | None = None
    own_min_trials: int | None = None

    def figures(self) -> d.WindowFigures:
        n_s, p_s, e_s = self.sampled or (self.passed + self.failed + self.errors,) + (
            self.passed,
            self.errors,
        )
        return d.WindowFigures(
            self.scenario,
            "1h",
            T0 + timedelta(hours=self.start),
            K,
            n_s,
            p_s,
            e_s,
            alert_min_pass_hat_k=self.own_target,
            alert_min_trials=self.own_min_trials,
        )

    def alert_rule(self) -> bool:
        """PasskScenarioReliabilityDrop, written out from alerts.yml: the judged pass^k
        gauge exists (at least k judged), its upper bound is below the target, sampled
        trials minus sampled errors reach min_trials, sampled errors are not most."""
        n_s, p_s, e_s = self.sampled or (self.passed + self.failed + self.errors,) + (
            self.passed,
            self.errors,
        )
        judged = n_s - e_s
        target = self.own_target if self.own_target is not None else TARGET
        least = self.own_min_trials if self.own_min_trials is not None else MIN_TRIALS
        return (
            judged >= K
            and pass_hat_k_interval(judged, p_s, K)[1] < target
            and judged >= least
            and not e_s * 2 > n_s
        )

    def old_rule(self) -> bool:
        """What the queue asked before: the upper bound over all trials, errors failing."""
        n = self.passed + self.failed + self.errors
        target = self.own_target if self.own_target is not None else TARGET
        least = self.own_min_trials if self.own_min_trials is not None else MIN_TRIALS
        upper = pass_hat_k_interval(n, self.passed, K)[1]
        return upper < target and n - self.errors >= least and not self.errors * 2 > n


K, TARGET, MIN_TRIALS = 3, 0.8, 10


def alerting(wins: list[Win]) -> set[str]:
    return d.alerting_scenarios(
        [w.figures() for w in wins],
        default_min_pass_hat_k=TARGET,
        default_min_trials=MIN_TRIALS,
    )


def test_alerting_takes_the_scenarios_whose_drop_alert_holds() -> None:
    wins = [
        Win("drop", 18, 2, 0, start=0),
        Win("drop", 3, 9, 0, start=1),  # newest window below: 3 of 12
        Win("recovered", 3, 9, 0, start=0),
        Win("recovered", 12, 0, 0, start=1),
        Win("few", 0, 5, 0, start=1),  # too few trials
        Win("errors", 0, 9, 11, start=1),  # mostly errors
        Win("own-target", 18, 2, 0, start=1, own_target=0.95),
    ]
    assert {w.scenario for w in wins if w.start == 1 and w.alert_rule()} == {"drop", "own-target"}
    found = alerting(wins)
    assert found == {"drop", "own-target"}
    c = cand("a", scenario_id="drop")
    assert d.holds("alerting", c, rules(alerting=frozenset(found)))
    assert not d.holds("alerting", cand("b", scenario_id="few"), rules(alerting=frozenset(found)))


# Windows where the alert's rule (sampled, judged trials) and the rule the queue had (the
# upper bound over all trials, errors counted as failures) disagree.
DIFFERING = [
    # 11 passed, 9 errors: all trials 11/20 (upper 0.36), but every judged trial passed
    Win("errors-are-the-judges", 11, 0, 9),
    # sampling: all trials look fine (36/40), the 12 sampled ones show 3 passed
    Win("sampled-drop", 36, 4, 0, sampled=(12, 3, 0)),
    # sampling: all trials are bad (10/40), but only 6 were sampled (< min_trials)
    Win("few-sampled", 10, 30, 0, sampled=(6, 1, 0)),
    # sampling: 10 errors of 40 is not most, but 7 of the 12 sampled trials are errors
    Win("sampled-mostly-errors", 5, 25, 10, sampled=(12, 1, 7)),
    # a scenario whose min_trials is below k: 2 judged trials, no pass^k gauge to alert on
    Win("fewer-than-k", 0, 2, 0, own_min_trials=1),
]


@pytest.mark.parametrize("w", DIFFERING, ids=lambda w: w.scenario)
def test_alerting_is_the_alerts_rule_not_the_all_trials_bound(w: Win) -> None:
    assert w.alert_rule() != w.old_rule()  # the case tells the two rules apart
    assert (w.scenario in alerting([w])) is w.alert_rule()


def test_the_windows_figures_are_the_sampled_ones_or_all_before_sampling() -> None:
    def row(**kw: object) -> WindowRecord:
        base = {
            "scenario_id": "s",
            "window": "1h",
            "window_start": T0,
            "window_end": T0,
            "k": 3,
            "n": 40,
            "passed": 36,
            "failed": 3,
            "errors": 1,
            "pass_at_k": None,
            "pass_hat_k": None,
            "pass_hat_k_lower": 0.0,
            "pass_hat_k_upper": 1.0,
            "seq": 1,
            "occurred_at": T0,
            "event_id": "e",
            "n_sampled": None,
            "passed_sampled": None,
            "errors_sampled": None,
            "alert_min_pass_hat_k": 0.8,
            "alert_min_trials": 10,
        }
        return WindowRecord(**{**base, **kw})

    class Store:
        def windows(self, last: int) -> list[WindowRecord]:
            assert last == 1
            return [row(), row(scenario_id="t", n_sampled=12, passed_sampled=3, errors_sampled=2)]

    before, sampled_ = windows_from(Store())
    assert (before.n_sampled, before.passed_sampled, before.errors_sampled) == (40, 36, 1)
    assert (sampled_.n_sampled, sampled_.passed_sampled, sampled_.errors_sampled) == (12, 3, 2)
    assert (sampled_.sampled.failed, sampled_.k) == (7, 3)


def test_an_item_leaves_once_enough_reviewers_labelled_it_newest_first() -> None:
    items = [cand(f"t{i}", at=i) for i in range(6)]
    overlap = 0.5
    twice = {c.trial_id for c in items if d.reviewers_needed(c.trial_id, overlap) == 2}
    assert twice == {
        c.trial_id for c in items if sampled(f"review-overlap\x1f{c.trial_id}", overlap)
    }
    book = d.LabelBook.of([label(c.trial_id, "j", "ann", True) for c in items])
    for_bob = d.queue_items("uncalibrated", items, rules(), book, overlap, "bob")
    assert [c.trial_id for c in for_bob] == [f"t{i}" for i in range(5, -1, -1) if f"t{i}" in twice]
    assert d.queue_items("uncalibrated", items, rules(), book, overlap, "ann") == []
    assert [
        c.trial_id
        for c in d.queue_items("uncalibrated", items, rules(), d.LabelBook(), overlap, "ann")
    ] == [f"t{i}" for i in range(5, -1, -1)]


def test_a_reviewer_counts_once_they_labelled_every_judge_the_queue_asks_about() -> None:
    # One item, two LLM judges; the gates passed, so `a` (failed) disagrees and `b`
    # (passed) does not. Three reviewers.
    item = cand("t", judges=(("a", "failed"), ("b", "passed")), scenario_id="down")
    alerting = rules(alerting=frozenset({"down"}))

    def shown(queue: str, labels: list[Label], overlap: float) -> dict[str, bool]:
        book = d.LabelBook.of(labels)
        return {
            who: d.queue_items(queue, [item], alerting, book, overlap, who) == [item]
            for who in ("ann", "bob", "cy")
        }

    everyone = {"ann": True, "bob": True, "cy": True}
    nobody = {"ann": False, "bob": False, "cy": False}
    ann_a = [label("t", "a", "ann", True)]
    ann_ab = [*ann_a, label("t", "b", "ann", True)]
    # one reviewer needed: ann labelled one of the two judges; the item stays, for her too
    assert shown("alerting", ann_a, 0.0) == everyone
    assert shown("alerting", ann_ab, 0.0) == nobody
    # `disagreements` asks only about `a`: ann's label on it is all it needed
    assert shown("disagreements", ann_a, 0.0) == nobody
    # two reviewers needed (overlap 1: every item): ann done, bob half-way, so the item
    # waits, for bob and cy; it leaves once cy (or bob) labelled both
    bob_a = [label("t", "a", "bob", False)]
    assert shown("alerting", ann_ab + bob_a, 1.0) == {"ann": False, "bob": True, "cy": True}
    cy_ab = [label("t", "a", "cy", True), label("t", "b", "cy", True)]
    assert shown("alerting", ann_ab + bob_a + cy_ab, 1.0) == nobody
    # each judge then has two reviewers' labels: a pair for the kappa
    book = d.LabelBook.of(ann_ab + bob_a + cy_ab)
    assert d.reviewer_pairs(book, "a") == [(True, False)]
    assert d.reviewer_pairs(book, "b") == [(True, True)]


def test_an_unknown_queue_is_refused() -> None:
    with pytest.raises(ValueError):
        d.holds("nope", cand("a"), rules())


# ------------------------------------------------------------------ kappa


@pytest.mark.parametrize(
    "pairs, kappa",
    [
        ([], None),
        ([(True, True), (False, False)], 1.0),
        ([(True, False), (False, True)], -1.0),
        ([(True, True)] * 3, None),  # no variation: 0/0
        # 20 items: 10 agree pass, 5 agree fail, 3 A pass B fail, 2 A fail B pass:
        # p_o = .75, p_A = .65, p_B = .6, p_e = .39 + .14 = .53, kappa = .22 / .47
        (
            [(True, True)] * 10 + [(False, False)] * 5 + [(True, False)] * 3 + [(False, True)] * 2,
            0.22 / 0.47,
        ),
    ],
)
def test_cohen_kappa(pairs: list[tuple[bool, bool]], kappa: float | None) -> None:
    got = d.cohen_kappa(pairs)
    assert got == kappa if kappa is None else got == pytest.approx(kappa)


def test_agreement_pairs_the_first_two_reviewers_and_takes_each_ones_latest_label() -> None:
    book = d.LabelBook.of(
        [
            label("t1", "j", "ann", True),
            label("t1", "j", "bob", False),
            label("t1", "j", "ann", False),  # ann changed her mind: her latest counts
            label("t2", "j", "ann", True),
            label("t2", "j", "bob", True),
            label("t2", "j", "cy", False),  # a third reviewer: not in the pair
            label("t3", "j", "ann", True),  # one reviewer only
            label("t1", "k", "ann", True),
            label("t1", "k", "bob", True),
        ]
    )
    assert d.reviewer_pairs(book, "j") == [(False, False), (True, True)]
    rows = d.agreement(["j", "k"], {"j": calibration("j", 9, 1, 0, 5)}, book, BAR)
    j, k = rows
    assert (j.judge_id, j.gating, j.kappa, j.pairs) == ("j", True, 1.0, 2)
    assert (k.judge_id, k.gating, k.why, k.kappa, k.pairs) == ("k", False, "uncalibrated", None, 1)
