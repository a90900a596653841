"""What `passk audit` prints, with rich."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from services.audit.domain import AuditReport
from services.contract.terminal import literal


def print_audit(report: AuditReport, console: Console) -> None:
    """The stages each trial reached, the trials unaccounted (the first 50), the counts
    that differ from their verdicts, what was repaired, and whether it is clean."""
    stages = Table(
        "stage",
        "trials",
        title=f"{report.trials} trials audited"
        + (f", {report.in_flight} still in flight" if report.in_flight else ""),
    )
    for stage, n in report.stages.items():
        stages.add_row(stage, str(n))
    for reason, n in report.dead_lettered.items():
        stages.add_row(f"dead-lettered: {literal(reason)}", str(n))
    console.print(stages)
    if report.unaccounted:
        lost = Table(
            "trial",
            "run",
            "scenario",
            "stopped at",
            "detail",
            title=f"{sum(report.unaccounted_by_stage.values())} unaccounted (the first 50)",
        )
        for u in report.unaccounted[:50]:
            lost.add_row(
                *(
                    literal(cell)
                    for cell in (
                        u.trial_id or "(a count)",
                        u.run_id or "",
                        u.scenario_id,
                        u.stopped_at,
                        u.detail,
                    )
                )
            )
        console.print(lost)
    if report.scopes:
        scopes = Table(
            "scenario",
            "scope",
            "counted (p/f/e)",
            "expected (p/f/e)",
            title="counts that differ from their verdicts",
        )
        for s in report.scopes:
            where = f"run {s.run_id}" if s.scope == "run" else f"{s.scope} @ {s.window_start}"
            scopes.add_row(
                literal(s.scenario_id),
                literal(where),
                f"{s.counted.passed}/{s.counted.failed}/{s.counted.errors}",
                f"{s.expected.passed}/{s.expected.failed}/{s.expected.errors}",
            )
        console.print(scopes)
    if report.repaired is not None:
        r = report.repaired
        console.print(
            f"repaired: {r.regraded} re-graded, {r.reprojected} re-projected, "
            f"{r.recounted_scopes} scopes recounted",
            markup=False,
        )
    console.print("clean: every trial accounted for" if report.clean else "NOT clean", markup=False)
