"""The OTLP worker's own metrics (prometheus/client_python naming), registry passed in."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class OtlpMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.spans_received = Counter(
            "passk_otlp_spans_received_total", "Spans in accepted OTLP requests.",
            registry=registry)
        self.traces_completed = Counter(
            "passk_otlp_traces_completed_total",
            "Agent traces whose root span arrived and that were published as a trial.",
            registry=registry)
        self.traces_skipped = Counter(
            "passk_otlp_traces_skipped_total",
            "Complete traces that are not a trial passk can use, by reason.",
            ["reason"], registry=registry)
        self.traces_dropped = Counter(
            "passk_otlp_traces_dropped_total",
            "Traces dropped past a bound before they completed, by reason.",
            ["reason"], registry=registry)
        self.spans_repeated = Counter(
            "passk_otlp_spans_repeated_total",
            "Spans of a trace already published, ignored (sent again).", registry=registry)
        self.requests_rejected = Counter(
            "passk_otlp_requests_rejected_total", "OTLP requests refused, by reason.",
            ["reason"], registry=registry)
        self.events_published = Counter(
            "passk_otlp_events_published_total", "Input events published, by type.",
            ["type"], registry=registry)
        self.pending_traces = Gauge(
            "passk_otlp_pending_traces", "Traces held until their root span arrives.",
            registry=registry)
        self.evaluations_exported = Counter(
            "passk_otlp_evaluations_exported_total",
            "gen_ai.evaluation.result events the exporter delivered, by kind.",
            ["kind"], registry=registry)
        self.export_failures = Counter(
            "passk_otlp_export_failures_total",
            "Export attempts the endpoint did not accept (retried).", registry=registry)
