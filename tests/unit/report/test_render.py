from __future__ import annotations

from rich.console import Console

from services.report.domain import build_report, gate_decision
from services.report.render import print_gate, print_report
from services.sink.domain import trial_record
from tests.unit.sink import factories as f


def rendered(fn, value) -> str:  # type: ignore[no-untyped-def]
    console = Console(record=True, width=200)
    fn(value, console)
    return console.export_text()


def test_the_report_shows_figures_to_three_decimals_and_each_verdict() -> None:
    rows = [trial_record(f.verdict(f"s{i}", o, scenario_id="s", when=i))
            for i, o in enumerate(["passed"] * 4 + ["failed"])]
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
