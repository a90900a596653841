"""The review queue as reviewers use it, in headless Chromium over the whole pipeline: a
reviewer signs in, works through the `uncalibrated` queue labelling 12 trials for one LLM
judge, and that judge turns from advisory to gating, in `passk calibrate --json` and in
the next trial's verdict; a second reviewer labels some of the same trials, and the
agreement page's kappa is the one computed here from their labels."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from services.calibration.store import CalibrationStore
from services.contract.settings import Settings
from services.contract.topics import Topic
from services.storage.store import Store
from tests.calibration_sets import scenario_yaml, send_trial, verdict_of
from tests.e2e.conftest import PROCESSORS, running_pipeline
from tests.review_browser import (
    CHROMEDRIVER,
    CHROMIUM,
    browser,
    by_testid,
    current_trial,
    review_app,
    sign_in,
    submit,
)
from tests.support import read_topic, wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        CHROMIUM is None or CHROMEDRIVER is None,
        reason="needs Debian's chromium and chromium-driver (.ci/run)",
    ),
]
RUN, SCENARIO, JUDGE = "review-run", "review-flow", "rv"
MIN_LABELLED = 12


def ok(result: Any) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return str(result.stdout)


def send_flagged(settings: Settings, trial_id: str, flagged: bool) -> None:
    said = f"Replaced the pump on {trial_id}." + (f" [[fail:{JUDGE}]]" if flagged else "")
    send_trial(settings, trial_id, SCENARIO, said, run_id=RUN)


def kappa(pairs: list[tuple[bool, bool]]) -> float:
    """Cohen's kappa, computed here from the two reviewers' labels."""
    n = len(pairs)
    agree = sum(a == b for a, b in pairs) / n
    first_pass = sum(a for a, _ in pairs) / n
    second_pass = sum(b for _, b in pairs) / n
    chance = first_pass * second_pass + (1 - first_pass) * (1 - second_pass)
    return (agree - chance) / (1 - chance)


def screenshot(driver: Any, tmp_path: Path, name: str) -> None:
    """Kept with the test's files; copied to PASSK_REVIEW_SCREENSHOTS (docs/img) if set."""
    path = tmp_path / name
    driver.save_screenshot(str(path))
    if os.environ.get("PASSK_REVIEW_SCREENSHOTS"):
        shutil.copy(path, Path(os.environ["PASSK_REVIEW_SCREENSHOTS"]) / name)


@pytest.fixture
def review_settings(settings: Settings) -> Settings:
    return settings.model_copy(
        update={"uncalibrated_judges": "advisory", "min_labelled": MIN_LABELLED}
    )


def calibrated(p: Any, suite: Path, folder: str) -> dict[str, Any]:
    """The judge's labelled set as production labels grew it, calibrated (not published)."""
    grown = suite / folder
    ok(p.passk("calibrate", "--export", str(grown)))
    out = json.loads(
        ok(
            p.passk(
                "calibrate",
                str(grown),
                "--json",
                "--no-publish",
                "--scenarios",
                str(suite / "scenarios"),
            )
        )
    )
    [row] = [j for j in out["judges"] if j["judge_id"] == JUDGE]
    return row


def test_reviewers_label_through_the_queue_and_the_judge_starts_gating(
    review_settings: Settings, tmp_path: Path
) -> None:
    settings = review_settings
    suite = tmp_path / "suite"
    scenario_yaml(suite / "scenarios", SCENARIO, {JUDGE: None})
    flagged = {f"r-{i:02d}": i % 3 == 0 for i in range(13)}
    with running_pipeline(
        settings, tmp_path, PROCESSORS, PASSK_MIN_LABELLED=str(MIN_LABELLED)
    ) as p:
        ok(p.passk("scenarios", "publish", str(suite / "scenarios")))
        for trial_id, flag in flagged.items():
            send_flagged(settings, trial_id, flag)
        before = verdict_of(settings, "r-00")  # flagged, but the judge is advisory
        assert before["outcome"] == "passed", before
        assert [(a["judge_id"], a["why"]) for a in before["advisory_judges"]] == [
            (JUDGE, "uncalibrated")
        ]
        store = Store(settings.database_url)
        wait_for(
            lambda: len(store.trials(RUN)) == 13 and len(store.judges_of(flagged)) == 13,
            timeout=180,
            interval=1.0,
            what="13 trials and their judge verdicts in the projection",
        )
        store.close()

        with (
            review_app(p.env, tmp_path / "logs" / "review.log", PASSK_REVIEW_OVERLAP="1") as base,
            browser() as driver,
        ):
            sign_in(driver, base, "ann", "ann-token-7f3a")
            assert by_testid(driver, "queue-count-uncalibrated").text == "13"
            by_testid(driver, "queue-uncalibrated").click()
            wait_for(
                lambda: "/queue/uncalibrated" in driver.current_url,
                timeout=30,
                what="the queue page",
            )
            by_testid(driver, "start").click()
            ann: dict[str, bool] = {}
            for n in range(12):
                wait_for(lambda: "/item/" in driver.current_url, timeout=30, what="an item page")
                trial_id = current_trial(driver)
                assert trial_id in flagged and trial_id not in ann, trial_id
                transcript = by_testid(driver, "transcript").text
                assert by_testid(driver, f"judge-{JUDGE}")  # its verdict and reason
                # the human reads the conversation: the assertion fails when it is flagged
                holds = f"[[fail:{JUDGE}]]" not in transcript
                assert holds is not flagged[trial_id]
                by_testid(driver, f"label-{JUDGE}-{'pass' if holds else 'fail'}").click()
                if n == 0:
                    by_testid(driver, f"note-{JUDGE}").send_keys("read the whole debrief")
                    screenshot(driver, tmp_path, "review-item.png")
                submit(driver, "submit-labels")
                ann[trial_id] = holds
                if n == 5:  # half-way: too few labels, still advisory
                    wait_for(
                        lambda: len(CalibrationStore(settings.database_url).items(JUDGE)) >= 6,
                        timeout=120,
                        interval=1.0,
                        what="6 labels in the store",
                    )
                    half = calibrated(p, suite, "grown-6")
                    assert (half["n"], half["gating"]) == (6, False), half
                    assert half["reason"] == f"too few labels: 6 < {MIN_LABELLED}"

            # every label on the topic, with the reviewer's name
            labels = [v for _, v, _ in read_topic(settings, Topic.LABELS, min_count=12)]
            assert {(v["trial_id"], v["passed"], v["labeller"]) for v in labels} == {
                (t, holds, "ann") for t, holds in ann.items()
            }
            assert sum(not holds for holds in ann.values()) >= 4  # failures among them

            def gating() -> dict[str, Any] | None:
                for _, v, _ in read_topic(settings, Topic.JUDGE_CALIBRATIONS):
                    if v["judge_id"] == JUDGE and v["n"] == 12 and v["gating"]:
                        return v
                return None

            running = wait_for(
                gating,
                timeout=180,
                interval=1.0,
                what="the judge's running calibration at 12 labels",
            )
            assert (running["precision"], running["source"]) == (1.0, "labels")
            full = calibrated(p, suite, "grown-12")
            assert (full["n"], full["precision"], full["gating"]) == (12, 1.0, True), full

            # the next trial's verdict: the judge now fails it
            send_flagged(settings, "r-after", True)
            after = verdict_of(settings, "r-after")
            assert after["outcome"] == "failed", after
            assert after["gating_judges"] == [JUDGE]
            assert [c["check"] for c in after["failed_checks"]] == [f"judge:{JUDGE}"]

            driver.get(f"{base}/agreement")
            assert by_testid(driver, f"gating-{JUDGE}").text == "yes"
            assert by_testid(driver, f"precision-{JUDGE}").text == "1.00"

            # a second reviewer on some of the same items: three flagged, three not
            driver.delete_all_cookies()
            sign_in(driver, base, "bob", "bob-token-91c2")
            chosen = [t for t in ann if not ann[t]][:3] + [t for t in ann if ann[t]][:3]
            bob: dict[str, bool] = {}
            for i, trial_id in enumerate(chosen):
                driver.get(f"{base}/item/{trial_id}")
                says = ann[trial_id] if i != 4 else not ann[trial_id]
                by_testid(driver, f"label-{JUDGE}-{'pass' if says else 'fail'}").click()
                submit(driver, "submit-labels")
                assert by_testid(driver, "saved")
                bob[trial_id] = says
            expected = kappa([(ann[t], bob[t]) for t in chosen])
            driver.get(f"{base}/agreement")
            cell = by_testid(driver, f"kappa-{JUDGE}")
            assert float(cell.get_attribute("data-value")) == pytest.approx(expected)
            assert cell.text == f"{expected:.2f}"

            # the newest label of each item counts (bob's where he labelled): the judge's
            # precision and recall over them, counted here (positive = a failure)
            newest = {**ann, **bob}
            flags = [not newest[t] for t in newest if flagged[t]]
            failures = [flagged[t] for t in newest if not newest[t]]
            precision, recall = sum(flags) / len(flags), sum(failures) / len(failures)
            assert recall < 1.0  # bob's one disagreement: a failure the judge missed

            def agreement_shows() -> bool:
                driver.get(f"{base}/agreement")
                shown = (by_testid(driver, f"{m}-{JUDGE}").text for m in ("precision", "recall"))
                return tuple(shown) == (f"{precision:.2f}", f"{recall:.2f}")

            wait_for(agreement_shows, timeout=120, interval=2.0, what="bob's labels counted")
            gates = "yes" if precision >= 0.8 else "no"
            assert by_testid(driver, f"gating-{JUDGE}").text == gates
            screenshot(driver, tmp_path, "review-agreement.png")
