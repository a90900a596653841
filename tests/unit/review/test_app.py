"""The review app's pages over fakes (Starlette's test client, no broker): nothing served
unsigned, a wrong token cannot sign in, a POST without a session or with a wrong CSRF token
is refused and publishes nothing, labels carry the reviewer's name, text is escaped."""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime

import pytest
from starlette.testclient import TestClient

from schemas.events import Label
from services.grading.calibration import Bar
from services.report.trial_view import ShownCheck, ShownExpectation, ShownJudge, TrialView
from services.review import domain as d
from services.review.app import ReviewConfig, ReviewSource, create_app
from services.review.auth import MIN_TOKEN, BadTokens, Reviewers, Throttle, new_csrf

HOSTILE = "<script>alert(1)</script> <img src=x onerror=alert(2)> </textarea>"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def view(trial_id: str) -> TrialView:
    return TrialView(
        trial_id=trial_id,
        run_id="r1",
        scenario_id="s1",
        scenario_version="v",
        session_id="x",
        outcome="passed",
        exit_reason="product_closed",
        exit_source="session",
        agent_version=None,
        checks=[ShownCheck(check="gate:exit", verdict="passed", reason="")],
        expectations=[
            ShownExpectation(
                gate="state",
                check="state:a present",
                path="a",
                passed=False,
                expected=True,
                actual=HOSTILE,
                reason=f"a: {HOSTILE}",
            )
        ],
        judges=[
            ShownJudge(
                judge_id="polite",
                kind="llm",
                result="failed",
                reason=f"rude {HOSTILE}",
                gating=False,
            ),
            ShownJudge(judge_id="rx", kind="regex", result="passed", reason="ok", gating=True),
        ],
        transcript=[{"role": "user", "content": f"hi {HOSTILE}"}],
    )


class World:
    def __init__(self) -> None:
        self.published: list[Label] = []
        self.more_judges: list[ShownJudge] = []  # shown on item pages after view()'s
        self.labels: list[Label] = []
        self.now = 1000.0  # the sign-in throttle's clock, in seconds
        ids = ["t1", "t2"]
        self.candidates = [
            d.candidate(
                t,
                "r1",
                "s1",
                "passed",
                T0,
                ["gate:exit", "gate:state"],
                [],
                [d.JudgeSeen("polite", "llm", "failed")],
            )
            for t in ids
        ]

    def publish(self, labels: list[Label]) -> None:
        self.published.extend(labels)


@pytest.fixture
def world() -> World:
    return World()


@pytest.fixture
def client(world: World) -> TestClient:
    source = ReviewSource(
        candidates=lambda: world.candidates,
        trial_view=lambda t: (
            view(t).model_copy(update={"judges": view(t).judges + world.more_judges})
            if t in ("t1", "t2")
            else None
        ),
        windows=lambda: [],
        labels=lambda: world.labels,
        calibrations=lambda: [],
    )
    config = ReviewConfig(
        reviewers=Reviewers("ann:s3cret-ann-token,bob:s3cret-bob-token"),
        bar=Bar(),
        overlap=0.0,
        sample_rate=0.0,
        production_runs="production-*",
        min_pass_hat_k=0.8,
        min_trials=10,
        throttle=Throttle(clock=lambda: world.now),
    )
    return TestClient(create_app(source, world.publish, config), base_url="http://127.0.0.1")


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, html
    return found.group(1)


def sign_in(client: TestClient, name: str = "ann", token: str = "s3cret-ann-token") -> str:
    page = client.get("/login")
    answer = client.post(
        "/login",
        data={"csrf": csrf_of(page.text), "name": name, "token": token},
        follow_redirects=False,
    )
    assert answer.status_code == 303 and answer.headers["location"] == "/"
    return csrf_of(client.get("/").text)


def test_nothing_is_served_unsigned(client: TestClient) -> None:
    for path in ("/", "/queue/uncalibrated", "/item/t1", "/agreement"):
        answer = client.get(path, follow_redirects=False)
        assert answer.status_code == 303 and answer.headers["location"] == "/login", path
    assert client.get("/login").status_code == 200


def test_a_wrong_token_cannot_sign_in_and_nothing_logs_it(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    page = client.get("/login")
    for name, token in (("ann", "s3cret-bob-token"), ("eve", "s3cret-ann-token"), ("ann", "")):
        answer = client.post(
            "/login",
            data={"csrf": csrf_of(page.text), "name": name, "token": token},
            follow_redirects=False,
        )
        assert answer.status_code == 401
        page = answer
        assert client.get("/", follow_redirects=False).status_code == 303
    assert "s3cret" not in caplog.text


def test_a_login_without_its_csrf_token_is_refused(client: TestClient) -> None:
    client.get("/login")
    answer = client.post(
        "/login", data={"name": "ann", "token": "s3cret-ann-token"}, follow_redirects=False
    )
    assert answer.status_code == 403
    assert client.get("/", follow_redirects=False).status_code == 303


def test_posts_without_a_session_or_with_a_wrong_csrf_token_publish_nothing(
    client: TestClient, world: World
) -> None:
    form = {"label-polite": "fail", "queue": "uncalibrated"}
    assert client.post("/item/t1", data={**form, "csrf": "x"}).status_code == 403
    csrf = sign_in(client)
    assert client.post("/item/t1", data={**form, "csrf": csrf + "x"}).status_code == 403
    assert client.post("/item/t1", data=form).status_code == 403
    assert world.published == []
    answer = client.post("/item/t1", data={**form, "csrf": csrf}, follow_redirects=False)
    assert answer.status_code == 303
    assert answer.headers["location"] == "/item/t2?queue=uncalibrated"
    [sent] = world.published
    assert (sent.trial_id, sent.judge_id, sent.passed, sent.labeller) == (
        "t1",
        "polite",
        False,
        "ann",
    )
    # the item left ann's queue at once, before the labels topic is read back
    assert "t1" not in client.get("/queue/uncalibrated").text.split("queue-items")[-1]


def test_a_logout_without_its_csrf_token_is_refused_and_the_session_stays(
    client: TestClient,
) -> None:
    csrf = sign_in(client)
    for form in ({}, {"csrf": ""}, {"csrf": csrf + "x"}, {"csrf": new_csrf()}):
        answer = client.post("/logout", data=form, follow_redirects=False)
        assert answer.status_code == 403, form
        assert client.get("/", follow_redirects=False).status_code == 200, form
    answer = client.post("/logout", data={"csrf": csrf}, follow_redirects=False)
    assert (answer.status_code, answer.headers["location"]) == (303, "/login")
    assert client.get("/", follow_redirects=False).headers["location"] == "/login"


def test_every_string_from_a_producer_or_a_model_is_escaped(client: TestClient) -> None:
    sign_in(client)
    page = client.get("/item/t1?queue=uncalibrated")
    assert page.status_code == 200
    assert "<script>alert" not in page.text and "<img src=x" not in page.text
    assert "</textarea> " not in page.text.replace("</textarea>\n", "")  # only our own
    assert page.text.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 4
    assert "script-src" not in page.headers["content-security-policy"]
    assert page.headers["content-security-policy"].startswith("default-src 'none'")
    for testid in (
        "transcript",
        "state",
        "judge-polite",
        "label-polite-pass",
        "label-polite-fail",
        "note-polite",
        "submit-labels",
        "next-item",
    ):
        assert f'data-testid="{testid}"' in page.text
    assert 'data-testid="judge-rx"' in page.text  # shown with its testid, not labelled
    assert 'data-testid="label-rx-pass"' not in page.text


def test_every_judge_shown_carries_its_testid_whatever_its_result(
    client: TestClient, world: World
) -> None:
    world.more_judges = [
        ShownJudge(judge_id="slow", kind="llm", result="error", reason="timeout", gating=False),
        ShownJudge(judge_id="cheap", kind="llm", result="skipped", reason="", gating=False),
    ]
    sign_in(client)
    page = client.get("/item/t1").text
    fieldsets = re.findall(r'<fieldset class="judge[^"]*" data-testid="judge-([^"]+)"', page)
    assert fieldsets == ["polite", "rx", "slow", "cheap"]
    # an error or a skipped verdict has nothing to label: no radios, no note
    for judge in ("slow", "cheap"):
        for testid in (f"label-{judge}-pass", f"label-{judge}-fail", f"note-{judge}"):
            assert f'data-testid="{testid}"' not in page


def test_the_index_lists_each_queue_with_its_count(client: TestClient) -> None:
    sign_in(client)
    page = client.get("/").text
    for name in d.QUEUES:
        assert f'data-testid="queue-{name}"' in page
    assert re.search(r'data-testid="queue-count-uncalibrated">2<', page)
    assert re.search(r'data-testid="queue-count-disagreements">2<', page)
    assert re.search(r'data-testid="queue-count-sampled">0<', page)


def test_malformed_tokens_are_refused_without_echoing_them() -> None:
    with pytest.raises(BadTokens) as caught:
        Reviewers("ann:one,bob-no-token-secret")
    assert "secret" not in str(caught.value)
    assert "one-long-token" not in repr(Reviewers("ann:one-long-token").__dict__)


def test_make_up_records_that_reviewers_are_set_never_their_tokens() -> None:
    from services.contract.masking import mask_value

    assert mask_value("PASSK_REVIEW_TOKENS", "ann:s3cret-ann-token") == "(set; not recorded)"


def test_a_copy_of_the_cookie_taken_before_signing_out_no_longer_works(
    client: TestClient, world: World
) -> None:
    csrf = sign_in(client)
    stolen = session_cookie(client)
    answer = client.post("/logout", data={"csrf": csrf}, follow_redirects=False)
    assert (answer.status_code, answer.headers["location"]) == (303, "/login")
    replay(client, stolen)
    for path in ("/", "/queue/uncalibrated", "/item/t1", "/agreement"):
        answer = client.get(path, follow_redirects=False)
        assert answer.status_code == 303 and answer.headers["location"] == "/login", path
    replay(client, stolen)
    form = {"label-polite": "fail", "queue": "uncalibrated", "csrf": csrf}
    assert client.post("/item/t1", data=form, follow_redirects=False).status_code == 403
    replay(client, stolen)
    assert client.post("/logout", data={"csrf": csrf}, follow_redirects=False).status_code == 403
    assert world.published == []
    # the reviewer signs in again: a new session works, the old copy still does not
    sign_in(client)
    assert client.get("/", follow_redirects=False).status_code == 200
    replay(client, stolen)
    assert client.get("/", follow_redirects=False).status_code == 303


def test_the_login_page_after_signing_out_is_usable_with_the_old_cookie(
    client: TestClient,
) -> None:
    csrf = sign_in(client)
    stolen = session_cookie(client)
    client.post("/logout", data={"csrf": csrf})
    replay(client, stolen)
    page = client.get("/login")
    assert "signed in as" not in page.text
    sign_in(client)  # a fresh CSRF token on the page, a new session
    assert client.get("/", follow_redirects=False).status_code == 200


def replay(client: TestClient, cookie: str) -> None:
    """The client holds this session cookie and no other."""
    client.cookies.clear()
    client.cookies.set("passk_review", cookie)


def session_cookie(client: TestClient) -> str:
    value = client.cookies.get("passk_review")
    assert value
    return value


def try_sign_in(client: TestClient, name: str, token: str) -> int:
    page = client.get("/login")
    answer = client.post(
        "/login",
        data={"csrf": csrf_of(page.text), "name": name, "token": token},
        follow_redirects=False,
    )
    return answer.status_code


def test_five_failed_sign_ins_lock_the_name_out_for_the_window_its_right_token_too(
    client: TestClient, world: World
) -> None:
    for _ in range(Throttle.LIMIT):
        assert try_sign_in(client, "ann", "wrong-guess-000") == 401
        world.now += 1
    page = client.get("/login")
    answer = client.post(
        "/login",
        data={"csrf": csrf_of(page.text), "name": "ann", "token": "s3cret-ann-token"},
        follow_redirects=False,
    )
    assert answer.status_code == 429
    assert answer.headers["retry-after"] == "55"  # the first failure was 5 s ago
    assert "too many failed sign-ins" in answer.text and "s3cret" not in answer.text
    assert client.get("/", follow_redirects=False).status_code == 303
    assert try_sign_in(client, "ann", "wrong-guess-001") == 429  # not counted, not checked
    # another name is not locked out with it
    assert try_sign_in(client, "bob", "s3cret-bob-token") == 303
    client.cookies.clear()
    world.now += 54
    assert try_sign_in(client, "ann", "s3cret-ann-token") == 429
    world.now += 1  # the first failure is a window old: four left in it, one try
    assert try_sign_in(client, "ann", "s3cret-ann-token") == 303


def test_a_right_token_clears_the_failures_before_it(client: TestClient, world: World) -> None:
    for _ in range(Throttle.LIMIT - 1):
        assert try_sign_in(client, "ann", "wrong-guess-000") == 401
    assert try_sign_in(client, "ann", "s3cret-ann-token") == 303
    client.cookies.clear()
    for _ in range(Throttle.LIMIT - 1):
        assert try_sign_in(client, "ann", "wrong-guess-000") == 401
    assert try_sign_in(client, "ann", "s3cret-ann-token") == 303


def test_the_throttle_keeps_a_bounded_table() -> None:
    now = [0.0]
    throttle = Throttle(limit=2, window=60.0, cap=3, clock=lambda: now[0])
    throttle.failed("old")
    throttle.failed("old")
    now[0] = 100.0  # old's failures are past the window
    throttle.failed("a")
    throttle.failed("a")
    throttle.failed("b")
    assert throttle.locked("a") == 60.0
    throttle.failed("c")  # full: the expired name goes, the locked one stays
    assert len(throttle) == 3 and throttle.locked("a") == 60.0
    for i in range(1000):
        throttle.failed(f"spray-{i}" + "x" * 1000)
    assert len(throttle) == 3
    assert throttle.locked("a") is None  # pushed out by a spray within the window: bounded
    assert all(len(key) == 32 for key in throttle._failures)  # a hash, whatever the name


def test_tokens_naming_nobody_or_too_short_are_refused_without_echoing_them() -> None:
    assert Reviewers(None).names == [] and Reviewers("  ").names == []
    with pytest.raises(BadTokens, match="names no reviewer"):
        Reviewers(" , ,")
    short = "x" * (MIN_TOKEN - 1)
    with pytest.raises(BadTokens) as caught:
        Reviewers(f"bob:{'y' * MIN_TOKEN},ann:{short}")
    assert "'ann'" in str(caught.value) and short not in str(caught.value)
    assert Reviewers(f"ann:{'x' * MIN_TOKEN}").names == ["ann"]
