from __future__ import annotations

from prometheus_client import CollectorRegistry

from services.judge.metrics import JudgeMetrics


def test_names_and_labels_follow_the_design() -> None:
    registry = CollectorRegistry()
    m = JudgeMetrics(registry)
    m.verdict("asked", "error")
    m.spent("asked", 120, 7)
    m.spent("asked", None, None)
    m.cache_hit("asked")
    m.error("asked", "rate_limited")
    m.request_seconds.observe(0.2)
    sample = registry.get_sample_value
    assert sample("passk_judge_verdicts_total", {"judge": "asked", "result": "error"}) == 1
    assert sample("passk_judge_tokens_total", {"judge": "asked", "kind": "input"}) == 120
    assert sample("passk_judge_tokens_total", {"judge": "asked", "kind": "output"}) == 7
    assert sample("passk_judge_cache_hits_total", {"judge": "asked"}) == 1
    assert sample("passk_judge_errors_total", {"judge": "asked", "cause": "rate_limited"}) == 1
    assert sample("passk_judge_request_seconds_bucket", {"le": "0.25"}) == 1
    assert sample("passk_judge_request_seconds_count") == 1
    assert sample("passk_judge_model_outage") == 0


def test_known_judges_have_every_result_series_at_zero_before_any_verdict() -> None:
    from prometheus_client import CollectorRegistry

    from services.judge.metrics import JudgeMetrics

    registry = CollectorRegistry()
    metrics = JudgeMetrics(registry)
    metrics.known_judges(["polite", "grounded"])
    for judge in ("polite", "grounded"):
        for result in ("passed", "failed", "error"):
            assert (
                registry.get_sample_value(
                    "passk_judge_verdicts_total", {"judge": judge, "result": result}
                )
                == 0.0
            )
    metrics.verdict("polite", "error")
    metrics.known_judges(["polite"])  # again: nothing is reset
    assert (
        registry.get_sample_value(
            "passk_judge_verdicts_total", {"judge": "polite", "result": "error"}
        )
        == 1.0
    )


def test_known_judges_have_their_cost_series_and_prices_are_nan_until_set() -> None:
    import math

    from prometheus_client import CollectorRegistry

    from services.judge.metrics import JudgeMetrics

    registry = CollectorRegistry()
    metrics = JudgeMetrics(registry)
    price = {
        k: registry.get_sample_value("passk_judge_price_per_mtok", {"kind": k})
        for k in ("input", "output")
    }
    assert all(v is not None and math.isnan(v) for v in price.values())  # unknown, not 0
    metrics.known_judges(["polite"])
    for kind in ("input", "output"):
        assert (
            registry.get_sample_value("passk_judge_tokens_total", {"judge": "polite", "kind": kind})
            == 0.0
        )
    assert registry.get_sample_value("passk_judge_call_seconds_count", {"judge": "polite"}) == 0
    assert registry.get_sample_value("passk_judge_skipped_total", {"judge": "polite"}) == 0.0
    metrics.set_prices(0.15, 0.6)
    assert registry.get_sample_value("passk_judge_price_per_mtok", {"kind": "output"}) == 0.6
