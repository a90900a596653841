"""The GitHub Action's shell steps (infra/ci/action.sh), run here with a stand-in `passk`
and a stand-in `gh` on PATH: the arguments passk ci gets from the inputs, the exit code
handed on while the step itself succeeds, and the sticky comment posted once, then
updated in place. And action.yml calls those steps."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
ACTION = ROOT / "infra" / "ci" / "action.sh"
MARKER = "<!-- passk-ci -->"

FAKE_PASSK = r"""#!/usr/bin/env bash
printf '%s\n' "$@" > "$CALLS/passk.args"
if [ "$WRITE" = 1 ]; then
  while [ $# -gt 0 ]; do
    case "$1" in
      --markdown) printf '<!-- passk-ci -->\n## ok\n' > "$2";;
      --junit|--html) : > "$2";;
    esac
    shift
  done
fi
exit "$CODE"
"""

FAKE_GH = r"""#!/usr/bin/env bash
printf '%s\n' "$*" >> "$CALLS/gh.calls"
for a in "$@"; do case "$a" in body=@*) cp "${a#body=@}" "$CALLS/posted.md";; esac; done
if [ "$2" = --paginate ]; then printf '%s' "$EXISTING"; fi
"""


def _stub(directory: Path, name: str, text: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(text)
    path.chmod(0o755)


def _run(
    tmp_path: Path, *args: str, **env: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    outputs = tmp_path / "github_output"
    outputs.touch()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("INPUT_", "GITHUB_"))}
    done = subprocess.run(
        ["bash", str(ACTION), *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={
            **base,
            "GITHUB_OUTPUT": str(outputs),
            "CALLS": str(tmp_path),
            "RUNNER_TEMP": str(tmp_path / "runner"),
            "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}",
            **env,
        },
    )
    pairs = dict(line.split("=", 1) for line in outputs.read_text().splitlines() if line)
    return done, pairs


def test_run_hands_the_inputs_to_passk_ci_and_its_exit_code_on(tmp_path: Path) -> None:
    _stub(tmp_path / "bin", "passk", FAKE_PASSK)
    done, out = _run(
        tmp_path,
        "run",
        PASSK_BIN=str(tmp_path / "bin" / "passk"),
        INPUT_SCENARIOS="scenarios/",
        INPUT_TARGET="target.yaml",
        INPUT_RUN_ID="pr-7",
        INPUT_TRIALS="5",
        INPUT_BASELINE="main-41",
        INPUT_FAIL_ON_REGRESSION="true",
        INPUT_ARGS="--concurrency 8",
        CODE="1",
        WRITE="1",
    )
    assert done.returncode == 0, done.stderr  # the gate's answer is the last step's
    args = (tmp_path / "passk.args").read_text().splitlines()
    folder = tmp_path / "runner" / "passk-ci"
    assert args == [
        "ci",
        "--scenarios",
        "scenarios/",
        "--target",
        "target.yaml",
        "--run-id",
        "pr-7",
        "--junit",
        f"{folder}/junit.xml",
        "--markdown",
        f"{folder}/comment.md",
        "--html",
        f"{folder}/report.html",
        "--trials",
        "5",
        "--baseline",
        "main-41",
        "--fail-on-regression",
        "--concurrency",
        "8",
    ]
    assert out["exit-code"] == "1" and out["run-id"] == "pr-7"
    assert out["markdown"] == f"{folder}/comment.md" and out["dir"] == str(folder)
    assert (folder / "comment.md").read_text().startswith(MARKER)


def test_run_defaults_and_a_run_that_never_reached_the_gate(tmp_path: Path) -> None:
    _stub(tmp_path / "bin", "passk", FAKE_PASSK)
    done, out = _run(
        tmp_path,
        "run",
        PASSK_BIN=str(tmp_path / "bin" / "passk"),
        INPUT_SCENARIOS="s",
        INPUT_TARGET="t.yaml",
        INPUT_ARGS="$(touch x) ;",
        CODE="4",
        WRITE="0",
    )
    assert done.returncode == 0, done.stderr
    args = (tmp_path / "passk.args").read_text().splitlines()
    assert re.fullmatch(r"ci-\d{8}T\d{6}Z", out["run-id"]) and out["run-id"] in args
    assert "--trials" not in args and "--baseline" not in args
    assert "--fail-on-regression" not in args
    assert "--adaptive" not in args and "--budget" not in args and "--goal" not in args
    assert args[-3:] == ["$(touch", "x)", ";"]  # words, never evaluated
    assert not (tmp_path / "x").exists()
    assert out["exit-code"] == "4"
    comment = Path(out["markdown"]).read_text()
    assert comment.startswith(MARKER) and "no answer (exit 4)" in comment


def test_a_budget_runs_ci_adaptively_with_its_goal(tmp_path: Path) -> None:
    _stub(tmp_path / "bin", "passk", FAKE_PASSK)
    done, out = _run(
        tmp_path,
        "run",
        PASSK_BIN=str(tmp_path / "bin" / "passk"),
        INPUT_SCENARIOS="s",
        INPUT_TARGET="t.yaml",
        INPUT_RUN_ID="pr-8",
        INPUT_BUDGET="60",
        INPUT_GOAL="0.8",
        INPUT_ARGS="--credibility 0.95",
        CODE="0",
        WRITE="1",
    )
    assert done.returncode == 0, done.stderr
    args = (tmp_path / "passk.args").read_text().splitlines()
    assert args[-7:] == ["--adaptive", "--budget", "60", "--goal", "0.8", "--credibility", "0.95"]
    assert out["exit-code"] == "0"


def test_run_needs_scenarios_and_target(tmp_path: Path) -> None:
    done, _ = _run(tmp_path, "run", PASSK_BIN="/bin/false", INPUT_TARGET="t.yaml")
    assert done.returncode != 0 and "scenarios" in done.stderr


def _event(tmp_path: Path, number: int | None) -> str:
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": number}} if number else {}))
    return str(event)


def test_comment_posts_once_then_updates_the_same_comment(tmp_path: Path) -> None:
    _stub(tmp_path / "bin", "gh", FAKE_GH)
    body = tmp_path / "comment.md"
    body.write_text(f"{MARKER}\n## passk ci `pr-7`: ❌ FAIL (exit 1)\n")
    common = {"GITHUB_REPOSITORY": "acme/agent", "GITHUB_EVENT_PATH": _event(tmp_path, 12)}
    first, _ = _run(tmp_path, "comment", str(body), EXISTING="", **common)
    assert first.returncode == 0, first.stderr
    calls = (tmp_path / "gh.calls").read_text().splitlines()
    assert calls[0].startswith("api --paginate repos/acme/agent/issues/12/comments --jq")
    assert MARKER in calls[0]  # found by its marker
    assert calls[1] == f"api --method POST repos/acme/agent/issues/12/comments -F body=@{body}"
    assert (tmp_path / "posted.md").read_text() == body.read_text()
    (tmp_path / "gh.calls").unlink()
    again, _ = _run(tmp_path, "comment", str(body), EXISTING="9876\n", **common)
    assert again.returncode == 0, again.stderr
    calls = (tmp_path / "gh.calls").read_text().splitlines()
    assert calls[1] == f"api --method PATCH repos/acme/agent/issues/comments/9876 -F body=@{body}"
    assert len(calls) == 2 and "updated comment 9876 on #12" in again.stdout


def test_no_comment_outside_a_pull_request(tmp_path: Path) -> None:
    _stub(tmp_path / "bin", "gh", FAKE_GH)
    body = tmp_path / "comment.md"
    body.write_text(MARKER)
    done, _ = _run(
        tmp_path,
        "comment",
        str(body),
        GITHUB_REPOSITORY="acme/agent",
        GITHUB_EVENT_PATH=_event(tmp_path, None),
    )
    assert done.returncode == 0 and "not a pull request" in done.stdout
    assert not (tmp_path / "gh.calls").exists()


def test_fetch_only_fills_the_cache_and_starts_nothing(tmp_path: Path) -> None:
    version = re.search(
        r"<kafka.version>(.*)</kafka.version>", (ROOT / "infra" / "kafka" / "pom.xml").read_text()
    ).group(1)  # type: ignore[union-attr]
    cached = tmp_path / "cache" / f"kafka-{version}"
    cached.mkdir(parents=True)
    (cached / ".complete").touch()  # as a restored actions/cache leaves it
    done = subprocess.run(
        ["bash", str(ROOT / "infra" / "kafka" / "kafka-up.sh"), "--fetch-only"],
        env={
            **os.environ,
            "PASSK_CACHE_DIR": str(tmp_path / "cache"),
            "PASSK_KAFKA_DIR": str(tmp_path / "kafka"),
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert f"Apache Kafka {version} in {cached}" in done.stdout
    assert not (tmp_path / "kafka").exists()  # nothing formatted, nothing started


def test_the_action_is_composite_and_runs_these_steps() -> None:
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    steps = action["runs"]["steps"]
    runs = [s["run"] for s in steps if "run" in s]
    for sub in ("install", "run", "comment"):
        assert any(f'infra/ci/action.sh" {sub}' in r for r in runs), sub
    uses = [s["uses"].split("@")[0] for s in steps if "uses" in s]
    assert uses == [
        "actions/setup-python",
        "actions/setup-java",
        "actions/cache",
        "actions/upload-artifact",
    ]
    cache = next(s for s in steps if s.get("uses", "").startswith("actions/cache"))
    assert cache["with"]["path"] == "~/.cache/passk"
    # every input the steps read is declared, every declared one is read
    text = (ROOT / "action.yml").read_text()
    used = set(re.findall(r"inputs\.([a-z-]+)", text))
    assert used == set(action["inputs"]), used ^ set(action["inputs"])
    run = next(s for s in steps if s.get("id") == "run")
    for name in (
        "scenarios",
        "target",
        "run-id",
        "trials",
        "baseline",
        "fail-on-regression",
        "budget",
        "goal",
        "args",
    ):
        assert run["env"][f"INPUT_{name.upper().replace('-', '_')}"] == f"${{{{ inputs.{name} }}}}"
