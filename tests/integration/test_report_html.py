"""`passk report --html` opened in headless Chromium (Debian's `chromium`): the figures the
page renders equal `passk report --json`, the charts are drawn without any network, the
failed-checks filter works, and a screenshot is kept under the test's temp dir."""

from __future__ import annotations

import json
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from schemas.events import TrialMetrics
from services.storage.store import Store
from tests.support import ROOT
from tests.unit.storage import factories as f

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (.ci/run)"),
    pytest.mark.xdist_group(__name__),  # one worker renders the module's page once
]
PASSK = str(ROOT / ".venv/bin/passk")
RUN = "build-42"


class Figures(HTMLParser):
    """Collects what the page shows: each `data-figure` cell's text by its row's key,
    which rows are hidden, and how many plotly bars were drawn."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: dict[tuple[str, str, str], str] = {}  # (table, row key, figure) -> text
        self.rows: dict[str, list[dict[str, Any]]] = {}  # table id -> row attrs
        self.bar_points = 0
        self.plots = 0
        self.flaky: dict[str, list[tuple[str, int, int]]] = {}
        self.ids: dict[str, str] = {}
        self._table = ""
        self._row: dict[str, Any] = {}
        self._capture: tuple[str, list[str]] | None = None
        self._id_capture: tuple[str, list[str]] | None = None
        self._flaky_scenario = ""
        self.external: list[str] = []  # resources the page would load from elsewhere

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        for name in ("src", "href", "data"):
            value = a.get(name) or ""
            if tag != "a" and value.startswith(("http:", "https:", "//")):
                self.external.append(f"<{tag} {name}={value}>")
        classes = (a.get("class") or "").split()
        if tag == "table":
            self._table = a.get("id") or ""
            self.rows.setdefault(self._table, [])
        elif tag == "tr" and self._table and ("data-scenario" in a or "data-judge" in a):
            self._row = a
            self.rows[self._table].append(a)
        elif tag == "td" and "data-figure" in a:
            self._capture = (a["data-figure"] or "", [])
        elif tag == "div" and "flaky" in classes:
            self._flaky_scenario = a.get("data-scenario") or ""
            self.flaky[self._flaky_scenario] = []
        elif tag == "li" and "data-check" in a and self._flaky_scenario:
            self.flaky[self._flaky_scenario].append(
                (a["data-check"] or "", int(a["data-failures"] or 0), int(a["data-trials"] or 0))
            )
        elif tag == "svg" and "main-svg" in classes:
            self.plots += 1
        elif tag == "g" and "point" in classes:
            self.bar_points += 1
        if a.get("id") in ("run-id", "deploy-gate", "previous-run", "without-state-gate"):
            self._id_capture = (a["id"] or "", [])

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._capture:
            name, text = self._capture
            key = self._row.get("data-trial") or self._row.get("data-scenario") or ""
            self.cells[(self._table, key, name)] = "".join(text).strip()
            self._capture = None
        if tag in ("span", "p", "b") and self._id_capture:
            name, text = self._id_capture
            self.ids[name] = "".join(text).strip()
            self._id_capture = None
        if tag == "table":
            self._table = ""

    def handle_data(self, data: str) -> None:
        if self._capture:
            self._capture[1].append(data)
        if self._id_capture:
            self._id_capture[1].append(data)


def chromium(tmp_path: Path, *args: str) -> str:
    profile = tmp_path / "chromium-profile"
    done = subprocess.run(
        [
            CHROMIUM or "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--no-first-run",
            f"--user-data-dir={profile}",
            # No network at view time: every host name fails to resolve.
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--virtual-time-budget=15000",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def seed_projection(url: str) -> None:
    """A previous run, then a run with a reliable scenario, a flaky one, a conversation-only
    one and an advisory judge."""
    store = Store(url)
    when = 0

    def verdict(trial: str, outcome: str, scenario: str, run: str = RUN, **kw: Any) -> None:
        nonlocal when
        when += 1
        store.apply(f.verdict(trial, outcome, run_id=run, scenario_id=scenario, when=when, **kw))

    for i in range(3):
        verdict(f"old-a{i}", "passed", "debrief-billable-repair", run="build-41")
        verdict(f"old-b{i}", "passed", "debrief-follow-up-required", run="build-41")
        verdict(f"old-c{i}", "passed", "debrief-quick-question", run="build-41")
    for i in range(5):
        verdict(
            f"a{i}",
            "passed",
            "debrief-billable-repair",
            exit_source="session",
            metrics=TrialMetrics(
                turns=8 + i, input_tokens=900, output_tokens=100 + i, duration_ms=200_000 + 1000 * i
            ),
        )
    flaky = [
        ("passed", []),
        ("failed", [("judge:captured_follow_up_details", "never asked about the part")]),
        ("passed", []),
        (
            "failed",
            [
                ("judge:captured_follow_up_details", "no return visit agreed"),
                ("gate:exit", "exit 'persona_exhausted' (recorded by the product)"),
            ],
        ),
        ("passed", []),
    ]
    for i, (outcome, failed) in enumerate(flaky):
        verdict(
            f"b{i}",
            outcome,
            "debrief-follow-up-required",
            failed=failed,
            exit_source="session" if i != 3 else "harness",
        )
    for i in range(3):
        verdict(
            f"c{i}",
            "passed",
            "debrief-quick-question",
            completion="conversation",
            exit_source="harness",
        )
        store.apply(
            f.judge(
                f"c{i}",
                "friendly_tone",
                "failed" if i == 0 else "passed",
                run_id=RUN,
                scenario_id="debrief-quick-question",
                gating=False,
            )
        )
    store.close()


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("report-html")
    url = f"sqlite:///{tmp / 'projection.db'}"
    seed_projection(url)
    out = tmp / "report.html"
    done = subprocess.run(
        [PASSK, "report", "--run-id", RUN, "--json", "--html", str(out), "--database-url", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert f"report page: {out}" in done.stderr
    return out, json.loads(done.stdout)


def test_the_page_shows_the_figures_of_report_json(
    page: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    path, data = page
    dom = Figures()
    dom.feed(chromium(tmp_path, "--dump-dom", path.as_uri()))
    assert dom.ids["run-id"] == RUN and dom.ids["deploy-gate"] == "FAIL"
    assert "build-41" in dom.ids["previous-run"] and data["previous_run"] == "build-41"
    assert [r["data-scenario"] for r in dom.rows["scenarios"]] == [
        s["scenario_id"] for s in data["scenarios"]
    ]
    for s in data["scenarios"]:
        sid = s["scenario_id"]

        def shown(name: str, sid: str = sid) -> str:
            return dom.cells[("scenarios", sid, name)]

        assert [shown(n) for n in ("k", "n", "passed", "failed", "errors")] == [
            str(s[n]) for n in ("k", "n", "passed", "failed", "errors")
        ]
        assert shown("pass_at_k") == f"{s['pass_at_k']:.3f}"
        assert shown("pass_hat_k") == f"{s['pass_hat_k']:.3f}"
        assert shown("pass_hat_k_interval") == (
            f"[{s['pass_hat_k_lower']:.3f}, {s['pass_hat_k_upper']:.3f}]"
        )
        assert shown("scenario_passed") == ("PASS" if s["scenario_passed"] else "FAIL")
        assert dom.cells[("costs", sid, "turns_median")] == f"{s['turns_median']:.1f}"
        assert dom.cells[("costs", sid, "tokens_median")] == f"{s['tokens_median']:.0f}"
    # Flakiness explained, as JSON says it: the check that flips most comes first.
    assert dom.flaky == {
        f["scenario_id"]: [(c["check"], c["failures"], c["trials"]) for c in f["checks"]]
        for f in data["flakiness"]
    }
    assert dom.flaky["debrief-follow-up-required"] == [
        ("judge:captured_follow_up_details", 2, 5),
        ("gate:exit", 1, 5),
    ]
    assert "debrief-quick-question" in dom.ids["without-state-gate"]
    assert [r["data-judge"] for r in dom.rows["advisory-judges"]] == ["friendly_tone"]
    # One row per failed check of each trial.
    failed = [(t["trial_id"], fc["check"]) for t in data["trials"] for fc in t["failed_checks"]]
    assert [(r["data-trial"], r["data-check"]) for r in dom.rows["failed-checks"]] == failed
    # The charts were drawn by the inlined plotly.js, with no network: two plots, and two
    # bars (pass@k, pass^k) per scenario in the first.
    assert dom.plots >= 2
    assert dom.bar_points >= 2 * len(data["scenarios"])


def test_the_page_needs_no_network(page: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    written, rendered = Figures(), Figures()
    written.feed(page[0].read_text())
    rendered.feed(chromium(tmp_path, "--dump-dom", page[0].as_uri()))
    assert written.external == [] and rendered.external == []
    assert "@import" not in page[0].read_text()


def test_the_filter_shows_only_the_chosen_scenario_and_check(
    page: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    path, data = page
    chosen = "#scenario=debrief-follow-up-required&check=gate%3Aexit"
    dom = Figures()
    dom.feed(chromium(tmp_path, "--dump-dom", path.as_uri() + chosen))
    visible = [
        (r["data-trial"], r["data-check"]) for r in dom.rows["failed-checks"] if "hidden" not in r
    ]
    expected = [
        (t["trial_id"], fc["check"])
        for t in data["trials"]
        for fc in t["failed_checks"]
        if t["scenario_id"] == "debrief-follow-up-required" and fc["check"] == "gate:exit"
    ]
    assert visible == expected == [("b3", "gate:exit")]
    assert len(dom.rows["failed-checks"]) == 3  # the others are hidden, not removed


def test_a_screenshot_of_the_page(page: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    chromium(
        tmp_path,
        f"--screenshot={shot}",
        "--window-size=1280,2600",
        "--hide-scrollbars",
        page[0].as_uri(),
    )
    assert shot.stat().st_size > 20_000  # a drawn page, not a blank one
    print(f"screenshot: {shot}")
