"""The review app against hostile content, in headless Chromium over the real broker:
`<script>`, `onerror=` and `</textarea>` in a transcript, a judge's reason and a state
value render as text and run nothing; a wrong token cannot sign in; a POST without a
session or with a wrong CSRF token is refused and publishes nothing, and the one label a
signed-in reviewer submits is published with their name."""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from schemas.events import CheckOutcome, Message
from services.contract.settings import Settings
from services.contract.topics import Topic
from services.storage.store import Store
from tests.review_browser import (
    CHROMEDRIVER,
    CHROMIUM,
    all_by_testid,
    browser,
    by_testid,
    review_app,
    session_cookie,
    sign_in,
    submit,
)
from tests.support import isolated_env, read_topic
from tests.unit.storage import factories as f

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        CHROMIUM is None or CHROMEDRIVER is None,
        reason="needs Debian's chromium and chromium-driver (.ci/run)",
    ),
]
RUN = "hostile-review"
# Each payload, if it ran, would mark the document; the test looks for the marks.
SCRIPT = "<script>document.documentElement.setAttribute('data-pwned','script')</script>"
HANDLER = "<img src=x onerror=\"document.documentElement.setAttribute('data-pwned','onerror')\">"
BREAKOUT = "</textarea><script>document.documentElement.setAttribute('data-pwned','ta')</script>"
PAYLOAD = f"{SCRIPT} then {HANDLER} and {BREAKOUT}"
SCENARIO = f"hostile {HANDLER}"  # a scenario id is a producer's string too


def seed(url: str) -> None:
    store = Store(url)
    conv = f.conversation("h1", run_id=RUN, scenario_id=SCENARIO)
    store.apply(
        conv.model_copy(
            update={
                "transcript": [
                    *conv.transcript,
                    Message(role="user", content=f"my answer: {PAYLOAD}"),
                ]
            }
        )
    )
    state = f.gate("h1", "state", False, run_id=RUN, scenario_id=SCENARIO)
    store.apply(
        state.model_copy(
            update={
                "checks": [
                    CheckOutcome(
                        check="state:report.fault present",
                        passed=False,
                        reason=f"report.fault: {PAYLOAD}",
                        expected=True,
                        found=PAYLOAD,
                    )
                ]
            }
        )
    )
    store.apply(f.gate("h1", "exit", True, run_id=RUN, scenario_id=SCENARIO))
    judge = f.judge("h1", "polite", "passed", run_id=RUN, scenario_id=SCENARIO)
    store.apply(judge.model_copy(update={"reason": f"polite {PAYLOAD}"}))
    store.apply(
        f.verdict(
            "h1",
            "failed",
            run_id=RUN,
            scenario_id=SCENARIO,
            failed=[("gate:state", f"report.fault: {PAYLOAD}")],
        )
    )
    store.close()


def post(url: str, form: dict[str, str], cookie: str | None = None) -> int:
    request = urllib.request.Request(url, data=urllib.parse.urlencode(form).encode(), method="POST")
    if cookie:
        request.add_header("Cookie", f"passk_review={cookie}")
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_hostile_text_runs_nothing_and_unsigned_or_forged_posts_publish_nothing(
    settings: Settings, tmp_path: Path
) -> None:
    from selenium.common.exceptions import NoAlertPresentException

    seed(settings.database_url)
    item = "/item/h1?queue=disagreements"
    with review_app(isolated_env(settings), tmp_path / "review.log") as base, browser() as driver:
        # a wrong token (or a right token under another name) cannot sign in
        for name, token in (("ann", "bob-token-91c2"), ("eve", "ann-token-7f3a")):
            sign_in(driver, base, name, token)
            assert by_testid(driver, "login-error").text == "Wrong name or token."
            driver.get(base + item)
            assert driver.current_url == f"{base}/login"

        sign_in(driver, base, "ann", "ann-token-7f3a")
        assert by_testid(driver, "reviewer").text == "ann"
        # the hostile trial is a disagreement: `polite` passed a trial whose state failed
        assert by_testid(driver, "queue-count-disagreements").text == "1"
        driver.get(base + item)
        html = driver.page_source
        assert (
            driver.execute_script("return document.documentElement.getAttribute('data-pwned')")
            is None
        )
        with pytest.raises(NoAlertPresentException):
            driver.switch_to.alert.text  # noqa: B018 - raises when no dialog is open
        assert not all_by_testid(driver, "transcript")[0].find_elements("css selector", "img")
        assert PAYLOAD in by_testid(driver, "transcript").text
        assert f"polite {PAYLOAD}" in by_testid(driver, "judge-polite").text
        state = by_testid(driver, "state").text
        assert f"report.fault: {PAYLOAD}" in state
        assert PAYLOAD.replace('"', '\\"') in state  # the found value, as JSON
        # the note's textarea was not broken out of: still empty, one per judge
        assert by_testid(driver, "note-polite").get_attribute("value") == ""
        assert html.count("<textarea") == 1
        assert not driver.find_elements("css selector", "main script")
        assert SCENARIO in driver.find_element("css selector", "main p.sub").text

        driver.get(f"{base}/queue/disagreements")  # the queue lists the scenario too
        assert SCENARIO in by_testid(driver, "queue-items").text
        assert not driver.find_elements("css selector", "main img")
        assert (
            driver.execute_script("return document.documentElement.getAttribute('data-pwned')")
            is None
        )

        # forged and unsigned posts are refused, and publish nothing
        form = {"label-polite": "fail", "queue": "disagreements"}
        target = f"{base}/item/h1"
        assert post(target, {**form, "csrf": "guess"}) == 403
        cookie = session_cookie(driver)
        assert post(target, {**form, "csrf": "guess"}, cookie) == 403
        assert post(target, form, cookie) == 403
        assert read_topic(settings, Topic.LABELS) == []

        # the reviewer's own submission is published, with their name and note
        driver.get(base + item)
        by_testid(driver, "label-polite-fail").click()
        by_testid(driver, "note-polite").send_keys("state never saved </textarea>")
        submit(driver, "submit-labels")
        assert driver.current_url == f"{base}/queue/disagreements"  # the queue, emptied
        assert by_testid(driver, "queue-empty")
        [(key, label, _)] = read_topic(settings, Topic.LABELS, min_count=1)
        assert key == b"h1"
        assert (
            label["trial_id"],
            label["judge_id"],
            label["passed"],
            label["labeller"],
            label["note"],
        ) == ("h1", "polite", False, "ann", "state never saved </textarea>")
    assert "ann-token" not in (tmp_path / "review.log").read_text()
