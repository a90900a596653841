"""`passk calibrate` through the production judge path (client, prompt, cache) against the
stand-in over HTTP: labelled sets built to known matrices give exactly those matrices."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from services.contract.settings import Settings
from services.contract.topics import Topic
from tests.calibration_sets import items, scenario_yaml, write_set
from tests.e2e.conftest import free_port
from tests.support import ROOT, isolated_env, read_topic, running


def answering(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/v1/models", timeout=2):
            return True
    except OSError:
        return False


def passk(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.cli", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def standin_env(settings: Settings, tmp_path: Path):  # type: ignore[no-untyped-def]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = isolated_env(
        settings,
        OPENAI_BASE_URL=f"{url}/v1",
        OPENAI_API_KEY="stand-in",
        PASSK_JUDGE_MODEL="passk-standin",
        PASSK_JUDGE_MAX_RETRIES="0",
    )
    with running(
        ["judge-standin", "--port", str(port)],
        env,
        tmp_path / "standin.log",
        ready=lambda: answering(url),
    ):
        yield env


# (tp, fp, fn, tn, errors): the method's own example first (precision 11/13 ≈ 0.85,
# recall 11/12 ≈ 0.92 on 20 labels), then a judge below the bar, a perfect one too small
# to gate, one that never flags, and one with an error item (incomplete).
MATRICES = {
    "method_example": (11, 2, 1, 6, 0),
    "below_bar": (6, 4, 0, 5, 0),
    "too_few": (3, 0, 0, 3, 0),
    "never_flags": (0, 0, 4, 8, 0),
    "one_error": (6, 0, 1, 5, 1),
}


def test_known_matrices_come_out_exactly(
    standin_env: dict[str, str], settings: Settings, tmp_path: Path
) -> None:
    root = tmp_path / "suite"
    dims = {"method_example": "coverage", "below_bar": "coverage"}
    scenario_yaml(root / "scenarios", "calib", {j: dims.get(j) for j in MATRICES})
    for judge_id, (tp, fp, fn, tn, errors) in MATRICES.items():
        write_set(root / "calibration", judge_id, items(judge_id, tp, fp, fn, tn, errors))

    result = passk(standin_env, "calibrate", str(root / "calibration"), "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    out = json.loads(result.stdout)
    assert set(out) == {"judges"}
    rows = {r["judge_id"]: r for r in out["judges"]}
    assert set(rows) == set(MATRICES)
    for judge_id, (tp, fp, fn, tn, errors) in MATRICES.items():
        row = rows[judge_id]
        assert list(row) == [
            "judge_id",
            "judge_version",
            "tp",
            "fp",
            "fn",
            "tn",
            "errors",
            "n",
            "precision",
            "recall",
            "gating",
            "reason",
        ]
        assert (row["tp"], row["fp"], row["fn"], row["tn"], row["errors"]) == (
            tp,
            fp,
            fn,
            tn,
            errors,
        ), judge_id
        assert row["n"] == tp + fp + fn + tn + errors

    example = rows["method_example"]
    assert example["precision"] == pytest.approx(11 / 13) and round(example["precision"], 2) == 0.85
    assert example["recall"] == pytest.approx(11 / 12) and round(example["recall"], 2) == 0.92
    assert example["gating"] is True
    assert rows["below_bar"]["precision"] == pytest.approx(0.6)
    assert rows["below_bar"]["gating"] is False and "below the bar" in rows["below_bar"]["reason"]
    assert rows["too_few"]["gating"] is False and "too few labels" in rows["too_few"]["reason"]
    assert rows["never_flags"]["precision"] is None and rows["never_flags"]["recall"] == 0.0
    assert rows["one_error"]["gating"] is False and "incomplete" in rows["one_error"]["reason"]

    # published, keyed by judge id, and stored with its time: the history shows it
    published = read_topic(settings, Topic.JUDGE_CALIBRATIONS, min_count=len(MATRICES))
    assert {key.decode() for key, _, _ in published} == set(MATRICES)
    assert {v["judge_version"] for _, v, _ in published} == {
        r["judge_version"] for r in rows.values()
    }
    history = passk(standin_env, "calibrate", "--history", "method_example", "--json")
    assert history.returncode == 0, history.stderr
    assert [
        (h["tp"], h["fp"], h["fn"], h["tn"]) for h in json.loads(history.stdout)["history"]
    ] == [(11, 2, 1, 6)]

    # the table: matrix, status and why per judge, every miss with excerpt and reason,
    # and the per-dimension sum
    table = passk(standin_env, "calibrate", str(root / "calibration"), "--no-publish")
    assert table.returncode == 0, table.stderr
    text = table.stdout
    assert text.count("false positive method_example") == 2
    assert text.count("false negative method_example") == 1
    assert "[[fail:method_example]]" in text and "[stand-in]" in text
    assert "error one_error item error-0" in text
    assert "per dimension" in text and "coverage" in text


def test_a_new_judge_version_is_a_new_calibration(
    standin_env: dict[str, str], tmp_path: Path
) -> None:
    root = tmp_path / "suite"
    scenario_yaml(root / "scenarios", "calib", {"j": None})
    write_set(root / "calibration", "j", items("j", 5, 0, 0, 5))
    first = json.loads(
        passk(standin_env, "calibrate", str(root / "calibration"), "--json", "--no-publish").stdout
    )["judges"][0]
    (root / "scenarios" / "calib.yaml").write_text(
        (root / "scenarios" / "calib.yaml").read_text().replace("well.", "very well.")
    )
    second = json.loads(
        passk(standin_env, "calibrate", str(root / "calibration"), "--json", "--no-publish").stdout
    )["judges"][0]
    assert first["judge_version"] != second["judge_version"]
    model = dict(standin_env, PASSK_JUDGE_MODEL="another-model")
    third = json.loads(
        passk(model, "calibrate", str(root / "calibration"), "--json", "--no-publish").stdout
    )["judges"][0]
    assert third["judge_version"] not in (first["judge_version"], second["judge_version"])


def test_bad_sets_are_refused_with_file_and_line(
    standin_env: dict[str, str], tmp_path: Path
) -> None:
    folder = tmp_path / "calibration"
    folder.mkdir()
    (folder / "j.jsonl").write_text('{"id": "a", "label": "maybe", "transcript": []}\nnot json\n')
    result = passk(standin_env, "calibrate", str(folder), "--json")
    assert result.returncode == 2
    assert "j.jsonl:1" in result.stderr and "j.jsonl:2" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_label_with_no_broker_is_a_clear_error(settings: Settings) -> None:
    env = isolated_env(settings, KAFKA_BOOTSTRAP_SERVERS=f"127.0.0.1:{free_port()}")
    result = passk(env, "label", "t-1", "--judge", "j", "--fail")
    assert result.returncode == 4, result.stderr
    assert "no Kafka broker answers at" in result.stderr and "Traceback" not in result.stderr
    usage = passk(env, "label", "t-1", "--judge", "j")
    assert usage.returncode == 2 and "--pass or --fail" in usage.stderr
