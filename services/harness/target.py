"""The target file (`passk run --target FILE`): how to reach one product and read its
persisted sessions (DESIGN.md, "Running scenarios against an agent"). Pure: parsing and
validation only; a bad file is refused naming the file, the field and the problem."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

MAX_TARGET_BYTES = 64 * 1024
# ${NAME} or ${NAME:-default}: ports, hosts and paths that differ per machine.
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_CALLABLE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


class HttpAgent(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["http"]
    url: str = Field(pattern=r"^https?://")
    timeout_s: float = Field(60.0, gt=0, le=3600)
    headers: dict[str, str] = Field(default_factory=dict)
    # A reply body past this is an agent error, never read whole.
    max_reply_bytes: int = Field(1024 * 1024, ge=1024, le=64 * 1024 * 1024)


class OpenAIChatAgent(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["openai_chat"]
    base_url: str = Field(pattern=r"^https?://")
    model: str = Field(min_length=1)
    exit_tool: str = Field("end_conversation", pattern=r"^[A-Za-z0-9_-]{1,64}$")
    system_prompt: str | None = None
    api_key_env: str = Field("OPENAI_API_KEY", min_length=1)
    timeout_s: float = Field(60.0, gt=0, le=3600)


class PythonAgent(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["python"]
    callable: str
    timeout_s: float = Field(60.0, gt=0, le=3600)

    @field_validator("callable")
    @classmethod
    def _module_function(cls, value: str) -> str:
        if not _CALLABLE.match(value):
            raise ValueError("must be 'package.module:function'")
        return value


Agent = Annotated[HttpAgent | OpenAIChatAgent | PythonAgent, Field(discriminator="kind")]


class HttpProbe(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["http"]
    url: str = Field(pattern=r"^https?://.*\{session_id\}")
    wait_s: float = Field(30.0, ge=0, le=3600)
    interval_s: float = Field(0.2, gt=0, le=60)
    headers: dict[str, str] = Field(default_factory=dict)


class SqlProbe(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["sql"]
    url: str = Field(min_length=1, description="SQLAlchemy URL; opened read-only")
    query: str = Field(min_length=1)
    state_column: str = Field("state", min_length=1)
    exit_column: str | None = None
    wait_s: float = Field(30.0, ge=0, le=3600)
    interval_s: float = Field(0.2, gt=0, le=60)

    @field_validator("query")
    @classmethod
    def _takes_session_id(cls, value: str) -> str:
        if ":session_id" not in value:
            raise ValueError("the query must take the session id as :session_id")
        if not re.match(r"^\s*(select|with)\b", value, re.IGNORECASE):
            raise ValueError("the query must be a SELECT (the probe only reads)")
        return value


class NoProbe(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["none"]


Probe = Annotated[HttpProbe | SqlProbe | NoProbe, Field(discriminator="kind")]


class Target(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent: Agent
    state: Probe = Field(default_factory=lambda: NoProbe(kind="none"))


class InvalidTarget(Exception):
    def __init__(self, file: str, field: str, problem: str) -> None:
        super().__init__(f"{file}: {field}: {problem}")
        self.file, self.field, self.problem = file, field, problem


def _field(loc: tuple[Any, ...]) -> str:
    # pydantic puts the discriminator's value in the location (agent.http.url): drop it
    parts = [
        str(p)
        for i, p in enumerate(loc)
        if not (i == 1 and p in ("http", "openai_chat", "python", "sql", "none"))
    ]
    return ".".join(parts) or "(file)"


def parse_target(data: Any, file: str = "<target>") -> Target:
    if not isinstance(data, dict):
        raise InvalidTarget(file, "(file)", "must be a mapping with `agent:` and `state:`")
    try:
        return Target.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        msg = str(first["msg"]).removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            msg = "unknown field"
        elif first["type"] == "missing":
            msg = "required field is missing"
        elif first["type"] == "union_tag_invalid":
            msg = (
                f"unknown kind {first['input'].get('kind')!r}"
                if isinstance(first.get("input"), dict)
                else msg
            )
        raise InvalidTarget(file, _field(tuple(first["loc"])), msg) from None


def expand(text: str, env: Mapping[str, str], file: str) -> str:
    """Replace ${NAME} and ${NAME:-default} from `env`; an unset one without a default is
    an error (a URL with a hole in it would fail later, further from the cause)."""

    def value(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in env and env[name] != "":
            return env[name]
        if default is not None:
            return default
        raise InvalidTarget(file, "(file)", f"${{{name}}} is not set and has no default")

    return _VARIABLE.sub(value, text)


def load_target(path: Path, env: Mapping[str, str] | None = None) -> Target:
    file = str(path)
    try:
        if path.stat().st_size > MAX_TARGET_BYTES:
            raise InvalidTarget(file, "(file)", f"larger than {MAX_TARGET_BYTES} bytes")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidTarget(file, "(file)", f"cannot read it: {exc}") from None
    text = expand(text, env or {}, file)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidTarget(file, "(file)", f"not valid YAML: {exc}") from None
    return parse_target(data, file)
