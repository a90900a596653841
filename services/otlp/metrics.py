"""The OTLP worker's own metrics (prometheus/client_python naming), registry passed in."""

from __future__ import annotations

from services.contract.metrics import MetricSet, counter, gauge


class OtlpMetrics(MetricSet):
    spans_received = counter("passk_otlp_spans_received_total", "Spans in accepted OTLP requests.")
    traces_completed = counter(
        "passk_otlp_traces_completed_total",
        "Agent traces whose root span arrived and that were published as a trial.",
    )
    traces_skipped = counter(
        "passk_otlp_traces_skipped_total",
        "Complete traces that are not a trial passk can use, by reason.",
        "reason",
    )
    traces_dropped = counter(
        "passk_otlp_traces_dropped_total",
        "Traces dropped past a bound before they completed, by reason.",
        "reason",
    )
    spans_repeated = counter(
        "passk_otlp_spans_repeated_total",
        "Spans of a trace already published, ignored (sent again).",
    )
    requests_rejected = counter(
        "passk_otlp_requests_rejected_total", "OTLP requests refused, by reason.", "reason"
    )
    events_published = counter(
        "passk_otlp_events_published_total", "Input events published, by type.", "type"
    )
    dead_letters = counter(
        "passk_otlp_dead_letters_total",
        "Traces not taken that were published as dead letters (source otlp), by reason.",
        "reason",
    )
    dead_letters_lost = counter(
        "passk_otlp_dead_letters_lost_total",
        "Dead letters of traces not taken that could not be published (queue full past "
        "PASSK_OTLP_MAX_QUEUED_LETTERS, or the broker refused), by reason.",
        "reason",
    )
    probe_misses = counter(
        "passk_otlp_state_probe_misses_total",
        "Trials whose persisted session the state probe (PASSK_OTLP_STATE_PROBE) did not "
        "return; published without one (the state gate then waits and says so).",
    )
    connections_open = gauge("passk_otlp_connections_open", "Connections open to the receiver.")
    connections_refused = counter(
        "passk_otlp_connections_refused_total",
        "Connections closed at once: PASSK_OTLP_MAX_CONNECTIONS were open.",
    )
    pending_bytes = gauge(
        "passk_otlp_pending_bytes", "Bytes of the spans held until their root span arrives."
    )
    pending_traces = gauge(
        "passk_otlp_pending_traces", "Traces held until their root span arrives."
    )
    evaluations_exported = counter(
        "passk_otlp_evaluations_exported_total",
        "gen_ai.evaluation.result events the exporter delivered, by kind.",
        "kind",
    )
    export_failures = counter(
        "passk_otlp_export_failures_total", "Export attempts the endpoint did not accept (retried)."
    )
