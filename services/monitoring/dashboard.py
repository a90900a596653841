"""The Grafana dashboard, as code (grafana-foundation-sdk): infra/grafana/dashboards/passk.json
is what `python -m services.monitoring.dashboard` writes, committed; a test fails when the
file and this code disagree, and the end-to-end test runs every query against a live
Prometheus fed by the workers.

Queries use two Grafana variables, `$scenario` (multi-value regex) and `$__rate_interval`;
`PANEL_VARIABLES` says what to put in their place to run a query outside Grafana.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from grafana_foundation_sdk.builders import common as gc
from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import prometheus as gp
from grafana_foundation_sdk.builders import timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as dm

from services.contract.settings import PROJECT_ROOT

OUT = PROJECT_ROOT / "infra" / "grafana" / "dashboards" / "passk.json"
# The datasource uid infra/grafana/provisioning/datasources/prometheus.yml declares.
DATASOURCE = dm.DataSourceRef(type_val="prometheus", uid="passk-prometheus")
SCENARIO = 'scenario=~"$scenario"'
# The smallest window is the one an operator watches; "1d" is the same query with 1d.
WINDOW = 'window="1h"'
PANEL_VARIABLES = {"$__rate_interval": "1m", "$scenario": ".*"}


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class PanelSpec:
    title: str
    description: str
    queries: tuple[Query, ...]
    unit: str = "short"
    bars: bool = False
    width: int = 12
    repeat_by_scenario: bool = False
    fill_between: tuple[str, str] | None = None  # fill from the first legend to the second
    min_max: tuple[float, float] | None = None


def quantiles(metric: str, by: str, unit_note: str) -> tuple[Query, ...]:
    rate = f"rate({metric}_bucket{{{SCENARIO}}}[$__rate_interval])"
    return tuple(
        Query(
            f"histogram_quantile({q}, sum by (le, {by}) ({rate}))",
            f"{{{{{by}}}}} p{int(q * 100)}{unit_note}",
        )
        for q in (0.5, 0.95)
    )


PANELS: tuple[PanelSpec, ...] = (
    PanelSpec(
        "pass^k of $scenario, with its 90% credible band",
        "pass^k of the scenario's latest 1h event-time window (every one of k trials passes), "
        "and the 5%-95% credible band from a Beta posterior on the per-trial pass rate. "
        "The drop alert fires when the band's top is below the scenario's target.",
        (
            Query(f"passk_scenario_pass_hat_k{{{SCENARIO},{WINDOW}}}", "pass^k"),
            Query(f"passk_scenario_pass_hat_k_upper{{{SCENARIO},{WINDOW}}}", "upper"),
            Query(f"passk_scenario_pass_hat_k_lower{{{SCENARIO},{WINDOW}}}", "lower"),
            Query(f"passk_scenario_alert_min_pass_hat_k{{{SCENARIO}}}", "target"),
        ),
        unit="percentunit",
        width=8,
        repeat_by_scenario=True,
        fill_between=("upper", "lower"),
        min_max=(0, 1),
    ),
    PanelSpec(
        "Sampled pass^k beside pass^k over all trials",
        "Production traffic under sampling (docs/production.md): pass^k over the latest 1h "
        "window's sampled trials (every check ran, LLM judges included: the unbiased figure, "
        "what the drop alert asks about) beside pass^k over all its trials (unsampled ones ran "
        "gates and deterministic checks only, so it reads high). Equal without sampling.",
        (
            Query(
                f"passk_scenario_sampled_pass_hat_k{{{SCENARIO},{WINDOW}}}", "{{scenario}} sampled"
            ),
            Query(f"passk_scenario_pass_hat_k{{{SCENARIO},{WINDOW}}}", "{{scenario}} all trials"),
        ),
        unit="percentunit",
        width=8,
        min_max=(0, 1),
    ),
    PanelSpec(
        "Sampled trials in the latest window",
        "n_sampled: the latest 1h window's trials in their scenario's LLM-judge sample, beside "
        "all its trials. The sampled pass^k's interval narrows with n_sampled, not with the "
        "traffic; the drop alert waits for alert.min_trials sampled trials.",
        (
            Query(f"passk_scenario_sampled_trials{{{SCENARIO},{WINDOW}}}", "{{scenario}} sampled"),
            Query(f"passk_scenario_trials{{{SCENARIO},{WINDOW}}}", "{{scenario}} all trials"),
        ),
        width=8,
    ),
    PanelSpec(
        "LLM judge calls saved by sampling",
        "What the LLM-judge sample saved: per scenario in its latest 1h window (trials outside "
        "the sample times the scenario's LLM judges), and per judge per interval (calls not "
        "made, passk_judge_not_sampled_total). `passk report` prices them.",
        (
            Query(
                f"passk_scenario_llm_judge_calls_saved{{{SCENARIO},{WINDOW}}}",
                "{{scenario}} latest window",
            ),
            Query(
                "sum by (judge) (increase(passk_judge_not_sampled_total[$__rate_interval]))",
                "{{judge}} per interval",
            ),
        ),
        width=8,
    ),
    PanelSpec(
        "pass@k per scenario",
        "pass@k of each scenario's latest 1h window: at least one of k trials passes.",
        (Query(f"passk_scenario_pass_at_k{{{SCENARIO},{WINDOW}}}", "{{scenario}}"),),
        unit="percentunit",
        min_max=(0, 1),
    ),
    PanelSpec(
        "Flakiness gap (pass@k − pass^k)",
        "High pass@k with low pass^k: the agent can do it, but not every time.",
        (
            Query(
                f"passk_scenario_pass_at_k{{{SCENARIO},{WINDOW}}} - on (scenario, window) "
                f"passk_scenario_pass_hat_k{{{SCENARIO},{WINDOW}}}",
                "{{scenario}}",
            ),
        ),
        unit="percentunit",
        min_max=(0, 1),
    ),
    PanelSpec(
        "Trials in the latest window",
        "How many trials each scenario's latest 1h window holds; below min_trials no alert fires.",
        (Query(f"passk_scenario_trials{{{SCENARIO},{WINDOW}}}", "{{scenario}}"),),
    ),
    PanelSpec(
        "Trials by outcome",
        "Trial verdicts per interval: passed, failed, error (an error never counts as a pass).",
        (
            Query(
                f"sum by (scenario, outcome) (increase(passk_trials_total{{{SCENARIO}}}"
                "[$__rate_interval]))",
                "{{scenario}} {{outcome}}",
            ),
        ),
        bars=True,
    ),
    PanelSpec(
        "Gate results by check",
        "Outcome gates per interval, by gate (exit, state) and result.",
        (
            Query(
                "sum by (gate, result) (increase(passk_gate_results_total[$__rate_interval]))",
                "{{gate}} {{result}}",
            ),
        ),
        bars=True,
    ),
    PanelSpec(
        "Judge verdicts and errors",
        "Judge verdicts per interval by judge and result; `error`: the judge could not answer.",
        (
            Query(
                "sum by (judge, result) (increase(passk_judge_verdicts_total[$__rate_interval]))",
                "{{judge}} {{result}}",
            ),
        ),
        bars=True,
    ),
    PanelSpec(
        "Judge model request duration",
        "Every request to the judge model, retried or not.",
        (
            Query(
                "histogram_quantile(0.95, sum by (le) "
                "(rate(passk_judge_request_seconds_bucket[$__rate_interval])))",
                "p95",
            ),
        ),
        unit="s",
    ),
    PanelSpec(
        "Judge tokens per trial",
        "Prompt (input) and completion (output) tokens the judge model's API reported, per "
        "trial verdict. Cache answers and skipped judges (skip_when_gates_fail) spend none.",
        (
            Query(
                "sum by (kind) (increase(passk_judge_tokens_total[$__rate_interval])) / "
                "scalar(sum(increase(passk_trials_total[$__rate_interval])))",
                "{{kind}} tokens per trial",
            ),
        ),
        width=8,
    ),
    PanelSpec(
        "Judge cost per trial (estimated)",
        "Judge tokens per trial priced by PASSK_JUDGE_PRICE_PER_MTOK_IN/_OUT (money units); "
        "empty while no price is set: the cost is unknown, never shown as 0.",
        (
            Query(
                "sum(increase(passk_judge_tokens_total[$__rate_interval]) * on (kind) "
                "group_left () max by (kind) (passk_judge_price_per_mtok)) / 1e6 / "
                "scalar(sum(increase(passk_trials_total[$__rate_interval])))",
                "estimated cost per trial",
            ),
        ),
        width=8,
    ),
    PanelSpec(
        "Judge call duration by judge",
        "Wall time of each judge's model call for one verdict (retries, backoff and outage "
        "waits included); cache answers make no call.",
        tuple(
            Query(
                f"histogram_quantile({q}, sum by (le, judge) "
                "(rate(passk_judge_call_seconds_bucket[$__rate_interval])))",
                f"{{{{judge}}}} p{int(q * 100)}",
            )
            for q in (0.5, 0.95)
        ),
        unit="s",
        width=8,
    ),
    PanelSpec(
        "Tokens per trial",
        "Agent tokens per trial, as the producer reported them. Tracked, never gating.",
        quantiles("passk_trial_tokens", "scenario", ""),
        width=8,
    ),
    PanelSpec(
        "Turns per trial",
        "Conversation turns per trial, as reported. Tracked, never gating.",
        quantiles("passk_trial_turns", "scenario", ""),
        width=8,
    ),
    PanelSpec(
        "Conversation duration",
        "Conversation duration per trial, as reported. Gates only through max_duration_s.",
        quantiles("passk_trial_duration_seconds", "scenario", ""),
        unit="s",
        width=8,
    ),
    PanelSpec(
        "Agent latency",
        "The agent's response latency per trial, as reported. Tracked, never gating.",
        quantiles("passk_agent_latency_seconds", "scenario", ""),
        unit="s",
    ),
    PanelSpec(
        "Verdict latency (trial finished → verdict)",
        "From the conversation's finish to its trial verdict; replayed traffic shows its age.",
        tuple(
            Query(
                f"histogram_quantile({q}, sum by (le) "
                "(rate(passk_verdict_latency_seconds_bucket[$__rate_interval])))",
                f"p{int(q * 100)}",
            )
            for q in (0.5, 0.95)
        ),
        unit="s",
    ),
    PanelSpec(
        "Dead letters by topic and reason",
        "Input set aside with a reason (bytes kept whole on the dead-letter topic).",
        (Query("sum by (topic, reason) (passk_dead_letters_total)", "{{topic}} {{reason}}"),),
    ),
    PanelSpec(
        "Consumer lag",
        "Records on each processor's input topics not yet consumed and committed.",
        (Query("max by (processor, topic) (passk_consumer_lag)", "{{processor}} {{topic}}"),),
    ),
    PanelSpec(
        "Events processed",
        "Events each processor handled per second, by what it made of them.",
        (
            Query(
                "sum by (processor, note) (rate(passk_events_total[$__rate_interval]))",
                "{{processor}} {{note}}",
            ),
        ),
        unit="ops",
    ),
    PanelSpec(
        "Unaccounted trials (audit)",
        "Trials the continuous auditor found stopped short past their deadlines, by the first "
        "stage they did not reach; 0 everywhere is the pipeline's promise kept. "
        "PasskTrialsUnaccounted fires on any above 0 for 5 minutes; `passk audit` names them.",
        (Query("sum by (stage) (passk_audit_unaccounted_trials)", "{{stage}}"),),
        bars=True,
    ),
    PanelSpec(
        "Since the last clean audit",
        "How long ago an audit last found every trial of its period accounted for; it grows "
        "while trials are unaccounted, or while audits fail (PasskAuditStale).",
        (
            Query(
                "time() - max(passk_audit_last_clean_timestamp_seconds > 0)",
                "since the last clean audit",
            ),
        ),
        unit="s",
    ),
)


def panel(spec: PanelSpec, panel_id: int) -> timeseries.Panel:
    built = (
        timeseries.Panel()
        .id(panel_id)
        .title(spec.title)
        .description(spec.description)
        .datasource(DATASOURCE)
        .unit(spec.unit)
        .span(spec.width)
        .height(8)
        .legend(
            gc.VizLegendOptions()
            .show_legend(True)
            .display_mode(common.LegendDisplayMode.LIST)
            .placement(common.LegendPlacement.BOTTOM)
        )
    )
    if spec.bars:
        built = built.draw_style(common.GraphDrawStyle.BARS).fill_opacity(60)
    if spec.min_max:
        built = built.min(spec.min_max[0]).max(spec.min_max[1])
    if spec.repeat_by_scenario:
        built = built.repeat("scenario").repeat_direction("h")
    if spec.fill_between:
        upper, lower = spec.fill_between
        built = built.override_by_name(
            upper,
            [
                dm.DynamicConfigValue(id_val="custom.fillBelowTo", value=lower),
                dm.DynamicConfigValue(id_val="custom.fillOpacity", value=20),
                dm.DynamicConfigValue(id_val="custom.lineWidth", value=0),
            ],
        ).override_by_name(lower, [dm.DynamicConfigValue(id_val="custom.lineWidth", value=0)])
    for i, query in enumerate(spec.queries):
        built = built.with_target(
            gp.Dataquery()
            .expr(query.expr)
            .legend_format(query.legend)
            .ref_id(chr(ord("A") + i))
            .datasource(DATASOURCE)
            .range()
        )
    return built


def build() -> dict[str, object]:
    scenario = (
        gd.QueryVariable("scenario")
        .label("scenario")
        .datasource(DATASOURCE)
        .query("label_values(passk_scenario_pass_hat_k, scenario)")
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dm.VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
    )
    board = (
        gd.Dashboard("passk — scenario reliability")
        .uid("passk-reliability")
        .tags(["passk"])
        .readonly()
        .timezone("utc")
        .time("now-6h", "now")
        .refresh("30s")
        .with_variable(scenario)
    )
    for i, spec in enumerate(PANELS, start=1):
        board = board.with_panel(panel(spec, i))
    encoded: dict[str, object] = json.loads(json.dumps(board.build(), cls=JSONEncoder))
    return encoded


def render() -> str:
    return json.dumps(build(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def queries(board: dict[str, object]) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every panel, with the Grafana variables put in their place."""
    out = []
    for p in board["panels"]:  # type: ignore[attr-defined]
        for target in p.get("targets") or []:
            expr = target["expr"]
            for variable, value in PANEL_VARIABLES.items():
                expr = expr.replace(variable, value)
            out.append((p["title"], expr))
    return out


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else OUT
    out.write_text(render(), encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
