"""The OTLP receiver's and evaluation exporter's settings, from the environment; read once
by the worker and passed in."""

from __future__ import annotations

from typing import Any

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.contract.settings import with_port_offset


class OtlpSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="", extra="ignore", populate_by_name=True)

    port_offset: int = Field(0, alias="PASSK_PORT_OFFSET", ge=0)  # see services/contract/ports.py
    host: str = Field("127.0.0.1", alias="PASSK_OTLP_HOST")
    port: int = Field(4318, alias="PASSK_OTLP_PORT", ge=0)
    token: SecretStr | None = Field(None, alias="PASSK_OTLP_TOKEN")
    # Bodies above this (compressed or inflated) are refused with 413.
    max_body_bytes: int = Field(8_000_000, alias="PASSK_OTLP_MAX_BODY_BYTES", gt=0)
    max_pending_traces: int = Field(10_000, alias="PASSK_OTLP_MAX_PENDING_TRACES", gt=0)
    # Hostile clients (docs/production.md, "The receiver under attack"): bytes of spans held
    # for traces whose root has not come; open connections; how long a request's headers,
    # then its body, may take; bodies read and not yet parsed; large ones parsed in threads.
    max_pending_bytes: int = Field(64_000_000, alias="PASSK_OTLP_MAX_PENDING_BYTES", gt=0)
    max_connections: int = Field(256, alias="PASSK_OTLP_MAX_CONNECTIONS", gt=0)
    header_timeout_s: float = Field(10.0, alias="PASSK_OTLP_HEADER_TIMEOUT_S", gt=0)
    body_timeout_s: float = Field(30.0, alias="PASSK_OTLP_BODY_TIMEOUT_S", gt=0)
    max_inflight_bytes: int = Field(64_000_000, alias="PASSK_OTLP_MAX_INFLIGHT_BYTES", gt=0)
    offload_bytes: int = Field(256_000, alias="PASSK_OTLP_OFFLOAD_BYTES", ge=0)
    parallel_parses: int = Field(2, alias="PASSK_OTLP_PARALLEL_PARSES", gt=0)
    idle_s: float = Field(300.0, alias="PASSK_OTLP_IDLE_S", gt=0)
    max_spans_per_trace: int = Field(2_000, alias="PASSK_OTLP_MAX_SPANS_PER_TRACE", gt=0)
    seen_traces: int = Field(100_000, alias="PASSK_OTLP_SEEN_TRACES", gt=0)
    # Dead letters of traces not taken, queued for the broker; past this, lost and counted.
    max_queued_letters: int = Field(1_000, alias="PASSK_OTLP_MAX_QUEUED_LETTERS", gt=0)
    publish_timeout_s: float = Field(30.0, alias="PASSK_OTLP_PUBLISH_TIMEOUT_S", gt=0)
    # A target file (passk run --target) whose `state:` probe reads the persisted session
    # of each trial whose trace carried none (as `passk import otel --state-probe`).
    state_probe: str | None = Field(None, alias="PASSK_OTLP_STATE_PROBE")
    probe_timeout_s: float = Field(10.0, alias="PASSK_OTLP_PROBE_TIMEOUT_S", gt=0)
    # Evaluations out: unset, nothing is exported.
    export_endpoint: str | None = Field(None, alias="PASSK_OTLP_EXPORT_ENDPOINT")
    export_headers: str = Field("", alias="PASSK_OTLP_EXPORT_HEADERS")  # k=v,k2=v2
    export_timeout_s: float = Field(10.0, alias="PASSK_OTLP_EXPORT_TIMEOUT_S", gt=0)
    export_batch: int = Field(256, alias="PASSK_OTLP_EXPORT_BATCH", gt=0)

    @model_validator(mode="before")
    @classmethod
    def _port_moved_by_the_offset(cls, data: Any) -> Any:
        return with_port_offset(cls, data, {"port": "{PASSK_OTLP_PORT}"})
