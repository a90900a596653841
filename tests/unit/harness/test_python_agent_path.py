"""Where a `python` agent is imported from: the current directory first (the `passk`
script alone would not look there), and a module not found says where it looked."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from services.harness.adapters import PythonClient, import_path
from services.harness.domain import AgentError
from services.harness.target import PythonAgent


def test_an_agent_in_the_current_directory_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "support_agent_here.py").write_text(
        "def reply(request):\n    return {'reply': 'hi', 'exit_reason': 'product_closed'}\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    PythonClient(PythonAgent(kind="python", callable="support_agent_here:reply"))
    assert import_path()[0] == str(tmp_path)


def test_a_module_not_found_names_where_it_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(AgentError) as caught:
        PythonClient(PythonAgent(kind="python", callable="no_such_agent_module:reply"))
    assert f"looked in: {tmp_path}" in str(caught.value)
    assert "PYTHONPATH" in str(caught.value)
