"""Reading scenario YAML files into versioned `Scenario`s, with every problem named.

Nothing is half-loaded: every file is validated, every problem of every file is
collected (file, line, dotted field, what is wrong), and a caller publishes only
when the list is empty. Warnings (say, fewer than 3 trials) never block.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from schemas.scenario import Expectation, JudgeSpec, Limits, Scenario, SimulatedUser
from services.contract.codec import nesting_depth
from services.contract.scenario_records import (
    MAX_SCENARIO_DEPTH,
    MAX_SCENARIO_RECORD_BYTES,
    encode_scenario,
)
from services.grading.kinds import spec_problems, user_check_problems
from services.grading.production import overlaps

SUFFIXES = (".yaml", ".yml")
# A scenario is a page of YAML; a file past this is refused unread.
MAX_FILE_BYTES = 256 * 1024
# Anchors and aliases may share parts of a file, but what they expand to is bounded: a
# "billion laughs" (aliases of aliases) is refused before anything is built from it.
MAX_EXPANDED_NODES = 20_000
MIN_RELIABLE_TRIALS = 3
# More trials than this is refused: pass^k over k trials needs every one of them to pass,
# so k = 1,000,000 can never pass in practice, and the aggregate and the report hold each
# scenario's trials; a typo (an extra 0) should not silently turn a gate off.
MAX_TRIALS = 1000
# YAML nesting is bounded while the document is composed: PyYAML's composer recurses once
# per level, and 800 nested `[` overflow Python's stack (RecursionError) before any check
# after parsing could run. A scenario needs a handful of levels; the JSON record's bound
# (MAX_SCENARIO_DEPTH) is the same.
MAX_YAML_DEPTH = MAX_SCENARIO_DEPTH
FILE_LEVEL = "(file)"  # the field of a problem that belongs to no field

# Which model validates the mapping at a location (list indexes dropped).
_MODEL_AT: dict[tuple[str, ...], type[BaseModel]] = {
    (): Scenario,
    ("limits",): Limits,
    ("outcome",): Expectation,
    ("judges",): JudgeSpec,
    ("user_checks",): JudgeSpec,
    ("user",): SimulatedUser,
}
# Model-level checks whose message names the one field at fault.
_FIELD_OF_MESSAGE: tuple[tuple[str, str], ...] = (
    ("matches is not a valid regular expression", "matches"),
    ("unordered only applies", "unordered"),
    ("an llm judge needs", "assertion"),
    ("judge ids must be unique", "judges"),
    ("user check ids must be unique", "user_checks"),
    ("outcome expectations need completion", "outcome"),
)


@dataclass(frozen=True)
class ScenarioError:
    """One problem in one file: where it is and what is wrong."""

    file: str
    field: str
    problem: str
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.field}: {self.problem}"


class ScenarioWarning(ScenarioError):
    """Accepted, but worth a look (e.g. too few trials to say anything about reliability)."""


@dataclass
class LoadResult:
    scenarios: list[Scenario] = field(default_factory=list)  # versioned, in file order
    errors: list[ScenarioError] = field(default_factory=list)
    warnings: list[ScenarioWarning] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)  # scenario id -> file

    @property
    def ok(self) -> bool:
        return not self.errors


class InvalidScenarios(Exception):
    def __init__(self, errors: Sequence[ScenarioError]) -> None:
        self.errors = list(errors)
        lines = "\n".join(f"  {e}" for e in self.errors)
        super().__init__(f"{len(self.errors)} problem(s) in scenario files:\n{lines}")


# ---------------------------------------------------------------------- YAML


class TooDeep(yaml.composer.ComposerError):
    pass


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys, keeps timestamps as text, and refuses
    nesting deeper than MAX_YAML_DEPTH while composing (before the stack can overflow).

    PyYAML silently keeps the last of two equal keys (a second `outcome:` would erase
    the first), and turns `2024-05-01` into a date, which no JSON state ever equals.
    """

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                mark = self.peek_event().start_mark
                raise TooDeep(
                    None,
                    None,
                    f"the document nests deeper than {MAX_YAML_DEPTH} "
                    "levels (lists and mappings inside each other)",
                    mark,
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *base` may legitimately be overridden
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:  # unhashable key: let SafeLoader report it
                break
            if duplicate:
                first = seen[key].start_mark.line + 1
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first defined on line {first})",
                    key_node.start_mark,
                )
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)

    def construct_timestamp_as_text(self, node: yaml.ScalarNode) -> str:
        return str(self.construct_scalar(node))


_StrictLoader.add_constructor(
    "tag:yaml.org,2002:timestamp", _StrictLoader.construct_timestamp_as_text
)


class ExpansionTooLarge(yaml.YAMLError):
    pass


def _expanded_size(root: yaml.Node, limit: int) -> int:
    """How many nodes the document has once every alias is expanded, counted over the
    node graph (an alias is the same node object), stopping as soon as it passes `limit`."""
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        if isinstance(node, yaml.MappingNode):
            kids = [n for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            kids = list(node.value)
        else:
            sizes[id(node)] = 1
            continue
        if not children_done:
            stack.append((node, True))
            stack.extend((k, False) for k in kids if id(k) not in sizes)
            continue
        size = 1 + sum(sizes.get(id(k), 1) for k in kids)
        if size > limit:
            return size
        sizes[id(node)] = size
    return sizes.get(id(root), 1)


def _parse_yaml(text: str) -> tuple[Any, yaml.Node | None]:
    loader = _StrictLoader(text)
    try:
        node = loader.get_single_node()
        if node is not None and (size := _expanded_size(node, MAX_EXPANDED_NODES)) > (
            MAX_EXPANDED_NODES
        ):
            raise ExpansionTooLarge(
                f"invalid YAML: anchors and aliases expand to more than {MAX_EXPANDED_NODES} "
                f"nodes (at least {size}); write the content out or share less"
            )
        data = loader.construct_document(node) if node is not None else None
        return data, node
    finally:
        loader.dispose()


def _yaml_problem(exc: yaml.YAMLError) -> tuple[str, int | None]:
    if isinstance(exc, ExpansionTooLarge):
        return str(exc), None
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    line = mark.line + 1 if mark is not None else None
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    text = f"invalid YAML: {context + ', ' if context else ''}{problem}"
    if mark is not None:
        text += f" (line {mark.line + 1}, column {mark.column + 1})"
    return text, line


def _line_of(node: yaml.Node | None, loc: Sequence[str | int]) -> int | None:
    """The line of the deepest YAML node the location reaches (the key, for a field)."""
    if node is None:
        return None
    line = node.start_mark.line + 1
    for step in loc:
        if isinstance(node, yaml.MappingNode):
            match = next((kv for kv in node.value if kv[0].value == str(step)), None)
            if match is None:
                break
            line = match[0].start_mark.line + 1
            node = match[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(step, int):
            if step >= len(node.value):
                break
            node = node.value[step]
            line = node.start_mark.line + 1
        else:
            break
    return line


# ---------------------------------------------------------------- validation


def dotted(loc: Sequence[str | int]) -> str:
    """('outcome', 2, 'matches') -> 'outcome[2].matches'."""
    out = ""
    for step in loc:
        if isinstance(step, int):
            out += f"[{step}]"
        else:
            out += f".{step}" if out else str(step)
    return out or FILE_LEVEL


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _unknown_field(loc: tuple[str | int, ...]) -> str:
    parent = tuple(s for s in loc[:-1] if isinstance(s, str))
    model = _MODEL_AT.get(parent)
    name = str(loc[-1])
    if model is None:
        return "unknown field"
    allowed = [f for f in model.model_fields if not (model is Scenario and f == "version")]
    guess = difflib.get_close_matches(name, allowed, n=1)
    hint = f"; did you mean {guess[0]!r}?" if guess else ""
    return f"unknown field {name!r}{hint} (allowed: {', '.join(allowed)})"


def _describe(error: Any) -> tuple[tuple[str | int, ...], str]:
    loc = tuple(error.get("loc", ()))
    kind = error["type"]
    msg = str(error["msg"]).removeprefix("Value error, ")
    if kind == "extra_forbidden":
        return loc, _unknown_field(loc)
    if kind == "missing":
        return loc, "required field is missing"
    if kind == "value_error":
        for fragment, name in _FIELD_OF_MESSAGE:
            if fragment in msg:
                # a field validator's location names the field already (user_checks)
                return (loc if loc[-1:] == (name,) else (*loc, name)), msg
        return loc, msg
    if "input" in error and not isinstance(error["input"], dict | list):
        msg += f" (got {_short(error['input'])})"
    return loc, msg


def _lint(data: dict[str, Any]) -> list[tuple[tuple[str | int, ...], str]]:
    """Checks the model cannot make: explicit nulls, a version written by hand."""
    found: list[tuple[tuple[str | int, ...], str]] = []
    if "version" in data:
        found.append(
            (("version",), "is set from the content when published; remove it from the file")
        )
    outcome = data.get("outcome")
    if isinstance(outcome, list):
        for i, item in enumerate(outcome):
            if not isinstance(item, dict):
                continue
            for op in ("present", "matches"):
                if op in item and item[op] is None:
                    found.append((("outcome", i, op), f"{op} is empty (null); give it a value"))
    return found


Problem = Callable[[Sequence[str | int], str, int | None], None]
"""Records a problem in one file: its location, its text, its line (when known)."""


def _read_mapping(path: Path, problem: Problem) -> tuple[dict[str, Any], yaml.Node | None] | None:
    """The file's YAML mapping and its node tree; None (after a problem) when the file is
    too large, unreadable, not YAML, empty or not a mapping."""
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            problem((), f"the file is {size} bytes, above the limit of {MAX_FILE_BYTES}", None)
            return None
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        problem((), f"cannot read the file: {exc}", None)
        return None
    try:
        data, node = _parse_yaml(text)
    except yaml.YAMLError as exc:
        message, line = _yaml_problem(exc)
        problem((), message, line)
        return None
    if data is None:
        problem((), "the file is empty", None)
        return None
    if not isinstance(data, dict):
        kind = "a list" if isinstance(data, list) else f"a {type(data).__name__}"
        problem((), f"expected a mapping of scenario fields, found {kind}", _line_of(node, ()))
        return None
    return data, node


def _scenario_of(data: dict[str, Any], node: yaml.Node | None, problem: Problem) -> Scenario | None:
    """The scenario the mapping describes (None when the model rejects it), after the
    lint checks; with a problem for each lint finding, model error and bad judge spec."""
    for loc, text_ in _lint(data):
        problem(loc, text_, _line_of(node, loc))
    body = {k: v for k, v in data.items() if k != "version"}
    scenario: Scenario | None = None
    try:
        scenario = Scenario.model_validate(body)
    except ValidationError as exc:
        for error in exc.errors():
            loc, text_ = _describe(error)
            problem(loc, text_, _line_of(node, loc))
    if scenario is not None:
        for section, specs in (("judges", scenario.judges), ("user_checks", scenario.user_checks)):
            for i, judge in enumerate(specs):
                found = spec_problems(judge)
                if section == "user_checks" and not found:
                    found = user_check_problems(judge)
                for loc, text_ in found:
                    where = (section, i, *loc)
                    problem(where, text_, _line_of(node, where))
        if scenario.user_checks and scenario.user is not None and scenario.user.script:
            # A scripted user says the lines it was given, no model plays it: nothing to
            # spoil, and a failed check would only take an agent's trial out of n.
            problem(
                ("user_checks",),
                "a scripted user (user.script) says only the lines it was given, so it "
                "cannot spoil a trial: user_checks are for a user a model plays (persona, "
                "instructions); remove them, or the script",
                _line_of(node, ("user_checks",)),
            )
    return scenario


def _record_fits(versioned: Scenario, problem: Problem) -> bool:
    """Whether the scenario's record on the scenarios topic is shallow and small enough
    (a problem when not)."""
    _, record = encode_scenario(versioned)
    if nesting_depth(json.loads(record), MAX_SCENARIO_DEPTH) > MAX_SCENARIO_DEPTH:
        problem((), f"the scenario nests deeper than {MAX_SCENARIO_DEPTH} levels", None)
        return False
    if len(record) > MAX_SCENARIO_RECORD_BYTES:
        problem(
            (),
            f"the scenario encodes to {len(record)} bytes, above the "
            f"{MAX_SCENARIO_RECORD_BYTES} a record on the scenarios topic may carry",
            None,
        )
        return False
    return True


def validate_file(path: Path, label: str | None = None) -> tuple[Scenario | None, LoadResult]:
    """Validate one file. Returns the versioned scenario (None if invalid) and its problems."""
    name = label or str(path)
    result = LoadResult()

    def problem(loc: Sequence[str | int], text: str, line: int | None) -> None:
        result.errors.append(ScenarioError(name, dotted(loc), text, line))

    read = _read_mapping(path, problem)
    if read is None:
        return None, result
    data, node = read
    scenario = _scenario_of(data, node, problem)
    if result.errors or scenario is None:
        return None, result
    versioned = scenario.versioned()
    if not _record_fits(versioned, problem):
        return None, result

    if scenario.trials > MAX_TRIALS:
        problem(
            ("trials",),
            f"trials: {scenario.trials} is above the maximum of {MAX_TRIALS} "
            "(pass^k needs every one of k trials to pass)",
            _line_of(node, ("trials",)),
        )
        return None, result
    if scenario.trials < MIN_RELIABLE_TRIALS:
        result.warnings.append(
            ScenarioWarning(
                name,
                "trials",
                f"trials: {scenario.trials} is below {MIN_RELIABLE_TRIALS}; pass^k over so few "
                "trials says little about reliability",
                _line_of(node, ("trials",)),
            )
        )
    result.scenarios.append(versioned)
    result.sources[versioned.id] = name
    return versioned, result


def _files(root: Path, errors: list[ScenarioError]) -> list[Path]:
    if not root.exists():
        errors.append(ScenarioError(str(root), FILE_LEVEL, "no such file or directory"))
        return []
    if root.is_file():
        return [root]
    files = sorted(p for p in root.iterdir() if p.is_file() and p.suffix in SUFFIXES)
    if not files:
        errors.append(
            ScenarioError(str(root), FILE_LEVEL, "no *.yaml or *.yml files in this directory")
        )
    return files


def validate_paths(paths: Iterable[Path | str]) -> LoadResult:
    """Validate files and directories of `*.yaml`/`*.yml` together; never raises on content."""
    total = LoadResult()
    files: list[Path] = []
    for raw in paths:
        for f in _files(Path(raw), total.errors):
            if f not in files:
                files.append(f)
    id_lines: dict[str, list[tuple[str, int | None]]] = {}
    for f in files:
        scenario, result = validate_file(f)
        total.errors.extend(result.errors)
        total.warnings.extend(result.warnings)
        if scenario is not None:
            id_lines.setdefault(scenario.id, []).append((str(f), _id_line(f)))
            if scenario.id not in total.sources:
                total.scenarios.append(scenario)
                total.sources.update(result.sources)
    for scenario_id, places in id_lines.items():
        if len(places) < 2:
            continue
        for file, line in places:
            others = ", ".join(other for other, _ in places if other != file)
            total.errors.append(
                ScenarioError(
                    file, "id", f"duplicate scenario id {scenario_id!r}, also in {others}", line
                )
            )
    for winner, loser in overlaps(total.scenarios):
        total.warnings.append(
            ScenarioWarning(
                total.sources.get(loser.id, loser.id),
                "match",
                f"match can hold for the same traces as scenario {winner.id!r}'s; such a trace "
                f"is a trial of {winner.id!r} (the match with more keys wins, a tie goes to the "
                "smaller scenario id)",
                None,
            )
        )
    total.errors.sort(key=lambda e: (e.file, e.line or 0))
    return total


def _id_line(path: Path) -> int | None:
    try:
        _, node = _parse_yaml(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    return _line_of(node, ("id",))


def load_scenarios(*paths: Path | str) -> LoadResult:
    """Validated, versioned scenarios; raises `InvalidScenarios` listing every problem."""
    result = validate_paths(paths)
    if result.errors:
        raise InvalidScenarios(result.errors)
    return result
