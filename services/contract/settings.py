"""One settings object, read from the environment (see DESIGN.md, "Configuration")."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.contract.ports import DEFAULT_PORTS, MAX_OFFSET

PROJECT_ROOT = Path(__file__).resolve().parents[2]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="", extra="ignore", populate_by_name=True)

    # Added to every default port (services/contract/ports.py): a second stack on one machine.
    port_offset: int = Field(0, alias="PASSK_PORT_OFFSET", ge=0, le=MAX_OFFSET)
    kafka_bootstrap_servers: str = Field("127.0.0.1:9092", alias="KAFKA_BOOTSTRAP_SERVERS")
    # How long a CLI command waits for the broker before answering "unreachable" (exit 4).
    broker_wait_s: float = Field(5.0, alias="PASSK_BROKER_WAIT_S", ge=0)
    # How long a worker's producer waits for room in its buffer, or for a topic's metadata,
    # before it gives a record up (Faust's producer_request_timeout, its default). Its
    # batches themselves are retried until delivered (idempotent); a record given up
    # stops the worker before its next offset commit (faust_compat/delivery.py).
    producer_timeout_s: float = Field(1200.0, alias="PASSK_PRODUCER_TIMEOUT_S", gt=0)
    # How long the producer SDK (`passk run`, `replay`, `import otel`, the OTLP receiver)
    # keeps trying to deliver one record before it reports it not delivered; commands wait
    # for their sends at most this long plus a grace (services/kafka/producer.py), never
    # for ever.
    producer_delivery_timeout_s: float = Field(
        120.0, alias="PASSK_PRODUCER_DELIVERY_TIMEOUT_S", ge=2, le=24 * 3600
    )
    topic_prefix: str = Field("passk.", alias="PASSK_TOPIC_PREFIX")
    # 8 partitions: room for up to 8 workers of a processor (4 each with headroom to double).
    topic_partitions: int = Field(8, alias="PASSK_TOPIC_PARTITIONS", ge=1)
    # 0: as many replicas as the cluster has brokers, up to 3 (min.insync.replicas 2 at 3).
    topic_replication: int = Field(0, alias="PASSK_TOPIC_REPLICATION", ge=0)
    # How every Kafka client (workers, CLI, producer SDK) authenticates; see kafka_client.py.
    kafka_security_protocol: str = Field("PLAINTEXT", alias="KAFKA_SECURITY_PROTOCOL")
    kafka_sasl_mechanism: str = Field("SCRAM-SHA-512", alias="KAFKA_SASL_MECHANISM")
    kafka_sasl_username: str | None = Field(None, alias="KAFKA_SASL_USERNAME")
    kafka_sasl_password: SecretStr | None = Field(None, alias="KAFKA_SASL_PASSWORD")
    kafka_ssl_cafile: Path | None = Field(None, alias="KAFKA_SSL_CAFILE")
    # -1 keeps records forever: the log is the source of truth.
    topic_retention_ms: int = Field(-1, alias="PASSK_TOPIC_RETENTION_MS")
    database_url: str = Field(
        f"sqlite:///{PROJECT_ROOT / 'var' / 'passk.db'}", alias="PASSK_DATABASE_URL"
    )
    session_wait_s: float = Field(120.0, alias="PASSK_SESSION_WAIT_S", gt=0)
    judge_wait_s: float = Field(300.0, alias="PASSK_JUDGE_WAIT_S", gt=0)
    # How long the gate and verdict remember a graded trial, to drop a late repeat of it.
    dedup_retention_s: float = Field(7 * 24 * 3600.0, alias="PASSK_DEDUP_RETENTION_S", gt=0)
    # Event time is bounded, not believed: an input event dated more than this ahead of
    # the broker's arrival time (and of the wall clock) is a dead letter
    # ("occurred_at_in_future"), and no stream clock or watermark runs further ahead than
    # this (services/contract/eventtime.py).
    max_clock_skew_s: float = Field(300.0, alias="PASSK_MAX_CLOCK_SKEW_S", gt=0)
    # Messages larger than this go to the dead-letter topic instead of being parsed.
    max_event_bytes: int = Field(1_000_000, alias="PASSK_MAX_EVENT_BYTES", gt=0)
    # Deeper JSON goes to the dead-letter topic ("too_deep"): recursive code (the parser,
    # pydantic, a table's serializer) would otherwise raise RecursionError on it.
    max_json_depth: int = Field(64, alias="PASSK_MAX_JSON_DEPTH", ge=2, le=500)
    # A persisted session larger than this is a dead letter ("session_too_large"): the gate
    # keeps it in a changelogged table until its conversation arrives.
    max_session_bytes: int = Field(256_000, alias="PASSK_MAX_SESSION_BYTES", gt=0)
    openai_api_key: str | None = Field(None, alias="OPENAI_API_KEY")
    openai_base_url: str | None = Field(None, alias="OPENAI_BASE_URL")
    judge_model: str = Field("gpt-4o-mini", alias="PASSK_JUDGE_MODEL")
    judge_concurrency: int = Field(16, alias="PASSK_JUDGE_CONCURRENCY", ge=1)
    judge_timeout_s: float = Field(30.0, alias="PASSK_JUDGE_TIMEOUT_S", gt=0)
    judge_max_retries: int = Field(4, alias="PASSK_JUDGE_MAX_RETRIES", ge=0)
    judge_cache: bool = Field(True, alias="PASSK_JUDGE_CACHE")
    # Scenarios that do not say `judging: {skip_when_gates_fail: ...}` take this; the gate
    # and the judge workers must be given the same value (`make up` passes one environment).
    judge_skip_when_gates_fail: bool = Field(False, alias="PASSK_JUDGE_SKIP_WHEN_GATES_FAIL")
    # Judge model prices in money units per million tokens: unset, reports show tokens only.
    judge_price_per_mtok_in: float | None = Field(None, alias="PASSK_JUDGE_PRICE_PER_MTOK_IN", ge=0)
    judge_price_per_mtok_out: float | None = Field(
        None, alias="PASSK_JUDGE_PRICE_PER_MTOK_OUT", ge=0
    )
    # Calibration: a judge fails trials only while its current version's latest calibration
    # has precision >= the bar on at least `min_labelled` items; uncalibrated judges are
    # advisory unless PASSK_UNCALIBRATED_JUDGES=gating.
    calibration_bar: float = Field(0.8, alias="PASSK_CALIBRATION_BAR", ge=0, le=1)
    min_labelled: int = Field(10, alias="PASSK_MIN_LABELLED", ge=1)
    uncalibrated_judges: Literal["advisory", "gating"] = Field(
        "advisory", alias="PASSK_UNCALIBRATED_JUDGES"
    )
    # The sink writes what it has read in batches of at most this many events, one
    # transaction each, waiting at most this long for a batch to fill.
    sink_batch_max: int = Field(500, alias="PASSK_SINK_BATCH_MAX", ge=1)
    sink_batch_within_s: float = Field(0.2, alias="PASSK_SINK_BATCH_WITHIN_S", gt=0)
    # The gate and verdict read at most this many records at a time, waiting at most this
    # long for more, and send their outputs together: it bounds the sends in flight.
    batch_max: int = Field(200, alias="PASSK_BATCH_MAX", ge=1)
    batch_within_s: float = Field(0.02, alias="PASSK_BATCH_WITHIN_S", gt=0)
    # Per partition of the gate's and the verdict's joined inputs: when more pending trials
    # than this wait for one input while it has records left to read, the other input is
    # not read on that partition until they are down to half (services/runtime/flow.py).
    # It bounds their RAM in a backlog; 0 turns it off.
    join_max_pending: int = Field(250, alias="PASSK_JOIN_MAX_PENDING", ge=0)
    metrics_port: int = Field(0, alias="PASSK_METRICS_PORT", ge=0)
    # Loopback only unless an operator opens it (a scraper on another host).
    metrics_host: str = Field("127.0.0.1", alias="PASSK_METRICS_HOST")
    # How often a worker serving /metrics reads its consumer lag from the broker.
    lag_interval_s: float = Field(5.0, alias="PASSK_LAG_INTERVAL_S", gt=0)
    # Monitoring (`make up` when Debian's prometheus packages are installed): each
    # processor serves /metrics on metrics_port_base + its offset in
    # services.contract.processors.PROCESSORS.
    metrics_port_base: int = Field(9464, alias="PASSK_METRICS_PORT_BASE", gt=0)
    prometheus_url: str = Field("http://127.0.0.1:9090", alias="PASSK_PROMETHEUS_URL")
    alertmanager_url: str = Field("http://127.0.0.1:9095", alias="PASSK_ALERTMANAGER_URL")
    monitoring_dir: Path = Field(PROJECT_ROOT / "var" / "monitoring", alias="PASSK_MONITORING_DIR")
    scrape_interval: str = Field("15s", alias="PASSK_SCRAPE_INTERVAL")
    # Replaces every rule's `for:` in the rendered copy (tests use seconds); None keeps them.
    alert_for: str | None = Field(None, alias="PASSK_ALERT_FOR")
    # Where Alertmanager delivers alerts (a webhook); none: they are kept in its UI only.
    alert_webhook_url: str | None = Field(None, alias="PASSK_ALERT_WEBHOOK_URL")
    # Alertmanager's grouping waits; short in tests, Alertmanager's own defaults otherwise.
    alert_group_wait: str = Field("30s", alias="PASSK_ALERT_GROUP_WAIT")
    alert_group_interval: str = Field("5m", alias="PASSK_ALERT_GROUP_INTERVAL")
    data_dir: Path = Field(PROJECT_ROOT / "var", alias="PASSK_DATA_DIR")
    log_level: str = Field("warn", alias="PASSK_LOG_LEVEL")
    # Event-time tumbling windows of the aggregate processor, aligned to the epoch.
    windows: str = Field("1h,1d", alias="PASSK_WINDOWS")
    # The aggregate counts at most this many verdicts at a time, waiting at most this long
    # for more, and writes and publishes each changed figure once per batch: the longer
    # the wait, the fewer writes, and the later a figure is published.
    aggregate_batch_max: int = Field(500, alias="PASSK_AGGREGATE_BATCH_MAX", ge=1)
    aggregate_batch_within_s: float = Field(0.5, alias="PASSK_AGGREGATE_BATCH_WITHIN_S", gt=0)
    # Defaults of a scenario's `alert:` targets (the reliability-drop alert rule's inputs).
    alert_min_pass_hat_k: float = Field(0.8, alias="PASSK_ALERT_MIN_PASS_HAT_K", ge=0, le=1)
    alert_min_trials: int = Field(10, alias="PASSK_ALERT_MIN_TRIALS", ge=1)
    # The review app (`passk review`, docs/review.md): where it listens (loopback unless an
    # operator opens it), who may sign in ("name:token,name:token"; never logged), the
    # fraction of queued items shown to a second reviewer (Cohen's kappa between them), and
    # the `sampled` queue: the share of production trials (runs matching the glob) it takes.
    review_host: str = Field("127.0.0.1", alias="PASSK_REVIEW_HOST")
    review_port: int = Field(8700, alias="PASSK_REVIEW_PORT", ge=0, lt=65536)
    review_tokens: SecretStr | None = Field(None, alias="PASSK_REVIEW_TOKENS")
    review_overlap: float = Field(0.1, alias="PASSK_REVIEW_OVERLAP", ge=0, le=1)
    review_sample_rate: float = Field(0.05, alias="PASSK_REVIEW_SAMPLE_RATE", ge=0, le=1)
    review_production_runs: str = Field("production-*", alias="PASSK_REVIEW_PRODUCTION_RUNS")

    @model_validator(mode="before")
    @classmethod
    def _ports_moved_by_the_offset(cls, data: Any) -> Any:
        """The defaults that name a port, moved by PASSK_PORT_OFFSET (a value given wins)."""
        return with_port_offset(
            cls,
            data,
            {
                "kafka_bootstrap_servers": "127.0.0.1:{PASSK_KAFKA_PORT}",
                "metrics_port_base": "{PASSK_METRICS_PORT_BASE}",
                "prometheus_url": "http://127.0.0.1:{PASSK_PROMETHEUS_PORT}",
                "alertmanager_url": "http://127.0.0.1:{PASSK_ALERTMANAGER_PORT}",
                "review_port": "{PASSK_REVIEW_PORT}",
            },
        )

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str) -> str:
        # Checked here, so every command and worker start refuses it in one line (exit 2)
        # instead of a ValueError traceback at the first connection; never echoed, as its
        # text may hold a password.
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            url = make_url(value)
        except (ArgumentError, ValueError) as exc:
            port = "; its port is not a number" if "int()" in str(exc) else ""
            raise ValueError(
                f"not usable as a database URL (SQLAlchemy's form, e.g. "
                f"postgresql://user:password@host:5432/db){port}"
            ) from None
        # The projection runs on SQLite or PostgreSQL only: another dialect would fail at
        # its first connection with an import traceback for a driver passk does not ship.
        if url.get_backend_name() not in ("sqlite", "postgresql"):
            raise ValueError(
                f"passk's store runs on sqlite:// or postgresql://, not {url.get_backend_name()}://"
            )
        if url.port is not None and not 0 < url.port < 65536:
            raise ValueError(f"its port {url.port} is outside 1-65535")
        if url.host and "@" in url.host:
            # An unencoded @ in the password leaves its tail in the host, which a failed
            # connection would print: refused before any connection, and not echoed.
            raise ValueError("the user or password holds an unencoded '@': write it as %40")
        return value

    @field_validator("openai_base_url", "prometheus_url", "alertmanager_url", "alert_webhook_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        from urllib.parse import urlsplit

        if value is None:
            return value
        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018 - raises ValueError for a port that is not a number
        except ValueError as exc:
            raise ValueError(f"not a usable URL ({exc}); e.g. http://127.0.0.1:8400/v1") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("not a usable URL: expected http(s)://host[:port]/...")
        return value

    @field_validator("kafka_bootstrap_servers")
    @classmethod
    def _bootstrap(cls, value: str) -> str:
        for part in value.split(","):
            host, _, port = part.strip().rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"expected host:port[,host:port...], got {value!r}")
        return value

    @field_validator("windows")
    @classmethod
    def _window_sizes(cls, value: str) -> str:
        parts = [p.strip() for p in value.split(",") if p.strip()]
        bad = [p for p in parts if not re.fullmatch(r"[1-9][0-9]*[smhdw]", p)]
        if not parts or bad:
            raise ValueError(
                f"PASSK_WINDOWS is a comma-separated list of sizes like 1h,1d "
                f"(number + s|m|h|d|w); got {value!r}"
            )
        return ",".join(parts)


def with_port_offset(model: type[BaseSettings], data: Any, templates: dict[str, str]) -> Any:
    """`data` with each field of `templates` not given set to its template, the ports in
    it moved by the offset in `data` (none: unchanged)."""
    if not isinstance(data, dict):
        return data
    raw = data.get("PASSK_PORT_OFFSET", data.get("port_offset"))
    try:
        moved = int(raw) if raw not in (None, "") else 0
    except (TypeError, ValueError):
        return data  # the field's own validation says what is wrong with it
    if moved <= 0:
        return data
    ports = {name: port + moved for name, port in DEFAULT_PORTS.items()}
    out = dict(data)
    for name, template in templates.items():
        alias = model.model_fields[name].alias
        if name not in data and alias not in data:
            value = template.format(**ports)
            out[alias or name] = int(value) if value.isdigit() else value
    return out


# The settings files a command reads besides its environment (which wins over them): the
# one `make up` writes (var/run/passk.env), then passk.env in the working directory.
# PASSK_ENV_FILE names another one; empty, none at all (the tests).
RUN_SETTINGS = PROJECT_ROOT / "var" / "run" / "passk.env"


def settings_files(environ: Mapping[str, str] | None = None) -> tuple[Path, ...]:
    environ = os.environ if environ is None else environ
    chosen = environ.get("PASSK_ENV_FILE")
    if chosen is not None:
        return (Path(chosen),) if chosen.strip() else ()
    return tuple(p for p in (RUN_SETTINGS, Path.cwd() / "passk.env") if p.is_file())


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings(_env_file=settings_files() or None)
