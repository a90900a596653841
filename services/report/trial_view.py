"""One trial opened: its transcript, every check with its verdict and reason, and the
persisted state beside each expectation (expected against actual, the failing paths
marked). `passk show TRIAL_ID` prints it (or `--json`), and the HTML report expands each
failed trial (and one trial per scenario) to the same view in a `<details>`.

Built from the projection only: the trial row, its gate rows (each state expectation's
expected value and the value found at its path, as the gate recorded it, found values
bounded to 2000 characters of JSON by the gate), its judge rows (with the call's model,
tokens, latency, attempts, cache) and the kept transcript. Every piece of text here came
from a producer or a model: the text and HTML renderings escape all of it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from html import escape
from typing import Any

from pydantic import BaseModel

from schemas.events import JudgeCall
from services.report.judge_cost import JudgeCostSummary, Prices, cost_lines, money, trial_costs
from services.storage.records import GateRecord, JudgeRecord, TranscriptRecord, TrialRecord

# The report page shows at most this many trials opened, and of each transcript at most
# this many messages of at most this many characters (`passk show` prints them whole).
MAX_PAGE_TRIALS = 200
MAX_PAGE_MESSAGES = 60
MAX_PAGE_CHARS = 4000


class ShownCheck(BaseModel):
    check: str  # gate:exit, exit:max_turns, state:<path> <op>, judge:<id>, ...
    verdict: str  # passed | failed | error | skipped | advisory-failed | advisory-passed ...
    reason: str
    gating: bool = True


class ShownExpectation(BaseModel):
    """One elementary check of a gate, with what it expected and what it found."""

    gate: str
    check: str
    path: str | None  # the state path an expectation reads (None for exit checks)
    passed: bool
    expected: Any = None
    actual: Any = None
    reason: str


class ShownJudge(JudgeCall):
    judge_id: str
    kind: str
    result: str
    reason: str
    gating: bool


class TrialView(BaseModel):
    trial_id: str
    run_id: str
    scenario_id: str
    scenario_version: str
    session_id: str
    outcome: str
    exit_reason: str | None
    exit_source: str | None
    agent_version: str | None
    checks: list[ShownCheck]
    expectations: list[ShownExpectation]
    judges: list[ShownJudge]
    transcript: list[dict[str, Any]] | None  # None: the projection kept no conversation
    judge_calls: int = 0
    judge_input_tokens: int = 0
    judge_output_tokens: int = 0
    judge_cost: float | None = None

    @property
    def failing_paths(self) -> list[str]:
        return [e.path for e in self.expectations if not e.passed and e.path]


def _path_of(check: str) -> str | None:
    """`state:report.fault present` -> `report.fault`; exit checks read no path."""
    if not check.startswith("state:") or check == "state:persisted":
        return None
    return check[len("state:") :].rsplit(" ", 1)[0]


def _shown_judges(trial: TrialRecord, judges: Sequence[JudgeRecord]) -> list[ShownJudge]:
    """The trial's judge calls, each marked gating as the verdict recorded it (older
    verdicts did not: then as the judge row says)."""
    recorded = bool(trial.gating_judges or trial.advisory_judges)  # older verdicts did not
    return [
        ShownJudge(
            **j.model_dump(include=set(ShownJudge.model_fields) - {"gating"}),
            kind=j.judge_kind,
            gating=j.judge_id in trial.gating_judges if recorded else j.gating,
        )
        for j in judges
    ]


def _checks(trial: TrialRecord, shown_judges: Sequence[ShownJudge]) -> list[ShownCheck]:
    """Every check with its verdict: passed, failed (or error), then the judges shown but
    never counted (skipped, not sampled, advisory) and the advisory external checks; the
    exit and state gates first."""
    failed = {fc["check"]: fc["reason"] for fc in trial.failed_checks}
    advisory = {a["judge_id"]: a for a in trial.advisory_judges}
    checks: list[ShownCheck] = []
    for name in trial.checks_passed:
        checks.append(ShownCheck(check=name, verdict="passed", reason=""))
    for name, reason in failed.items():
        verdict = "error" if reason.startswith("error:") else "failed"
        checks.append(ShownCheck(check=name, verdict=verdict, reason=reason))
    listed = {c.check for c in checks}
    for j in shown_judges:  # advisory and skipped judges: shown, never counted
        name = f"judge:{j.judge_id}"
        if name in listed:
            continue
        if j.result in ("skipped", "not_sampled"):
            checks.append(ShownCheck(check=name, verdict=j.result, reason=j.reason, gating=False))
        elif j.judge_id in advisory:
            why = advisory[j.judge_id]["why"]
            checks.append(
                ShownCheck(
                    check=name,
                    verdict=f"advisory {j.result}",
                    reason=f"{j.reason} (advisory: {why})",
                    gating=False,
                )
            )
    for a in trial.advisory_checks:  # external checks the scenario does not name
        checks.append(
            ShownCheck(
                check=a["check"],
                verdict="advisory " + ("passed" if a["passed"] else "failed"),
                reason=a.get("reason", ""),
                gating=False,
            )
        )
    order = {"gate:exit": 0, "gate:state": 1}
    checks.sort(key=lambda c: (order.get(c.check, 2), c.check))
    return checks


def _expectations(gates: Sequence[GateRecord]) -> list[ShownExpectation]:
    """Each elementary check of the gates, with what it expected and what it found."""
    return [
        ShownExpectation(
            gate=g.gate,
            check=c["check"],
            path=_path_of(c["check"]),
            passed=bool(c["passed"]),
            expected=c.get("expected"),
            actual=c.get("found"),
            reason=c.get("reason", ""),
        )
        for g in gates
        for c in g.checks
    ]


def build_view(
    trial: TrialRecord,
    gates: Sequence[GateRecord],
    judges: Sequence[JudgeRecord],
    transcript: TranscriptRecord | None,
    prices: Prices = Prices(),
) -> TrialView:
    shown_judges = _shown_judges(trial, judges)
    checks = _checks(trial, shown_judges)
    expectations = _expectations(gates)
    cost = trial_costs(judges, prices).get(trial.trial_id)
    return TrialView(
        trial_id=trial.trial_id,
        run_id=trial.run_id,
        scenario_id=trial.scenario_id,
        scenario_version=trial.scenario_version,
        session_id=trial.session_id,
        outcome=trial.outcome,
        exit_reason=trial.exit_reason,
        exit_source=trial.exit_source,
        agent_version=trial.agent_version,
        checks=checks,
        expectations=expectations,
        judges=shown_judges,
        transcript=list(transcript.messages) if transcript else None,
        judge_calls=cost.calls if cost else 0,
        judge_input_tokens=cost.input_tokens if cost else 0,
        judge_output_tokens=cost.output_tokens if cost else 0,
        judge_cost=cost.cost if cost else None,
    )


def view_json(view: TrialView) -> dict[str, Any]:
    data = view.model_dump(mode="json")
    data["failing_paths"] = view.failing_paths
    return data


def page_trials(trials: Sequence[TrialRecord]) -> tuple[list[TrialRecord], int]:
    """The trials the report page opens: the first trial of each scenario (so every
    scenario shows a conversation being graded) and every failed or errored one, at most
    MAX_PAGE_TRIALS (the first of each scenario kept first); and how many were left out."""
    ordered = sorted(trials, key=lambda t: (t.scenario_id, t.trial_id))
    firsts = {t.scenario_id: t for t in reversed(ordered)}
    wanted = [*firsts.values(), *(t for t in ordered if t.outcome != "passed")]
    unique = list({t.trial_id: t for t in wanted}.values())
    keep = unique[:MAX_PAGE_TRIALS]
    return sorted(keep, key=lambda t: (t.scenario_id, t.trial_id)), len(unique) - len(keep)


# ------------------------------------------------------------------------- text


def json_cell(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def message_text(message: dict[str, Any]) -> str:
    parts = [str(message.get("content") or "")]
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        parts.append(f"[tool call {fn.get('name', call.get('name'))}({fn.get('arguments', '')})]")
    return " ".join(p for p in parts if p)


# ------------------------------------------------------------------------- HTML

STYLE = """
details.trial { border: 1px solid #e3e7ec; border-radius: 4px; margin: 6px 0; padding: 4px 10px; }
details.trial > summary { cursor: pointer; }
details.trial:target { border-color: #1f5f99; }
.trial .failing-path td { background: #fdecea; }
.trial .failing-path td.path { font-weight: 700; color: #b42318; }
.transcript { list-style: none; padding-left: 0; }
.transcript li { margin: 4px 0; } .transcript .role { font-weight: 600; margin-right: 6px; }
.transcript .text { white-space: pre-wrap; overflow-wrap: anywhere; }
.transcript .role-user .role { color: #1f5f99; }
.transcript .role-assistant .role { color: #16794c; }
code.json { white-space: pre-wrap; overflow-wrap: anywhere; }
"""

# Opens the trial a link points at (#trial-...), on load and when the address changes.
OPEN_SCRIPT = """
(function () {
  function openTarget() {
    if (!location.hash || location.hash.indexOf('#trial-') !== 0) { return; }
    var el = document.getElementById(location.hash.slice(1));
    if (el && el.tagName === 'DETAILS') { el.open = true; }
  }
  window.addEventListener('hashchange', openTarget);
  openTarget();
})();
"""


def anchor(trial_id: str) -> str:
    """A fragment id for a trial, safe in an attribute and a URL whatever the id holds."""
    slug = re.sub(r"[^A-Za-z0-9_-]+", "_", trial_id)[:80]
    return f"trial-{slug}-{hashlib.sha1(trial_id.encode()).hexdigest()[:8]}"


def _short(text: str, limit: int = MAX_PAGE_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + f"… ({len(text) - limit} more characters)"


def _transcript_html(view: TrialView) -> str:
    if view.transcript is None:
        return '<p class="sub">Transcript not kept in the projection.</p>'
    shown = view.transcript[:MAX_PAGE_MESSAGES]
    items = "".join(
        f'<li class="msg role-{escape(str(m.get("role", "")))}">'
        f'<span class="role">{escape(str(m.get("role", "?")))}</span>'
        f'<span class="text">{escape(_short(message_text(m)))}</span></li>'
        for m in shown
    )
    more = len(view.transcript) - len(shown)
    rest = (
        (
            f'<p class="sub">{more} more messages: <code>passk show '
            f"{escape(view.trial_id)}</code></p>"
        )
        if more > 0
        else ""
    )
    return f'<ol class="transcript">{items}</ol>{rest}'


def view_html(view: TrialView, *, open_: bool = False) -> str:
    checks = "".join(
        f'<tr class="check-{escape(c.verdict.replace(" ", "-"))}" data-check-name="'
        f'{escape(c.check)}"><td>{escape(c.check)}</td><td>{escape(c.verdict)}</td>'
        f'<td class="reason">{escape(c.reason)}</td></tr>'
        for c in view.checks
    )
    state = "".join(
        f'<tr class="{"passing-path" if x.passed else "failing-path"}" '
        f'data-path="{escape(x.path or "")}"><td>{"✔" if x.passed else "✘"}</td>'
        f'<td class="path">{escape(x.check)}</td>'
        f'<td><code class="json">{escape(_short(json_cell(x.expected)))}</code></td>'
        f'<td><code class="json">{escape(_short(json_cell(x.actual)))}</code></td>'
        f'<td class="reason">{escape(x.reason)}</td></tr>'
        for x in view.expectations
    )
    judges = "".join(
        f"<tr><td>{escape(j.judge_id)}</td><td>{escape(j.result)}</td>"
        f'<td>{escape(j.model or "—")}</td><td class="num">{j.input_tokens or 0}</td>'
        f'<td class="num">{j.output_tokens or 0}</td>'
        f'<td class="num">{"—" if j.latency_ms is None else f"{j.latency_ms:.0f}"}</td>'
        f'<td class="num">{j.attempts}</td><td>{"hit" if j.cached else "—"}</td></tr>'
        for j in view.judges
    )
    failed = ", ".join(c.check for c in view.checks if c.verdict in ("failed", "error"))
    cost = f", estimated cost {money(view.judge_cost)}" if view.judge_cost is not None else ""
    return (
        f'<details class="trial" id="{anchor(view.trial_id)}" data-trial="'
        f'{escape(view.trial_id)}" data-outcome="{escape(view.outcome)}"'
        f"{' open' if open_ else ''}><summary><b>{escape(view.trial_id)}</b> · "
        f"{escape(view.scenario_id)} · {escape(view.outcome)}"
        f"{' · ' + escape(failed) if failed else ''}</summary>"
        f'<p class="sub">exit {escape(view.exit_reason or "—")} '
        f"({escape(view.exit_source or 'unknown')}) · judging: {view.judge_calls} calls, "
        f"{view.judge_input_tokens} + {view.judge_output_tokens} tokens{escape(cost)}</p>"
        '<table class="trial-checks"><thead><tr><th>check</th><th>verdict</th><th>reason'
        f"</th></tr></thead><tbody>{checks}</tbody></table>"
        + (
            '<table class="trial-state"><thead><tr><th></th><th>expectation</th><th>expected'
            "</th><th>actual (persisted)</th><th>reason</th></tr></thead>"
            f"<tbody>{state}</tbody></table>"
            if state
            else ""
        )
        + (
            '<table class="trial-judges"><thead><tr><th>judge</th><th>result</th><th>model'
            "</th><th>prompt tokens</th><th>completion tokens</th><th>latency (ms)</th>"
            f"<th>attempts</th><th>cache</th></tr></thead><tbody>{judges}</tbody></table>"
            if judges
            else ""
        )
        + _transcript_html(view)
        + "</details>"
    )


def trials_section(views: Iterable[TrialView], more: int = 0) -> str:
    """The report page's opened trials (failed ones, and one per scenario)."""
    body = "".join(view_html(v) for v in views)
    rest = (
        (
            f'<p class="sub">{more} more failed trials are not opened here: '
            "<code>passk show TRIAL_ID</code></p>"
        )
        if more > 0
        else ""
    )
    return (
        f'<style>{STYLE}</style><div id="trials">{body or "<p>No trials.</p>"}</div>'
        f"{rest}<script>{OPEN_SCRIPT}</script>"
    )


def trial_links(trial_ids: Iterable[str]) -> str:
    return ", ".join(
        f'<a class="trial-link" href="#{anchor(t)}">{escape(t)}</a>' for t in trial_ids
    )


def judge_cost_html(summary: JudgeCostSummary | None) -> str:
    """The run's judging for the report page: the same lines `passk report` prints."""
    if summary is None:
        return ""
    items = "".join(f"<li>{escape(line)}</li>" for line in cost_lines(summary))
    return (
        f'<h3>Judge cost</h3><ul id="judge-cost" data-calls="{summary.calls}" '
        f'data-skipped="{summary.skipped}" data-tokens="'
        f'{summary.input_tokens + summary.output_tokens}">{items}</ul>'
    )
