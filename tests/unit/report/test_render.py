from __future__ import annotations

from rich.console import Console

from services.report.domain import build_report, gate_decision
from services.report.render import print_gate, print_report
from services.storage.records import trial_record
from tests.unit.storage import factories as f


def rendered(fn, value) -> str:  # type: ignore[no-untyped-def]
    console = Console(record=True, width=200)
    fn(value, console)
    return console.export_text()


def test_the_report_shows_figures_to_three_decimals_and_each_verdict() -> None:
    rows = [
        trial_record(f.verdict(f"s{i}", o, scenario_id="s", when=i))
        for i, o in enumerate(["passed"] * 4 + ["failed"])
    ]
    rows.append(trial_record(f.verdict("t0", "passed", scenario_id="thin")))
    text = rendered(print_report, build_report("run-1", rows))
    assert "0.400" in text and "1.000" in text
    assert "✘" in text and "insufficient trials" in text
    assert "checks that fail most" in text and "gate:state" in text
    assert "17%" in text  # 1 failure in 6 trials


def test_the_gate_names_each_failing_scenario_and_why() -> None:
    rows = [trial_record(f.verdict(f"s{i}", "passed", scenario_id="ok", when=i)) for i in range(3)]
    rows.append(trial_record(f.verdict("b0", "failed", scenario_id="bad")))
    text = rendered(print_gate, gate_decision(build_report("run-1", rows)))
    assert "✔ ok" in text
    assert "✘ bad: insufficient trials" in text
    assert "FAILED" in text


def test_reasons_quoting_brackets_are_printed_as_written() -> None:
    from rich.console import Console

    from services.report.render import failing_checks_table

    class Check:
        check, failures, share = "judge:avoided_repetition", 1, 0.05
        example_reason = "[stand-in] the transcript contains the marker [[fail:avoided_repetition]]"

    class Report:
        failing_checks = [Check()]

    console = Console(width=200, record=True)
    console.print(failing_checks_table(Report()))  # type: ignore[arg-type]
    text = console.export_text()
    assert "[stand-in]" in text and "[[fail:avoided_repetition]]" in text


def test_the_report_explains_flakiness_exits_and_the_previous_run() -> None:
    rows = [
        trial_record(f.verdict("s0", "passed", scenario_id="s", when=0, exit_source="session")),
        trial_record(
            f.verdict(
                "s1",
                "failed",
                scenario_id="s",
                when=1,
                exit_source="session",
                failed=[("gate:exit", "exit 'persona_exhausted'")],
            )
        ),
        trial_record(
            f.verdict(
                "c0",
                "passed",
                scenario_id="chat",
                when=2,
                completion="conversation",
                exit_source="harness",
            )
        ),
    ]
    report = build_report("run-1", rows, previous_run="run-0")
    text = rendered(print_report, report)
    assert "flaky: s (1 of 2 passed): gate:exit fails 1 of 2" in text
    assert "graded without a state gate (completion: conversation): chat" in text
    assert "exits checked: 1 from the harness, 2 from the persisted session" in text
    assert "previous run of these scenarios: run-0" in text
    assert "scenario versions graded: chat@v1, s@v1" in text  # what each trial was run against
