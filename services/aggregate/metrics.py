"""The reliability gauges: each scenario's most recent window of each size, and its alert
targets. A custom collector over what the aggregate holds, so a window that expired is
simply not collected any more (never a stale gauge), and after a restart the figures are
set again from the recovered table. Labels: scenario and window only."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from schemas.scenario import Scenario
from services.aggregate.domain import Bucket
from services.contract.metrics import MetricSet, counter
from services.grading.estimators import ReliabilityTally, pass_hat_k_interval

# The gauges of a scenario's most recent window of each size: name, help.
WINDOW_GAUGES: tuple[tuple[str, str], ...] = (
    (
        "pass_hat_k",
        "pass^k of the scenario's most recent window of that size "
        "(absent while it has fewer than k trials).",
    ),
    (
        "pass_hat_k_lower",
        "5% bound of pass^k: Beta(c+1, n-c+1) posterior on the pass rate p, mapped through p^k.",
    ),
    ("pass_hat_k_upper", "95% bound of pass^k (same posterior)."),
    ("pass_at_k", "pass@k of the scenario's most recent window of that size."),
    ("trials", "Trials counted in the scenario's most recent window of that size."),
    (
        "errors",
        "Trials of that window that could not be judged (outcome error); "
        "counted in passk_scenario_trials, never as passed.",
    ),
    (
        "invalid",
        "Trials of that window a simulated user spoiled (outcome "
        "invalid: a user check failed); out of passk_scenario_trials.",
    ),
    (
        "judged_pass_hat_k",
        "pass^k over the window's judged trials only (errors "
        "left out; under sampling, the sampled trials only; "
        "absent while fewer than k were judged): what the "
        "reliability-drop alert asks about.",
    ),
    ("judged_pass_hat_k_upper", "95% bound of pass^k over the judged trials only."),
    (
        "sampled_trials",
        "Trials of that window whose every check ran (production "
        "trials in their scenario's LLM-judge sample; every trial "
        "without sampling).",
    ),
    ("sampled_errors", "Sampled trials of that window with outcome error."),
    ("sampled_pass_hat_k", "pass^k over the window's sampled trials (absent while fewer than k)."),
    ("sampled_pass_hat_k_lower", "5% bound of pass^k over the sampled trials."),
    ("sampled_pass_hat_k_upper", "95% bound of pass^k over the sampled trials."),
    (
        "llm_judge_calls_saved",
        "LLM judge calls the sample saved in that window: "
        "its trials outside the LLM-judge sample times the "
        "scenario's LLM judges (as the catalog has it now); "
        "absent until the catalog was read.",
    ),
)


class ReliabilityGauges(Collector):
    def __init__(self, registry: CollectorRegistry | None = REGISTRY) -> None:
        # Scrapes run on the HTTP server's thread, updates on the event loop's.
        self._lock = threading.Lock()
        self._windows: dict[tuple[str, str], tuple[int, Bucket]] = {}
        self._targets: dict[str, tuple[float, int]] = {}
        self._llm_judges: dict[str, int] = {}  # LLM judges per scenario (the catalog's)
        if registry is not None:
            registry.register(self)

    def set_window(self, bucket: Bucket) -> None:
        """Show `bucket` unless a later window of its size is already shown."""
        assert bucket.window is not None and bucket.window_start is not None
        key = (bucket.scenario_id, bucket.window)
        with self._lock:
            shown = self._windows.get(key)
            if shown is None or bucket.window_start >= shown[0]:
                self._windows[key] = (bucket.window_start, bucket)

    def remove_window(self, scenario_id: str, window: str) -> None:
        with self._lock:
            self._windows.pop((scenario_id, window), None)

    def reset_windows(self, buckets: Iterable[Bucket]) -> None:
        with self._lock:
            self._windows.clear()
        for bucket in buckets:
            self.set_window(bucket)

    def target(self, scenario_id: str) -> tuple[float, int] | None:
        """(min_pass_hat_k, min_trials) of the scenario's alert, once the catalog was read."""
        with self._lock:
            return self._targets.get(scenario_id)

    def set_targets(
        self, scenarios: Iterable[Scenario], default_min_pass_hat_k: float, default_min_trials: int
    ) -> None:
        targets = {}
        llm_judges = {}
        for s in scenarios:
            llm_judges[s.id] = sum(1 for j in s.judges if j.kind == "llm")
            alert = s.alert
            targets[s.id] = (
                alert.min_pass_hat_k
                if alert and alert.min_pass_hat_k is not None
                else default_min_pass_hat_k,
                alert.min_trials if alert and alert.min_trials is not None else default_min_trials,
            )
        with self._lock:
            self._targets = targets
            self._llm_judges = llm_judges

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:
            windows = [b for _, b in self._windows.values()]
            targets = dict(self._targets)
            llm_judges = dict(self._llm_judges)
        labels = ["scenario", "window"]
        families = {
            name: GaugeMetricFamily(f"passk_scenario_{name}", doc, labels=labels)
            for name, doc in WINDOW_GAUGES
        }
        for b in sorted(windows, key=lambda b: (b.scenario_id, b.window or "")):
            _add_window(families, b, llm_judges)
        yield from families.values()

        min_hat = GaugeMetricFamily(
            "passk_scenario_alert_min_pass_hat_k",
            "The scenario's alert target: pass^k below this (with enough trials) is a drop.",
            labels=["scenario"],
        )
        min_trials = GaugeMetricFamily(
            "passk_scenario_alert_min_trials",
            "Trials a window needs before the scenario's reliability-drop alert may fire.",
            labels=["scenario"],
        )
        for scenario_id, (hat, n) in sorted(targets.items()):
            min_hat.add_metric([scenario_id], hat)
            min_trials.add_metric([scenario_id], n)
        yield min_hat
        yield min_trials

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter(())  # the families depend on the data; collected at scrape time only


class AggregateMetrics(MetricSet):
    verdicts = counter(
        "passk_aggregate_verdicts_total",
        "Trial verdicts the aggregate read, by what it made of them "
        "(counted, regraded, duplicate, superseded, late).",
        "note",
    )


def _add_window(
    families: dict[str, GaugeMetricFamily], b: Bucket, llm_judges: dict[str, int]
) -> None:
    """One window's figures onto the gauges (its scenario and size the labels)."""
    tally = ReliabilityTally(
        k=b.k, passed=b.passed, failed=b.failed, errors=b.errors, invalid=b.invalid
    )
    lower, upper = pass_hat_k_interval(tally.n, tally.passed, tally.k)
    at = [b.scenario_id, b.window or ""]
    if tally.pass_hat_k is not None:
        families["pass_hat_k"].add_metric(at, tally.pass_hat_k)
    if tally.pass_at_k is not None:
        families["pass_at_k"].add_metric(at, tally.pass_at_k)
    families["pass_hat_k_lower"].add_metric(at, lower)
    families["pass_hat_k_upper"].add_metric(at, upper)
    families["trials"].add_metric(at, tally.n)
    families["errors"].add_metric(at, tally.errors)
    families["invalid"].add_metric(at, tally.invalid)
    n_s, passed_s, errors_s = b.sampled_counts
    sampled = ReliabilityTally(
        k=b.k, passed=passed_s, failed=n_s - passed_s - errors_s, errors=errors_s
    )
    families["sampled_trials"].add_metric(at, n_s)
    families["sampled_errors"].add_metric(at, errors_s)
    if sampled.pass_hat_k is not None:
        families["sampled_pass_hat_k"].add_metric(at, sampled.pass_hat_k)
    s_lower, s_upper = pass_hat_k_interval(n_s, passed_s, b.k)
    families["sampled_pass_hat_k_lower"].add_metric(at, s_lower)
    families["sampled_pass_hat_k_upper"].add_metric(at, s_upper)
    if b.scenario_id in llm_judges:
        families["llm_judge_calls_saved"].add_metric(
            at, max(tally.n - n_s, 0) * llm_judges[b.scenario_id]
        )
    judged = sampled.judged()
    if judged.pass_hat_k is not None:
        families["judged_pass_hat_k"].add_metric(at, judged.pass_hat_k)
    families["judged_pass_hat_k_upper"].add_metric(
        at, pass_hat_k_interval(judged.n, judged.passed, judged.k)[1]
    )
