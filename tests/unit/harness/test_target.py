from __future__ import annotations

from pathlib import Path

import pytest

from services.harness.target import (
    HttpAgent,
    HttpProbe,
    InvalidTarget,
    NoProbe,
    SqlProbe,
    load_target,
    parse_target,
)
from tests.support import ROOT


def test_the_reference_product_targets_load() -> None:
    http = load_target(ROOT / "examples" / "agent" / "target-http.yaml")
    assert isinstance(http.agent, HttpAgent) and isinstance(http.state, HttpProbe)
    sql = load_target(ROOT / "examples" / "agent" / "target-sql.yaml")
    assert isinstance(sql.state, SqlProbe) and sql.state.exit_column == "exit_reason"


def test_no_state_section_means_no_probe() -> None:
    target = parse_target({"agent": {"kind": "python", "callable": "pkg.mod:fn"}})
    assert isinstance(target.state, NoProbe)


@pytest.mark.parametrize(
    ("data", "field", "problem"),
    [
        ({"agent": {"kind": "http"}}, "agent.url", "required"),
        ({"agent": {"kind": "smtp", "url": "x"}}, "agent", "smtp"),
        ({"agent": {"kind": "http", "url": "ftp://x"}}, "agent.url", "pattern"),
        ({"agent": {"kind": "http", "url": "http://x", "timeout": 3}}, "agent.timeout", "unknown"),
        ({"agent": {"kind": "python", "callable": "nocolon"}}, "agent.callable", "module:function"),
        (
            {
                "agent": {"kind": "http", "url": "http://x"},
                "state": {"kind": "http", "url": "http://x/sessions"},
            },
            "state.url",
            "pattern",
        ),
        (
            {
                "agent": {"kind": "http", "url": "http://x"},
                "state": {"kind": "sql", "url": "sqlite:///f", "query": "SELECT 1"},
            },
            "state.query",
            ":session_id",
        ),
        (
            {
                "agent": {"kind": "http", "url": "http://x"},
                "state": {
                    "kind": "sql",
                    "url": "sqlite:///f",
                    "query": "DELETE FROM s WHERE id = :session_id",
                },
            },
            "state.query",
            "SELECT",
        ),
        ([1], "(file)", "mapping"),
    ],
)
def test_invalid_target_names_file_field_and_problem(
    data: object, field: str, problem: str
) -> None:
    with pytest.raises(InvalidTarget) as caught:
        parse_target(data, "t.yaml")
    assert caught.value.file == "t.yaml"
    assert caught.value.field == field, caught.value
    assert problem in caught.value.problem, caught.value


def test_unreadable_yaml_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "t.yaml"
    bad.write_text("agent: [unclosed\n")
    with pytest.raises(InvalidTarget) as caught:
        load_target(bad)
    assert caught.value.file == str(bad) and "YAML" in caught.value.problem


def test_variables_are_expanded_with_defaults(tmp_path: Path) -> None:
    file = tmp_path / "t.yaml"
    file.write_text("agent: {kind: http, url: 'http://127.0.0.1:${PORT:-8600}/chat'}\n")
    assert load_target(file, {}).agent.url == "http://127.0.0.1:8600/chat"  # type: ignore[union-attr]
    assert load_target(file, {"PORT": "9"}).agent.url == "http://127.0.0.1:9/chat"  # type: ignore[union-attr]
    file.write_text("agent: {kind: http, url: 'http://${HOST}/chat'}\n")
    with pytest.raises(InvalidTarget, match=r"\$\{HOST\} is not set"):
        load_target(file, {})
