"""The Docker files cannot run here; these checks keep them honest: they parse, name only
what exists, and agree with each other. That rules and panels name only metrics the workers
export is proven against the workers' live registries (tests/e2e/test_monitoring.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from services.contract.processors import WORKERS

ROOT = Path(__file__).resolve().parents[3]
INFRA = ROOT / "infra"
COMPOSE = INFRA / "docker-compose.yml"

# Where `make up` and the compose file serve each processor's /metrics.
METRICS_PORTS = {
    "gate": 9464,
    "verdict": 9465,
    "judge": 9466,
    "sink": 9467,
    "aggregate": 9468,
    "calibration": 9469,
}


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load(COMPOSE)


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def env_of(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def worker_of(service: dict[str, Any]) -> str | None:
    command = service.get("command") or []
    if isinstance(command, str):
        command = command.split()
    if command[:2] == ["passk", "worker"]:
        return command[2]
    return None


def test_every_service_has_an_image_or_a_build(services: dict[str, dict[str, Any]]) -> None:
    assert services
    for name, service in services.items():
        assert service.get("image") or service.get("build"), name


def test_builds_point_at_files_that_exist(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        build = service.get("build")
        if not build:
            continue
        context = (COMPOSE.parent / build["context"]).resolve()
        assert context == ROOT, name
        assert (context / build["dockerfile"]).is_file(), name


def test_every_mounted_host_path_exists(compose: dict[str, Any]) -> None:
    named = set(compose.get("volumes") or {})
    for name, service in compose["services"].items():
        for volume in service.get("volumes") or []:
            source = volume.split(":", 1)[0]
            if source.startswith((".", "/")):
                assert (COMPOSE.parent / source).exists(), f"{name}: {source}"
            else:
                assert source in named, f"{name}: volume {source} is not declared"


def test_ports_are_strings(services: dict[str, dict[str, Any]]) -> None:
    # YAML reads 29092:29092 as a base-60 number; quoted strings are what compose means.
    for name, service in services.items():
        for port in service.get("ports") or []:
            assert isinstance(port, str), f"{name}: {port!r}"


def test_depends_on_names_services(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        for other in service.get("depends_on") or {}:
            assert other in services, f"{name} depends on unknown {other}"


def test_workers_are_passk_workers_with_their_metrics_port(
    services: dict[str, dict[str, Any]],
) -> None:
    workers = {}
    for name, service in services.items():
        worker = worker_of(service)
        if worker is None:
            continue
        assert worker in WORKERS, f"{name} runs unknown worker {worker}"
        env = env_of(service)
        assert env["KAFKA_BOOTSTRAP_SERVERS"] == "kafka:9092", name
        assert env["PASSK_METRICS_PORT"] == str(METRICS_PORTS[worker]), name
        workers[worker] = name
    # Every processor the CLI can run is in the stack.
    assert set(workers) == set(WORKERS)


def test_every_passk_process_talks_to_the_compose_broker(
    services: dict[str, dict[str, Any]],
) -> None:
    for name, service in services.items():
        command = service.get("command") or []
        if command[:1] == ["passk"]:
            assert env_of(service)["KAFKA_BOOTSTRAP_SERVERS"] == "kafka:9092", name


def server_properties() -> dict[str, str]:
    """The template as kafka-up.sh fills it for one node."""
    one_node = {"@NODE_ID@": "1", "@REPLICATION@": "1", "@MIN_ISR@": "1"}
    text = (INFRA / "kafka" / "server.properties.in").read_text()
    for field, value in one_node.items():
        text = text.replace(field, value)
    props = {}
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            key, value = line.split("=", 1)
            props[key.strip()] = value.strip()
    return props


def test_kafka_is_configured_like_the_local_broker(services: dict[str, dict[str, Any]]) -> None:
    kafka = services["kafka"]
    assert kafka["image"] == "apache/kafka:4.1.1"
    env = env_of(kafka)
    # Addresses differ by network; everything else is the same broker.
    network = {
        "listeners",
        "advertised.listeners",
        "controller.quorum.voters",
        "log.dirs",
        "listener.security.protocol.map",
    }
    for key, value in server_properties().items():
        if key in network:
            continue
        var = "KAFKA_" + key.upper().replace(".", "_")
        assert env.get(var) == value, f"{var} should be {value!r} as in server.properties.in"
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert "PLAINTEXT://kafka:9092" in env["KAFKA_ADVERTISED_LISTENERS"]


def test_the_dockerfile_installs_passk_from_the_lock_file() -> None:
    text = (INFRA / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim$", text, re.M)
    assert "pip install -c requirements.lock ." in text
    for source in re.findall(r"^COPY (.+) \S+$", text, re.M):
        for path in source.split():
            assert (ROOT / path).exists(), path


# ------------------------------------------------------------------- Prometheus


def test_the_compose_prometheus_scrapes_each_processor_on_its_port() -> None:
    # The local config is rendered from the worker list (services/monitoring/config.py);
    # the compose one is committed, so it must name every worker on its port.
    prometheus = load(INFRA / "prometheus" / "prometheus.compose.yml")
    for rule_file in prometheus["rule_files"]:
        assert (INFRA / "prometheus" / rule_file).is_file()
    targets = {}
    for job in prometheus["scrape_configs"]:
        (static,) = job["static_configs"]
        (target,) = static["targets"]
        # a `processor` target label would rename the workers' own `processor` label
        assert "labels" not in static, job["job_name"]
        targets[job["job_name"].removeprefix("passk-")] = target
    assert targets == {p: f"{p}:{port}" for p, port in METRICS_PORTS.items()}


def test_the_compose_prometheus_alerts_through_the_compose_alertmanager(
    services: dict[str, dict[str, Any]],
) -> None:
    prometheus = load(INFRA / "prometheus" / "prometheus.compose.yml")
    (manager,) = prometheus["alerting"]["alertmanagers"]
    assert manager["static_configs"][0]["targets"] == ["alertmanager:9095"]
    alertmanager = services["alertmanager"]
    assert "--web.listen-address=:9095" in alertmanager["command"]
    config = next(c for c in alertmanager["command"] if c.startswith("--config.file="))
    mounted = dict(v.split(":")[:2] for v in alertmanager["volumes"])
    host = mounted["./prometheus"]
    assert config.startswith(f"--config.file={host}/")
    name = config.rsplit("/", 1)[1]
    route = load(INFRA / "prometheus" / name)
    assert route["route"]["receiver"] in {r["name"] for r in route["receivers"]}


def test_the_compose_prometheus_reads_the_compose_config(
    services: dict[str, dict[str, Any]],
) -> None:
    command = services["prometheus"]["command"]
    assert "--config.file=/etc/prometheus/prometheus.compose.yml" in command
    assert "./prometheus:/etc/prometheus:ro" in services["prometheus"]["volumes"]


# ---------------------------------------------------------------------- Grafana


def test_grafana_datasource_and_dashboard_agree() -> None:
    provisioning = INFRA / "grafana" / "provisioning"
    (datasource,) = load(provisioning / "datasources" / "prometheus.yml")["datasources"]
    assert datasource["type"] == "prometheus"
    dashboard = json.loads((INFRA / "grafana" / "dashboards" / "passk.json").read_text())
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == datasource["uid"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == datasource["uid"]
    titles = " | ".join(p["title"] for p in dashboard["panels"]).lower()
    for wanted in (
        "pass^k",
        "pass@k",
        "flakiness",
        "trials by outcome",
        "gate",
        "judge",
        "tokens",
        "turns",
        "duration",
        "verdict latency",
        "dead letters",
        "consumer lag",
    ):
        assert wanted in titles
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_grafana_loads_the_dashboards_from_where_compose_mounts_them(
    services: dict[str, dict[str, Any]],
) -> None:
    (provider,) = load(INFRA / "grafana" / "provisioning" / "dashboards" / "passk.yml")["providers"]
    mounts = dict(v.split(":")[:2] for v in services["grafana"]["volumes"])
    assert mounts["./grafana/dashboards"] == provider["options"]["path"]
    assert mounts["./grafana/provisioning"] == "/etc/grafana/provisioning"
    assert env_of(services["grafana"])["PASSK_PROMETHEUS_URL"] == "http://prometheus:9090"


def test_every_passk_variable_the_compose_file_sets_is_a_setting(
    services: dict[str, dict[str, Any]],
) -> None:
    """A variable nothing reads is a setting silently not applied (PASSK_METRICS_ADDR was)."""
    from services.contract.settings import Settings

    known = {field.alias for field in Settings.model_fields.values() if field.alias}
    set_here = {
        name
        for key, service in services.items()
        if key != "kafka"
        for name in env_of(service)
        if name.startswith(("PASSK_", "KAFKA_"))
    }
    assert set_here, "the compose file sets no passk variable at all"
    assert set_here <= known, f"not passk settings: {sorted(set_here - known)}"
