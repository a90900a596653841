"""`passk report --html`: one self-contained page a team can open and attach to a pull request.

Everything the page needs is inside it: the plotly.js bundle of the `plotly` package is
inlined (no network at view time), the charts are plotly figures, and the tables carry
the same figures as `passk report --json` (each cell names its figure in `data-figure`).
The only script of ours filters the failed-checks table by scenario and check, and keeps
the filter in the address (`#scenario=…&check=…`) so a link shows the same rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from html import escape

import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs

from services.report.cells import cell, figure
from services.report.domain import RunReport, ScenarioReport
from services.report.trial_view import TrialView, judge_cost_html, trial_links, trials_section

PLOT_CONFIG = {"displaylogo": False, "responsive": True}

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px auto; max-width: 1200px;
       color: #1d232b; padding: 0 16px; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 17px; margin-top: 32px; }
.sub { color: #5b6673; margin-top: 0; }
table { border-collapse: collapse; width: 100%; margin: 8px 0; }
th, td { text-align: left; padding: 5px 8px; border-bottom: 1px solid #e3e7ec;
         vertical-align: top; }
th { background: #f4f6f8; font-weight: 600; } td.num { text-align: right;
     font-variant-numeric: tabular-nums; white-space: nowrap; }
.pass { color: #16794c; font-weight: 600; } .fail { color: #b42318; font-weight: 600; }
.warn { color: #a15c07; font-weight: 600; }
.note { background: #f4f6f8; border-left: 3px solid #8a96a3; padding: 6px 10px; }
label { margin-right: 16px; } select { margin-left: 4px; }
.reason { max-width: 640px; overflow-wrap: anywhere; }
"""

FILTER_SCRIPT = """
(function () {
  var scenario = document.getElementById('filter-scenario');
  var check = document.getElementById('filter-check');
  var count = document.getElementById('filter-count');
  function apply() {
    var shown = 0;
    document.querySelectorAll('#failed-checks tbody tr').forEach(function (row) {
      var ok = (!scenario.value || row.dataset.scenario === scenario.value) &&
               (!check.value || row.dataset.check === check.value);
      row.hidden = !ok;
      if (ok) { shown += 1; }
    });
    count.textContent = shown;
    var parts = [];
    if (scenario.value) { parts.push('scenario=' + encodeURIComponent(scenario.value)); }
    if (check.value) { parts.push('check=' + encodeURIComponent(check.value)); }
    history.replaceState(null, '', parts.length ? '#' + parts.join('&') : location.pathname);
  }
  new URLSearchParams(location.hash.slice(1)).forEach(function (value, key) {
    if (key === 'scenario') { scenario.value = value; }
    if (key === 'check') { check.value = value; }
  });
  scenario.addEventListener('change', apply);
  check.addEventListener('change', apply);
  apply();
})();
"""


def _verdict(s: ScenarioReport) -> str:
    if s.insufficient:
        return '<span class="warn">insufficient trials</span>'
    if s.scenario_passed:
        return '<span class="pass">PASS</span>'
    return '<span class="fail">FAIL</span>'


def reliability_figure(report: RunReport) -> go.Figure:
    ids = [s.scenario_id for s in report.scenarios]
    hat = [s.pass_hat_k for s in report.scenarios]
    fig = go.Figure()
    fig.add_bar(
        name="pass@k", x=ids, y=[s.pass_at_k for s in report.scenarios], marker_color="#8fb8de"
    )
    fig.add_bar(
        name="pass^k (90% credible interval)",
        x=ids,
        y=hat,
        marker_color="#1f5f99",
        error_y={
            "type": "data",
            "symmetric": False,
            "array": [
                s.pass_hat_k_upper - (h or 0.0) for s, h in zip(report.scenarios, hat, strict=True)
            ],
            "arrayminus": [
                (h or 0.0) - s.pass_hat_k_lower for s, h in zip(report.scenarios, hat, strict=True)
            ],
        },
    )
    fig.update_layout(
        barmode="group",
        height=380,
        margin={"t": 30, "b": 60, "l": 50, "r": 20},
        yaxis={"range": [0, 1.05], "title": "estimate"},
        legend={"orientation": "h", "y": 1.12},
    )
    return fig


def cost_figure(report: RunReport) -> go.Figure:
    fig = go.Figure()
    for s in report.scenarios:
        durations = [
            t.duration_s
            for t in report.trials
            if t.scenario_id == s.scenario_id and t.duration_s is not None
        ]
        fig.add_box(name=s.scenario_id, y=durations, boxpoints="all", jitter=0.3)
    fig.update_layout(
        height=340,
        showlegend=False,
        margin={"t": 30, "b": 60, "l": 50, "r": 20},
        yaxis={"title": "duration per trial (s)"},
    )
    return fig


def _plot(fig: go.Figure, div_id: str) -> str:
    return str(
        pio.to_html(fig, include_plotlyjs=False, full_html=False, div_id=div_id, config=PLOT_CONFIG)
    )


def _scenario_rows(report: RunReport) -> Iterable[str]:
    for s in report.scenarios:
        interval = f"[{s.pass_hat_k_lower:.3f}, {s.pass_hat_k_upper:.3f}]"
        yield (
            f'<tr data-scenario="{escape(s.scenario_id)}">'
            + cell("scenario_id", s.scenario_id, num=False)
            + cell("k", str(s.k))
            + cell("n", str(s.n))
            + cell("passed", str(s.passed))
            + cell("failed", str(s.failed))
            + cell("errors", str(s.errors))
            + cell("invalid", str(s.invalid))
            + cell("pass_at_k", figure(s.pass_at_k))
            + cell("pass_hat_k", figure(s.pass_hat_k))
            + cell("pass_hat_k_interval", interval)
            + cell("n_sampled", str(s.n_sampled))
            + cell("pass_hat_k_sampled", figure(s.pass_hat_k_sampled))
            + cell("judge_calls_saved", str(s.judge_calls_saved))
            + f'<td data-figure="scenario_passed" data-value="{str(s.scenario_passed).lower()}">'
            + _verdict(s)
            + "</td>"
            + cell(
                "completion",
                "exit gate only" if s.completion == "conversation" else "both gates",
                num=False,
            )
            + "</tr>"
        )


def _invalid(report: RunReport) -> str:
    """Trials the simulated user spoiled, and the adaptive run's comparison: apart from
    every figure of the agent."""
    out = []
    if report.fixed_plan is not None:
        out.append(
            f'<p id="fixed-plan" class="note" data-trials-run='
            f'"{report.fixed_plan.trials_run}" data-fixed-plan-trials='
            f'"{report.fixed_plan.fixed_plan_trials}">'
            f"{escape(report.fixed_plan.text())}</p>"
        )
    if report.invalid_trials:
        rows = "".join(
            f'<tr data-trial="{escape(t.trial_id)}"><td>{escape(t.trial_id)}</td>'
            f"<td>{escape(t.scenario_id)}</td><td>"
            + escape("; ".join(f"{c.check}: {c.reason}" for c in t.checks))
            + "</td></tr>"
            for t in report.invalid_trials
        )
        out.append(
            '<h2>Invalid trials</h2><p class="sub">The simulated user failed a user '
            "check: neither passed nor failed, out of n and of every figure.</p>"
            '<table id="invalid-trials"><thead><tr><th>trial</th><th>scenario</th>'
            f"<th>user checks failed</th></tr></thead><tbody>{rows}</tbody></table>"
        )
    return "\n".join(out)


def _cost_rows(report: RunReport) -> Iterable[str]:
    for s in report.scenarios:
        yield (
            f'<tr data-scenario="{escape(s.scenario_id)}">'
            + cell("scenario_id", s.scenario_id, num=False)
            + cell("tokens_median", figure(s.tokens_median, 0))
            + cell("turns_median", figure(s.turns_median, 1))
            + cell("duration_s_median", figure(s.duration_s_median, 1))
            + "</tr>"
        )


def _failed_rows(report: RunReport) -> Iterable[str]:
    for t in report.trials:
        for fc in t.failed_checks:
            yield (
                f'<tr data-scenario="{escape(t.scenario_id)}" data-check="{escape(fc.check)}" '
                f'data-trial="{escape(t.trial_id)}">'
                + cell("trial_id", t.trial_id, num=False)
                + cell("scenario_id", t.scenario_id, num=False)
                + cell("outcome", t.outcome, num=False)
                + cell("check", fc.check, num=False)
                + f'<td class="reason">{escape(fc.reason)}</td>'
                + cell("exit", f"{t.exit_reason or '—'} ({t.exit_source or 'unknown'})", num=False)
                + "</tr>"
            )


def _options(values: Iterable[str]) -> str:
    return "".join(f'<option value="{escape(v)}">{escape(v)}</option>' for v in values)


def _flakiness(report: RunReport, opened_ids: Iterable[str] = ()) -> str:
    opened = set(opened_ids)
    if not report.flakiness:
        return '<p id="flakiness-none">No scenario is flaky: every scenario\'s trials agree.</p>'
    items = []
    for f in report.flakiness:

        def failing(check: str, scenario: str = f.scenario_id) -> str:
            ids = [
                t.trial_id
                for t in report.trials
                if t.scenario_id == scenario
                and t.trial_id in opened
                and any(fc.check == check for fc in t.failed_checks)
            ]
            return f' <span class="trials">in {trial_links(ids)}</span>' if ids else ""

        checks = "".join(
            f'<li data-check="{escape(c.check)}" data-failures="{c.failures}" '
            f'data-trials="{c.trials}"><b>{escape(c.check)}</b> fails {c.failures} of '
            f'{c.trials}{failing(c.check)} <span class="sub">— e.g. '
            f"{escape(c.example_reason)}</span></li>"
            for c in f.checks
        )
        items.append(
            f'<div class="flaky" data-scenario="{escape(f.scenario_id)}">'
            f"<h3>{escape(f.scenario_id)}: {f.passed} of {f.trials} trials passed</h3>"
            f"<p>{escape(f.summary)}</p><ol>{checks}</ol></div>"
        )
    return "".join(items)


def _advisory_table(
    table_id: str,
    key: str,
    heads: Sequence[str],
    rows: Iterable[tuple[str, Sequence[str], int, int, str]],
) -> str:
    """An advisory judge's or check's rows: what it is, where, how often, how often it failed,
    and why (each row carries its key as `data-<key>` for the page's tests and links)."""
    body = "".join(
        f'<tr data-{key}="{escape(name)}"><td>{escape(name)}</td>'
        f'<td>{escape(", ".join(scenarios))}</td><td class="num">{count}</td>'
        f'<td class="num">{failed}</td><td>{escape(why)}</td></tr>'
        for name, scenarios, count, failed, why in rows
    )
    head = "".join(f"<th>{h}</th>" for h in heads)
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _advisory(report: RunReport) -> str:
    if not report.advisory_judges:
        return '<p id="advisory-none">Every judge of this run was gating.</p>'
    return _advisory_table(
        "advisory-judges",
        "judge",
        ("judge", "scenarios", "verdicts", "would have failed", "why advisory"),
        ((j.judge_id, j.scenarios, j.verdicts, j.failed, j.why) for j in report.advisory_judges),
    )


def _advisory_checks(report: RunReport) -> str:
    """External checks the scenarios do not name (shown only when a run reported some)."""
    if not report.advisory_checks:
        return ""
    return _advisory_table(
        "advisory-checks",
        "check",
        (
            "external check (not in the scenario's external_checks)",
            "scenarios",
            "trials",
            "failed",
            "example reason",
        ),
        (
            (c.check, c.scenarios, c.trials, c.failed, c.example_reason or "—")
            for c in report.advisory_checks
        ),
    )


def _page_head(report: RunReport, generated_at: datetime) -> str:
    """The document's head and the run's heading: when, the deploy gate, how many
    scenarios passed, and the previous run of these scenarios to compare with."""
    passed = sum(1 for s in report.scenarios if s.scenario_passed)
    total = len(report.scenarios)
    gate = (
        '<span class="pass">PASS</span>'
        if total and passed == total
        else '<span class="fail">FAIL</span>'
    )
    previous = (
        f'<p id="previous-run">Previous run of these scenarios: '
        f"<code>{escape(report.previous_run)}</code> — compare with "
        f"<code>passk compare --base {escape(report.previous_run)} "
        f"--run {escape(report.run_id)}</code></p>"
        if report.previous_run
        else ""
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>passk report: {escape(report.run_id)}</title>
<style>{STYLE}</style>
<script>{get_plotlyjs()}</script>
</head><body>
<h1>passk report: <span id="run-id">{escape(report.run_id)}</span></h1>
<p class="sub">generated {escape(generated_at.isoformat(timespec="seconds"))} · deploy gate
<b id="deploy-gate">{gate}</b> · {passed} of {total} scenarios passed pass^k</p>
{previous}
"""


def _reliability_section(report: RunReport) -> str:
    """Reliability per scenario: the chart, the table, the scenarios graded without the
    state gate."""
    without = (
        '<p id="without-state-gate" class="note">Graded without the state gate '
        "(<code>completion: conversation</code>, no persisted session): "
        f"{escape(', '.join(report.without_state_gate))}</p>"
        if report.without_state_gate
        else ""
    )
    return f"""<h2>Reliability per scenario</h2>
<p class="sub">A scenario passes only with at least k trials, every one passed. pass^k gates
deploys; the gap to pass@k is where flakiness hides.</p>
{_plot(reliability_figure(report), "reliability-chart")}
<table id="scenarios"><thead><tr><th>scenario</th><th>k</th><th>n</th><th>passed</th>
<th>failed</th><th>errors</th><th>invalid</th><th>pass@k</th><th>pass^k</th>
<th>pass^k 90% interval</th><th>sampled</th><th>pass^k sampled</th>
<th>LLM judge calls saved</th>
<th>verdict</th><th>gates</th></tr></thead>
<tbody>{"".join(_scenario_rows(report))}</tbody></table>
{without}
"""


def _failed_checks_section(report: RunReport) -> str:
    """Failed checks: the table of every failed check, filtered by scenario and check."""
    checks = sorted({fc.check for t in report.trials for fc in t.failed_checks})
    failed_rows = "".join(_failed_rows(report))
    return f"""<h2>Failed checks</h2>
<p><label>scenario<select id="filter-scenario"><option value="">all</option>
{_options(s.scenario_id for s in report.scenarios)}</select></label>
<label>check<select id="filter-check"><option value="">all</option>{_options(checks)}
</select></label> <span id="filter-count"></span> shown</p>
<table id="failed-checks"><thead><tr><th>trial</th><th>scenario</th><th>outcome</th>
<th>check</th><th>reason</th><th>exit checked (whose)</th></tr></thead>
<tbody>{failed_rows}</tbody></table>
"""


def render_html(
    report: RunReport,
    *,
    generated_at: datetime,
    over_time: str | None = None,
    opened: Sequence[TrialView] = (),
    not_opened: int = 0,
) -> str:
    """The whole page as one string; `over_time`, the run's scenarios over time
    (services/report/over_time.py), when the projection holds their windows; `opened`, the
    trials expanded (services/report/trial_view.py)."""
    head = _page_head(report, generated_at)
    reliability = _reliability_section(report)
    invalid = _invalid(report)
    flakiness = _flakiness(report, {v.trial_id for v in opened})
    failed_checks = _failed_checks_section(report)
    return f"""{head}{reliability}{invalid}
{over_time or ""}
<h2>Flakiness explained</h2>
<p class="sub">For each scenario whose trials disagree: the checks whose result flips between
its trials, by how many trials they failed.</p>
<div id="flakiness">{flakiness}</div>
{failed_checks}<h2>Trials opened</h2>
<p class="sub">Every failed trial, and the first of each scenario: its checks, the persisted
state against each expectation (the failing paths marked), the judge calls and the
conversation. <code>passk show TRIAL_ID</code> prints the same.</p>
{trials_section(opened, not_opened)}
<h2>Advisory judges</h2>
<p class="sub">Recorded and shown, never failing a trial.</p>
{_advisory(report)}{_advisory_checks(report)}
<h2>Tokens, turns and duration</h2>
<p class="sub">Tracked to spot regressions and cost drift; they never gate.</p>
<table id="costs"><thead><tr><th>scenario</th><th>median tokens</th><th>median turns</th>
<th>median duration (s)</th></tr></thead><tbody>{"".join(_cost_rows(report))}</tbody></table>
{_plot(cost_figure(report), "duration-chart")}
{judge_cost_html(report.judge_cost)}
<script>{FILTER_SCRIPT}</script>
</body></html>
"""
