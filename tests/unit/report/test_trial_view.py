"""One trial opened (`passk show`, the report page's <details>): built from projection rows."""

from __future__ import annotations

from html.parser import HTMLParser

from schemas.events import CheckOutcome, Message
from services.report.judge_cost import Prices
from services.report.trial_view import (
    MAX_PAGE_TRIALS,
    anchor,
    build_view,
    page_trials,
    view_html,
    view_json,
)
from services.storage.records import gate_record, judge_record, transcript_record, trial_record
from tests.unit.storage import factories as f

HOSTILE = '<script>document.title="pwned"</script><img src=x onerror="alert(1)">'


def state_failed_trial(text: str = "Saved."):
    trial = trial_record(
        f.verdict(
            "t1",
            "failed",
            failed=[("gate:state", "report.fault: absent"), ("judge:polite", f"rude: {text}")],
        )
    )
    state = f.gate("t1", "state", False).model_copy(
        update={
            "checks": [
                CheckOutcome(
                    check="state:report.parts present",
                    passed=True,
                    reason="report.parts: present",
                    expected=True,
                    found=["pump"],
                ),
                CheckOutcome(
                    check="state:report.fault present",
                    passed=False,
                    reason="report.fault: absent",
                    expected=True,
                    found=None,
                ),
            ]
        }
    )
    exit_ = f.gate("t1", "exit", True).model_copy(
        update={
            "checks": [
                CheckOutcome(
                    check="exit:expected_exit",
                    passed=True,
                    reason="exit ok",
                    expected=["product_closed"],
                    found="product_closed",
                )
            ]
        }
    )
    judges = [
        judge_record(
            f.judge("t1", "polite", "failed").model_copy(
                update={
                    "reason": f"rude: {text}",
                    "input_tokens": 900,
                    "output_tokens": 40,
                    "latency_ms": 321.0,
                    "attempts": 2,
                    "model": "passk-standin",
                }
            )
        )
    ]
    conv = f.conversation("t1")
    conv = conv.model_copy(
        update={"transcript": [*conv.transcript, Message(role="user", content=text)]}
    )
    return trial, [gate_record(exit_), gate_record(state)], judges, transcript_record(conv)


def test_the_view_holds_checks_state_beside_expectations_judge_calls_and_transcript() -> None:
    view = build_view(*state_failed_trial(), Prices(per_mtok_in=1.0, per_mtok_out=10.0))
    data = view_json(view)
    assert [(c["check"], c["verdict"]) for c in data["checks"]] == [
        ("gate:exit", "passed"),
        ("gate:state", "failed"),
        ("judge:polite", "failed"),
    ]
    assert data["failing_paths"] == ["report.fault"]
    by_check = {x["check"]: x for x in data["expectations"]}
    assert by_check["state:report.fault present"]["expected"] is True
    assert by_check["state:report.fault present"]["actual"] is None
    assert by_check["state:report.parts present"]["actual"] == ["pump"]
    assert by_check["exit:expected_exit"]["path"] is None
    (judge,) = data["judges"]
    assert (judge["input_tokens"], judge["latency_ms"], judge["attempts"]) == (900, 321.0, 2)
    assert data["judge_calls"] == 1 and data["judge_cost"] == (900 * 1.0 + 40 * 10.0) / 1e6
    assert [m["role"] for m in data["transcript"]] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]


class Visible(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs += [name for name, _ in attrs]

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_hostile_transcript_and_reason_are_text_not_markup() -> None:
    page = view_html(build_view(*state_failed_trial(HOSTILE)))
    dom = Visible()
    dom.feed(page)
    assert "script" not in dom.tags and "img" not in dom.tags and "onerror" not in dom.attrs
    assert "".join(dom.text).count(HOSTILE) == 2  # the user's message and the judge's reason
    assert 'class="failing-path" data-path="report.fault"' in page


def test_the_page_opens_every_failed_trial_and_the_first_of_each_scenario() -> None:
    rows = [
        trial_record(f.verdict(t, o, scenario_id=s))
        for s, t, o in [
            ("a", "a1", "passed"),
            ("a", "a2", "failed"),
            ("a", "a3", "passed"),
            ("b", "b1", "passed"),
            ("b", "b2", "passed"),
            ("c", "c1", "error"),
        ]
    ]
    chosen, left_out = page_trials(rows)
    assert [t.trial_id for t in chosen] == ["a1", "a2", "b1", "c1"] and left_out == 0
    many = [trial_record(f.verdict(f"x{i:04}", "failed", scenario_id="x")) for i in range(250)]
    chosen, left_out = page_trials([*many, *rows])
    # wanted: the firsts a1, b1, c1, x0000, then a2 and x0001..x0249 (c1 once): 254
    assert len(chosen) == MAX_PAGE_TRIALS and left_out == 254 - MAX_PAGE_TRIALS
    assert {"a1", "b1", "c1"} <= {t.trial_id for t in chosen}  # each scenario still shown


def test_anchors_are_safe_and_distinct() -> None:
    odd = ['run:1/"x"<y>', "run:1/_x__y_"]
    ids = [anchor(t) for t in odd]
    assert ids[0] != ids[1]
    assert all(i.startswith("trial-") and all(ch.isalnum() or ch in "-_" for ch in i) for i in ids)
