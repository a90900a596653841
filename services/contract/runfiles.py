"""What `make up` writes down in var/run for the CLI and the operator: the configuration
every worker got (`env`, secrets masked, mode 0600) and the judge endpoint the workers
grade with (`judge.json`), so a CLI command run later in another shell uses the same one.

    python -m services.contract.runfiles env var/run/env
    python -m services.contract.runfiles settings var/run/passk.env
    python -m services.contract.runfiles judge --base-url URL [--stand-in]
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from services.contract.masking import mask_url, mask_value, masked_lines
from services.contract.settings import Settings, get_settings

ENV_NAMES = re.compile(r"KAFKA_BOOTSTRAP_SERVERS|PASSK_[A-Z0-9_]*|OPENAI_BASE_URL")
STAND_IN_KEY = "stand-in"  # what `make up` gives the workers as OPENAI_API_KEY for it


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read (0600), also when it existed with wider modes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode("utf-8"))
    finally:
        os.close(fd)


def write_env(path: Path, environ: Mapping[str, str]) -> None:
    lines = masked_lines(environ, ENV_NAMES)
    write_private(path, "".join(f"{line}\n" for line in lines))


def settings_lines(environ: Mapping[str, str]) -> list[str]:
    """The settings a later command in a fresh shell needs to reach this stack (its ports,
    topic prefix, database, data dir, every other setting it was given), as a dotenv file:
    nothing secret at all (a secret's name, or a URL with a password in it, is left out:
    a command that needs one takes it from its own environment)."""
    out = []
    for name, value in sorted(environ.items()):
        # the judge endpoint is recorded apart (judge.json), with whether it is the stand-in
        if not ENV_NAMES.fullmatch(name) or name in ("PASSK_ENV_FILE", "OPENAI_BASE_URL"):
            continue
        if mask_value(name, value) != value or "\n" in value:
            continue  # a secret, or masked in part: not written down
        out.append(f"{name}={json.dumps(value)}")
    return out


def write_settings(path: Path, environ: Mapping[str, str]) -> None:
    write_private(
        path,
        "# written by `make up`: what a command in a fresh shell reads "
        "(services/contract/settings.py)\n"
        + "".join(f"{line}\n" for line in settings_lines(environ)),
    )


def judge_path(settings: Settings) -> Path:
    return settings.data_dir / "run" / "judge.json"


@dataclass(frozen=True)
class RecordedJudge:
    base_url: str
    stand_in: bool


def record_judge(path: Path, base_url: str, stand_in: bool) -> None:
    write_private(path, json.dumps({"base_url": mask_url(base_url), "stand_in": stand_in}))


def recorded_judge(path: Path) -> RecordedJudge | None:
    try:
        data = json.loads(path.read_text())
        return RecordedJudge(str(data["base_url"]), bool(data["stand_in"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


NO_MODEL = (
    "no judge model configured: export OPENAI_API_KEY=<your key> (and OPENAI_BASE_URL "
    "for an endpoint other than OpenAI's), or use the offline stand-in: `make up` starts "
    "one that the CLI then uses too, or run `passk judge-standin --port 8400 &` and "
    "export OPENAI_BASE_URL=http://127.0.0.1:8400/v1 OPENAI_API_KEY=stand-in"
)


class NoJudge(Exception):
    """No endpoint the CLI may use; the message says what to export. `unreachable`: one
    is recorded but does not answer."""

    def __init__(self, message: str, unreachable: bool = False) -> None:
        super().__init__(message)
        self.unreachable = unreachable


def _answers(base_url: str, timeout_s: float = 2.0) -> bool:
    parts = urlsplit(base_url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname or "127.0.0.1", port), timeout=timeout_s).close()
    except OSError:
        return False
    return True


def cli_judge(settings: Settings) -> tuple[Settings, str | None]:
    """The settings a CLI command grades with, and a note to print when they are not the
    shell's own: with no OPENAI_* set, the stand-in `make up` started for the workers."""
    if settings.openai_base_url or settings.openai_api_key:
        return settings, None
    recorded = recorded_judge(judge_path(settings))
    if recorded is None:
        raise NoJudge(NO_MODEL)
    if not recorded.stand_in:
        raise NoJudge(
            f"no judge model configured in this shell; the workers `make up` started "
            f"grade with OPENAI_BASE_URL={recorded.base_url}: export the same "
            "OPENAI_BASE_URL and your OPENAI_API_KEY here"
        )
    if not _answers(recorded.base_url):
        raise NoJudge(
            f"the judge stand-in `make up` started ({recorded.base_url}) does not "
            "answer: run `make up` again, or " + NO_MODEL.split(": ", 1)[1],
            unreachable=True,
        )
    used = settings.model_copy(
        update={"openai_base_url": recorded.base_url, "openai_api_key": STAND_IN_KEY}
    )
    return used, (
        f"judge: the offline stand-in `make up` started at {recorded.base_url} "
        "(not a model), as the workers use; set OPENAI_API_KEY for a model"
    )


def main(argv: list[str]) -> int:
    if argv[:1] == ["env"] and len(argv) == 2:
        write_env(Path(argv[1]), os.environ)
        return 0
    if argv[:1] == ["settings"] and len(argv) == 2:
        write_settings(Path(argv[1]), os.environ)
        return 0
    if argv[:2] == ["judge", "--base-url"] and len(argv) in (3, 4):
        record_judge(judge_path(get_settings()), argv[2], argv[3:] == ["--stand-in"])
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
