"""A production run's report under sampling (docs/production.md): per scenario the sampled
trials, pass^k over them, and the LLM judge calls, tokens and cost the sample saved, each
against a count made here."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from math import comb

import pytest
from rich.console import Console

from services.grading.estimators import pass_hat_k_interval
from services.report.domain import build_report, report_json
from services.report.html import render_html
from services.report.judge_cost import Prices
from services.report.render import print_report
from services.storage.records import judge_record, trial_record
from tests.unit.storage import factories as f

RUN, SAMPLED, FULL = "production-2026-12-06", "refunds", "general"
PRICES = Prices(per_mtok_in=2.0, per_mtok_out=8.0)

# refunds: 10 trials. In the sample (their LLM judge ran): r0..r5, of which r0..r3 passed,
# r4 failed its judge, r5 errored. Outside it (judge `not_sampled`): r6..r9, r9 failed its
# exit gate, the others passed on gates alone.
OUTCOMES = {
    "r0": "passed",
    "r1": "passed",
    "r2": "passed",
    "r3": "passed",
    "r4": "failed",
    "r5": "error",
    "r6": "passed",
    "r7": "passed",
    "r8": "passed",
    "r9": "failed",
}
UNSAMPLED = {"r6", "r7", "r8", "r9"}


def _rows() -> tuple[list, list]:
    trials, judges = [], []
    for tid, outcome in OUTCOMES.items():
        trials.append(trial_record(f.verdict(tid, outcome, run_id=RUN, scenario_id=SAMPLED)))
        result = (
            "not_sampled"
            if tid in UNSAMPLED
            else ({"passed": "passed", "failed": "failed", "error": "error"}[outcome])
        )
        v = f.judge(tid, "polite", result, run_id=RUN, scenario_id=SAMPLED)
        tokens = {"input_tokens": 900 + 100 * int(tid[1:]), "output_tokens": 40}
        judges.append(
            judge_record(
                v.model_copy(update={} if tid in UNSAMPLED else tokens)
                if result != "not_sampled"
                else v.model_copy(update={"attempts": 0})
            )
        )
    for i in range(3):  # a scenario without sampling: every trial judged
        tid = f"g{i}"
        trials.append(trial_record(f.verdict(tid, "passed", run_id=RUN, scenario_id=FULL)))
        judges.append(
            judge_record(
                f.judge(tid, "polite", "passed", run_id=RUN, scenario_id=FULL).model_copy(
                    update={"input_tokens": 1000, "output_tokens": 40}
                )
            )
        )
    return trials, judges


def test_each_scenario_carries_its_sampled_figures_and_what_the_sample_saved() -> None:
    trials, judges = _rows()
    report = build_report(RUN, trials, judges=judges, prices=PRICES)
    refunds = next(s for s in report.scenarios if s.scenario_id == SAMPLED)
    # every trial: 10, 7 passed (r0..r3, r6..r8)
    assert (refunds.n, refunds.passed) == (10, 7)
    # the sampled trials, counted here: r0..r5, 4 passed, 1 error
    assert (refunds.n_sampled, refunds.passed_sampled, refunds.errors_sampled) == (6, 4, 1)
    assert refunds.pass_hat_k_sampled == pytest.approx(comb(4, 3) / comb(6, 3))
    assert (refunds.pass_hat_k_sampled_lower, refunds.pass_hat_k_sampled_upper) == pytest.approx(
        pass_hat_k_interval(6, 4, 3)
    )
    assert refunds.sampled
    # saved: 4 calls of `polite`, each estimated from its answered calls in the run:
    # r0..r5 (900..1400 in, 40 out) and g0..g2 (1000 in, 40 out); r5's error was a call too
    answered_in = [900 + 100 * i for i in range(6)] + [1000] * 3
    mean_in, mean_out = sum(answered_in) / len(answered_in), 40.0
    assert refunds.judge_calls_saved == 4
    assert refunds.judge_tokens_saved_estimate == round((mean_in + mean_out) * 4)
    assert refunds.judge_cost_saved_estimate == pytest.approx(
        (round(mean_in * 4) * 2.0 + round(mean_out * 4) * 8.0) / 1e6
    )

    general = next(s for s in report.scenarios if s.scenario_id == FULL)
    assert (general.n_sampled, general.passed_sampled, general.judge_calls_saved) == (3, 3, 0)
    assert general.pass_hat_k_sampled == general.pass_hat_k == 1.0
    assert not general.sampled

    as_json = {s["scenario_id"]: s for s in report_json(report)["scenarios"]}
    assert as_json[SAMPLED]["n_sampled"] == 6
    assert as_json[SAMPLED]["pass_hat_k_sampled"] == pytest.approx(0.2)
    assert as_json[SAMPLED]["judge_calls_saved"] == 4
    # the run's judge cost says it too, over every scenario
    assert report.judge_cost is not None and report.judge_cost.not_sampled == 4


def test_unpriced_or_unanswered_savings_are_not_invented() -> None:
    trials, judges = _rows()
    report = build_report(RUN, trials, judges=judges)  # no prices
    refunds = next(s for s in report.scenarios if s.scenario_id == SAMPLED)
    assert refunds.judge_cost_saved_estimate is None and refunds.judge_tokens_saved_estimate
    # no answered call of the judge in the run: tokens unknown
    only_unsampled = [j for j in judges if j.result == "not_sampled"]
    report = build_report(RUN, trials, judges=only_unsampled, prices=PRICES)
    refunds = next(s for s in report.scenarios if s.scenario_id == SAMPLED)
    assert refunds.judge_calls_saved == 4
    assert (refunds.judge_tokens_saved_estimate, refunds.judge_cost_saved_estimate) == (None, None)


def test_the_table_and_the_page_show_the_sampled_figures() -> None:
    trials, judges = _rows()
    report = build_report(RUN, trials, judges=judges, prices=PRICES)
    out = io.StringIO()
    print_report(report, Console(file=out, width=200, color_system=None))
    text = out.getvalue()
    assert "pass^k sampled" in text and "sampled" in text
    assert (
        f"sampled {SAMPLED}: 6 of 10 trials in the LLM-judge sample, 4 passed: pass^k sampled 0.200"
    ) in text
    assert "the sample saved 4 LLM judge calls" in text
    assert f"sampled {FULL}:" not in text  # nothing left out there
    page = render_html(report, generated_at=datetime(2026, 12, 6, tzinfo=UTC))
    assert 'data-figure="n_sampled"' in page and "<th>pass^k sampled</th>" in page
    assert 'data-figure="judge_calls_saved"' in page
