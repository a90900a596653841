"""The Prometheus and Alertmanager files `make up` renders."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from services.contract.settings import PROJECT_ROOT, Settings
from services.monitoring.config import ALERTS, listen_address, render, rules

INFRA = PROJECT_ROOT / "infra" / "prometheus"


def settings(tmp_path: Path, **env: str) -> Settings:
    return Settings(PASSK_MONITORING_DIR=str(tmp_path), **env)  # type: ignore[arg-type]


def test_each_worker_is_scraped_on_base_plus_its_registry_offset(tmp_path: Path) -> None:
    render(
        settings(tmp_path, PASSK_METRICS_PORT_BASE="15464", PASSK_SCRAPE_INTERVAL="2s"),
        ("gate", "verdict", "aggregate"),
    )
    config = yaml.safe_load((tmp_path / "prometheus.yml").read_text())
    jobs = {j["job_name"]: j["static_configs"][0] for j in config["scrape_configs"]}
    assert jobs == {
        "passk-gate": {"targets": ["127.0.0.1:15464"]},
        "passk-verdict": {"targets": ["127.0.0.1:15465"]},
        # its own port whichever others are rendered (not its place in this list)
        "passk-aggregate": {"targets": ["127.0.0.1:15468"]},
    }
    assert config["global"] == {"scrape_interval": "2s", "evaluation_interval": "2s"}
    assert config["rule_files"] == ["alerts.yml"]
    assert config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == [
        "127.0.0.1:9095"
    ]


def test_the_rules_are_copied_whole_unless_for_is_overridden(tmp_path: Path) -> None:
    original = yaml.safe_load(ALERTS.read_text())
    assert rules() == original
    short = rules(alert_for="3s")
    fors = [r.get("for") for g in short["groups"] for r in g["rules"] if "alert" in r]
    assert fors and set(fors) == {"3s"}
    exprs = [r["expr"] for g in short["groups"] for r in g["rules"]]
    assert exprs == [r["expr"] for g in original["groups"] for r in g["rules"]]


def test_alertmanager_delivers_to_the_webhook_when_one_is_set(tmp_path: Path) -> None:
    render(
        settings(
            tmp_path,
            PASSK_ALERT_WEBHOOK_URL="http://127.0.0.1:15401/hook",
            PASSK_ALERT_GROUP_WAIT="1s",
        ),
        ("gate",),
    )
    config = yaml.safe_load((tmp_path / "alertmanager.yml").read_text())
    assert config["route"]["receiver"] == "passk"
    assert config["route"]["group_wait"] == "1s"
    (receiver,) = config["receivers"]
    assert receiver["webhook_configs"][0]["url"] == "http://127.0.0.1:15401/hook"
    render(settings(tmp_path), ("gate",))
    (receiver,) = yaml.safe_load((tmp_path / "alertmanager.yml").read_text())["receivers"]
    assert "webhook_configs" not in receiver


def test_listen_addresses_come_from_the_urls() -> None:
    assert listen_address("http://127.0.0.1:15090") == "127.0.0.1:15090"
    with pytest.raises(ValueError, match="host and a port"):
        listen_address("http://127.0.0.1")
