"""Validation refuses what could only fail later: unknown judge kinds, arguments that do not
fit the kind, alias bombs, oversized files and scenarios too large to publish."""

from __future__ import annotations

import resource
import textwrap
import time
from pathlib import Path

import pytest

from services.grading.scenario_loader import (
    MAX_EXPANDED_NODES,
    MAX_FILE_BYTES,
    MAX_TRIALS,
    MAX_YAML_DEPTH,
    validate_file,
    validate_paths,
)

TOP = """\
id: hostile
expected_exit: product_closed
"""
HEAD = (
    TOP
    + """\
outcome:
  - {path: report.fault, present: true}
"""
)


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def problems(path: Path) -> list[tuple[str, str, int | None]]:
    scenario, result = validate_file(path)
    assert scenario is None, "expected the file to be refused"
    return [(e.field, e.problem, e.line) for e in result.errors]


@pytest.mark.parametrize(
    ("judge", "field", "says"),
    [
        ("{id: j, kind: nosuchkind}", "judges[0].kind", "unknown judge kind 'nosuchkind'"),
        ("{id: j, kind: regex}", "judges[0].pattern", "Field required"),
        (
            "{id: j, kind: regex, pattern: x, must_match: 'yes'}",
            "judges[0].must_match",
            "valid boolean",
        ),
        ("{id: j, kind: regex, pattern: '(a)\\1'}", "judges[0].pattern", "RE2"),
        ("{id: j, kind: regex, pattern: x, role: robot}", "judges[0].role", "assistant"),
        ("{id: j, kind: regex, pattern: x, colour: red}", "judges[0].colour", "Extra inputs"),
    ],
)
def test_a_judge_whose_kind_or_arguments_do_not_fit_is_refused(
    tmp_path: Path, judge: str, field: str, says: str
) -> None:
    path = write(tmp_path, HEAD + f"judges:\n  - {judge}\n")
    found = problems(path)
    assert any(f == field and says in p and line == 6 for f, p, line in found), found


def test_a_good_deterministic_judge_is_accepted(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        HEAD + "judges:\n  - {id: j, kind: regex, pattern: x, must_match: false, role: any}\n",
    )
    scenario, result = validate_file(path)
    assert scenario is not None and not result.errors


BILLION_LAUGHS = (
    TOP
    + """\
laughs:
  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
  b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
  c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
  d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
  e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
  f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
  g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
  h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
  i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
outcome:
  - {path: report.fault, equals: *i}
"""
)


def test_a_billion_laughs_under_equals_is_refused_fast_in_bounded_memory(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, BILLION_LAUGHS)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    found = problems(path)
    took = time.monotonic() - started
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert any("anchors and aliases expand to more than" in p for _, p, _ in found), found
    assert took < 2.0 and grown_mb < 50  # 9^9 strings would be gigabytes


def test_modest_sharing_with_anchors_and_merge_keys_is_fine(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        HEAD
        + """\
        limits: &lim {max_turns: 30}
        judges:
          - &j {id: a, kind: regex, pattern: x}
          - {<<: *j, id: b}
        """.replace("        ", ""),
    )
    scenario, result = validate_file(path)
    assert scenario is not None, result.errors
    assert [j.id for j in scenario.judges] == ["a", "b"]
    assert MAX_EXPANDED_NODES >= 1000


def test_a_file_above_the_size_limit_is_refused_unread(tmp_path: Path) -> None:
    path = write(tmp_path, HEAD + "description: " + "x" * MAX_FILE_BYTES + "\n")
    ((field, problem, _),) = problems(path)
    assert "above the limit" in problem and str(MAX_FILE_BYTES) in problem


def test_a_scenario_that_encodes_past_the_record_limit_is_refused(tmp_path: Path) -> None:
    # 100 KB of YAML that aliases a long string 20 times: 2 MB once encoded
    body = (
        TOP
        + f"""\
description: &long "{"y" * 100_000}"
outcome:
  - {{path: notes, equals: [{", ".join(["*long"] * 20)}]}}
"""
    )
    path = write(tmp_path, body)
    ((_, problem, _),) = problems(path)
    assert "encodes to" in problem and "scenarios topic" in problem


def test_one_bad_file_among_good_ones_fails_the_whole_set(tmp_path: Path) -> None:
    write(tmp_path, HEAD, "good.yaml")
    write(
        tmp_path,
        HEAD.replace("hostile", "other") + "judges:\n  - {id: j, kind: nope}\n",
        "bad.yaml",
    )
    result = validate_paths([tmp_path])
    assert not result.ok and len(result.errors) == 1


# Issue 21, item 3: the red team's 1.6 KB file, 800 nested `[` in a flow sequence.
@pytest.mark.parametrize(
    "text",
    [
        TOP + "outcome: " + "[" * 800 + "]" * 800 + "\n",
        TOP + "outcome: " + "[" * 100_000 + "\n",  # unclosed too: refused before the scanner ends
        TOP + "outcome: " + "{a: " * 800 + "}" * 800 + "\n",
        TOP + "outcome:\n" + "".join("  " * i + "-\n" for i in range(1, 300)),  # block style
    ],
)
def test_yaml_nested_past_the_bound_is_refused_with_its_line_not_a_recursion_error(
    tmp_path: Path, text: str
) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text(text)
    [(field, problem, line)] = problems(path)
    assert field == "(file)"
    assert f"nests deeper than {MAX_YAML_DEPTH} levels" in problem
    assert line is not None and line >= 3


def test_yaml_at_the_bound_is_read(tmp_path: Path) -> None:
    # MAX_YAML_DEPTH levels in all: the mapping, `outcome`'s list, then lists inside it.
    path = tmp_path / "s.yaml"
    path.write_text(HEAD + "description: x\nalert: null\nuser: null\n")
    scenario, result = validate_file(path)
    assert scenario is not None, result.errors
    nested = TOP + "outcome: " + "[" * (MAX_YAML_DEPTH - 1) + "]" * (MAX_YAML_DEPTH - 1) + "\n"
    path.write_text(nested)
    _, result = validate_file(path)
    assert all("nests deeper" not in e.problem for e in result.errors), result.errors


@pytest.mark.parametrize(
    ("trials", "refused"), [(MAX_TRIALS, False), (MAX_TRIALS + 1, True), (1_000_000, True)]
)
def test_trials_above_the_maximum_are_refused_on_their_line(
    tmp_path: Path, trials: int, refused: bool
) -> None:
    path = write(tmp_path, HEAD + f"trials: {trials}\n")
    scenario, result = validate_file(path)
    if not refused:
        assert scenario is not None and scenario.trials == trials, result.errors
        return
    assert scenario is None
    [error] = result.errors
    assert (error.field, error.line) == ("trials", 5)
    assert f"above the maximum of {MAX_TRIALS}" in error.problem


@pytest.mark.parametrize(
    "limits",
    [
        "{max_duration_s: .inf}",
        "{max_duration_s: .nan}",
        "{max_duration_s: 1e400}",
        "{max_turns: 10001}",
        "{max_duration_s: 604801}",
    ],
)
def test_limits_that_are_no_limits_are_refused(tmp_path: Path, limits: str) -> None:
    found = problems(write(tmp_path, HEAD + f"limits: {limits}\n"))
    assert [line for field, _, line in found if field.startswith("limits.")] == [5], found
