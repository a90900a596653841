"""Judge cost per trial and per run, and what skip_when_gates_fail saved: hand-counted."""

from __future__ import annotations

from typing import Any

import pytest

from services.report.judge_cost import Prices, cost_lines, summarize_costs, trial_costs
from services.storage.records import judge_record
from tests.unit.storage import factories as f


def row(trial: str, judge: str, result: str, **update: Any):
    v = f.judge(trial, judge, result)
    return judge_record(v.model_copy(update=update))


ROWS = [
    row("t1", "a", "passed", input_tokens=1000, output_tokens=50, attempts=1, latency_ms=200.0),
    row("t1", "b", "failed", input_tokens=3000, output_tokens=150, attempts=2, latency_ms=900.0),
    row("t2", "a", "passed", cached=True, attempts=0, input_tokens=None),  # the cache answered
    row("t2", "b", "passed", input_tokens=1000, output_tokens=50, attempts=1, latency_ms=100.0),
    row("t3", "a", "skipped", attempts=0),
    row("t3", "b", "skipped", attempts=0),
]


def test_per_trial_tokens_calls_and_cost_only_when_priced() -> None:
    unpriced = trial_costs(ROWS, Prices())
    assert (unpriced["t1"].calls, unpriced["t1"].requests) == (2, 3)
    assert (unpriced["t1"].input_tokens, unpriced["t1"].output_tokens) == (4000, 200)
    assert unpriced["t1"].cost is None  # no price set: tokens only, no invented cost
    t2 = unpriced["t2"]
    assert (t2.calls, t2.cached, t2.input_tokens) == (1, 1, 1000)
    assert unpriced["t3"].calls == 0 and unpriced["t3"].skipped == ["a", "b"]
    priced = trial_costs(ROWS, Prices(per_mtok_in=0.15, per_mtok_out=0.60))
    # 4000 * 0.15 / 1e6 + 200 * 0.60 / 1e6
    assert priced["t1"].cost == pytest.approx(0.00072)
    assert trial_costs(ROWS, Prices(per_mtok_in=0.15))["t1"].cost is None  # half a price


def test_the_run_summary_says_what_skipping_saved() -> None:
    s = summarize_costs(["t1", "t2", "t3"], ROWS, Prices(per_mtok_in=1.0, per_mtok_out=2.0))
    assert (s.trials, s.calls, s.cached, s.skipped) == (3, 3, 1, 2)
    assert (s.input_tokens, s.output_tokens) == (5000, 250)
    assert s.calls_per_trial == pytest.approx(1.0)
    assert s.tokens_per_trial == pytest.approx(5250 / 3)
    saved = {j.judge_id: (j.trials, j.tokens_saved_estimate) for j in s.skipped_judges}
    # a: one answered call of 1050 tokens; b: two of 3150 and 1050, mean 2100
    assert saved == {"a": (1, 1050), "b": (1, 2100)}
    # in: a 1000 + b 2000; out: a 50 + b 100 -> 3000 * 1 / 1e6 + 150 * 2 / 1e6
    assert s.cost_saved_estimate == pytest.approx(0.0033)
    lines = cost_lines(s)
    assert "3 model calls (1.00 per trial" in lines[0] and "estimated cost" in lines[0]
    assert lines[1] == (
        "skipped judge a: 1 trials whose gates had failed, 1 calls saved, ~1050 tokens saved"
    )


def test_a_skipped_judge_never_answered_in_the_run_has_unknown_savings() -> None:
    s = summarize_costs(["t3"], ROWS, Prices())
    assert [j.tokens_saved_estimate for j in s.skipped_judges] == [None, None]
    assert s.cost is None and s.cost_saved_estimate is None
    assert "no cost: set PASSK_JUDGE_PRICE_PER_MTOK_IN" in cost_lines(s)[0]
    assert "tokens unknown" in cost_lines(s)[1]


def test_the_run_summary_says_what_sampling_saved() -> None:
    rows = [
        *ROWS,
        row("t4", "a", "not_sampled", attempts=0),
        row("t5", "a", "not_sampled", attempts=0),
        row("t5", "b", "not_sampled", attempts=0),
    ]
    s = summarize_costs(["t1", "t2", "t4", "t5"], rows, Prices(per_mtok_in=1.0, per_mtok_out=2.0))
    assert s.calls == 3 and s.not_sampled == 3  # not_sampled is never a call
    assert trial_costs(rows, Prices())["t5"].not_sampled == ["a", "b"]
    saved = {j.judge_id: (j.trials, j.tokens_saved_estimate) for j in s.not_sampled_judges}
    assert saved == {"a": (2, 2100), "b": (1, 2100)}
    # in: a 2 * 1000 + b 2000; out: a 2 * 50 + b 100 -> 4000 / 1e6 + 200 * 2 / 1e6
    assert s.sampling_saved_estimate == pytest.approx(0.0044)
    assert any(
        line.startswith("not_sampled judge a: 2 production trials") for line in cost_lines(s)
    )
    assert cost_lines(s)[-1] == "sampling saved an estimated 0.0044"
