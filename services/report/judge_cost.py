"""What judging a run cost: model calls, tokens and (when prices are set) money, per trial and
for the run, and what skip_when_gates_fail saved. Pure functions over the projection's
judge rows.

Tokens are what the judge model's API reported in its `usage` (summed over a call's
attempts). A cost is estimated only when both prices are given
(PASSK_JUDGE_PRICE_PER_MTOK_IN / _OUT, money units per million tokens); without them the
report shows tokens and never invents a price. A cache answer made no call and spent
nothing. What a skipped judge saved is its calls, counted, and its tokens, estimated from
the same judge's answered calls in the same run (none answered: tokens unknown).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel

from services.storage.records import JudgeRecord


@dataclass(frozen=True)
class Prices:
    per_mtok_in: float | None = None
    per_mtok_out: float | None = None

    @property
    def known(self) -> bool:
        return self.per_mtok_in is not None and self.per_mtok_out is not None

    def cost(self, input_tokens: int, output_tokens: int) -> float | None:
        if not self.known:
            return None
        assert self.per_mtok_in is not None and self.per_mtok_out is not None
        return (input_tokens * self.per_mtok_in + output_tokens * self.per_mtok_out) / 1e6


class TrialJudgeCost(BaseModel):
    trial_id: str
    calls: int = 0  # verdicts that asked the model (not cached, not skipped)
    requests: int = 0  # HTTP requests those calls made (attempts, retries included)
    cached: int = 0
    skipped: list[str] = []  # judges not asked: the gates had failed the trial
    not_sampled: list[str] = []  # LLM judges not run: production trial outside the sample
    input_tokens: int = 0
    output_tokens: int = 0
    latency_ms: float = 0.0  # summed wall time of the calls
    cost: float | None = None  # None: no prices set


class SkippedJudge(BaseModel):
    judge_id: str
    trials: int  # calls saved
    tokens_saved_estimate: int | None  # None: the judge answered no call in this run


class JudgeCostSummary(BaseModel):
    trials: int
    calls: int
    requests: int
    cached: int
    skipped: int
    input_tokens: int
    output_tokens: int
    cost: float | None
    priced: bool
    calls_per_trial: float
    tokens_per_trial: float
    skipped_judges: list[SkippedJudge]
    cost_saved_estimate: float | None = None
    # Sampling (production traffic): LLM judges not run because the trial was outside its
    # scenario's sample, what that saved (calls counted, tokens and cost estimated the same
    # way as for skipped judges).
    not_sampled: int = 0
    not_sampled_judges: list[SkippedJudge] = []
    sampling_saved_estimate: float | None = None


def is_call(v: JudgeRecord) -> bool:
    """A verdict for which the model was asked (errors past their budget included)."""
    return v.result not in ("skipped", "not_sampled") and not v.cached and v.attempts > 0


def trial_costs(judges: Sequence[JudgeRecord], prices: Prices) -> dict[str, TrialJudgeCost]:
    out: dict[str, TrialJudgeCost] = {}
    for v in sorted(judges, key=lambda j: (j.trial_id, j.judge_id)):
        t = out.setdefault(v.trial_id, TrialJudgeCost(trial_id=v.trial_id))
        if v.result == "skipped":
            t.skipped = [*t.skipped, v.judge_id]
            continue
        if v.result == "not_sampled":
            t.not_sampled = [*t.not_sampled, v.judge_id]
            continue
        if v.cached:
            t.cached += 1
            continue
        if is_call(v):
            t.calls += 1
            t.requests += v.attempts
            t.latency_ms += v.latency_ms or 0.0
        t.input_tokens += v.input_tokens or 0
        t.output_tokens += v.output_tokens or 0
    for t in out.values():
        t.cost = prices.cost(t.input_tokens, t.output_tokens)
    return out


def summarize_costs(
    trial_ids: Sequence[str], judges: Sequence[JudgeRecord], prices: Prices
) -> JudgeCostSummary:
    """The run's judging, over its trials (`trial_ids`: every trial of the report)."""
    mine = set(trial_ids)
    judges = [j for j in judges if j.trial_id in mine]
    per_trial = trial_costs(judges, prices)
    calls = sum(t.calls for t in per_trial.values())
    tokens_in = sum(t.input_tokens for t in per_trial.values())
    tokens_out = sum(t.output_tokens for t in per_trial.values())
    saved, saved_cost, skipped_n = _saved(judges, "skipped", prices)
    unsampled, sampling_cost, unsampled_n = _saved(judges, "not_sampled", prices)
    n = len(mine)
    return JudgeCostSummary(
        trials=n,
        calls=calls,
        requests=sum(t.requests for t in per_trial.values()),
        cached=sum(t.cached for t in per_trial.values()),
        skipped=skipped_n,
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        cost=prices.cost(tokens_in, tokens_out),
        priced=prices.known,
        calls_per_trial=calls / n if n else 0.0,
        tokens_per_trial=(tokens_in + tokens_out) / n if n else 0.0,
        skipped_judges=saved,
        cost_saved_estimate=saved_cost,
        not_sampled=unsampled_n,
        not_sampled_judges=unsampled,
        sampling_saved_estimate=sampling_cost,
    )


class SamplingSaved(BaseModel):
    """What the LLM-judge sample saved on some trials (a scenario's, in a report): the
    calls not made, and their tokens and cost estimated from the same judges' answered
    calls in the run (None: a judge answered no call, or no prices set)."""

    calls: int = 0
    tokens_estimate: int | None = 0
    cost_estimate: float | None = None


def sampling_saved(
    trial_ids: Sequence[str], judges: Sequence[JudgeRecord], prices: Prices
) -> SamplingSaved:
    """The `not_sampled` verdicts of `trial_ids` among `judges` (the run's), each estimated
    from its judge's answered calls among `judges`."""
    mine = set(trial_ids)
    unsampled = [j for j in judges if j.trial_id in mine and j.result == "not_sampled"]
    if not unsampled:
        return SamplingSaved()
    ids = {j.judge_id for j in unsampled}
    answered = [j for j in judges if j.judge_id in ids and is_call(j)]
    saved, cost, calls = _saved([*unsampled, *answered], "not_sampled", prices)
    tokens = (
        None
        if any(s.tokens_saved_estimate is None for s in saved)
        else sum(s.tokens_saved_estimate or 0 for s in saved)
    )
    return SamplingSaved(calls=calls, tokens_estimate=tokens, cost_estimate=cost)


def _saved(
    judges: Sequence[JudgeRecord], result: str, prices: Prices
) -> tuple[list[SkippedJudge], float | None, int]:
    """Per judge, the verdicts with `result` (calls not made) and the tokens they would
    have spent, estimated from the same judge's answered calls; and the cost of those."""
    counts: dict[str, int] = {}
    for j in judges:
        if j.result == result:
            counts[j.judge_id] = counts.get(j.judge_id, 0) + 1
    saved: list[SkippedJudge] = []
    saved_in = saved_out = 0
    estimable = True
    for judge_id, count in sorted(counts.items()):
        answered = [j for j in judges if j.judge_id == judge_id and is_call(j)]
        if not answered:
            saved.append(SkippedJudge(judge_id=judge_id, trials=count, tokens_saved_estimate=None))
            estimable = False
            continue
        mean_in = sum(j.input_tokens or 0 for j in answered) / len(answered)
        mean_out = sum(j.output_tokens or 0 for j in answered) / len(answered)
        saved_in += round(mean_in * count)
        saved_out += round(mean_out * count)
        saved.append(
            SkippedJudge(
                judge_id=judge_id,
                trials=count,
                tokens_saved_estimate=round((mean_in + mean_out) * count),
            )
        )
    cost = prices.cost(saved_in, saved_out) if saved and estimable else None
    return saved, cost, sum(counts.values())


def money(value: float) -> str:
    return f"{value:.4f}" if value < 1 else f"{value:.2f}"


def cost_lines(s: JudgeCostSummary) -> list[str]:
    """The run's judging as a person reads it: what it spent, and what skipping saved."""
    spent = (
        f"judging: {s.calls} model calls ({s.calls_per_trial:.2f} per trial, "
        f"{s.requests} requests), {s.cached} cache answers, {s.input_tokens} prompt + "
        f"{s.output_tokens} completion tokens ({s.tokens_per_trial:.0f} per trial)"
    )
    spent += (
        f", estimated cost {money(s.cost)}"
        if s.cost is not None
        else " (no cost: set PASSK_JUDGE_PRICE_PER_MTOK_IN and _OUT)"
    )
    lines = [spent]
    for j in s.skipped_judges:
        tokens = (
            f"~{j.tokens_saved_estimate} tokens"
            if j.tokens_saved_estimate is not None
            else "tokens unknown (no answered call of it in this run)"
        )
        lines.append(
            f"skipped judge {j.judge_id}: {j.trials} trials whose gates had failed, "
            f"{j.trials} calls saved, {tokens} saved"
        )
    if s.cost_saved_estimate is not None:
        lines.append(f"skipping saved an estimated {money(s.cost_saved_estimate)}")
    for j in s.not_sampled_judges:
        tokens = (
            f"~{j.tokens_saved_estimate} tokens"
            if j.tokens_saved_estimate is not None
            else "tokens unknown (no answered call of it in this run)"
        )
        lines.append(
            f"not_sampled judge {j.judge_id}: {j.trials} production trials outside "
            f"the sample, {j.trials} calls saved, {tokens} saved"
        )
    if s.sampling_saved_estimate is not None:
        lines.append(f"sampling saved an estimated {money(s.sampling_saved_estimate)}")
    return lines
