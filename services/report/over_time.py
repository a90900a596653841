"""A scenario's reliability over time: its event-time windows as the aggregate published
them (kept in the projection's `scenario_windows` table), for `passk windows` (table,
JSON, page) and the over-time section of `passk report --html`.

Each window shows pass^k with its 90% credible band, pass@k beside it, the trials that
could not be judged (errors) apart, and whether the reliability-drop alert's condition
held in it. That condition is the rule's (infra/prometheus/alerts.yml,
PasskScenarioReliabilityDrop), asked of the *judged* trials: the upper bound of pass^k over
the judged trials is below the scenario's `alert.min_pass_hat_k`, at least
`alert.min_trials` trials were judged, and errors are not most of the window's trials (a
window of mostly errors is the judge's incident: PasskJudgeErrorRate). The strict figures
(errors count as not passed) are the ones shown as pass^k, as the deploy gate reads them.
Under sampling (production traffic) the judged figures and the alert condition are those of
the sampled trials (every check ran), shown beside the figures over all trials.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from html import escape
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs

from schemas.events import ReliabilityFigures
from services.grading.estimators import ReliabilityTally, drop_alert_holds, pass_hat_k_interval
from services.report.cells import cell, figure
from services.report.html import STYLE
from services.storage.records import WindowRecord

PLOT_CONFIG = {"displaylogo": False, "responsive": True}


class WindowView(ReliabilityFigures):
    scenario_id: str
    window: str
    window_start: datetime
    window_end: datetime
    pass_hat_k_lower: float
    pass_hat_k_upper: float
    judged_pass_hat_k: float | None
    judged_pass_hat_k_upper: float
    alert_min_pass_hat_k: float | None
    alert_min_trials: int | None
    alert_condition: bool
    # Production traffic under sampling: the trials whose every check ran, and pass^k over
    # them (equal to n / passed without sampling). The alert condition asks about these.
    n_sampled: int
    passed_sampled: int
    pass_hat_k_sampled: float | None
    pass_hat_k_sampled_lower: float
    pass_hat_k_sampled_upper: float


def alert_condition(
    tally: ReliabilityTally, min_pass_hat_k: float | None, min_trials: int | None
) -> bool:
    """Whether PasskScenarioReliabilityDrop's condition holds for a window whose sampled
    trials are `tally` (without its `for:` duration); never for a window without targets."""
    if min_pass_hat_k is None or min_trials is None:
        return False
    return drop_alert_holds(tally, min_pass_hat_k, min_trials)


def view(row: WindowRecord) -> WindowView:
    sampled = row.sampled_tally()
    judged = sampled.judged()
    lower, upper = pass_hat_k_interval(sampled.n, sampled.passed, sampled.k)
    return WindowView(
        **row.model_dump(include=set(WindowView.model_fields) - {"n_sampled", "passed_sampled"}),
        judged_pass_hat_k=judged.pass_hat_k,
        judged_pass_hat_k_upper=pass_hat_k_interval(judged.n, judged.passed, judged.k)[1],
        alert_condition=alert_condition(sampled, row.alert_min_pass_hat_k, row.alert_min_trials),
        n_sampled=sampled.n,
        passed_sampled=sampled.passed,
        pass_hat_k_sampled=sampled.pass_hat_k,
        pass_hat_k_sampled_lower=lower,
        pass_hat_k_sampled_upper=upper,
    )


def views(rows: Iterable[WindowRecord]) -> list[WindowView]:
    return [view(r) for r in rows]


def windows_json(items: Sequence[WindowView]) -> dict[str, Any]:
    return {"windows": [w.model_dump(mode="json") for w in items]}


def by_scenario(items: Sequence[WindowView]) -> dict[tuple[str, str], list[WindowView]]:
    out: dict[tuple[str, str], list[WindowView]] = {}
    for w in sorted(items, key=lambda w: (w.scenario_id, w.window, w.window_start)):
        out.setdefault((w.scenario_id, w.window), []).append(w)
    return out


# ------------------------------------------------------------------------ pictures


def over_time_figure(items: Sequence[WindowView]) -> go.Figure:
    """One scenario's windows of one size: the credible band, pass^k, pass@k, and the
    windows where the alert condition held."""
    x = [middle(w) for w in items]  # a point stands for its whole window: drawn at its middle
    fig = go.Figure()
    _draw_estimates(fig, items, x)
    _draw_alerts(fig, items)
    _draw_errors(fig, items, x)
    _draw_target(fig, items)
    fig.update_layout(
        height=320,
        margin={"t": 30, "b": 40, "l": 50, "r": 20},
        yaxis={"range": [0, 1.05], "title": "estimate"},
        xaxis={"range": time_range(items), "type": "date"},
        legend={"orientation": "h", "y": 1.15},
    )
    return fig


def _draw_estimates(fig: go.Figure, items: Sequence[WindowView], x: list[datetime]) -> None:
    """The pass^k credible band, pass^k, pass@k, and pass^k judged when some trials errored."""
    fig.add_scatter(
        x=x,
        y=[w.pass_hat_k_upper for w in items],
        mode="lines",
        line={"width": 0},
        hoverinfo="skip",
        showlegend=False,
        name="upper",
    )
    fig.add_scatter(
        x=x,
        y=[w.pass_hat_k_lower for w in items],
        mode="lines",
        line={"width": 0},
        fill="tonexty",
        fillcolor="rgba(31,95,153,0.18)",
        name="pass^k 90% credible band",
    )
    fig.add_scatter(
        x=x,
        y=[w.pass_hat_k for w in items],
        mode="lines+markers",
        line={"color": "#1f5f99", "width": 2},
        name="pass^k",
    )
    fig.add_scatter(
        x=x,
        y=[w.pass_at_k for w in items],
        mode="lines+markers",
        line={"color": "#8fb8de", "dash": "dash"},
        name="pass@k",
    )
    if any(w.errors for w in items):
        fig.add_scatter(
            x=x,
            y=[w.judged_pass_hat_k for w in items],
            mode="lines+markers",
            line={"color": "#16794c", "dash": "dot"},
            name="pass^k judged",
        )


def _draw_alerts(fig: go.Figure, items: Sequence[WindowView]) -> None:
    """The windows where the alert condition held: a cross on pass^k and the window shaded."""
    alerts = [w for w in items if w.alert_condition]
    fig.add_scatter(
        x=[middle(w) for w in alerts],
        y=[w.pass_hat_k for w in alerts],
        mode="markers",
        marker={"symbol": "x", "size": 14, "color": "#b42318"},
        name="alert condition held",
    )
    for w in alerts:
        fig.add_vrect(
            x0=w.window_start, x1=w.window_end, fillcolor="#b42318", opacity=0.08, line_width=0
        )


def _draw_errors(fig: go.Figure, items: Sequence[WindowView], x: list[datetime]) -> None:
    """The share of errored trials per window, as bars (only when some errored)."""
    if any(w.errors for w in items):
        fig.add_bar(
            x=x,
            y=[w.errors / w.n if w.n else 0 for w in items],
            name="share errors",
            marker_color="#a15c07",
            opacity=0.35,
        )


def _draw_target(fig: go.Figure, items: Sequence[WindowView]) -> None:
    """The latest window's alert target, as a dotted line."""
    target = next(
        (w.alert_min_pass_hat_k for w in reversed(items) if w.alert_min_pass_hat_k is not None),
        None,
    )
    if target is not None:
        fig.add_hline(
            y=target,
            line_dash="dot",
            line_color="#b42318",
            annotation_text=f"alert target {target:g}",
            annotation_position="top left",
        )


def time_range(items: Sequence[WindowView]) -> list[str]:
    """The x axis: from the first window's start to the last one's end, so a single window
    spans its own length (plotly alone zooms one point to a millisecond)."""
    first = min(w.window_start for w in items)
    last = max(w.window_end for w in items)
    return [first.isoformat(), last.isoformat()]


def middle(w: WindowView) -> datetime:
    return w.window_start + (w.window_end - w.window_start) / 2


def stamp(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


def _rows(items: Sequence[WindowView]) -> str:
    out = []
    for w in items:
        out.append(
            f'<tr data-scenario="{escape(w.scenario_id)}" data-window="{escape(w.window)}" '
            f'data-window-start="{escape(stamp(w.window_start))}" '
            f'data-alert="{str(w.alert_condition).lower()}">'
            + cell("window_start", stamp(w.window_start), num=False)
            + cell("n", str(w.n))
            + cell("passed", str(w.passed))
            + cell("failed", str(w.failed))
            + cell("errors", str(w.errors))
            + cell("invalid", str(w.invalid))
            + cell("pass_hat_k", figure(w.pass_hat_k))
            + cell("pass_hat_k_interval", f"[{w.pass_hat_k_lower:.3f}, {w.pass_hat_k_upper:.3f}]")
            + cell("pass_at_k", figure(w.pass_at_k))
            + cell("judged_pass_hat_k", figure(w.judged_pass_hat_k))
            + f'<td data-figure="alert_condition" class="{"fail" if w.alert_condition else ""}">'
            + ("alert" if w.alert_condition else "")
            + "</td></tr>"
        )
    return "".join(out)


def over_time_section(items: Sequence[WindowView], *, empty: str) -> str:
    """The HTML of one figure and one table per (scenario, window size)."""
    if not items:
        return f'<p id="over-time-none">{escape(empty)}</p>'
    parts = []
    for i, ((scenario_id, size), group) in enumerate(by_scenario(items).items()):
        fig = over_time_figure(group)
        plot = str(
            pio.to_html(
                fig,
                include_plotlyjs=False,
                full_html=False,
                div_id=f"over-time-{i}",
                config=PLOT_CONFIG,
            )
        )
        parts.append(
            f'<div class="over-time" data-scenario="{escape(scenario_id)}" '
            f'data-window="{escape(size)}"><h3>{escape(scenario_id)} · {escape(size)} windows'
            f"</h3>{plot}"
            f'<table class="windows"><thead><tr><th>window start</th><th>n</th>'
            "<th>passed</th><th>failed</th><th>errors</th><th>invalid</th><th>pass^k</th>"
            "<th>pass^k 90% interval</th><th>pass@k</th><th>pass^k judged</th>"
            f"<th>alert</th></tr></thead><tbody>{_rows(group)}</tbody></table></div>"
        )
    return "".join(parts)


SECTION_NOTE = (
    "pass^k per event-time window with its 90% credible band, pass@k beside it; "
    "errors (trials that could not be judged) shown apart; a red × marks a window where "
    "the reliability-drop alert's condition held (asked of the judged trials)."
)


def run_section(items: Sequence[WindowView]) -> str:
    """The over-time section of a run's report page: its scenarios' latest windows."""
    body = over_time_section(
        items, empty="No event-time windows of these scenarios in the projection yet."
    )
    return (
        f'<h2>Reliability over time</h2><p class="sub">{escape(SECTION_NOTE)}</p>'
        f'<div id="over-time">{body}</div>'
    )


def render_windows_page(items: Sequence[WindowView], *, generated_at: datetime) -> str:
    """`passk windows --html`: the last windows of every scenario, one page."""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>passk: reliability over time</title>
<style>{STYLE}</style>
<script>{get_plotlyjs()}</script>
</head><body>
<h1>passk: reliability over time</h1>
<p class="sub">generated {escape(generated_at.isoformat(timespec="seconds"))} ·
{len(by_scenario(items))} scenario window series</p>
<p class="sub">{escape(SECTION_NOTE)}</p>
<div id="over-time">{over_time_section(items, empty="No windows in the projection yet.")}</div>
</body></html>
"""
