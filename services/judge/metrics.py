"""The judge processor's Prometheus metrics (names per DESIGN.md, prefix `passk_`).

Defined against a registry passed in, so tests use a fresh `CollectorRegistry`; the worker
uses the process-wide default (`default_metrics()`), served when PASSK_METRICS_PORT > 0.
Labels stay low-cardinality: judge id, result, token kind, cause; never trial ids.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from functools import lru_cache

from prometheus_client import REGISTRY, CollectorRegistry

from services.contract.metrics import MetricSet, counter, gauge, histogram

RESULTS = ("passed", "failed", "error")
REQUEST_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class JudgeMetrics(MetricSet):
    verdicts = counter(
        "passk_judge_verdicts",
        "Judge verdicts emitted, by judge and result (passed, failed, error).",
        "judge",
        "result",
    )
    request_seconds = histogram(
        "passk_judge_request_seconds",
        "Duration of each model request (every attempt, retried or not).",
        buckets=REQUEST_BUCKETS,
    )
    tokens = counter(
        "passk_judge_tokens",
        "Model tokens spent by judges, by kind (input, output).",
        "judge",
        "kind",
    )
    cache_hits = counter(
        "passk_judge_cache_hits", "Verdicts served from the judge cache (no model call).", "judge"
    )
    call_seconds = histogram(
        "passk_judge_call_seconds",
        "Wall time of each judge's model call for one verdict: every attempt, backoff "
        "and outage wait (cache answers make no call and are not observed).",
        "judge",
        buckets=REQUEST_BUCKETS,
    )
    skipped = counter(
        "passk_judge_skipped",
        "LLM judge verdicts not asked of the model because the trial's gates had "
        "already failed (skip_when_gates_fail): model calls saved.",
        "judge",
    )
    not_sampled = counter(
        "passk_judge_not_sampled",
        "LLM judge verdicts not asked of the model because the production trial was outside "
        "its scenario's sample (sampling.llm_judges): model calls the sampling saved.",
        "judge",
    )
    errors = counter(
        "passk_judge_errors",
        "Failed model requests by cause (each failed attempt, whether retried or not).",
        "judge",
        "cause",
    )
    price = gauge(
        "passk_judge_price_per_mtok",
        "The judge model's price per million tokens by kind (input, output), from "
        "PASSK_JUDGE_PRICE_PER_MTOK_IN/_OUT; NaN when unset (the cost is unknown, not 0).",
        "kind",
    )
    outage = gauge(
        "passk_judge_model_outage",
        "1 while the judge model fails even the health probe; trials wait, none is lost.",
    )

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        super().__init__(registry)
        self.set_prices(None, None)

    def known_judges(self, judges: Iterable[str]) -> None:
        """Create every (judge, result) series at 0: the judge-error alert reads increase(),
        which cannot see a series first scraped at its final value (a burst of errors that
        all land between two scrapes of a series created by its first error)."""
        for judge in judges:
            for result in RESULTS:
                self.verdicts.labels(judge=judge, result=result)
            # Cost panels and skip counts read these the same way.
            for kind in ("input", "output"):
                self.tokens.labels(judge=judge, kind=kind)
            self.call_seconds.labels(judge=judge)
            self.skipped.labels(judge=judge)
            self.not_sampled.labels(judge=judge)

    def verdict(self, judge: str, result: str) -> None:
        self.verdicts.labels(judge=judge, result=result).inc()

    def spent(self, judge: str, input_tokens: int | None, output_tokens: int | None) -> None:
        if input_tokens:
            self.tokens.labels(judge=judge, kind="input").inc(input_tokens)
        if output_tokens:
            self.tokens.labels(judge=judge, kind="output").inc(output_tokens)

    def set_prices(self, per_mtok_in: float | None, per_mtok_out: float | None) -> None:
        for kind, value in (("input", per_mtok_in), ("output", per_mtok_out)):
            self.price.labels(kind=kind).set(math.nan if value is None else value)

    def called(self, judge: str, seconds: float) -> None:
        self.call_seconds.labels(judge=judge).observe(seconds)

    def skip(self, judge: str) -> None:
        self.skipped.labels(judge=judge).inc()

    def unsampled(self, judge: str) -> None:
        self.not_sampled.labels(judge=judge).inc()

    def cache_hit(self, judge: str) -> None:
        self.cache_hits.labels(judge=judge).inc()

    def error(self, judge: str, cause: str) -> None:
        self.errors.labels(judge=judge, cause=cause).inc()


@lru_cache(maxsize=1)
def default_metrics() -> JudgeMetrics:
    return JudgeMetrics(REGISTRY)
