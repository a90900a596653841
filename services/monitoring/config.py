"""Render the Prometheus and Alertmanager configuration for the workers `make up` starts.

The scrape targets come from the processor registry, as `passk supervise config` serves
them (each processor of services.contract.processors.PROCESSORS on PASSK_METRICS_PORT_BASE
+ its offset there), so a new worker is scraped without editing a file. The rules are
infra/prometheus/alerts.yml, copied whole except that PASSK_ALERT_FOR, when set, replaces every
`for:` (tests cannot wait five minutes).

`python -m services.monitoring.config render` writes prometheus.yml, alerts.yml and
alertmanager.yml into PASSK_MONITORING_DIR and prints the listen addresses for the shell;
`python -m services.monitoring.config wait URL...` waits until each answers /-/ready.
"""

from __future__ import annotations

import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from services.contract.processors import PROCESSORS, metrics_ports
from services.contract.settings import PROJECT_ROOT, Settings, get_settings

ALERTS = PROJECT_ROOT / "infra" / "prometheus" / "alerts.yml"


def listen_address(url: str) -> str:
    """host:port for a server's --web.listen-address, from the URL clients use."""
    parts = urlsplit(url)
    if not parts.hostname or not parts.port:
        raise ValueError(f"{url!r} needs a host and a port, e.g. http://127.0.0.1:9090")
    return f"{parts.hostname}:{parts.port}"


def prometheus_config(
    targets: dict[str, str], alertmanager: str, interval: str, rules: str = "alerts.yml"
) -> dict[str, Any]:
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [rules],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]},
        "scrape_configs": [
            {
                "job_name": f"passk-{worker}",
                # No `processor` target label: the workers' own series carry one (lag,
                # events), and a target label of that name would rename theirs.
                "static_configs": [{"targets": [target]}],
            }
            for worker, target in targets.items()
        ],
    }


def rules(source: Path = ALERTS, alert_for: str | None = None) -> dict[str, Any]:
    """The alert rules, with every `for:` replaced when alert_for is given."""
    loaded: dict[str, Any] = yaml.safe_load(source.read_text(encoding="utf-8"))
    if alert_for is not None:
        for group in loaded["groups"]:
            for rule in group["rules"]:
                if "alert" in rule:
                    rule["for"] = alert_for
    return loaded


def alertmanager_config(
    webhook_url: str | None, group_wait: str, group_interval: str
) -> dict[str, Any]:
    receiver: dict[str, Any] = {"name": "passk"}
    if webhook_url:
        receiver["webhook_configs"] = [{"url": webhook_url, "send_resolved": True}]
    return {
        "route": {
            "receiver": "passk",
            "group_by": ["alertname", "scenario"],
            "group_wait": group_wait,
            "group_interval": group_interval,
            "repeat_interval": "4h",
        },
        "receivers": [receiver],
    }


def render(settings: Settings, workers: tuple[str, ...]) -> dict[str, str]:
    """Write the three files into the monitoring dir; return the listen addresses."""
    out = settings.monitoring_dir
    out.mkdir(parents=True, exist_ok=True)
    ports = metrics_ports(workers, settings.metrics_port_base)
    prometheus = listen_address(settings.prometheus_url)
    alertmanager = listen_address(settings.alertmanager_url)
    files = {
        "prometheus.yml": prometheus_config(
            {w: f"127.0.0.1:{p}" for w, p in ports.items()},
            alertmanager,
            settings.scrape_interval,
        ),
        "alerts.yml": rules(alert_for=settings.alert_for),
        "alertmanager.yml": alertmanager_config(
            settings.alert_webhook_url, settings.alert_group_wait, settings.alert_group_interval
        ),
    }
    for name, content in files.items():
        (out / name).write_text(yaml.safe_dump(content, sort_keys=False), encoding="utf-8")
    return {"PROMETHEUS_LISTEN": prometheus, "ALERTMANAGER_LISTEN": alertmanager}


def wait_ready(urls: list[str], timeout: float = 60.0) -> list[str]:
    """The URLs whose /-/ready did not answer 200 within the timeout."""
    deadline = time.monotonic() + timeout
    pending = list(urls)
    while pending and time.monotonic() < deadline:
        for url in list(pending):
            try:
                with urllib.request.urlopen(f"{url.rstrip('/')}/-/ready", timeout=2) as answer:
                    if answer.status == 200:
                        pending.remove(url)
            except (urllib.error.URLError, OSError):
                pass
        if pending:
            time.sleep(0.5)
    return pending


def main(argv: list[str]) -> int:
    settings = get_settings()
    if argv[:1] == ["render"]:
        try:
            addresses = render(settings, tuple(PROCESSORS))
        except ValueError as exc:
            print(f"monitoring: {exc}", file=sys.stderr)
            return 2
        for key, value in addresses.items():
            print(f"{key}={value}")
        return 0
    if argv[:1] == ["wait"] and argv[1:]:
        late = wait_ready(argv[1:])
        for url in late:
            print(f"monitoring: {url} not ready", file=sys.stderr)
        return 1 if late else 0
    print("usage: python -m services.monitoring.config render | wait URL...", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
