"""The report page's opened trials in headless Chromium: hostile text in a transcript, a
judge's reason or a state value renders as text (no script runs, no handler fires), every
failed trial and one trial per scenario is opened in a <details>, and the flakiness
section's links open the trials they name."""

from __future__ import annotations

import re
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from schemas.events import CheckOutcome, Message
from services.storage.store import Store
from tests.integration.test_report_html import CHROMIUM, PASSK, chromium
from tests.unit.storage import factories as f

pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (.ci/run)"),
    pytest.mark.xdist_group(__name__),  # one worker renders the module's page once
]
RUN = "hostile-1"
# Each payload, if it ran, would mark the document; the test looks for the marks.
SCRIPT = "<script>document.documentElement.setAttribute('data-pwned','script')</script>"
HANDLER = "<img src=x onerror=\"document.documentElement.setAttribute('data-pwned','onerror')\">"
PAYLOAD = f"{SCRIPT} then {HANDLER}"


def seed(url: str) -> None:
    store = Store(url)
    for i, outcome in enumerate(("passed", "failed", "passed")):
        trial = f"h{i}"
        failed = (
            []
            if outcome == "passed"
            else [("judge:polite", f"rude {PAYLOAD}"), ("gate:state", "report.fault: absent")]
        )
        conv = f.conversation(trial, run_id=RUN, scenario_id="hostile", when=i)
        conv = conv.model_copy(
            update={
                "transcript": [
                    *conv.transcript,
                    Message(role="user", content=f"my answer: {PAYLOAD}"),
                ]
            }
        )
        store.apply(conv)
        state = f.gate(trial, "state", outcome == "passed", run_id=RUN, scenario_id="hostile")
        state = state.model_copy(
            update={
                "checks": [
                    CheckOutcome(
                        check="state:report.fault present",
                        passed=outcome == "passed",
                        reason=f"report.fault: {PAYLOAD}",
                        expected=True,
                        found=PAYLOAD,
                    )
                ]
            }
        )
        store.apply(state)
        judge = f.judge(
            trial,
            "polite",
            "failed" if outcome == "failed" else "passed",
            run_id=RUN,
            scenario_id="hostile",
        )
        store.apply(judge.model_copy(update={"reason": f"rude {PAYLOAD}"}))
        store.apply(
            f.verdict(trial, outcome, run_id=RUN, scenario_id="hostile", when=10 + i, failed=failed)
        )
    store.apply(f.conversation("q0", run_id=RUN, scenario_id="quiet"))
    store.apply(f.verdict("q0", "passed", run_id=RUN, scenario_id="quiet", when=20))
    store.close()


class Dom(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.root: dict[str, str | None] = {}
        self.details: list[dict[str, str | None]] = []
        self.links: list[str] = []
        self.scripts_in_trials = 0
        self.imgs = 0
        self.text: list[str] = []
        self.judge_cost: dict[str, str | None] = {}
        self.judge_cost_text: list[str] = []
        self._in_trials = 0
        self._in_cost = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "html":
            self.root = a
        if tag == "details":
            self.details.append(a)
            self._in_trials += 1
        if tag == "script" and self._in_trials:
            self.scripts_in_trials += 1
        if tag == "img":
            self.imgs += 1
        if tag == "ul" and a.get("id") == "judge-cost":
            self.judge_cost, self._in_cost = a, True
        if tag == "a" and "trial-link" in (a.get("class") or ""):
            self.links.append(a.get("href") or "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "ul":
            self._in_cost = False
        if tag == "details":
            self._in_trials -= 1

    def handle_data(self, data: str) -> None:
        if self._in_cost:
            self.judge_cost_text.append(data)
        if self._in_trials:
            self.text.append(data)


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("trial-view")
    url = f"sqlite:///{tmp / 'projection.db'}"
    seed(url)
    out = tmp / "report.html"
    done = subprocess.run(
        [PASSK, "report", "--run-id", RUN, "--html", str(out), "--database-url", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return out


def test_hostile_text_renders_as_text_and_no_script_runs(page: Path, tmp_path: Path) -> None:
    dom = Dom()
    dom.feed(chromium(tmp_path, "--dump-dom", page.as_uri()))
    assert "data-pwned" not in dom.root  # neither the <script> nor the onerror ran
    assert dom.imgs == 0 and dom.scripts_in_trials == 0  # no element was made of them
    shown = " ".join(dom.text)
    # The payloads are visible as the text they are: in the transcript, the judge's reason,
    # and the state value beside its expectation.
    assert shown.count(SCRIPT) >= 3 and shown.count(HANDLER) >= 3
    assert f"my answer: {PAYLOAD}" in shown and f"rude {PAYLOAD}" in shown
    # The run's judging is on the page too: three judge calls (one per hostile trial),
    # priced by nothing, so in tokens only.
    assert dom.judge_cost["data-calls"] == "3" and dom.judge_cost["data-skipped"] == "0"
    assert "no cost: set PASSK_JUDGE_PRICE_PER_MTOK_IN" in "".join(dom.judge_cost_text)


def test_failed_trials_and_one_per_scenario_open_and_flakiness_links_to_them(
    page: Path, tmp_path: Path
) -> None:
    dom = Dom()
    dom.feed(chromium(tmp_path, "--dump-dom", page.as_uri()))
    opened = {d["data-trial"]: d for d in dom.details}
    # h1 failed; h0 and q0 are their scenarios' first trials (a conversation each).
    assert set(opened) == {"h0", "h1", "q0"}
    assert opened["h1"]["data-outcome"] == "failed"
    assert all("open" not in d for d in dom.details)  # collapsed until asked
    # The flaky scenario "hostile" (1 of 3 failed) names its failing trial, linked.
    assert dom.links and all(link == f"#{opened['h1']['id']}" for link in dom.links)
    # Following the link opens that trial's <details>.
    target = dom.links[0]
    followed = Dom()
    followed.feed(chromium(tmp_path, "--dump-dom", page.as_uri() + target))
    states: dict[str, Any] = {d["data-trial"]: d for d in followed.details}
    assert "open" in states["h1"] and "open" not in states["h0"]
    assert re.fullmatch(r"#trial-[A-Za-z0-9_-]+", target)
