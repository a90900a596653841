"""Write the JSON Schema files in schemas/json from the pydantic models.

    python -m schemas.generate          # (re)write every file
    python -m schemas.generate --check  # exit 1, listing stale or missing files

The files are for producers in other languages; the models stay the single source, so
a test fails whenever the committed files drift from them.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from pydantic import BaseModel

from schemas.events import ALL_MODELS, SCHEMA_VERSION
from schemas.scenario import Scenario

JSON_DIR = Path(__file__).resolve().parent / "json"
DRAFT = "https://json-schema.org/draft/2020-12/schema"
MODELS: tuple[type[BaseModel], ...] = (*ALL_MODELS, Scenario)


def schema_name(model: type[BaseModel]) -> str:
    """ConversationFinished -> conversation_finished (the event's `type`, for events)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", model.__name__).lower()


def render(model: type[BaseModel]) -> str:
    name = schema_name(model)
    schema = {
        "$schema": DRAFT,
        "$id": f"passk/{name}.v{SCHEMA_VERSION}",
        **model.model_json_schema(),
    }
    # Sorted keys: the bytes depend on the model only, not on dict insertion order.
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def expected_files() -> dict[Path, str]:
    return {JSON_DIR / f"{schema_name(m)}.schema.json": render(m) for m in MODELS}


def stale_files(directory: Path | None = None) -> list[str]:
    """Files that are missing, differ from what the models generate, or match no model."""
    directory = directory or JSON_DIR
    problems = []
    for path, text in expected_files().items():
        target = directory / path.name
        if not target.exists():
            problems.append(f"missing: {target.name}")
        elif target.read_text(encoding="utf-8") != text:
            problems.append(f"stale: {target.name}")
    wanted = {path.name for path in expected_files()}
    for extra in sorted(directory.glob("*.schema.json")):
        if extra.name not in wanted:  # a model was renamed or removed
            problems.append(f"unexpected: {extra.name}")
    return problems


def write(directory: Path | None = None) -> list[Path]:
    directory = directory or JSON_DIR
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for path, text in expected_files().items():
        target = directory / path.name
        target.write_text(text, encoding="utf-8")
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m schemas.generate", description=__doc__)
    parser.add_argument("--check", action="store_true", help="only report stale or missing files")
    args = parser.parse_args(argv)
    if args.check:
        problems = stale_files()
        for problem in problems:
            print(problem, file=sys.stderr)
        if problems:
            print("run `make schemas` (python -m schemas.generate) to regenerate", file=sys.stderr)
            return 1
        print(f"{len(MODELS)} schema files up to date")
        return 0
    for path in write():
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
