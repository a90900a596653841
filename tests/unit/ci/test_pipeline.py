"""`passk ci`'s checks: the default run id, and the usage errors (exit 2) for invalid
scenarios and a bad target (before anything starts) and an unknown baseline (looked up
while a broker of its own boots, which is then stopped)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from services.ci.pipeline import default_run_id
from services.cli.main import app

ROOT = Path(__file__).resolve().parents[3]


def test_the_default_run_id_is_ci_and_the_utc_time() -> None:
    assert default_run_id(datetime(2026, 12, 6, 3, 4, 5, tzinfo=UTC)) == "ci-20261206T030405Z"


STACK: list[str] = []


@contextmanager
def recorded_stack(
    settings: object, *, say: object, meanwhile: Callable[[], None], **kwargs: object
) -> Iterator[None]:
    """What the real stack_for does around its caller: start, run `meanwhile` while the
    broker boots, always stop; here it only says so (and never lets the run go on)."""
    STACK.append("started")
    try:
        meanwhile()
        raise AssertionError("ci went on past a check")
        yield
    finally:
        STACK.append("stopped")


@pytest.fixture
def quiet(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """No broker: the stack is a recording stand-in."""
    from services.ci import pipeline
    from services.contract.settings import get_settings

    STACK.clear()
    monkeypatch.setattr(pipeline, "stack_for", recorded_stack)
    monkeypatch.setenv("PASSK_DATABASE_URL", f"sqlite:///{tmp_path / 'p.db'}")
    get_settings.cache_clear()
    yield tmp_path
    get_settings.cache_clear()


def _ci(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, ["ci", *args])


def test_invalid_scenarios_are_exit_2_before_anything_starts(quiet: Path) -> None:
    done = _ci(
        "--scenarios",
        str(ROOT / "examples" / "invalid"),
        "--target",
        str(ROOT / "examples" / "agent" / "target-http.yaml"),
    )
    assert done.exit_code == 2, done.output
    assert "nothing was run" in str(done.exception or "") + done.output
    assert STACK == []  # refused before anything started


def test_a_bad_target_is_exit_2_naming_it(quiet: Path) -> None:
    bad = quiet / "target.yaml"
    bad.write_text("agent: {kind: carrier-pigeon}\n")
    done = _ci("--scenarios", str(ROOT / "examples" / "scenarios"), "--target", str(bad))
    assert done.exit_code == 2
    assert "target.yaml" in str(done.exception or "") + done.output
    assert STACK == []


def test_an_unknown_baseline_is_exit_2_and_what_started_meanwhile_is_stopped(quiet: Path) -> None:
    done = _ci(
        "--scenarios",
        str(ROOT / "examples" / "scenarios"),
        "--target",
        str(ROOT / "examples" / "agent" / "target-http.yaml"),
        "--baseline",
        "nope",
    )
    assert done.exit_code == 2
    assert "--baseline 'nope'" in str(done.exception or "") + done.output
    # looked up while the broker boots, never past it: started, then stopped
    assert STACK == ["started", "stopped"]


A = ["--adaptive", "--budget", "40"]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--adaptive"], "--adaptive needs --budget"),
        (["--budget", "10"], "go with --adaptive"),
        (["--goal", "0.9"], "go with --adaptive"),
        (["--credibility", "0.95"], "--credibility given without --adaptive"),
        (A + ["--goal", "0"], "--goal must be a number between 0 and 1 exclusive (got 0.0)"),
        (A + ["--goal", "1"], "--goal must be a number between 0 and 1 exclusive (got 1.0)"),
        (A + ["--goal", "nan"], "--goal must be a number between 0 and 1 exclusive (got nan)"),
        # examples/scenarios: five scenarios, k = 3, 3, 3, 3, 5; each first gets its k
        (
            ["--adaptive", "--budget", "16"],
            "--budget 16 is below the 17 trials the 5 scenario(s) first get (the sum of "
            "their k: 3 + 3 + 3 + 3 + 5)",
        ),
        (
            ["--adaptive", "--budget", "20", "--trials", "4"],
            "--budget 20 is below the 21 trials the 5 scenario(s) first get (the sum of "
            "their max(--trials 4, k): 4 + 4 + 4 + 4 + 5)",
        ),
    ],
)
def test_adaptive_options_are_checked_before_anything_starts(
    quiet: Path, args: list[str], said: str
) -> None:
    done = _ci(
        "--scenarios",
        str(ROOT / "examples" / "scenarios"),
        "--target",
        str(ROOT / "examples" / "agent" / "target-http.yaml"),
        *args,
    )
    assert done.exit_code == 2, done.output
    assert said in " ".join(done.output.split())  # rich wraps long lines
    assert STACK == []  # nothing was started


# ------------------------------------------------------------------ --adaptive, end to end
# in-process: everything that would start a process or reach a broker is a fake; the
# options go from the command line to the adaptive player, and the decisions come back out
# of the run's final counts (the report the fake projection returns) into --json.

ADAPTIVE_SCENARIO = """\
id: {sid}
trials: 3
expected_exit: product_closed
user:
  script: ["hello"]
"""
# the final verdicts per scenario, as the (fake) projection reports them
FINAL = {
    "sure": ["passed"] * 20,
    "broken": ["failed"] * 3,
    "open": ["passed", "failed", "invalid", "passed", "passed", "failed", "passed"],
}


def _final_report(run: str):
    from services.report.domain import build_report
    from services.storage.records import trial_record
    from tests.unit.storage import factories as f

    return build_report(
        run,
        [
            trial_record(
                f.verdict(
                    f"{run}:{sid}:{i:03d}",
                    outcome,
                    run_id=run,
                    scenario_id=sid,
                    k=3,
                    when=i,
                    failed=[("user:in_role", "broke role")] if outcome == "invalid" else None,
                )
            )
            for sid, outcomes in FINAL.items()
            for i, outcome in enumerate(outcomes, 1)
        ],
    )


class _FakeStack:
    def __init__(self, settings: object) -> None:
        self.settings = settings
        self.timings: dict[str, float] = {}
        self.standin_url = self.standin = None
        self.own_broker = False
        self.started: list[object] = []
        self.reused = ["gate", "judge", "verdict", "sink", "aggregate"]

    def check(self) -> None:
        pass


def test_ci_adaptive_takes_the_adaptive_path_with_the_options_given(
    quiet: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from scipy.stats import beta

    import services.harness.play as play_module
    import services.report.load as load_module
    import services.report.wait as wait_module
    from services.ci import pipeline
    from services.grading.adaptive import Standing
    from services.harness.adaptive_run import AdaptiveOptions, AdaptiveResult
    from services.harness.domain import RunSummary

    scenarios = quiet / "scenarios"
    scenarios.mkdir()
    for sid in FINAL:
        (scenarios / f"{sid}.yaml").write_text(ADAPTIVE_SCENARIO.format(sid=sid))
    calls: dict[str, Any] = {}
    trials = sum(len(o) for o in FINAL.values())

    @contextmanager
    def fake_stack(settings: object, *, say: object, meanwhile: Callable[[], None], **kw: object):
        meanwhile()
        yield _FakeStack(settings)

    def play_adaptive(scenarios, target, run_id, settings, **kwargs):
        calls["adaptive"] = (sorted(s.id for s in scenarios), run_id, kwargs)
        options = kwargs["options"]
        # the loop's last look: stale counts (the final verdicts came after it)
        stale = [
            Standing(
                scenario_id=s.id, k=s.k, goal=options.goal, trials=0, n=0, passed=0, failed=0,
                errors=0, invalid=0, pass_hat_k=None, lower=0.0, upper=1.0,
                decision="undecided",
            )
            for s in scenarios
        ]  # fmt: skip
        return AdaptiveResult(
            run_id=run_id,
            budget=options.budget,
            credibility=options.credibility,
            standings=stale,
            trials_run=trials,
            added=trials,
            summary=RunSummary(planned=trials, run=trials, published=trials),
        )

    def fixed_play(*args: object, **kwargs: object) -> None:
        raise AssertionError("the fixed plan was played under --adaptive")

    def await_verdicts(url: str, run_id: str, total: int, **kwargs: object) -> dict[str, str]:
        calls["await"] = (run_id, total, kwargs["timeout"])
        return {f"t{i}": "passed" for i in range(total)}

    monkeypatch.setattr(pipeline, "stack_for", fake_stack)
    monkeypatch.setattr(pipeline, "_publish", lambda sc, stack, say: {s.id: "new" for s in sc})
    monkeypatch.setattr(pipeline, "start_workers", lambda *a, **kw: None)
    monkeypatch.setattr(pipeline, "_users", lambda *a, **kw: None)
    monkeypatch.setattr(play_module, "play_adaptive", play_adaptive)
    monkeypatch.setattr(play_module, "play", fixed_play)
    monkeypatch.setattr(wait_module, "await_verdicts", await_verdicts)
    monkeypatch.setattr(
        load_module, "load_report", lambda run, url, settings: (_final_report(run), [run], url)
    )
    comment = quiet / "comment.md"
    done = _ci(
        "--scenarios", str(scenarios),
        "--target", str(ROOT / "examples" / "agent" / "target-http.yaml"),
        "--run-id", "pr-9", "--trials", "4", "--concurrency", "3", "--agent-version", "a-1",
        "--timeout", "77", "--adaptive", "--budget", "40", "--goal", "0.5",
        "--credibility", "0.95", "--batch", "2", "--json", "--markdown", str(comment),
    )  # fmt: skip
    assert done.exit_code in (0, 1), done.output
    ids, run_id, kwargs = calls["adaptive"]
    assert (ids, run_id) == (sorted(FINAL), "pr-9")
    assert kwargs["options"] == AdaptiveOptions(
        budget=40, goal=0.5, credibility=0.95, batch=2, initial=4, verdict_timeout_s=77
    )
    assert (kwargs["concurrency"], kwargs["agent_version"]) == (3, "a-1")
    assert calls["await"] == ("pr-9", trials, 77)  # every trial of the run waited for
    data = json.loads(done.stdout)
    assert data["adaptive"]["budget"] == 40 and data["adaptive"]["credibility"] == 0.95
    # each decision from the final counts, at the run's credibility: computed here
    by = {s["scenario_id"]: s for s in data["scenarios"]}
    for sid, outcomes in FINAL.items():
        n, c = outcomes.count("passed") + outcomes.count("failed"), outcomes.count("passed")
        lower, upper = (float(beta.ppf(q, c + 1, n - c + 1)) ** 3 for q in (0.025, 0.975))
        want = "above" if lower > 0.5 else "below" if upper < 0.5 else "undecided"
        assert (by[sid]["decision"], by[sid]["invalid"]) == (want, outcomes.count("invalid"))
        assert (by[sid]["lower"], by[sid]["upper"]) == pytest.approx((lower, upper))
    # one of each: the loop's stale standings (all undecided) were not what came out
    assert sorted(s["decision"] for s in data["scenarios"]) == ["above", "below", "undecided"]
    assert "Adaptive: " in comment.read_text()
