"""A run's report and its page, read from the projection: what `passk report`, `passk gate`
and `passk compare` print, as functions returning values (`passk ci` calls them too)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from services.contract.exits import NothingToJudge
from services.contract.settings import Settings
from services.report.domain import RunReport, build_report, previous_run
from services.report.judge_cost import Prices
from services.report.trial_view import TrialView, build_view, page_trials
from services.storage.db import redacted
from services.storage.records import TranscriptRecord, TrialRecord, of_trial
from services.storage.store import Store

if TYPE_CHECKING:
    from services.report.compare import Comparison

RUN_WINDOWS = 24  # windows per scenario and size in the report page's over-time section


def prices(settings: Settings) -> Prices:
    return Prices(settings.judge_price_per_mtok_in, settings.judge_price_per_mtok_out)


def load_report(
    run_id: str, database_url: str, settings: Settings
) -> tuple[RunReport, list[str], str]:
    """The run's report, the runs the projection knows (for a helpful error), its URL.
    A store that cannot be reached escapes as OperationalError (exit 4 in the CLI)."""
    store = Store(database_url)
    try:
        trials = store.trials(run_id)
        before = previous_run(run_id, store.run_scenarios()) if trials else None
        judges = store.judge_verdicts(run_id) if trials else []
        report = build_report(run_id, trials, before, judges, prices(settings))
        return report, ([] if trials else store.runs()), redacted(store.url)
    finally:
        store.close()


def _known(runs: list[str]) -> str:
    """The first ten runs the projection knows, for the message about one it does not."""
    return ", ".join(runs[:10]) + (", …" if len(runs) > 10 else "") or "none"


def run_report(run_id: str, database_url: str, settings: Settings) -> RunReport:
    """`passk report`: the run's report; NothingToJudge, naming the runs the projection
    knows, when it has no trial of this one."""
    report, runs, url = load_report(run_id, database_url, settings)
    if not report.trials:
        raise NothingToJudge(
            f"unknown run {run_id!r}: no trial verdicts in the projection "
            f"({url}). Known runs: {_known(runs)}"
        )
    return report


def compare_reports(base: str, run: str, database_url: str, settings: Settings) -> Comparison:
    """`passk compare`: the two runs side by side; NothingToJudge when either has no
    trials."""
    from services.report.compare import compare_runs

    reports = []
    for run_id in (base, run):
        report, runs, url = load_report(run_id, database_url, settings)
        if not report.trials:
            raise NothingToJudge(
                f"run {run_id!r} has no trial verdicts in the projection "
                f"({url}): nothing to compare. Known runs: {_known(runs)}"
            )
        reports.append(report)
    return compare_runs(*reports)


def own(trial: TrialRecord, kept: TranscriptRecord | None) -> TranscriptRecord | None:
    """The kept transcript if it is this trial's (not another's that reused the id)."""
    return kept if kept is not None and of_trial(trial, kept) else None


def open_trial(store: Store, trial_id: str, settings: Settings) -> TrialView | None:
    """The view `passk show` prints of one trial in the projection, or None when there is
    no such trial (the review app's item page shows the same, services/cli/wiring.py)."""
    trial = store.trial(trial_id)
    if trial is None:
        return None
    return build_view(
        trial,
        [g for g in store.trial_gates(trial_id) if of_trial(trial, g)],
        [j for j in store.trial_judges(trial_id) if of_trial(trial, j)],
        own(trial, store.transcript(trial_id)),
        prices(settings),
    )


def load_trial(trial_id: str, database_url: str, settings: Settings) -> TrialView:
    """`passk show`: the trial's view; NothingToJudge when the projection has no such
    trial."""
    store = Store(database_url)
    try:
        view = open_trial(store, trial_id, settings)
        if view is None:
            raise NothingToJudge(
                f"unknown trial {trial_id!r}: no trial verdict in the projection "
                f"({redacted(store.url)})"
            )
        return view
    finally:
        store.close()


def opened_trials(
    run_id: str, database_url: str, settings: Settings
) -> tuple[list[TrialView], int]:
    """The trials the report page expands (services.report.trial_view.page_trials)."""
    store = Store(database_url)
    try:
        chosen, left_out = page_trials(store.trials(run_id))
        ids = {t.trial_id for t in chosen}
        gates = [g for g in store.gate_results(run_id) if g.trial_id in ids]
        judges = [j for j in store.judge_verdicts(run_id) if j.trial_id in ids]
        kept = store.transcripts(ids)
        paid = prices(settings)
        return [
            build_view(
                t,
                [g for g in gates if g.trial_id == t.trial_id and of_trial(t, g)],
                [j for j in judges if j.trial_id == t.trial_id and of_trial(t, j)],
                own(t, kept.get(t.trial_id)),
                paid,
            )
            for t in chosen
        ], left_out
    finally:
        store.close()


def report_page(report: RunReport, database_url: str, settings: Settings) -> str:
    """The report page (one self-contained HTML file) of a loaded report."""
    from services.report.html import render_html
    from services.report.over_time import run_section
    from services.report.windows import load_windows

    over_time = run_section(
        load_windows(database_url, RUN_WINDOWS, None, [s.scenario_id for s in report.scenarios])
    )
    opened, not_opened = opened_trials(report.run_id, database_url, settings)
    return render_html(
        report,
        generated_at=datetime.now(UTC),
        over_time=over_time,
        opened=opened,
        not_opened=not_opened,
    )
