"""Counting verdicts per run and per window: once per trial, re-grades move counts, and a
verdict read again after a crash finishes what was cut short. The expected figures come
from a reference count over the verdicts written here, never from the code under test."""

from __future__ import annotations

import copy
import random
from collections import defaultdict
from datetime import UTC, datetime
from math import comb
from typing import Any

import pytest
from scipy.stats import beta

from schemas.events import Outcome, ScenarioReliability, TrialVerdict
from services.aggregate import domain
from services.grading.windows import parse_windows

CONFIG = domain.Config(sizes=parse_windows("1h,1d"), retention_s=7 * 86400)
T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC).timestamp()  # 10:00 UTC
NOW = T0 + 60 * 86400  # the wall clock, which bounds event time: after all of it here


def verdict(
    trial: str,
    outcome: Outcome = "passed",
    *,
    at: float = T0,
    attempt: int = 1,
    run: str = "run-1",
    scenario: str = "s1",
    k: int = 3,
) -> TrialVerdict:
    return TrialVerdict(
        event_id=f"verdict:{trial}:{attempt}",
        trial_id=trial,
        run_id=run,
        scenario_id=scenario,
        scenario_version="v1",
        session_id=f"s-{trial}",
        k=k,
        outcome=outcome,
        attempt=attempt,
        finished_at=datetime.fromtimestamp(at, UTC),
    )


class Table(dict[str, Any]):
    """The Faust table as the domain sees it; `cut` keeps only the first writes (a crash)."""

    published: dict[str, ScenarioReliability]

    def __init__(self) -> None:
        super().__init__()
        self.published = {}
        self.now = NOW

    def feed(self, v: TrialVerdict, partition: int = 0, cut: int | None = None) -> domain.Step:
        step = domain.apply(self.get, v, partition, CONFIG, now=self.now)
        for record in step.records:  # the last record per scope is the current figure
            self.published[scope(record)] = record
        for key, value in step.writes[:cut]:
            if value is None:
                self.pop(key, None)
            else:
                self[key] = value
        return step

    def counts(self) -> dict[str, tuple[int, int, int]]:
        return {
            k: (v["passed"], v["failed"], v["errors"])
            for k, v in self.items()
            if k.startswith("b|")
        }

    def snapshot(self) -> Table:
        """A copy that feeding does not share: the same as feeding a new table again what
        this one was fed, without the cost."""
        t = Table()
        t.update(copy.deepcopy(dict(self)))
        t.published = dict(self.published)
        t.now = self.now
        return t


def scope(r: ScenarioReliability) -> str:
    return f"{r.scenario_id}|{r.run_id}|{r.window}|{r.window_start}"


def figures(r: ScenarioReliability) -> dict[str, Any]:
    return r.model_dump(exclude={"occurred_at"})


def reference(verdicts: list[TrialVerdict]) -> dict[str, tuple[int, int, int]]:
    """Each trial's highest attempt (the first of equals), counted per run and window."""
    final: dict[str, TrialVerdict] = {}
    for v in verdicts:
        if v.trial_id not in final or v.attempt > final[v.trial_id].attempt:
            final[v.trial_id] = v
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    index = {"passed": 0, "failed": 1, "error": 2}
    for v in final.values():
        assert v.finished_at is not None
        at = int(v.finished_at.timestamp())
        keys = [
            f"b|{v.scenario_id}|run|{v.run_id}",
            f"b|{v.scenario_id}|w|1h|{at - at % 3600}",
            f"b|{v.scenario_id}|w|1d|{at - at % 86400}",
        ]
        for key in keys:
            counts[key][index[v.outcome]] += 1
    return {k: (c[0], c[1], c[2]) for k, c in counts.items()}


def test_a_trial_counts_in_its_run_and_in_each_window_holding_its_finish() -> None:
    t = Table()
    t.feed(verdict("a", at=T0 + 10))
    t.feed(verdict("b", "failed", at=T0 + 3599))
    step = t.feed(verdict("c", "error", at=T0 + 3600))  # the next hour, the same day
    assert step.note == "counted"
    hour, day = 3600, 86400
    start_day = int(T0) - int(T0) % day
    assert t.counts() == {
        "b|s1|run|run-1": (1, 1, 1),
        f"b|s1|w|1h|{int(T0)}": (1, 1, 0),
        f"b|s1|w|1h|{int(T0) + hour}": (0, 0, 1),
        f"b|s1|w|1d|{start_day}": (1, 1, 1),
    }
    run = t.published["s1|run-1|None|None"]
    assert (run.n, run.passed, run.failed, run.errors, run.window) == (3, 1, 1, 1, None)
    day_record = next(r for r in t.published.values() if r.window == "1d")
    assert day_record.run_id is None
    assert day_record.window_start == datetime(2026, 11, 30, tzinfo=UTC)
    assert day_record.window_end == datetime(2026, 12, 1, tzinfo=UTC)


def test_figures_are_the_estimators_and_the_beta_interval() -> None:
    t = Table()
    outcomes: list[Outcome] = ["passed"] * 7 + ["failed"] * 2 + ["error"]
    for i, o in enumerate(outcomes):
        t.feed(verdict(f"t{i}", o, k=3))
    r = t.published["s1|run-1|None|None"]
    n, c, k = 10, 7, 3
    assert (r.n, r.passed, r.k) == (n, c, k)
    assert r.pass_at_k == pytest.approx(1 - comb(n - c, k) / comb(n, k))
    assert r.pass_hat_k == pytest.approx(comb(c, k) / comb(n, k))
    assert r.pass_hat_k_lower == pytest.approx(beta.ppf(0.05, c + 1, n - c + 1) ** k)
    assert r.pass_hat_k_upper == pytest.approx(beta.ppf(0.95, c + 1, n - c + 1) ** k)
    assert r.scenario_passed is False
    assert r.event_id == "reliability:s1:run:run-1:10"


def test_too_few_trials_have_no_estimate_but_an_interval() -> None:
    t = Table()
    t.feed(verdict("a", k=3))
    r = t.published["s1|run-1|None|None"]
    assert (r.n, r.pass_hat_k, r.pass_at_k, r.scenario_passed) == (1, None, None, False)
    assert 0.0 < r.pass_hat_k_lower < r.pass_hat_k_upper < 1.0


def test_a_repeated_verdict_counts_once_and_republishes_the_same_figures() -> None:
    t = Table()
    t.feed(verdict("a"))
    first = dict(t.published)
    before = dict(t)
    step = t.feed(verdict("a"))
    assert step.note == "duplicate"
    assert dict(t) == before
    assert step.writes == []
    # the current figures again, under the event ids they were first published with
    assert {r.event_id for r in step.records} == {r.event_id for r in first.values()}
    assert [figures(r) for r in step.records] == [figures(r) for r in first.values()]


def test_a_regrade_moves_the_count_and_an_older_attempt_changes_nothing() -> None:
    t = Table()
    t.feed(verdict("a", "passed"))
    t.feed(verdict("b", "passed"))
    step = t.feed(verdict("a", "failed", attempt=2))
    assert step.note == "regraded"
    assert t.counts()["b|s1|run|run-1"] == (1, 1, 0)
    assert t.published["s1|run-1|None|None"].n == 2
    late = t.feed(verdict("a", "passed", attempt=1))  # the first grading, delivered again
    assert late.note == "superseded" and late.writes == [] and late.records == []
    same = t.feed(verdict("a", "failed", attempt=3))  # a regrade that agrees
    assert same.note == "regraded" and same.records == []
    assert t.counts()["b|s1|run|run-1"] == (1, 1, 0)
    back = t.feed(verdict("a", "passed", attempt=4))
    assert back.note == "regraded"
    assert t.counts()["b|s1|run|run-1"] == (2, 0, 0)


def latest(t: Table) -> dict[str, Any]:
    return {k: v for k, v in t.items() if k.startswith("l|")}


def mixed_traffic(seed: int) -> list[TrialVerdict]:
    """Trials over three days and two scenarios, some repeated, some re-graded."""
    rng = random.Random(seed)
    out: list[TrialVerdict] = []
    for i in range(120):
        at = T0 + rng.uniform(-2 * 86400, 86400)
        scenario = rng.choice(["s1", "s2"])
        run = rng.choice(["r1", "r2"])
        outcome: Outcome = rng.choice(["passed", "passed", "failed", "error"])
        out.append(verdict(f"t{i}", outcome, at=at, scenario=scenario, run=run))
        if rng.random() < 0.2:
            out.append(out[-1])  # redelivered
        if rng.random() < 0.2:
            regraded: Outcome = rng.choice(["passed", "failed", "error"])
            out.append(verdict(f"t{i}", regraded, at=at, scenario=scenario, run=run, attempt=2))
    return out


@pytest.mark.parametrize("seed", range(5))
def test_arrival_order_does_not_matter(seed: int) -> None:
    traffic = mixed_traffic(seed)
    shuffled = traffic[:]
    random.Random(seed + 100).shuffle(shuffled)
    a, b = Table(), Table()
    for v in traffic:
        a.feed(v)
    for v in shuffled:
        b.feed(v)
    assert a.counts() == reference(traffic)
    assert b.counts() == reference(shuffled) == a.counts()
    assert {k: figures(r)["n"] for k, r in a.published.items()} == {
        k: figures(r)["n"] for k, r in b.published.items()
    }


def test_a_crash_after_any_write_is_finished_when_the_verdict_is_read_again() -> None:
    traffic = mixed_traffic(7)[:30]
    undisturbed = Table()
    for v in traffic:
        undisturbed.feed(v)
    want = (
        undisturbed.counts(),
        latest(undisturbed),
        {k: figures(r) for k, r in undisturbed.published.items()},
    )
    crashes = 0
    before = Table()  # fed traffic[:i]
    for i, v in enumerate(traffic):
        writes = len(domain.apply(Table().get, v, 0, CONFIG, now=NOW).writes) + 2
        for cut in range(writes):
            t = before.snapshot()
            t.feed(v, cut=cut)  # the changelog lost every write after `cut`
            for again in traffic[max(0, i - 3) :]:  # the uncommitted offsets, read again
                t.feed(again)
            assert t.counts() == want[0], (i, cut)
            assert latest(t) == want[1], (i, cut)  # what the gauges show
            assert {k: figures(r) for k, r in t.published.items()} == want[2], (i, cut)
            crashes += 1
        before.feed(v)
    assert crashes > 150


def test_a_crash_across_several_verdicts_recovers_from_any_offset_faust_may_commit() -> None:
    """What the test above does not model: the changelog may lose the writes of several
    verdicts at once (they are produced asynchronously), the restart reads again from any
    offset Faust may have committed, and the re-keying agent, restarting from its own
    committed offset, appends repeats of verdicts already counted (a lower attempt
    after a higher one among them). Faust may commit an offset only once every changelog
    write of the verdicts before it was delivered (services/runtime/faust_compat/flush.py makes
    that hold); from any such offset every figure comes back."""
    traffic = mixed_traffic(3)[:24]
    undisturbed = Table()
    for v in traffic:
        undisturbed.feed(v)
    want = (
        undisturbed.counts(),
        latest(undisturbed),
        {k: figures(r) for k, r in undisturbed.published.items()},
    )
    log: list[tuple[int, str, dict[str, Any] | None]] = []  # (verdict, key, value)
    records: list[tuple[int, ScenarioReliability]] = []  # sent before that verdict's writes
    first = Table()
    for i, v in enumerate(traffic):
        step = domain.apply(first.get, v, 0, CONFIG, now=NOW)
        records.extend((i, r) for r in step.records)
        for key, value in step.writes:
            log.append((i, key, value))
            if value is None:
                first.pop(key, None)
            else:
                first[key] = value
    rng = random.Random(5)
    crashes = 0
    for kept in range(0, len(log) + 1):
        lost_from = log[kept][0] if kept < len(log) else len(traffic)  # first verdict cut
        for committed in sorted({lost_from, rng.randint(max(0, lost_from - 3), lost_from)}):
            rekeyed_from = rng.randint(0, committed)
            t = Table()
            for _, key, value in log[:kept]:  # the table restored from the changelog
                if value is None:
                    t.pop(key, None)
                else:
                    t[key] = value
            # the figures sent before the crash (sends are flushed before a commit too)
            sent_up_to = max(lost_from, log[kept - 1][0] + 1 if kept else 0)
            t.published = {scope(r): r for i, r in records if i < sent_up_to}
            for again in traffic[committed:] + traffic[rekeyed_from:]:
                t.feed(again)
            assert t.counts() == want[0], (kept, committed, rekeyed_from)
            assert latest(t) == want[1], (kept, committed)
            assert {k: figures(r) for k, r in t.published.items()} == want[2], (kept, committed)
            crashes += 1
    assert crashes > 150


def test_the_most_recent_window_is_the_one_shown() -> None:
    t = Table()
    first = t.feed(verdict("a", at=T0 + 7200))
    assert sorted((b.window, b.window_start) for b in first.latest) == [
        ("1d", int(T0) - int(T0) % 86400),
        ("1h", int(T0) + 7200),
    ]
    older = t.feed(verdict("b", at=T0))  # an earlier hour: a figure, but not the latest
    assert [b.window for b in older.latest] == ["1d"]
    assert t["l|s1|1h"]["window_start"] == int(T0) + 7200


def test_state_past_retention_expires_and_late_trials_count_in_their_run_only() -> None:
    t = Table()
    t.feed(verdict("old", at=T0))
    now = T0 + CONFIG.retention_s + 2 * 86400
    step = t.feed(verdict("new", at=now))
    assert step.sweep
    keys, gone = domain.expired(list(t.items()), 0, now, CONFIG, NOW)
    assert "t|s1|old" in keys and "t|s1|new" not in keys
    assert f"b|s1|w|1h|{int(T0)}" in keys and "b|s1|run|run-1" not in keys  # runs are kept
    assert not any(k.startswith("l|") for k in keys)  # the latest windows are recent ones
    assert gone == []
    for key in keys:
        del t[key]
    # A trial that finished before the retention: no window keeps it, its run counts it
    # (run scope equals `passk report`), and its memory is kept from now, so a repeat
    # read moments later is dropped.
    late = t.feed(verdict("older", at=T0 - 3600))
    assert late.note == "late"
    assert [(r.run_id, r.window, r.n) for r in late.records] == [("run-1", None, 3)]
    assert t["t|s1|older"]["kept_from"] == now
    again = t.feed(verdict("older", at=T0 - 3600))
    assert again.note == "duplicate" and t["b|s1|run|run-1"]["passed"] == 3
    assert "t|s1|older" not in domain.expired(list(t.items()), 0, now, CONFIG, NOW)[0]
    # A re-grade of a trial forgotten with its windows moves nothing (it was counted once,
    # with an outcome no longer known): its run is not counted twice.
    regrade = t.feed(verdict("old", "failed", at=T0, attempt=2))
    assert regrade.note == "late" and regrade.writes == [] and regrade.records == []
    # on another partition nothing is this partition's to drop
    assert domain.expired(list(t.items()), 1, now, CONFIG, NOW) == ([], [])


def test_a_scenarios_latest_window_past_retention_takes_its_gauge_with_it() -> None:
    t = Table()
    t.feed(verdict("a", scenario="quiet", at=T0))
    t.feed(verdict("b", scenario="busy", at=T0 + CONFIG.retention_s + 86400 * 2))
    keys, gone = domain.expired(list(t.items()), 0, t["p|0"]["watermark"], CONFIG, NOW)
    assert sorted(gone) == [("quiet", "1d"), ("quiet", "1h")]
    assert "l|quiet|1h" in keys


def test_most_recent_reads_the_latest_windows_back() -> None:
    t = Table()
    t.feed(verdict("a", at=T0))
    t.feed(verdict("b", "failed", at=T0 + 3600))
    shown = {
        (b.scenario_id, b.window): (b.window_start, b.passed, b.failed)
        for b in domain.most_recent(list(t.items()), t.get, CONFIG, NOW)
    }
    assert shown == {
        ("s1", "1h"): (int(T0) + 3600, 0, 1),
        ("s1", "1d"): (int(T0) - int(T0) % 86400, 1, 1),
    }


# ------------------------------------------------- event time bounded (issue 21, item 1)
FUTURE = datetime(2099, 1, 1, tzinfo=UTC).timestamp()


def test_a_verdict_dated_past_the_wall_counts_in_its_run_only_and_moves_no_clock() -> None:
    t = Table()
    for i in range(6):
        t.feed(verdict(f"a{i}", at=T0 + i, run="run-a"))
    bad = t.feed(verdict("x", at=FUTURE, run="run-a"))
    assert bad.note == "future" and bad.latest == []
    assert [(r.run_id, r.n) for r in bad.records] == [("run-a", 7)]
    assert not any(k.startswith("b|s1|w|") and str(int(FUTURE) // 3600 * 3600) in k for k in t)
    assert t["p|0"]["watermark"] == T0 + 5
    for i in range(6):
        step = t.feed(verdict(f"b{i}", at=T0 + 10 + i, run="run-b"))
        assert step.note == "counted"
    assert t["b|s1|run|run-b"]["passed"] == 6
    assert t[f"b|s1|w|1h|{int(T0)}"]["passed"] == 12
    assert t["l|s1|1h"]["window_start"] == int(T0)
    assert t.feed(verdict("x", at=FUTURE, run="run-a")).note == "duplicate"
    # its memory is kept from the watermark, not from 2099: it expires like the others
    keys, _ = domain.expired(list(t.items()), 0, T0 + CONFIG.retention_s + 86400, CONFIG, NOW)
    assert "t|s1|x" in keys


def test_a_1970_trial_counts_in_its_run() -> None:
    t = Table()
    t.feed(verdict("now", at=T0, run="r"))
    step = t.feed(verdict("epoch", at=0.0, run="r"))
    assert step.note == "late" and t["b|s1|run|r"]["passed"] == 2
    assert not any(k.startswith("b|s1|w|") and k.endswith("|0") for k in t)


def test_a_watermark_already_in_2099_heals_on_read() -> None:
    """State written before the bound: a 2099 watermark, latest windows and windows, in
    the changelogged table (so restored after a restart)."""
    t = Table()
    t.now = wall = T0 + 60
    hour, day = int(FUTURE) // 3600 * 3600, int(FUTURE) // 86400 * 86400
    bogus = {"scenario_id": "s1", "k": 3, "passed": 1, "seq": 1, "partition": 0}
    t[f"b|s1|w|1h|{hour}"] = {
        **bogus,
        "window": "1h",
        "window_start": hour,
        "window_end": hour + 3600,
    }
    t[f"b|s1|w|1d|{day}"] = {
        **bogus,
        "window": "1d",
        "window_start": day,
        "window_end": day + 86400,
    }
    t["l|s1|1h"] = {"window_start": hour, "partition": 0}
    t["l|s1|1d"] = {"window_start": day, "partition": 0}
    t["p|0"] = {"watermark": FUTURE, "swept_at": FUTURE}
    # the gauges after a restart do not show 2099
    assert domain.most_recent(list(t.items()), t.get, CONFIG, wall) == []
    step = t.feed(verdict("a", at=T0))
    assert step.note == "counted"  # not late against 2099
    assert sorted(b.window_start for b in step.latest) == [int(T0) - int(T0) % 86400, int(T0)]
    assert t["l|s1|1h"]["window_start"] == int(T0)
    assert t["p|0"]["watermark"] == wall + CONFIG.max_skew_s and step.sweep
    keys, gone = domain.expired(list(t.items()), 0, t["p|0"]["watermark"], CONFIG, wall)
    assert sorted(keys) == sorted([f"b|s1|w|1h|{hour}", f"b|s1|w|1d|{day}"])
    assert gone == []
    shown = domain.most_recent(list(t.items()), t.get, CONFIG, wall)
    assert sorted((b.window, b.window_start, b.passed) for b in shown) == [
        ("1d", int(T0) - int(T0) % 86400, 1),
        ("1h", int(T0), 1),
    ]


def test_a_regrade_gaining_its_windows_is_finished_as_a_gain_after_a_crash() -> None:
    """A trial first counted in its run only (dated past the wall clock then) and re-graded
    once its date is believed: the re-grade moves its run count and *gains* its windows.
    A crash that kept the re-grade's memory and lost its buckets must be finished the
    same way: before the fix the windows were finished as a move (its old outcome taken
    from windows that never held it), so the windows came out wrong while the run was
    right."""
    at = T0 + 3600
    undisturbed, t = Table(), Table()
    for table in (undisturbed, t):
        table.now = at - CONFIG.max_skew_s - 60  # the first verdict is from the future
        assert table.feed(verdict("a", "passed", at=at)).note == "future"
        table.feed(verdict("b", "failed", at=at))  # counted in its run only as well
        table.now = NOW
    regrade = verdict("a", "failed", at=at, attempt=2)
    assert undisturbed.feed(regrade).note == "regraded"
    writes = domain.apply(t.get, regrade, 0, CONFIG, now=NOW).writes
    assert writes[0][0] == "t|s1|a"  # the memory first, then the buckets
    t.feed(regrade, cut=1)  # the changelog kept the memory only
    t.feed(regrade)  # read again after the restart
    assert t.counts() == undisturbed.counts()
    hour = int(at) - int(at) % 3600
    assert t.counts()[f"b|s1|w|1h|{hour}"] == (0, 1, 0)


def test_a_verdict_not_read_again_loses_its_own_change_only() -> None:
    """Run 10 of the outage experiment (docs/notes/incidents.md), on the pure count: two
    trials of one day counted one after the other, a crash keeping their memories and
    losing their window writes, and the restart not reading the first one's verdict
    again. The second one's change is finished all the same (before, it waited behind
    the first's for good, and the next trial of the day took its number): the day is
    short of the first trial only, not of both."""
    z = verdict("z", "error", at=T0)
    a = verdict("a", "passed", at=T0 + 10)
    b = verdict("b", "passed", at=T0 + 20)
    c = verdict("c", "failed", at=T0 + 30)
    undisturbed = Table()
    for v in (z, a, b, c):
        undisturbed.feed(v)
    t = Table()
    t.feed(z)  # counted and delivered: its windows stand in the table
    day, hour = int(T0) - int(T0) % 86400, int(T0) - int(T0) % 3600
    lost = {f"b|s1|w|1d|{day}", f"b|s1|w|1h|{hour}"}
    before = {key: t[key] for key in lost}
    t.feed(a)
    t.feed(b)
    t.update(before)  # the changelog kept a's and b's memories and runs, not their windows
    t.feed(b)  # read again; a's verdict is not
    t.feed(c)  # a new trial of the same day
    want = undisturbed.counts()
    got = t.counts()
    assert got["b|s1|run|run-1"] == want["b|s1|run|run-1"]
    for key in lost:  # b and c counted, a lost alone
        assert got[key] == (want[key][0] - 1, want[key][1], want[key][2]), key
    t.feed(a)  # were it read after all, later: too late, and not counted twice
    assert t.counts() == got


def test_an_invalid_trial_is_counted_apart_and_out_of_n() -> None:
    t = Table()
    for i, o in enumerate(["passed", "passed", "invalid", "passed", "failed"]):
        t.feed(verdict(f"t{i}", o, k=3))  # type: ignore[arg-type]
    r = t.published["s1|run-1|None|None"]
    n, c, k = 4, 3, 3
    assert (r.n, r.passed, r.failed, r.errors, r.invalid) == (n, c, 1, 0, 1)
    assert r.pass_hat_k == pytest.approx(comb(c, k) / comb(n, k))
    assert r.pass_hat_k_upper == pytest.approx(beta.ppf(0.95, c + 1, n - c + 1) ** k)
    # a re-grade that finds the user was fine moves the trial from invalid to passed
    t.feed(verdict("t2", "passed", attempt=2, k=3))
    r = t.published["s1|run-1|None|None"]
    assert (r.n, r.passed, r.invalid) == (5, 4, 0)


def test_sampled_figures_count_only_the_trials_whose_every_check_ran() -> None:
    from services.grading.estimators import pass_hat_k_interval

    table = Table()
    outcomes = [
        ("a", "passed", True),
        ("b", "passed", True),
        ("c", "failed", True),
        ("d", "passed", True),
        ("e", "passed", False),
        ("f", "failed", False),
        ("g", "error", True),
    ]
    for trial, outcome, sampled in outcomes:
        table.feed(verdict(trial, outcome).model_copy(update={"sampled": sampled}))
    for record in table.published.values():
        assert (record.n, record.passed) == (7, 4)
        # the reference count: the sampled trials' outcomes
        n = sum(1 for _, _, s in outcomes if s)
        c = sum(1 for _, o, s in outcomes if s and o == "passed")
        assert (record.n_sampled, record.passed_sampled, record.errors_sampled) == (n, c, 1)
        assert record.pass_hat_k_sampled == pytest.approx(comb(c, 3) / comb(n, 3))
        assert (record.pass_hat_k_sampled_lower, record.pass_hat_k_sampled_upper) == (
            pytest.approx(pass_hat_k_interval(n, c, 3)[0]),
            pytest.approx(pass_hat_k_interval(n, c, 3)[1]),
        )
    # a backfill re-grade of an unsampled trial, same outcome: it joins the sampled figures
    table.feed(verdict("e", "passed", attempt=2))
    run = next(r for r in table.published.values() if r.run_id == "run-1")
    assert (run.n, run.passed, run.n_sampled, run.passed_sampled) == (7, 4, 6, 4)
    # a trial that was never unsampled keeps the old shape: every trial is sampled
    other = Table()
    other.feed(verdict("z", "passed"))
    rec = next(iter(other.published.values()))
    assert (rec.n_sampled, rec.passed_sampled) == (1, 1)
    assert "n_sampled" not in {
        k for k, v in other.items() if k.startswith("b|") for k in v if v[k] is not None
    }
