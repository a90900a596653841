"""The continuous auditor's settings (`passk worker audit`), from the environment; read
once when the worker is built and passed in."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class AuditSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="", extra="ignore", populate_by_name=True)

    # An audit starts this long after the previous one started (at once when it took
    # longer).
    interval_s: float = Field(60.0, alias="PASSK_AUDIT_INTERVAL_S", gt=0)
    # Each round audits the trials whose ConversationFinished reached the log this long ago
    # or later (`passk audit --since`): a full-log audit every minute of a week of traffic
    # would cost more than it tells.
    period_s: float = Field(21600.0, alias="PASSK_AUDIT_PERIOD_S", gt=0)
    # A trial younger than this is in flight, not unaccounted. None: the pipeline's
    # deadlines, as `passk audit` (PASSK_SESSION_WAIT_S + PASSK_JUDGE_WAIT_S + 60).
    grace_s: float | None = Field(None, alias="PASSK_AUDIT_GRACE_S", ge=0)
