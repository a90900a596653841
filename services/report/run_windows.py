"""Which runs a windows view shows (`passk windows --runs PATTERN`), and the windows of only
those runs, counted again from the projection's trial rows.

The aggregate's windows count every trial of a scenario whatever its run: a CI run, a
developer's run and `make demo`'s would make one series with production traffic. By
default the view leaves out the runs `make demo` (`demo-...`, its `passk run` half) and
`passk ci` (`ci-...`) name; `--runs` names the runs to show instead: comma-separated run-id
patterns, each a glob (`production-*`) or, without `*`, `?` or `[`, a prefix (`build-4`).
`--runs '*'` shows every run.

When every run in the projection is shown, the view is the aggregate's own records (the
figures the alert saw). Otherwise each window is counted again here from the shown runs'
trials, placed by `finished_at` in the same epoch-aligned windows as the aggregate's
(services/grading/windows.py), the sampled trials being those none of whose LLM judges was
`not_sampled`; the alert targets are the aggregate record's of the same window. (A trial the
aggregate dated out of its windows, past its retention or in the future, is counted here.)
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime

from services.grading.estimators import ReliabilityTally, pass_hat_k_interval
from services.grading.windows import WindowSize, as_datetime, parse_windows
from services.storage.records import JudgeRecord, TrialRecord, WindowRecord, as_utc

# Run ids of make demo's `passk run` half and of `passk ci` (services/ci/pipeline.py).
EXCLUDED_BY_DEFAULT = ("demo-", "ci-")
DEFAULT_RUNS_HELP = "every run but make demo's (demo-*) and passk ci's (ci-*)"


def run_filter(pattern: str | None) -> Callable[[str], bool]:
    """Whether a run id is shown: by default every run but `demo-*` and `ci-*`; else any of
    the comma-separated patterns (a glob, or a prefix when it has no glob character)."""
    if pattern is None:
        return lambda run_id: not run_id.startswith(EXCLUDED_BY_DEFAULT)
    parts = [p.strip() for p in pattern.split(",") if p.strip()]
    if not parts:
        raise ValueError("--runs needs at least one pattern (e.g. 'production-*', or '*')")

    def shown(run_id: str) -> bool:
        return any(
            fnmatch.fnmatchcase(run_id, p) if any(ch in p for ch in "*?[") else run_id.startswith(p)
            for p in parts
        )

    return shown


def unsampled(judges: Iterable[JudgeRecord]) -> set[str]:
    """Trials at least one of whose LLM judges was left out by the sample."""
    return {j.trial_id for j in judges if j.result == "not_sampled"}


WindowKey = tuple[str, str, int]
"""(scenario id, window size label, window start in epoch seconds)."""


def _tally(
    trials: Sequence[TrialRecord], not_sampled: set[str], sizes: Sequence[WindowSize]
) -> tuple[dict[WindowKey, dict[str, int]], dict[WindowKey, tuple[datetime, int]]]:
    """Per window each trial finished in: its outcome counts (all and sampled), and the
    latest verdict's time and k."""
    counts: dict[WindowKey, dict[str, int]] = {}
    k_of: dict[WindowKey, tuple[datetime, int]] = {}
    for t in trials:
        if t.finished_at is None:
            continue
        at = as_utc(t.finished_at).timestamp()
        for size in sizes:
            key = (t.scenario_id, size.label, size.start(at))
            c = counts.setdefault(
                key,
                {
                    "passed": 0,
                    "failed": 0,
                    "errors": 0,
                    "invalid": 0,
                    "n_sampled": 0,
                    "passed_sampled": 0,
                    "errors_sampled": 0,
                },
            )
            outcome = {
                "passed": "passed",
                "failed": "failed",
                "error": "errors",
                "invalid": "invalid",
            }.get(t.outcome)
            if outcome is None:
                continue
            c[outcome] += 1
            if t.trial_id not in not_sampled and outcome != "invalid":
                c["n_sampled"] += 1
                c["passed_sampled"] += outcome == "passed"
                c["errors_sampled"] += outcome == "errors"
            verdict_at = as_utc(t.verdict_at)
            if key not in k_of or verdict_at >= k_of[key][0]:
                k_of[key] = (verdict_at, t.k)  # the latest verdict's k, as a run's summary
    return counts, k_of


def _window_record(
    key: WindowKey,
    c: dict[str, int],
    k: int,
    size: WindowSize,
    target: tuple[float | None, int | None],
    now: datetime,
) -> WindowRecord:
    """One window's record from its counts: the figures, the credible interval, and the
    aggregate's alert targets of that window."""
    scenario_id, label, start = key
    tally = ReliabilityTally(
        k=k, passed=c["passed"], failed=c["failed"], errors=c["errors"], invalid=c["invalid"]
    )
    lower, upper = pass_hat_k_interval(tally.n, tally.passed, k)
    min_hat, min_trials = target
    return WindowRecord(
        scenario_id=scenario_id,
        window=label,
        window_start=as_datetime(start),
        window_end=as_datetime(size.end(start)),
        **{f: v for f, v in tally.figures().items() if f != "scenario_passed"},
        pass_hat_k_lower=lower,
        pass_hat_k_upper=upper,
        alert_min_pass_hat_k=min_hat,
        alert_min_trials=min_trials,
        seq=0,
        occurred_at=now,
        event_id=f"recount:{scenario_id}:{label}:{start}",
        n_sampled=c["n_sampled"],
        passed_sampled=c["passed_sampled"],
        errors_sampled=c["errors_sampled"],
    )


def recount(
    trials: Sequence[TrialRecord],
    not_sampled: set[str],
    sizes: Sequence[WindowSize],
    aggregated: Sequence[WindowRecord],
    now: datetime,
) -> list[WindowRecord]:
    """The windows of these trials, one row per (scenario, size, start) that holds one, with
    the aggregate's alert targets of that window (None when it has no record of it)."""
    targets = {
        (r.scenario_id, r.window, as_utc(r.window_start)): (
            r.alert_min_pass_hat_k,
            r.alert_min_trials,
        )
        for r in aggregated
    }
    counts, k_of = _tally(trials, not_sampled, sizes)
    length = {s.label: s for s in sizes}
    return [
        _window_record(
            (scenario_id, label, start),
            c,
            k_of[(scenario_id, label, start)][1],
            length[label],
            targets.get((scenario_id, label, as_datetime(start)), (None, None)),
            now,
        )
        for (scenario_id, label, start), c in sorted(counts.items())
    ]


def last_of_each(rows: Sequence[WindowRecord], last: int) -> list[WindowRecord]:
    """The `last` most recent windows of each scenario and size, oldest first."""
    by: dict[tuple[str, str], list[WindowRecord]] = {}
    for r in sorted(rows, key=lambda r: (r.scenario_id, r.window, r.window_start)):
        by.setdefault((r.scenario_id, r.window), []).append(r)
    return [r for group in by.values() for r in group[-last:]]


def sizes_of(rows: Iterable[WindowRecord]) -> tuple[WindowSize, ...]:
    """The window sizes the aggregate publishes, as its records name them."""
    labels = sorted({r.window for r in rows})
    return parse_windows(",".join(labels)) if labels else ()
