"""The Grafana dashboard is code: the committed JSON must be exactly what the code makes."""

from __future__ import annotations

import json
import re

from services.monitoring.dashboard import OUT, PANEL_VARIABLES, build, queries, render


def test_the_committed_dashboard_is_what_the_code_generates() -> None:
    assert OUT.read_text(encoding="utf-8") == render(), (
        "infra/grafana/dashboards/passk.json is stale: run "
        "`.venv/bin/python -m services.monitoring.dashboard` and commit it"
    )


def test_every_panel_queries_prometheus_and_has_a_unique_id() -> None:
    board = build()
    panels = board["panels"]
    assert isinstance(panels, list) and len(panels) >= 12
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    for panel in panels:
        assert panel["targets"], panel["title"]
        assert panel["datasource"]["uid"] == "passk-prometheus"


def test_queries_outside_grafana_have_no_variables_left() -> None:
    runnable = queries(build())
    assert runnable
    for title, expr in runnable:
        assert "$" not in expr, (title, expr)
        assert re.search(r"\bpassk_[a-z_]+", expr), (title, expr)
    assert set(PANEL_VARIABLES) == {"$__rate_interval", "$scenario"}


def test_the_pass_hat_k_panel_draws_the_credible_band() -> None:
    (panel,) = [p for p in build()["panels"] if p["title"].startswith("pass^k")]
    legends = {t["legendFormat"] for t in panel["targets"]}
    assert {"pass^k", "upper", "lower"} <= legends
    overrides = json.dumps(panel["fieldConfig"]["overrides"])
    assert '"custom.fillBelowTo", "value": "lower"' in overrides
