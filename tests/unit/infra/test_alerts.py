"""Every alert rule is unit-tested with `promtool test rules`: one file per rule group in
tests/integration/infra/promtool/, named `<group>.test.yml`, run by
tests/integration/infra/test_alerts_promtool.py (promtool is Debian's `prometheus`, not
needed here). Adding a rule group means adding its file, and the checks below fail until
every alert of every group is shown firing and staying quiet by one of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
ALERTS = ROOT / "infra" / "prometheus" / "alerts.yml"
TESTS = ROOT / "tests" / "integration" / "infra" / "promtool"


def groups() -> list[dict[str, Any]]:
    return list(yaml.safe_load(ALERTS.read_text(encoding="utf-8"))["groups"])


def test_every_group_has_its_test_file_and_every_file_a_group() -> None:
    names = {g["name"] for g in groups()}
    files = {p.name.removesuffix(".test.yml") for p in TESTS.glob("*.test.yml")}
    assert names == files


@pytest.mark.parametrize("group", groups(), ids=lambda g: g["name"])
def test_every_alert_is_shown_firing_and_quiet(group: dict[str, Any]) -> None:
    spec = yaml.safe_load((TESTS / f"{group['name']}.test.yml").read_text(encoding="utf-8"))
    firing, quiet = set(), set()
    for case in spec["tests"]:
        for check in case.get("alert_rule_test") or []:
            (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    for rule in group["rules"]:
        if "alert" in rule:
            assert rule["alert"] in firing, f"no test shows {rule['alert']} firing"
            assert rule["alert"] in quiet, f"no test shows {rule['alert']} staying quiet"


def test_every_alert_says_what_and_how_bad() -> None:
    for group in groups():
        for rule in group["rules"]:
            if "alert" not in rule:
                continue
            assert rule["annotations"]["summary"] and rule["annotations"]["description"]
            assert rule["labels"]["severity"] in {"warning", "page"}, rule["alert"]
