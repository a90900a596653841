"""A scenario definition, as written in YAML (see DESIGN.md, "Scenario file")."""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from schemas.events import EXTERNAL_CHECK_ID
from schemas.paths import parse_path
from schemas.patterns import PatternError, compile_pattern

SCENARIO_ID = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
DEFAULT_TRIALS = 3


class Limits(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # The same bounds as a trial's reported metrics (schemas.events); YAML's `.inf` is no limit.
    max_turns: int | None = Field(None, ge=1, le=10_000)
    max_duration_s: float | None = Field(None, gt=0, le=7 * 24 * 3600, allow_inf_nan=False)


class Expectation(BaseModel):
    """One assertion on the persisted session state; exactly one operator is set."""

    model_config = ConfigDict(extra="forbid")

    # Dotted path; list items by index: a.b[0].c or a.b.0.c (syntax in schemas.paths)
    path: str = Field(min_length=1)
    present: bool | None = None
    equals: Any = None
    unordered: bool = False
    matches: str | None = None

    @field_validator("path")
    @classmethod
    def _readable_path(cls, value: str) -> str:
        parse_path(value)  # a PathError is a ValueError: reported against `path`
        return value

    @model_validator(mode="after")
    def _one_operator(self) -> Expectation:
        given = [op for op in ("present", "equals", "matches") if op in self.model_fields_set]
        if len(given) != 1:
            raise ValueError(
                f"needs exactly one of present, equals, matches (got {', '.join(given) or 'none'})"
            )
        if self.unordered and "equals" not in self.model_fields_set:
            raise ValueError("unordered only applies to equals")
        if self.matches is not None:
            try:
                compile_pattern(self.matches)
            except PatternError as exc:
                raise ValueError(
                    "matches is not a valid regular expression for RE2, the linear-time "
                    f"engine passk uses: {exc.reason}"
                ) from exc
        return self

    @model_serializer(mode="wrap")
    def _as_written(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Only what the file set: a dump listing every operator (unset ones as null) would
        # not validate again, so a published scenario could not be read back.
        return {k: v for k, v in handler(self).items() if k in self.model_fields_set}

    @model_serializer(mode="wrap")
    def _only_what_was_written(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Dumping the unused operators as null would make the dump read back as three
        # operators (equals: null is a real expectation), so only given fields are written.
        data = handler(self)
        return {k: v for k, v in data.items() if k == "path" or k in self.model_fields_set}

    @property
    def operator(self) -> str:
        return next(op for op in ("present", "equals", "matches") if op in self.model_fields_set)

    def spec(self) -> dict[str, Any]:
        return self.model_dump(exclude_unset=True)


class JudgeSpec(BaseModel):
    """One binary judge. `kind` names a registered judge function; the rest are its arguments."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    kind: str = "llm"
    assertion: str | None = None
    gating: bool = True
    # What the judge measures, for calibration reported per dimension as well as per judge.
    dimension: str | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def _llm_needs_assertion(self) -> JudgeSpec:
        if self.kind == "llm" and not (self.assertion and self.assertion.strip()):
            raise ValueError("an llm judge needs a non-empty assertion")
        return self

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class AlertTargets(BaseModel):
    """When the reliability-drop alert fires for this scenario; unset fields take the
    defaults from settings (PASSK_ALERT_MIN_PASS_HAT_K, PASSK_ALERT_MIN_TRIALS)."""

    model_config = ConfigDict(extra="forbid")

    min_pass_hat_k: float | None = Field(None, ge=0.0, le=1.0)
    min_trials: int | None = Field(None, ge=1)


class Judging(BaseModel):
    """How the scenario's judges are asked. `skip_when_gates_fail`: do not call the model
    for a trial whose gates already failed (recorded as `skipped`; the trial is failed
    either way); unset: the global PASSK_JUDGE_SKIP_WHEN_GATES_FAIL (off by default)."""

    model_config = ConfigDict(extra="forbid")

    skip_when_gates_fail: bool | None = None


MAX_MATCH_KEYS = 32
MAX_MATCH_VALUES = 256
# An attribute key as OpenTelemetry spells them (service.name, gen_ai.agent.name, app.intent).
ATTRIBUTE_KEY = r"^[A-Za-z0-9_][A-Za-z0-9_.\-/]{0,254}$"


class Sampling(BaseModel):
    """Which production trials run the scenario's LLM judges (DESIGN.md, "Production
    traffic"): a trial is in the sample at rate r when the first 8 hex digits of the
    sha256 of its trial id, read as a number, are below r * 2**32
    (services.grading.sampling.in_sample)."""

    model_config = ConfigDict(extra="forbid")

    llm_judges: float = Field(1.0, ge=0.0, le=1.0, allow_inf_nan=False)


def _match_values(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


class SimulatedUser(BaseModel):
    """The user `passk run` plays against the agent (DESIGN.md, "Running scenarios against
    an agent"): `script` lines in order (no model), else a model playing the persona."""

    model_config = ConfigDict(extra="forbid")

    persona: str = ""
    instructions: str = ""
    script: list[str] | None = Field(None, min_length=1)
    max_turns: int = Field(20, ge=1, description="user turns; then the user gives up")

    @model_validator(mode="after")
    def _someone_to_play(self) -> SimulatedUser:
        if self.script is None and not (self.persona.strip() or self.instructions.strip()):
            raise ValueError("a user needs a script, or a persona or instructions to play")
        return self


def _one_or_many(schema: dict[str, Any]) -> None:
    as_list = {k: schema.pop(k) for k in ("type", "items", "minItems") if k in schema}
    schema["anyOf"] = [{"type": "string"}, as_list]


class Scenario(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=SCENARIO_ID)
    description: str = ""
    trials: int = Field(DEFAULT_TRIALS, ge=1, description="k")
    # A single exit may be written as a plain string (see _exit_as_list); the JSON Schema
    # says so too, or producers validating the DESIGN.md example against it would fail.
    expected_exit: list[str] = Field(
        min_length=1,
        json_schema_extra=_one_or_many,
    )
    # `conversation`: the product owns no completion, so no state gate and no session wait.
    completion: Literal["product", "conversation"] = "product"
    limits: Limits = Field(default_factory=Limits)
    outcome: list[Expectation] = Field(default_factory=list)
    judges: list[JudgeSpec] = Field(default_factory=list)
    judging: Judging | None = None
    alert: AlertTargets | None = None
    # The simulated user `passk run` plays; scenarios graded from replays need none.
    user: SimulatedUser | None = None
    # Checks of the simulated user's own turns against its persona and instructions (same
    # shape and kinds as judges, shown as user:<id>): one failed makes the trial `invalid`.
    user_checks: list[JudgeSpec] = Field(default_factory=list)
    # ConversationFinished.checks ids that gate (each shown as external:<id>).
    external_checks: list[Annotated[str, Field(pattern=EXTERNAL_CHECK_ID)]] = Field(
        default_factory=list
    )
    # Production traffic (DESIGN.md, "Production traffic"): a trace with no passk ids is a
    # trial of the scenario whose `match` holds (every key; a value or a list of values).
    match: (
        dict[
            Annotated[str, Field(pattern=ATTRIBUTE_KEY)],
            Annotated[
                list[Annotated[str, Field(max_length=1024)]],
                Field(min_length=1, max_length=MAX_MATCH_VALUES),
            ],
        ]
        | None
    ) = Field(None, min_length=1, max_length=MAX_MATCH_KEYS)
    sampling: Sampling | None = None
    production_run: str | None = Field(None, min_length=1, max_length=200)
    exit_attribute: str | None = Field(None, pattern=ATTRIBUTE_KEY)
    # Set from the content when published; not written in YAML.
    version: str | None = None

    @field_validator("match", mode="before")
    @classmethod
    def _match_as_lists(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: _match_values(v) for k, v in value.items()}
        return value

    @field_validator("production_run")
    @classmethod
    def _run_template(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            value.format(date="2000-01-01")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"production_run may only use {{date}} ({exc!r})") from None
        return value

    @property
    def llm_judge_rate(self) -> float:
        """The fraction of production trials whose LLM judges run (1.0 unless `sampling`)."""
        return self.sampling.llm_judges if self.sampling is not None else 1.0

    @field_validator("expected_exit", mode="before")
    @classmethod
    def _exit_as_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @model_validator(mode="after")
    def _unique_judges(self) -> Scenario:
        ids = [j.id for j in self.judges]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"judge ids must be unique: {', '.join(dupes)}")
        return self

    @field_validator("user_checks")
    @classmethod
    def _unique_user_checks(cls, specs: list[JudgeSpec]) -> list[JudgeSpec]:
        ids = [j.id for j in specs]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"user check ids must be unique: {', '.join(dupes)}")
        return specs

    @field_validator("external_checks")
    @classmethod
    def _unique_external_checks(cls, ids: list[str]) -> list[str]:
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"external check ids must be unique: {', '.join(dupes)}")
        return ids

    @model_validator(mode="after")
    def _outcome_needs_a_session(self) -> Scenario:
        if self.completion == "conversation" and self.outcome:
            raise ValueError(
                "outcome expectations need completion: product (with completion: "
                "conversation no persisted session is waited for)"
            )
        return self

    @property
    def k(self) -> int:
        return self.trials

    @property
    def has_state_gate(self) -> bool:
        return self.completion == "product"

    @property
    def gating_judges(self) -> list[JudgeSpec]:
        return [j for j in self.judges if j.gating]

    def skips_judges_when_gates_fail(self, default: bool) -> bool:
        """Whether its LLM judges wait for the gates and are skipped when they failed: the
        scenario's `judging.skip_when_gates_fail`, else the global setting `default`.
        Only scenarios with an LLM judge have anything to skip."""
        if not any(j.kind == "llm" for j in self.judges):
            return False
        said = self.judging.skip_when_gates_fail if self.judging else None
        return default if said is None else said

    def content_hash(self) -> str:
        body = self.model_dump(mode="json", exclude={"version"}, exclude_unset=False)
        if body["completion"] == "product":
            del body["completion"]  # the default: versions published before it existed hold
        if body.get("alert") is None:
            # A scenario without alert targets keeps the version it had before they existed.
            body.pop("alert", None)
        # Sections added later keep the versions of scenarios that do not use them.
        for added in (
            "user",
            "external_checks",
            "judging",
            "user_checks",
            "match",
            "sampling",
            "production_run",
            "exit_attribute",
        ):
            if not body.get(added):
                body.pop(added, None)
        canon = json.dumps(body, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canon.encode()).hexdigest()[:16]

    def versioned(self) -> Scenario:
        return self.model_copy(update={"version": self.content_hash()})
