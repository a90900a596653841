from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from services.contract.settings import PROJECT_ROOT
from services.grading.scenario_loader import (
    FILE_LEVEL,
    InvalidScenarios,
    ScenarioError,
    dotted,
    load_scenarios,
    validate_paths,
)

EXAMPLES = PROJECT_ROOT / "examples" / "scenarios"
INVALID = PROJECT_ROOT / "examples" / "invalid"

VALID = """\
id: s-ok
trials: 3
expected_exit: product_closed
outcome:
  - {path: report.fault, present: true}
judges:
  - id: j1
    assertion: "The agent asked about the fault."
"""


WITH_USER_CHECKS = """\
id: s-user
trials: 3
expected_exit: product_closed
user:
  persona: A customer who lost an order number.
  instructions: Ask where the shoes are.
user_checks:
  - id: stayed_in_role
    assertion: "The user never answered as the assistant."
  - id: no_code
    kind: regex
    role: user
    pattern: "E-[0-9]+"
    must_match: false
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def only_error(result_errors: list[ScenarioError]) -> ScenarioError:
    assert len(result_errors) == 1, [str(e) for e in result_errors]
    return result_errors[0]


@pytest.mark.parametrize(
    ("loc", "text"),
    [
        ((), FILE_LEVEL),
        (("id",), "id"),
        (("outcome", 2, "matches"), "outcome[2].matches"),
        (("limits", "max_turns"), "limits.max_turns"),
        (("judges", 0), "judges[0]"),
    ],
)
def test_dotted(loc: tuple[str | int, ...], text: str) -> None:
    assert dotted(loc) == text


def test_the_examples_load_versioned() -> None:
    result = load_scenarios(EXAMPLES)
    ids = [s.id for s in result.scenarios]
    assert ids == [
        "debrief-billable-repair",
        "debrief-follow-up-required",
        "debrief-quick-question",
        "debrief-safety-incident",
        "debrief-warranty-no-charge",
    ]
    assert all(s.version == s.content_hash() for s in result.scenarios)
    assert not result.warnings
    by_id = {s.id: s for s in result.scenarios}
    repair = by_id["debrief-billable-repair"]
    assert [e.operator for e in repair.outcome] == [
        "present",
        "present",
        "equals",
        "present",
        "matches",
    ]
    assert [j.id for j in repair.judges] == ["covered_expected_topics", "avoided_repetition"]
    assert by_id["debrief-follow-up-required"].expected_exit == ["product_closed", "handed_off"]
    assert by_id["debrief-quick-question"].completion == "conversation"
    assert all(s.completion == "product" for s in result.scenarios if s.outcome)
    assert by_id["debrief-safety-incident"].limits.max_turns == 20
    assert len(by_id["debrief-safety-incident"].judges) == 1
    assert sorted(s.trials for s in result.scenarios) == [3, 3, 3, 3, 5]


def test_version_is_a_content_hash_stable_across_formatting(tmp_path: Path) -> None:
    a = write(tmp_path, "a.yaml", VALID)
    (tmp_path / "other").mkdir()
    b = write(
        tmp_path / "other",
        "b.yml",
        "# same content, other layout\n"
        "judges: [{id: j1, assertion: The agent asked about the fault.}]\n"
        "outcome: [{path: report.fault, present: true}]\n"
        "expected_exit: [product_closed]\nid: s-ok\n",
    )
    first = load_scenarios(a).scenarios[0]
    second = load_scenarios(b).scenarios[0]
    assert first.version == second.version
    changed = write(tmp_path, "c.yaml", VALID.replace("trials: 3", "trials: 4"))
    assert load_scenarios(changed).scenarios[0].version != first.version


# (file text, field, fragments of the problem, line)
ERROR_CASES = [
    pytest.param(
        VALID.replace("present: true}", "present: true, equal: 1}"),
        "outcome[0].equal",
        ["unknown field 'equal'", "did you mean 'equals'"],
        5,
        id="unknown expectation field",
    ),
    pytest.param(
        VALID + "judge: x\n",
        "judge",
        ["unknown field 'judge'", "'judges'"],
        9,
        id="unknown top-level field",
    ),
    pytest.param(
        VALID.replace(
            "expected_exit: product_closed\n",
            "expected_exit: product_closed\nlimits: {max_turns: 10, max_time: 3}\n",
        ),
        "limits.max_time",
        ["unknown field 'max_time'", "max_duration_s"],
        4,
        id="unknown limits field",
    ),
    pytest.param(
        VALID.replace(
            "{path: report.fault, present: true}",
            "{path: report.summary, matches: '(?i)replaced (pump'}",
        ),
        "outcome[0].matches",
        ["not a valid regular expression"],
        5,
        id="bad regex",
    ),
    pytest.param(
        VALID.replace("id: s-ok\n", ""),
        "id",
        ["required field is missing"],
        1,
        id="missing id",
    ),
    pytest.param(
        VALID.replace("expected_exit: product_closed\n", ""),
        "expected_exit",
        ["required field is missing"],
        1,
        id="missing expected_exit",
    ),
    pytest.param(
        VALID.replace("trials: 3", "trials: many"),
        "trials",
        ["valid integer", "'many'"],
        2,
        id="trials not a number",
    ),
    pytest.param(
        VALID.replace("trials: 3", "trials: 0"),
        "trials",
        ["greater than or equal to 1"],
        2,
        id="zero trials",
    ),
    pytest.param(
        VALID.replace("id: s-ok", "id: 'has spaces'"),
        "id",
        ["should match pattern"],
        1,
        id="bad id",
    ),
    pytest.param(
        VALID.replace("present: true}", "present: true, equals: 1}"),
        "outcome[0]",
        ["needs exactly one of present, equals, matches"],
        5,
        id="two operators",
    ),
    pytest.param(
        VALID.replace("present: true}", "present: true, unordered: true}"),
        "outcome[0].unordered",
        ["unordered only applies to equals"],
        5,
        id="unordered misuse",
    ),
    pytest.param(
        VALID.replace("present: true}", "present: }"),
        "outcome[0].present",
        ["empty (null)"],
        5,
        id="null operator",
    ),
    pytest.param(
        VALID.replace("path: report.fault", "path: 'report..fault'"),
        "outcome[0].path",
        ["empty segment"],
        5,
        id="unreadable path",
    ),
    pytest.param(
        VALID.replace('    assertion: "The agent asked about the fault."\n', ""),
        "judges[0].assertion",
        ["needs a non-empty assertion"],
        7,
        id="llm judge without assertion",
    ),
    pytest.param(
        VALID + "  - id: j1\n    assertion: again\n",
        "judges",
        ["judge ids must be unique", "j1"],
        6,
        id="duplicate judge ids",
    ),
    pytest.param(
        VALID + "version: abc\n",
        "version",
        ["set from the content"],
        9,
        id="version written by hand",
    ),
    pytest.param(
        VALID.replace("trials: 3", "trials: 3\ntrials: 5"),
        FILE_LEVEL,
        ["invalid YAML", "duplicate key 'trials'", "line 2"],
        3,
        id="duplicate key",
    ),
    pytest.param(
        VALID.replace("{path: report.fault, present: true}", "{path: report.fault, present: true"),
        FILE_LEVEL,
        ["invalid YAML", "line 6"],
        6,
        id="yaml syntax error",
    ),
    pytest.param(
        "- just\n- a list\n",
        FILE_LEVEL,
        ["expected a mapping", "found a list"],
        1,
        id="not a mapping",
    ),
    pytest.param("# nothing here\n", FILE_LEVEL, ["the file is empty"], None, id="empty file"),
    pytest.param(
        WITH_USER_CHECKS.replace(
            '    assertion: "The user never answered as the assistant."\n', ""
        ),
        "user_checks[0].assertion",
        ["needs a non-empty assertion"],
        8,
        id="llm user check without assertion",
    ),
    pytest.param(
        WITH_USER_CHECKS.replace("id: no_code", "id: stayed_in_role"),
        "user_checks",
        ["user check ids must be unique", "stayed_in_role"],
        7,
        id="duplicate user check ids",
    ),
    pytest.param(
        WITH_USER_CHECKS.replace('"E-[0-9]+"', '"E-[0-9+"'),
        "user_checks[1].pattern",
        ["not a valid regular expression", "regex judge"],
        13,
        id="user check with a bad pattern",
    ),
    pytest.param(
        WITH_USER_CHECKS.replace("role: user", "role: robot"),
        "user_checks[1].role",
        ["'assistant', 'user'"],
        12,
        id="user check reading an unknown role",
    ),
    pytest.param(
        WITH_USER_CHECKS.replace("kind: regex", "kind: telepathy"),
        "user_checks[1].kind",
        ["unknown judge kind 'telepathy'"],
        11,
        id="user check of an unknown kind",
    ),
    pytest.param(
        WITH_USER_CHECKS.replace("role: user", "role: assistant"),
        "user_checks[1].role",
        ["reads only the simulated user's turns", "role must be 'user'", "not 'assistant'"],
        12,
        id="user check reading the assistant's turns",
    ),
    pytest.param(
        WITH_USER_CHECKS.replace("role: user", "role: any"),
        "user_checks[1].role",
        ["role must be 'user'", "not 'any'"],
        12,
        id="user check reading every role",
    ),
    pytest.param(
        WITH_USER_CHECKS.replace(
            '    kind: regex\n    role: user\n    pattern: "E-[0-9]+"\n    must_match: false\n',
            "    kind: repeated_question\n",
        ),
        "user_checks[1].kind",
        ["'repeated_question' reads the assistant's questions", "make it a judge"],
        11,
        id="repeated_question as a user check",
    ),
    pytest.param(
        VALID + "    gatting: false\n",
        "judges[0].gatting",
        ["unknown field 'gatting'; did you mean 'gating'?", "a judge of kind llm takes only"],
        9,
        id="llm judge with a misspelt field",
    ),
    pytest.param(
        VALID + "    modle: gpt-5\n",
        "judges[0].modle",
        ["unknown field 'modle'"],
        9,
        id="llm judge with a field it does not take",
    ),
    pytest.param(
        WITH_USER_CHECKS.replace(
            '    assertion: "The user never answered as the assistant."\n',
            '    assertion: "The user never answered as the assistant."\n    model: gpt-5\n',
        ),
        "user_checks[0].model",
        ["unknown field 'model'"],
        10,
        id="llm user check with a field it does not take",
    ),
    pytest.param(
        WITH_USER_CHECKS.replace(
            "  instructions: Ask where the shoes are.\n",
            "  script: [Where are my shoes]\n",
        ),
        "user_checks",
        ["a scripted user (user.script)", "user_checks are for a user a model plays"],
        7,
        id="user checks on a scripted user",
    ),
    pytest.param(
        WITH_USER_CHECKS.split("user_checks:")[0] + "user_checks: stayed_in_role\n",
        "user_checks",
        ["valid list"],
        7,
        id="user checks not a list",
    ),
    pytest.param(
        VALID + "---\nid: second\n",
        FILE_LEVEL,
        ["invalid YAML", "single document"],
        9,
        id="two documents",
    ),
]


@pytest.mark.parametrize(("text", "field", "fragments", "line"), ERROR_CASES)
def test_an_invalid_file_names_file_field_problem_and_line(
    tmp_path: Path, text: str, field: str, fragments: list[str], line: int | None
) -> None:
    path = write(tmp_path, "broken.yaml", text)
    result = validate_paths([path])
    error = only_error(result.errors)
    assert error.file == str(path)
    assert error.field == field
    for fragment in fragments:
        assert fragment in error.problem
    assert error.line == line
    assert not result.scenarios
    rendered = str(error)
    assert str(path) in rendered and field in rendered


def test_every_problem_of_every_file_is_collected(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", VALID.replace("trials: 3", "trials: x").replace("j1", "j 1"))
    write(tmp_path, "b.yaml", VALID.replace("id: s-ok", "id: s-b").replace("present:", "presnt:"))
    write(tmp_path, "c.yaml", VALID.replace("id: s-ok", "id: s-c"))
    result = validate_paths([tmp_path])
    found = {(Path(e.file).name, e.field) for e in result.errors}
    assert found == {
        ("a.yaml", "trials"),
        ("a.yaml", "judges[0].id"),
        ("b.yaml", "outcome[0].presnt"),
    }
    assert [s.id for s in result.scenarios] == ["s-c"]  # validated, yet the caller publishes none
    with pytest.raises(InvalidScenarios) as raised:
        load_scenarios(tmp_path)
    assert len(raised.value.errors) == len(result.errors)
    assert "a.yaml" in str(raised.value) and "b.yaml" in str(raised.value)


def test_duplicate_ids_across_files_name_both_files(tmp_path: Path) -> None:
    one = write(tmp_path, "one.yaml", VALID)
    two = write(tmp_path, "two.yml", VALID.replace("trials: 3", "trials: 4"))
    result = validate_paths([tmp_path])
    assert {(e.file, e.field) for e in result.errors} == {(str(one), "id"), (str(two), "id")}
    for error in result.errors:
        assert "duplicate scenario id 's-ok'" in error.problem
        other = two if error.file == str(one) else one
        assert str(other) in error.problem
        assert error.line == 1


def test_an_empty_directory_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a scenario")
    error = only_error(validate_paths([tmp_path]).errors)
    assert (error.file, error.field) == (str(tmp_path), FILE_LEVEL)
    assert "no *.yaml or *.yml files" in error.problem


def test_a_missing_path_is_an_error(tmp_path: Path) -> None:
    error = only_error(validate_paths([tmp_path / "nope"]).errors)
    assert error.file == str(tmp_path / "nope") and "no such file" in error.problem


def test_fewer_than_three_trials_is_accepted_with_a_warning(tmp_path: Path) -> None:
    path = write(tmp_path, "few.yaml", VALID.replace("trials: 3", "trials: 2"))
    result = load_scenarios(path)
    assert [s.trials for s in result.scenarios] == [2]
    assert len(result.warnings) == 1
    warning = result.warnings[0]
    assert (warning.file, warning.field, warning.line) == (str(path), "trials", 2)
    assert "below 3" in warning.problem


def test_dates_stay_text_so_they_can_equal_a_json_state(tmp_path: Path) -> None:
    text = VALID.replace("{path: report.fault, present: true}", "{path: day, equals: 2024-05-01}")
    scenario = load_scenarios(write(tmp_path, "d.yaml", text)).scenarios[0]
    assert scenario.outcome[0].equals == "2024-05-01"


def test_the_invalid_examples_name_file_field_and_problem() -> None:
    result = validate_paths([INVALID, EXAMPLES])
    rows = {(Path(e.file).name, e.field) for e in result.errors}
    assert rows == {
        ("bad-regex.yaml", "outcome[2].matches"),
        ("unknown-field.yaml", "outcome[1].equal"),
        ("unknown-field.yaml", "judge"),
    }
    assert len(result.scenarios) == 5  # the valid ones still validate; the caller publishes none


def test_user_checks_load_beside_the_judges_and_change_the_version(tmp_path: Path) -> None:
    path = write(tmp_path, "user.yaml", WITH_USER_CHECKS)
    result = validate_paths([path])
    assert result.errors == []
    [scenario] = result.scenarios
    checks = {c.id: c for c in scenario.user_checks}
    assert list(checks) == ["stayed_in_role", "no_code"]
    assert checks["stayed_in_role"].kind == "llm" and checks["stayed_in_role"].assertion
    assert checks["no_code"].kind == "regex"
    assert scenario.judges == []  # the agent's judges are apart
    (tmp_path / "plain").mkdir()
    without = write(tmp_path / "plain", "user.yaml", WITH_USER_CHECKS.split("user_checks:")[0])
    [plain] = validate_paths([without]).scenarios
    assert plain.version != scenario.version  # a user check is part of the content
