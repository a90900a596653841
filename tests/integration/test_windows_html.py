"""Reliability over time, opened in headless Chromium (Debian's `chromium`): the figures the
`passk windows --html` page renders equal `passk windows --json`, the pictures are drawn
with no network (the alert windows marked where JSON says the alert condition held), a
run's report page carries the same section for its scenarios, and a screenshot is kept.
With PASSK_SCREENSHOT_DIR set, the screenshot is also written there (docs/img/)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from datetime import datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from services.storage.store import Store
from tests.integration.test_report_html import CHROMIUM, PASSK, chromium
from tests.unit.storage import factories as f

pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (.ci/run)"),
    pytest.mark.xdist_group(__name__),  # one worker renders the module's page once
]
DEGRADING, OUTAGE, STEADY = "debrief-billable-repair", "debrief-quick-question", "refund"
HOURS = 8


class Windows(HTMLParser):
    """What the page shows: each window row's `data-figure` cells, the plots drawn, and
    the points plotly drew."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, Any]] = []
        self.sections: list[tuple[str, str]] = []
        self.plots = 0
        self.points = 0
        self.external: list[str] = []
        self._row: dict[str, Any] | None = None
        self._cell: tuple[str, list[str]] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        for name in ("src", "href"):
            if tag != "a" and (a.get(name) or "").startswith(("http:", "https:", "//")):
                self.external.append(f"<{tag} {name}={a[name]}>")
        if tag == "div" and "over-time" in classes:
            self.sections.append((a["data-scenario"] or "", a["data-window"] or ""))
        elif tag == "tr" and "data-window-start" in a:
            self._row = {"attrs": a, "cells": {}}
            self.rows.append(self._row)
        elif tag == "td" and "data-figure" in a and self._row is not None:
            self._cell = (a["data-figure"] or "", [])
        elif tag == "svg" and "main-svg" in classes:
            self.plots += 1
        elif tag == "path" and "point" in classes:
            self.points += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell and self._row is not None:
            name, text = self._cell
            self._row["cells"][name] = "".join(text).strip()
            self._cell = None
        if tag == "tr":
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._cell:
            self._cell[1].append(data)


def seed(url: str) -> None:
    """Eight hours: the degrading scenario drops in its last hour; another has a judge
    outage (9 of 12 trials could not be judged) in its fifth; a third stays steady. Every
    window is published several times, as the aggregate does while trials arrive."""
    store = Store(url)
    events = []
    for h in range(HOURS):
        start = f.T0 + timedelta(hours=h)
        for seq in (1, 2):
            events.append(
                f.window(
                    seq,
                    passed=12 if h < HOURS - 1 else 3,
                    failed=0 if h < HOURS - 1 else 9,
                    start=start,
                    scenario=DEGRADING,
                )
            )
            events.append(
                f.window(
                    seq,
                    passed=3 if h == 4 else 11,
                    failed=0 if h == 4 else 1,
                    errors=9 if h == 4 else 0,
                    start=start,
                    scenario=OUTAGE,
                )
            )
            events.append(f.window(seq, passed=10 + seq, start=start, scenario=STEADY))
    store.apply_many(events)
    for i in range(3):  # a run of two of the scenarios, for the report page
        store.apply(f.verdict(f"t{i}", "passed", run_id="run-1", scenario_id=DEGRADING, when=i + 1))
        store.apply(f.verdict(f"u{i}", "passed", run_id="run-1", scenario_id=OUTAGE, when=i + 4))
    store.close()


def _passk(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PASSK, *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("windows-html")
    url = f"sqlite:///{tmp / 'projection.db'}"
    seed(url)
    page = tmp / "windows.html"
    done = _passk("windows", "--last", "6", "--json", "--html", str(page), "--database-url", url)
    assert done.returncode == 0, done.stderr
    report = tmp / "report.html"
    ran = _passk("report", "--run-id", "run-1", "--html", str(report), "--database-url", url)
    assert ran.returncode == 0, ran.stderr
    table = _passk("windows", "--last", "2", "--database-url", url)
    assert table.returncode == 0, table.stderr
    return {
        "page": page,
        "json": json.loads(done.stdout),
        "report": report,
        "table": table.stdout,
        "url": url,
    }


def _figure(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def test_the_windows_page_shows_the_figures_of_windows_json(
    pages: dict[str, Any], tmp_path: Path
) -> None:
    windows = pages["json"]["windows"]
    # the last 6 of each scenario, oldest first
    assert len(windows) == 3 * 6
    dom = Windows()
    dom.feed(chromium(tmp_path, "--dump-dom", pages["page"].as_uri()))
    assert dom.external == []
    assert dom.sections == [(DEGRADING, "1h"), (OUTAGE, "1h"), (STEADY, "1h")]
    shown = [(r["attrs"]["data-scenario"], r["attrs"]["data-window-start"]) for r in dom.rows]
    assert shown == [(w["scenario_id"], w["window_start"]) for w in windows]
    for row, w in zip(dom.rows, windows, strict=True):
        cells = row["cells"]
        assert [cells[n] for n in ("n", "passed", "failed", "errors")] == [
            str(w[n]) for n in ("n", "passed", "failed", "errors")
        ]
        assert cells["pass_hat_k"] == _figure(w["pass_hat_k"])
        assert cells["pass_at_k"] == _figure(w["pass_at_k"])
        assert cells["judged_pass_hat_k"] == _figure(w["judged_pass_hat_k"])
        assert cells["pass_hat_k_interval"] == (
            f"[{w['pass_hat_k_lower']:.3f}, {w['pass_hat_k_upper']:.3f}]"
        )
        assert row["attrs"]["data-alert"] == str(w["alert_condition"]).lower()
        assert cells["alert_condition"] == ("alert" if w["alert_condition"] else "")
    # The figures themselves: the newest record of each window (seq 2), not the first.
    steady = [w for w in windows if w["scenario_id"] == STEADY]
    assert {w["passed"] for w in steady} == {12}
    # The alert condition held in the degrading scenario's last window only; the judge
    # outage's window is low in pass^k but not the agent's drop.
    alerts = [(w["scenario_id"], w["window_start"]) for w in windows if w["alert_condition"]]
    last = (f.T0 + timedelta(hours=HOURS - 1)).isoformat().replace("+00:00", "Z")
    assert alerts == [(DEGRADING, last)]
    outage = next(w for w in windows if w["scenario_id"] == OUTAGE and w["errors"])
    assert outage["pass_hat_k"] < 0.01 and outage["judged_pass_hat_k"] == 1.0
    # Drawn by the inlined plotly.js: one plot per scenario, a marker per window for
    # pass^k and for pass@k at least.
    assert dom.plots >= 3
    assert dom.points >= 2 * len(windows)


def _traces(page: Path) -> list[list[dict[str, Any]]]:
    """The traces of each plot, as the page hands them to Plotly.newPlot."""
    text = page.read_text(encoding="utf-8")
    found = re.findall(r'Plotly\.newPlot\(\s*"over-time-\d+",\s*(\[.*?\]),\s*\{', text, re.S)
    return [json.loads(t) for t in found]


def test_the_marked_windows_are_those_where_the_alert_condition_held(
    pages: dict[str, Any],
) -> None:
    windows = pages["json"]["windows"]
    plots = _traces(pages["page"])
    assert len(plots) == 3
    for traces, scenario in zip(plots, (DEGRADING, OUTAGE, STEADY), strict=True):
        mine = [w for w in windows if w["scenario_id"] == scenario]
        named = {t.get("name"): t for t in traces}
        hat = named["pass^k"]["y"]
        assert hat == [w["pass_hat_k"] for w in mine]
        assert named["pass@k"]["y"] == [w["pass_at_k"] for w in mine]
        band = named["pass^k 90% credible band"]["y"]
        assert band == [w["pass_hat_k_lower"] for w in mine]
        marked = named["alert condition held"].get("x") or []
        middles = [
            (datetime.fromisoformat(w["window_start"]) + timedelta(minutes=30)).strftime(
                "%Y-%m-%dT%H:%M:%S"
            )
            for w in mine
            if w["alert_condition"]
        ]
        assert [m[:19] for m in marked] == middles
        assert bool(marked) is (scenario == DEGRADING)


def test_the_table_and_the_run_report_page(pages: dict[str, Any], tmp_path: Path) -> None:
    table = pages["table"]
    assert "ALERT" in table and table.count(DEGRADING) == 2 and table.count(STEADY) == 2
    dom = Windows()
    dom.feed(chromium(tmp_path, "--dump-dom", pages["report"].as_uri()))
    # the run's two scenarios, not the third
    assert dom.sections == [(DEGRADING, "1h"), (OUTAGE, "1h")]
    assert len(dom.rows) == 2 * HOURS


def test_no_windows_yet_is_exit_3(tmp_path: Path) -> None:
    done = _passk("windows", "--database-url", f"sqlite:///{tmp_path / 'empty.db'}")
    assert done.returncode == 3 and "no windows" in done.stderr


def test_a_screenshot_of_the_over_time_section(pages: dict[str, Any], tmp_path: Path) -> None:
    shot = tmp_path / "windows.png"
    chromium(
        tmp_path,
        f"--screenshot={shot}",
        "--window-size=1280,1120",
        "--hide-scrollbars",
        pages["page"].as_uri(),
    )
    assert shot.stat().st_size > 20_000  # a drawn page, not a blank one
    keep = os.environ.get("PASSK_SCREENSHOT_DIR")
    if keep:
        shutil.copy(shot, Path(keep) / "windows-over-time.png")
    print(f"screenshot: {shot}")
