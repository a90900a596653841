"""What `passk ci` writes where reviewers look: JUnit XML for the CI system's test view, a
Markdown pull-request comment, and one JSON object. Pure: a CiResult in, text out.

JUnit: `<testsuites>` holding one `<testsuite name="passk">`, one `<testcase
classname="passk.<run_id>" name="<scenario_id>">` per scenario: a `<failure>` for a
scenario that did not pass (its text names each failed check, how many trials it failed
and its first reason), an `<error>` for one with fewer judged trials than k. `tests`,
`failures` and `errors` on both elements count exactly those.

Markdown: a heading naming the run and the gate's answer, then one row per scenario:
`scenario | verdict | pass^k | 90% interval | pass@k | passed/n | vs baseline | failing
checks`. The interval cell leads with the posterior median of pass^k, which lies in it
(the pass^k column is the unbiased estimate the gate reads). "vs baseline" is marked
only when `passk compare` calls the scenario confidently worse. An adaptive run
(`--adaptive`) adds, after passed/n, `invalid` and `decision` (above, below or undecided
against the goal, at the run's credibility) and a line with the trials run, the budget
and the fixed plan; a run with invalid trials adds the `invalid` column alone. At most
65,536 characters (GitHub's comment limit): the longest cells are cut first, then rows.

JSON: `passk report --json`'s object plus the gate, the versions, the baseline, what ci
ran on, and for an adaptive run `adaptive: {budget, trials_run, credibility,
fixed_plan_trials}` and, per scenario, `decision`, `goal`, `lower` and `upper` (the
interval the decision read, over judged trials at the run's credibility).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.ci.pipeline import CiResult
from services.report.compare import ScenarioChange
from services.report.domain import (
    CheckFailures,
    ScenarioReport,
    rank_failing_checks,
    report_json,
)
from services.report.render import interval

COMMENT_LIMIT = 65_536
# The sticky comment's marker: the action finds its own comment by it (infra/ci/comment.sh).
MARKER = "<!-- passk-ci -->"
ELLIPSIS = "…"
COLUMNS = (
    "scenario",
    "verdict",
    "pass^k",
    "90% interval",
    "pass@k",
    "passed/n",
    "vs baseline",
    "failing checks",
)
# After passed/n: `invalid` when a trial was (or the run was adaptive), `decision` when
# the run was adaptive.
INVALID, DECISION = "invalid", "decision"


def columns(result: CiResult) -> tuple[str, ...]:
    """The comment table's columns for this run."""
    extra = ((INVALID,) if _shows_invalid(result) else ()) + (
        (DECISION,) if result.adaptive is not None else ()
    )
    at = COLUMNS.index("passed/n") + 1
    return COLUMNS[:at] + extra + COLUMNS[at:]


def _shows_invalid(result: CiResult) -> bool:
    return result.adaptive is not None or any(s.invalid for s in result.report.scenarios)


def failing_checks(result: CiResult, scenario_id: str) -> list[CheckFailures]:
    return rank_failing_checks([t for t in result.report.trials if t.scenario_id == scenario_id])


def _figure(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def verdict(scenario: ScenarioReport) -> str:
    return "PASS" if scenario.scenario_passed else "FAIL"


def interval_of(scenario: ScenarioReport) -> str:
    from services.grading.estimators import pass_hat_k_median

    median = pass_hat_k_median(scenario.n, scenario.passed, scenario.k)
    return interval(median, scenario.pass_hat_k_lower, scenario.pass_hat_k_upper)


# ------------------------------------------------------------------------------ JUnit


def junit_xml(result: CiResult) -> str:
    suites = ET.Element("testsuites", name=f"passk ci {result.run_id}")
    suite = ET.SubElement(suites, "testsuite", name="passk")
    failures = errors = 0
    for s in result.report.scenarios:
        case = ET.SubElement(
            suite, "testcase", classname=f"passk.{result.run_id}", name=s.scenario_id
        )
        figures = (
            f"pass^k={_figure(s.pass_hat_k)} (90% interval "
            f"[{s.pass_hat_k_lower:.2f}, {s.pass_hat_k_upper:.2f}]), "
            f"pass@k={_figure(s.pass_at_k)}, {s.passed}/{s.n} passed, k={s.k}"
            + (f", invalid={s.invalid}" if _shows_invalid(result) else "")
            + _decision_words(result, s.scenario_id)
        )
        checks = failing_checks(result, s.scenario_id)
        if s.insufficient:
            errors += 1
            ET.SubElement(
                case,
                "error",
                message=f"insufficient trials: {s.n} of k={s.k} judged",
                type="insufficient_trials",
            ).text = figures
        elif not s.scenario_passed:
            failures += 1
            named = ", ".join(f"{c.check} x{c.failures}" for c in checks) or "no check named"
            failure = ET.SubElement(
                case, "failure", message=f"{figures}; failed: {named}", type="not_reliable"
            )
            failure.text = "\n".join(
                [figures]
                + [
                    f"{c.check}: failed {c.failures} trial(s); first reason: {c.example_reason}"
                    for c in checks
                ]
            )
        version = result.scenario_versions.get(s.scenario_id) or ", ".join(s.scenario_versions)
        ET.SubElement(case, "system-out").text = f"{figures}\nscenario version {version}" + (
            f" ({result.sources[s.scenario_id]})" if s.scenario_id in result.sources else ""
        )
    tests = str(len(result.report.scenarios))
    for element in (suites, suite):
        element.set("tests", tests)
        element.set("failures", str(failures))
        element.set("errors", str(errors))
    suite.set("skipped", "0")
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def _decision_words(result: CiResult, scenario_id: str) -> str:
    standing = result.adaptive.of(scenario_id) if result.adaptive else None
    if standing is None:
        return ""
    return f", decision={standing.decision} (goal {standing.goal:g})"


def decision_cell(result: CiResult, scenario_id: str) -> str:
    """above / below / undecided, and the goal it was decided against."""
    standing = result.adaptive.of(scenario_id) if result.adaptive else None
    if standing is None:
        return "—"
    return f"{standing.decision} (goal {standing.goal:g})"


# ------------------------------------------------------------------------------ Markdown


def _cell(text: str) -> str:
    """One table cell: no line breaks, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _cut(text: str, at: int) -> str:
    return text if len(text) <= at else text[: max(at - 1, 0)].rstrip() + ELLIPSIS


def baseline_cell(change: ScenarioChange | None) -> str:
    """Marked only when confidently worse; otherwise the move, said to be noise."""
    if change is None:
        return "—"
    if change.base is None:
        return "new"
    if change.regression:
        moved = f" {change.change:+.2f}" if change.change is not None else ""
        return f"**▼ worse{moved}** (confidently)"
    if change.change is None:
        return "—"
    return f"{change.change:+.2f} (within noise)"


def _checks_cell(checks: list[CheckFailures]) -> str:
    return "; ".join(f"`{c.check}` ×{c.failures}: {c.example_reason}" for c in checks)


def _comment_head(result: CiResult) -> list[str]:
    """The marker, the verdict heading, the gate's message, the baseline line and the
    table's header."""
    passed = result.exit_code == 0
    head = [
        MARKER,
        f"## passk ci `{result.run_id}`: {'✅ PASS' if passed else '❌ FAIL'} "
        f"(exit {result.exit_code})",
        "",
        _cell(result.decision.message),
    ]
    if result.comparison is not None:
        worse = result.regressions
        head.append("")
        head.append(
            f"Against baseline `{result.comparison.base_run}`: "
            + (
                f"**confidently worse: {', '.join(worse)}**"
                if worse
                else "no scenario confidently worse"
            )
        )
    if result.adaptive is not None:
        a = result.adaptive
        fixed = a.fixed_plan_trials
        share = f" ({a.trials_run / fixed:.0%} of it)" if fixed else ""
        head += [
            "",
            f"Adaptive: {a.trials_run} trials of a budget of {a.budget}; decided at "
            f"{a.credibility:.0%} credibility against each scenario's goal; a fixed plan "
            f"reaching the same interval widths would have run {fixed}{share}.",
        ]
    shown = columns(result)
    head += ["", "| " + " | ".join(shown) + " |", "|" + "---|" * len(shown)]
    return head


def _scenario_rows(result: CiResult) -> tuple[list[list[str]], list[list[str]]]:
    """Per scenario: every cell but the last two free-text ones (fixed), and
    [scenario-with-version, failing checks] (free, cut to fit later)."""
    changes = {c.scenario_id: c for c in result.comparison.scenarios} if result.comparison else {}
    fixed: list[list[str]] = []
    free: list[list[str]] = []
    for s in result.report.scenarios:
        version = result.scenario_versions.get(s.scenario_id) or ",".join(s.scenario_versions)
        name = f"`{s.scenario_id}` @{version[:12]}" if version else f"`{s.scenario_id}`"
        fixed.append(
            [
                verdict(s) if not s.insufficient else "FAIL (insufficient trials)",
                _figure(s.pass_hat_k),
                interval_of(s),
                _figure(s.pass_at_k),
                f"{s.passed}/{s.n}",
                *((str(s.invalid),) if _shows_invalid(result) else ()),
                *((decision_cell(result, s.scenario_id),) if result.adaptive else ()),
                baseline_cell(changes.get(s.scenario_id) if result.comparison else None),
            ]
        )
        free.append([name, _checks_cell(failing_checks(result, s.scenario_id))])
    return fixed, free


def _comment_foot(result: CiResult) -> list[str]:
    """What pass^k and the interval are, then the advisory notes folded away."""
    foot = [
        "",
        "pass^k: the unbiased estimate the gate reads; the interval: 90% credible "
        "(Beta posterior), led by its posterior median. Versions: the content hash "
        "of the scenario every trial ran.",
    ]
    notes = [_cell(line) for line in result.decision.advisory]
    if notes:
        foot += ["", "<details><summary>advisory (not counted)</summary>", ""]
        foot += [f"- {n}" for n in notes] + ["", "</details>"]
    return foot


@dataclass(frozen=True)
class _Comment:
    """The parts of the comment; `build` cuts free text to `cap` and keeps `rows` rows."""

    head: list[str]
    fixed: list[list[str]]
    free: list[list[str]]
    foot: list[str]

    def build(self, cap: int, rows: int) -> str:
        lines = list(self.head)
        for fixed_cells, (name, checks) in list(zip(self.fixed, self.free, strict=True))[:rows]:
            cells = [
                _cell(_cut(name, max(cap, 40))),
                *[_cell(c) for c in fixed_cells],
                _cell(_cut(checks, cap)),
            ]
            lines.append("| " + " | ".join(cells) + " |")
        if rows < len(self.fixed):
            lines.append(
                f"\n… and {len(self.fixed) - rows} more scenario(s): see the JUnit file "
                "and the report page"
            )
        tail = [_cut(line, cap) for line in self.foot]
        return "\n".join(lines + tail) + "\n"


def _fit(comment: _Comment, limit: int) -> str:
    """The comment whole when it fits in `limit`; else the longest parts cut first, then
    fewer rows, then the text cut."""
    free, foot = comment.free, comment.foot
    longest = max([len(c) for row in free for c in row] + [len(line) for line in foot] + [1])
    rows = len(comment.fixed)
    text = comment.build(longest, rows)
    if len(text) <= limit:
        return text
    # The longest parts first: the largest cap every cell can keep within the limit.
    low, high = 40, longest
    while low < high:
        mid = (low + high + 1) // 2
        if len(comment.build(mid, rows)) <= limit:
            low = mid
        else:
            high = mid - 1
    text = comment.build(low, rows)
    while len(text) > limit and rows > 0:  # even short cells do not fit: fewer rows
        rows -= 1
        text = comment.build(low, rows)
    return text if len(text) <= limit else _cut(text, limit)


def markdown(result: CiResult, limit: int = COMMENT_LIMIT) -> str:
    fixed, free = _scenario_rows(result)
    comment = _Comment(_comment_head(result), fixed, free, _comment_foot(result))
    return _fit(comment, limit)


# ------------------------------------------------------------------------------ JSON


def ci_json(result: CiResult) -> dict[str, Any]:
    """`passk report --json`'s object, plus the gate, the scenario versions, the baseline
    comparison and what ci ran on."""
    data = report_json(result.report)
    data["gate"] = {
        "passed": result.exit_code == 0,
        "exit_code": result.exit_code,
        "message": result.decision.message,
    }
    data["scenario_versions"] = dict(sorted(result.scenario_versions.items()))
    if result.comparison is not None:
        compared = result.comparison.model_dump()
        compared["regressions"] = result.regressions
        data["baseline"] = compared
    if result.adaptive is not None:
        a = result.adaptive
        data["adaptive"] = {
            "budget": a.budget,
            "trials_run": a.trials_run,
            "credibility": a.credibility,
            "fixed_plan_trials": a.fixed_plan_trials,
        }
        for row in data["scenarios"]:
            standing = a.of(row["scenario_id"])
            row["decision"] = standing.decision if standing else None
            row["goal"] = standing.goal if standing else None
            row["lower"] = standing.lower if standing else None
            row["upper"] = standing.upper if standing else None
    data["ci"] = {
        "own_broker": result.own_broker,
        "started": result.started,
        "reused": result.reused,
        "published": result.published,
        "timings_s": {k: round(v, 2) for k, v in result.timings.items()},
    }
    return data


def closing_lines(
    result: CiResult,
    written: list[tuple[str, Path]],
    baseline: str | None,
    fail_on_regression: bool,
) -> list[str]:
    """What `passk ci` says last on stderr: the files it wrote, its timings, and the
    regressions that failed it."""
    lines = [f"{name}: {path.resolve()}" for name, path in written]
    t = result.timings
    lines.append(
        f"ci: {t.get('total_s', 0):.1f} s in all, {t.get('conversations_s', 0):.1f} s "
        f"of conversations, {t.get('own_s', 0):.1f} s of its own "
        f"(broker {t.get('broker_s', 0):.1f}, last verdict "
        f"{t.get('last_verdict_s', 0):.1f}, teardown {t.get('teardown_s', 0):.1f})"
    )
    if fail_on_regression and result.regressions and result.exit_code == 1:
        lines.append(f"ci: confidently worse than {baseline}: {', '.join(result.regressions)}")
    return lines
