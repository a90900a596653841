"""What `passk ci` writes for reviewers, from a result built of real reports: JUnit that
parses with attributes that add up, a Markdown comment with one row per scenario under
GitHub's limit (the longest parts cut first), the baseline marked only when confidently
worse, and the JSON object."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from services.ci.pipeline import CiResult
from services.ci.render import COLUMNS, MARKER, ci_json, junit_xml, markdown
from services.report.compare import compare_runs
from services.report.domain import build_report, gate_decision
from services.storage.records import trial_record
from tests.unit.storage import factories as f


def rows(
    run: str,
    scenario: str,
    passed: int,
    n: int,
    k: int = 3,
    failed: list[tuple[str, str]] | None = None,
):  # type: ignore[no-untyped-def]
    return [
        trial_record(
            f.verdict(
                f"{run}:{scenario}:{i:03d}",
                "passed" if i < passed else "failed",
                run_id=run,
                scenario_id=scenario,
                k=k,
                version=f"{scenario}-hash",
                when=i,
                failed=None if i < passed else failed,
            )
        )
        for i in range(n)
    ]


def result(run: str, *specs, base=None) -> CiResult:  # type: ignore[no-untyped-def]
    report = build_report(run, [r for spec in specs for r in rows(run, *spec)])
    decision = gate_decision(report)
    comparison = compare_runs(base, report) if base is not None else None
    return CiResult(
        run_id=run,
        report=report,
        decision=decision,
        exit_code=decision.exit_code,
        scenario_versions={s.scenario_id: f"{s.scenario_id}-hash" for s in report.scenarios},
        sources={s.scenario_id: f"scenarios/{s.scenario_id}.yaml" for s in report.scenarios},
        published={},
        comparison=comparison,
        regressions=comparison.regressions if comparison else [],
    )


FAILS = [("gate:state", "billability: path not found"), ("judge:polite", "was rude")]


def test_junit_parses_one_testcase_per_scenario_and_its_attributes_add_up() -> None:
    done = result("ci-1", ("steady", 5, 5), ("flaky", 3, 5, 3, FAILS), ("thin", 2, 2))
    root = ET.fromstring(junit_xml(done))
    assert root.tag == "testsuites"
    [suite] = root.findall("testsuite")
    assert suite.get("name") == "passk"
    cases = suite.findall("testcase")
    assert [(c.get("classname"), c.get("name")) for c in cases] == [
        ("passk.ci-1", "flaky"),
        ("passk.ci-1", "steady"),
        ("passk.ci-1", "thin"),
    ]
    failures = [c for c in cases if c.find("failure") is not None]
    errors = [c for c in cases if c.find("error") is not None]
    assert [c.get("name") for c in failures] == ["flaky"]
    assert [c.get("name") for c in errors] == ["thin"]  # 2 trials, k=3: insufficient
    for element in (root, suite):
        assert element.get("tests") == str(len(cases)) == "3"
        assert element.get("failures") == str(len(failures)) == "1"
        assert element.get("errors") == str(len(errors)) == "1"
    failure = failures[0].find("failure")
    assert failure is not None and failure.text is not None
    assert "gate:state x2" in (failure.get("message") or "")
    # each failed check named, with how many trials it failed and its first reason
    assert (
        "gate:state: failed 2 trial(s); first reason: billability: path not found" in failure.text
    )
    assert "judge:polite: failed 2 trial(s); first reason: was rude" in failure.text
    assert "flaky-hash" in (failures[0].findtext("system-out") or "")


def test_junit_of_a_passing_run_has_no_failure() -> None:
    root = ET.fromstring(junit_xml(result("ci-2", ("a", 3, 3), ("b", 4, 4))))
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("2", "0", "0")
    assert root.find(".//failure") is None and root.find(".//error") is None


def _table(text: str) -> list[list[str]]:
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    return [[c.strip() for c in line.strip("|").split(" | ")] for line in lines]


def test_markdown_has_the_columns_and_one_row_per_scenario() -> None:
    done = result("ci-3", ("steady", 5, 5), ("flaky", 3, 5, 3, FAILS))
    text = markdown(done)
    assert text.startswith(MARKER)
    assert "`ci-3`" in text.splitlines()[1] and "FAIL" in text.splitlines()[1]
    header, *body = _table(text)
    assert tuple(header) == COLUMNS
    assert [r[0] for r in body] == ["`flaky` @flaky-hash", "`steady` @steady-hash"]
    flaky = dict(zip(COLUMNS, body[0], strict=True))
    assert (flaky["verdict"], flaky["passed/n"]) == ("FAIL", "3/5")
    assert "`gate:state` ×2: billability: path not found" in flaky["failing checks"]
    # the figure leading the interval lies in it
    figure, bounds = flaky["90% interval"].split(" [")
    lower, upper = (float(x) for x in bounds.rstrip("]").split(", "))
    assert lower <= float(figure) <= upper
    assert dict(zip(COLUMNS, body[1], strict=True))["verdict"] == "PASS"


def test_the_baseline_is_marked_only_when_confidently_worse() -> None:
    base = build_report("base", rows("base", "falls", 10, 10) + rows("base", "wobbles", 10, 10))
    done = result("ci-4", ("falls", 2, 10, 3, FAILS), ("wobbles", 9, 10, 3, FAILS), base=base)
    body = {r[0].split()[0]: dict(zip(COLUMNS, r, strict=True)) for r in _table(markdown(done))[1:]}
    assert "**▼ worse" in body["`falls`"]["vs baseline"]
    assert "confidently" in body["`falls`"]["vs baseline"]
    assert "▼" not in body["`wobbles`"]["vs baseline"]
    assert "within noise" in body["`wobbles`"]["vs baseline"]
    assert "confidently worse: falls" in markdown(done)
    assert ci_json(done)["baseline"]["regressions"] == ["falls"]


def test_markdown_stays_under_the_limit_cutting_the_longest_parts_first() -> None:
    huge = [("gate:state", "x" * 200_000)]
    short = [("gate:exit", "closed early")]
    specs = [(f"s{i:03d}", 1, 3, 3, huge if i % 2 else short) for i in range(60)]
    text = markdown(result("ci-5", *specs))
    assert len(text) <= 65_536
    body = _table(text)[1:]
    assert len(body) == 60  # every scenario keeps its row
    cells = {r[0].split()[0]: r[-1] for r in body}
    assert cells["`s000`"] == "`gate:exit` ×2: closed early"  # short parts untouched
    assert cells["`s001`"].endswith("…") and len(cells["`s001`"]) < 2000
    cut = markdown(result("ci-6", *specs[:4]), limit=1200)  # cells cut, every row kept
    assert len(cut) <= 1200 and len(_table(cut)) == 5
    tiny = markdown(result("ci-6", *specs[:4]), limit=600)  # then rows go, said so
    assert len(tiny) <= 600 and "more scenario(s)" in tiny and len(_table(tiny)) < 5


def test_markdown_cells_never_break_the_table() -> None:
    text = markdown(result("ci-7", ("pipes", 0, 3, 3, [("gate:state", "a | b\nc")])))
    [row] = _table(text)[1:]
    assert len(row) == len(COLUMNS) and "a \\| b c" in row[-1]


def test_json_is_the_report_plus_the_gate_and_the_versions(tmp_path: Path) -> None:
    data = ci_json(result("ci-8", ("a", 3, 3), ("b", 0, 3)))
    assert data["run_id"] == "ci-8" and [s["scenario_id"] for s in data["scenarios"]] == ["a", "b"]
    assert data["gate"] == {"passed": False, "exit_code": 1, "message": data["gate"]["message"]}
    assert data["scenario_versions"] == {"a": "a-hash", "b": "b-hash"}
    assert "trials" in data and "baseline" not in data


# ------------------------------------------------------------------ an adaptive run


def _verdicts(run: str, scenario: str, outcomes: list[str]):  # type: ignore[no-untyped-def]
    return [
        trial_record(
            f.verdict(
                f"{run}:{scenario}:{i:03d}",
                outcome,
                run_id=run,
                scenario_id=scenario,
                k=3,
                version=f"{scenario}-hash",
                when=i,
                failed=[("user:in_role", "answered as the assistant")]
                if outcome == "invalid"
                else None,
            )
        )
        for i, outcome in enumerate(outcomes, 1)
    ]


# What the run did, per scenario: its outcomes in order, and the decision and interval the
# test says it reached (every scenario with n == k = 3 judged trials, so that a fixed
# plan reaching the same widths gives each 3 trials: 9 in all).
ADAPTIVE = {
    "broken": (["failed"] * 3, "below", 0.0, 0.146),
    "open": (["passed", "invalid", "passed", "invalid", "failed"], "undecided", 0.04, 0.79),
    "sure": (["passed"] * 3, "above", 0.51, 0.96),
}


def adaptive_result(run: str = "ci-9") -> CiResult:
    from services.ci.pipeline import CiAdaptive
    from services.grading.adaptive import Standing

    done = result(run)
    report = build_report(
        run, [r for sid, (o, *_) in ADAPTIVE.items() for r in _verdicts(run, sid, o)]
    )
    done.report, done.decision = report, gate_decision(report)
    done.exit_code = done.decision.exit_code
    done.scenario_versions = {sid: f"{sid}-hash" for sid in ADAPTIVE}
    standings = []
    for sid, (outcomes, decision, lower, upper) in ADAPTIVE.items():
        counts = {o: outcomes.count(o) for o in ("passed", "failed", "error", "invalid")}
        standings.append(
            Standing(
                scenario_id=sid, k=3, goal=0.5, trials=len(outcomes),
                n=counts["passed"] + counts["failed"], passed=counts["passed"],
                failed=counts["failed"], errors=counts["error"], invalid=counts["invalid"],
                pass_hat_k=None, lower=lower, upper=upper, decision=decision,  # type: ignore[arg-type]
            )
        )  # fmt: skip
    trials = sum(len(o) for o, *_ in ADAPTIVE.values())
    done.adaptive = CiAdaptive(budget=20, trials_run=trials, credibility=0.9, standings=standings)
    return done


def test_an_adaptive_comment_has_the_decision_and_invalid_columns_and_the_budget() -> None:
    text = markdown(adaptive_result())
    header, *body = _table(text)
    at = COLUMNS.index("passed/n") + 1
    assert tuple(header) == (*COLUMNS[:at], "invalid", "decision", *COLUMNS[at:])
    rows = {r[0].split()[0].strip("`"): dict(zip(header, r, strict=True)) for r in body}
    for sid, (outcomes, decision, *_) in ADAPTIVE.items():
        judged = [o for o in outcomes if o != "invalid"]
        assert rows[sid]["invalid"] == str(outcomes.count("invalid")), sid
        assert rows[sid]["decision"] == f"{decision} (goal 0.5)", sid
        assert rows[sid]["passed/n"] == f"{judged.count('passed')}/{len(judged)}", sid
    trials = sum(len(o) for o, *_ in ADAPTIVE.values())
    assert (
        f"Adaptive: {trials} trials of a budget of 20; decided at 90% credibility against "
        f"each scenario's goal; a fixed plan reaching the same interval widths would have "
        f"run 9 ({trials / 9:.0%} of it)."
    ) in text


def test_an_adaptive_runs_json_carries_each_decision_and_the_budget() -> None:
    data = ci_json(adaptive_result())
    trials = sum(len(o) for o, *_ in ADAPTIVE.values())
    assert data["adaptive"] == {
        "budget": 20,
        "trials_run": trials,
        "credibility": 0.9,
        "fixed_plan_trials": 9,
    }
    by = {s["scenario_id"]: s for s in data["scenarios"]}
    assert {
        sid: (s["decision"], s["goal"], s["lower"], s["upper"], s["invalid"])
        for sid, s in by.items()
    } == {
        sid: (decision, 0.5, lower, upper, outcomes.count("invalid"))
        for sid, (outcomes, decision, lower, upper) in ADAPTIVE.items()
    }


def test_an_adaptive_runs_junit_names_each_decision_and_its_invalid_trials() -> None:
    root = ET.fromstring(junit_xml(adaptive_result()))
    out = {c.get("name"): c.findtext("system-out") or "" for c in root.iter("testcase")}
    for sid, (outcomes, decision, *_) in ADAPTIVE.items():
        assert f"invalid={outcomes.count('invalid')}" in out[sid]
        assert f"decision={decision} (goal 0.5)" in out[sid]


def test_a_fixed_run_with_invalid_trials_shows_them_without_a_decision() -> None:
    done = adaptive_result()
    done.adaptive = None
    header, *body = _table(markdown(done))
    at = COLUMNS.index("passed/n") + 1
    assert tuple(header) == (*COLUMNS[:at], "invalid", *COLUMNS[at:])
    assert "Adaptive:" not in markdown(done)
    assert "adaptive" not in ci_json(done) and "decision" not in ci_json(done)["scenarios"][0]
    # and a run without any keeps the plain columns
    assert tuple(_table(markdown(result("ci-10", ("a", 3, 3))))[0]) == COLUMNS
