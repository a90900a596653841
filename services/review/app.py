"""The review app: a Starlette application over the projection, the labels topic and the
judges' live calibrations, served by uvicorn on 127.0.0.1 (`passk review`).

Everything it reads comes through `ReviewSource` and everything it sends through
`publish` (both handed in), so the pages can be built over fakes; `serve` wires the real
ones: the SQL projection, a follower of `labels.v1`, a follower of
`judge-calibrations.v1`, and the producer `passk label` uses.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates

from schemas.events import JudgeCalibration, Label
from services.grading.calibration import Bar
from services.kafka.labels import label_event
from services.review import domain
from services.review.auth import Reviewers, Throttle, new_csrf, same_csrf

log = logging.getLogger(__name__)

TEMPLATES = Path(__file__).parent / "templates"
RECENT_TRIALS = 5000  # the queues look at this many most recently graded trials
MAX_NOTE = 2000
# No script runs on any page (there is none), whatever a transcript holds: the browser
# refuses inline scripts and handlers even if some text escaped its escaping.
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'none'; style-src 'unsafe-inline'; "
    "img-src 'self'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'",
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


@dataclass
class ReviewSource:
    """What the pages read: each a plain callable, so tests hand in fakes."""

    candidates: Callable[[], list[domain.Candidate]]
    trial_view: Callable[[str], Any]  # trial id -> the `passk show` view, or None
    windows: Callable[[], list[domain.WindowFigures]]
    labels: Callable[[], Sequence[Label]]
    calibrations: Callable[[], Sequence[JudgeCalibration]]
    refresh: Callable[[], Any] | None = None  # async: catch the followers up before a page


@dataclass
class ReviewConfig:
    reviewers: Reviewers
    bar: Bar
    overlap: float
    sample_rate: float
    production_runs: str
    min_pass_hat_k: float
    min_trials: int
    secret: str = field(default_factory=lambda: secrets.token_hex(32))
    throttle: Throttle = field(default_factory=Throttle)  # failed sign-ins per name


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _figure(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def templates() -> Jinja2Templates:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["json"] = _json
    env.filters["figure"] = _figure
    env.filters["q"] = lambda s: quote(str(s), safe="")
    return Jinja2Templates(env=env)


class Review:
    """The pages, over a source, a publisher and the reviewers' config."""

    def __init__(
        self, source: ReviewSource, publish: Callable[[list[Label]], None], config: ReviewConfig
    ) -> None:
        self.source = source
        self.publish = publish
        self.config = config
        self.templates = templates()
        self.sent: list[Label] = []  # published here, until the follower reads them back
        # Signing out ends the session on the server too, not only in the browser: the
        # cookie is signed, not stored, so a copy taken before would otherwise stay good
        # for its 12 hours. Each session carries its reviewer's generation at sign-in;
        # signing out moves the reviewer to the next one, and a session of an older
        # generation is signed out (every session of that reviewer: "sign out everywhere").
        # One integer per reviewer who ever signed out, so bounded by the configured names.
        self.generations: dict[str, int] = {}

    # ------------------------------------------------------------ state

    async def _refresh(self) -> None:
        if self.source.refresh is not None:
            try:
                await self.source.refresh()
            except Exception as exc:  # a page shows what was read so far
                log.warning(
                    "review: could not catch up with the broker (%s); showing what was read",
                    type(exc).__name__,
                )

    def book(self) -> domain.LabelBook:
        read = list(self.source.labels())
        seen = {label.event_id for label in read}
        self.sent = [label for label in self.sent if label.event_id not in seen]
        return domain.LabelBook.of([*read, *self.sent])

    def rules(self, windows: list[domain.WindowFigures]) -> domain.QueueRules:
        """The queues' rules now (in the event loop: the followers change what they hold
        there, never while this reads it)."""
        c = self.config
        alerting = domain.alerting_scenarios(
            windows, default_min_pass_hat_k=c.min_pass_hat_k, default_min_trials=c.min_trials
        )
        return domain.QueueRules(
            bar=c.bar,
            calibrations=domain.latest_by_judge(self.source.calibrations()),
            sample_rate=c.sample_rate,
            production_runs=c.production_runs,
            alerting=frozenset(alerting),
        )

    async def _queues(self, reviewer: str) -> dict[str, list[domain.Candidate]]:
        await self._refresh()
        candidates, windows = await run_in_threadpool(
            lambda: (self.source.candidates(), self.source.windows())
        )
        rules, book = self.rules(windows), self.book()
        return {
            name: domain.queue_items(name, candidates, rules, book, self.config.overlap, reviewer)
            for name in domain.QUEUES
        }

    # ------------------------------------------------------------ helpers

    def page(self, request: Request, template: str, status: int = 200, **context: Any) -> Response:
        session = request.session
        context.setdefault("reviewer", self.signed_in(request))
        context.setdefault("csrf", session.get("csrf", ""))
        return self.templates.TemplateResponse(request, template, context, status_code=status)

    def signed_in(self, request: Request) -> str | None:
        """The reviewer of a live session, or None (a session from before its reviewer
        signed out is forgotten here, the cookie with it)."""
        session = request.session
        name = session.get("reviewer")
        if not isinstance(name, str) or not name:
            return None
        if session.get("generation") != self.generations.get(name, 0):
            session.clear()
            return None
        return name

    def refuse(self, request: Request, why: str, status: int = 403) -> Response:
        return self.page(request, "refused.html", status=status, why=why)

    async def guarded_form(self, request: Request) -> tuple[str | None, Any, Response | None]:
        """A state-changing request: signed in and carrying the session's CSRF token, or
        refused (403) before anything is done."""
        reviewer = self.signed_in(request)
        if reviewer is None:
            return None, None, self.refuse(request, "not signed in")
        form = await request.form()
        if not same_csrf(request.session.get("csrf"), form.get("csrf")):  # type: ignore[arg-type]
            return None, None, self.refuse(request, "the form's CSRF token is missing or wrong")
        return reviewer, form, None

    # ------------------------------------------------------------ pages

    async def login(self, request: Request) -> Response:
        if request.method == "GET":
            self.signed_in(request)  # a signed-out session's cookie is dropped first
            if not request.session.get("csrf"):
                request.session["csrf"] = new_csrf()
            return self.page(request, "login.html", nobody=not self.config.reviewers.names)
        form = await request.form()
        if not same_csrf(request.session.get("csrf"), form.get("csrf")):  # type: ignore[arg-type]
            return self.refuse(request, "the form's CSRF token is missing or wrong")
        name, token = str(form.get("name") or ""), str(form.get("token") or "")
        throttle = self.config.throttle
        wait = throttle.locked(name)
        if wait is not None:  # refused unchecked, the right token too: no guess is tried
            seconds = max(1, math.ceil(wait))
            answer = self.refuse(
                request,
                f"too many failed sign-ins for this name: try again in {seconds} s",
                429,
            )
            answer.headers["retry-after"] = str(seconds)
            return answer
        # Counted as failed before the check (no await in between), so attempts sent at
        # once cannot all pass the lock while their checks run; a right token clears it.
        throttle.failed(name)
        if not await run_in_threadpool(self.config.reviewers.check, name, token):
            request.session.clear()
            request.session["csrf"] = new_csrf()
            return self.page(
                request,
                "login.html",
                status=401,
                failed=True,
                nobody=not self.config.reviewers.names,
            )
        throttle.succeeded(name)
        request.session.clear()
        request.session.update(
            {"reviewer": name, "generation": self.generations.get(name, 0), "csrf": new_csrf()}
        )
        return RedirectResponse("/", status_code=303)

    async def logout(self, request: Request) -> Response:
        reviewer, _, refused = await self.guarded_form(request)
        if refused is not None:
            return refused
        assert reviewer is not None
        self.generations[reviewer] = self.generations.get(reviewer, 0) + 1
        request.session.clear()
        return RedirectResponse("/login", status_code=303)

    async def index(self, request: Request) -> Response:
        reviewer = self.signed_in(request)
        if reviewer is None:
            return RedirectResponse("/login", status_code=303)
        queues = await self._queues(reviewer)
        return self.page(request, "index.html", queues=queues)

    async def queue(self, request: Request) -> Response:
        reviewer = self.signed_in(request)
        if reviewer is None:
            return RedirectResponse("/login", status_code=303)
        name = request.path_params["name"]
        if name not in domain.QUEUES:
            return self.page(request, "refused.html", status=404, why=f"no queue {name!r}")
        queues = await self._queues(reviewer)
        return self.page(
            request,
            "queue.html",
            queue=name,
            items=queues[name],
            counts={q: len(v) for q, v in queues.items()},
        )

    def _next(
        self, queues: dict[str, list[domain.Candidate]], queue: str | None, after: str
    ) -> str:
        items = [c for c in queues.get(queue or "", []) if c.trial_id != after]
        if items:
            return f"/item/{quote(items[0].trial_id, safe='')}?queue={queue}"
        return f"/queue/{queue}" if queue in domain.QUEUES else "/"

    async def item(self, request: Request) -> Response:
        reviewer = self.signed_in(request)
        if reviewer is None:
            return RedirectResponse("/login", status_code=303)
        trial_id = request.path_params["trial_id"]
        queue = request.query_params.get("queue")
        queue = queue if queue in domain.QUEUES else None
        queues = await self._queues(reviewer)
        view = await run_in_threadpool(self.source.trial_view, trial_id)
        if view is None:
            return self.page(
                request, "refused.html", status=404, why=f"no trial {trial_id!r} in the projection"
            )
        book = self.book()
        labellable = [j for j in view.judges if j.kind == "llm" and j.result in domain.LABELLABLE]
        mine = {j.judge_id: book.given(trial_id, j.judge_id, reviewer) for j in labellable}
        return self.page(
            request,
            "item.html",
            view=view,
            labellable=labellable,
            mine=mine,
            queue=queue,
            next_url=self._next(queues, queue, trial_id),
            saved=request.query_params.get("saved") == "1",
        )

    async def submit(self, request: Request) -> Response:
        reviewer, form, refused = await self.guarded_form(request)
        if refused is not None:
            return refused
        assert reviewer is not None
        trial_id = request.path_params["trial_id"]
        queue = str(form.get("queue") or "")
        view = await run_in_threadpool(self.source.trial_view, trial_id)
        if view is None:
            return self.refuse(request, f"no trial {trial_id!r} in the projection", 404)
        labels = []
        for j in view.judges:
            if j.kind != "llm" or j.result not in domain.LABELLABLE:
                continue
            said = form.get(f"label-{j.judge_id}")
            if said not in ("pass", "fail"):
                continue
            note = str(form.get(f"note-{j.judge_id}") or "").strip()[:MAX_NOTE] or None
            labels.append(label_event(trial_id, j.judge_id, said == "pass", note, reviewer))
        if not labels:
            return self.refuse(request, "mark pass or fail for at least one judge", 400)
        try:
            await run_in_threadpool(self.publish, labels)
        except Exception as exc:  # any broker failure: say so, keep nothing
            log.warning(
                "review: could not publish %d label(s): %s", len(labels), type(exc).__name__
            )
            return self.refuse(
                request,
                "the labels could not be published (is the broker up?); nothing was recorded",
                503,
            )
        self.sent.extend(labels)
        queues = await self._queues(reviewer)
        if queue in domain.QUEUES:
            return RedirectResponse(self._next(queues, queue, trial_id), status_code=303)
        return RedirectResponse(f"/item/{quote(trial_id, safe='')}?saved=1", status_code=303)

    async def agreement(self, request: Request) -> Response:
        reviewer = self.signed_in(request)
        if reviewer is None:
            return RedirectResponse("/login", status_code=303)
        await self._refresh()
        candidates = await run_in_threadpool(self.source.candidates)
        judges = {j.judge_id for c in candidates for j in c.judges if j.kind == "llm"}
        calibrations = domain.latest_by_judge(self.source.calibrations())
        rows = domain.agreement(judges, calibrations, self.book(), self.config.bar)
        return self.page(
            request, "agreement.html", rows=rows, bar=self.config.bar, overlap=self.config.overlap
        )


async def _headers(request: Request, call_next: Callable[[Request], Any]) -> Response:
    response: Response = await call_next(request)
    response.headers.update(SECURITY_HEADERS)
    return response


def create_app(
    source: ReviewSource, publish: Callable[[list[Label]], None], config: ReviewConfig
) -> Starlette:
    from starlette.middleware.base import BaseHTTPMiddleware

    review = Review(source, publish, config)
    routes = [
        Route("/login", review.login, methods=["GET", "POST"]),
        Route("/logout", review.logout, methods=["POST"]),
        Route("/", review.index),
        Route("/queue/{name}", review.queue),
        Route("/item/{trial_id:path}", review.item, methods=["GET"]),
        Route("/item/{trial_id:path}", review.submit, methods=["POST"]),
        Route("/agreement", review.agreement),
    ]
    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(BaseHTTPMiddleware, dispatch=_headers),
            Middleware(
                SessionMiddleware,
                secret_key=config.secret,
                session_cookie="passk_review",
                max_age=12 * 3600,
                same_site="strict",
                https_only=False,
            ),
        ],
    )
    app.state.review = review
    return app


# ---------------------------------------------------------------- the real wiring


def candidates_from(store: Any) -> list[domain.Candidate]:
    trials = store.recent_trials(RECENT_TRIALS)
    judges: dict[str, list[domain.JudgeSeen]] = {}
    for j in store.judges_of(t.trial_id for t in trials):
        judges.setdefault(j.trial_id, []).append(
            domain.JudgeSeen(j.judge_id, j.judge_kind, j.result, j.reason)
        )
    return [
        domain.candidate(
            t.trial_id,
            t.run_id,
            t.scenario_id,
            t.outcome,
            t.verdict_at,
            t.checks_passed,
            (f["check"] for f in t.failed_checks),
            judges.get(t.trial_id, ()),
        )
        for t in trials
    ]


def windows_from(store: Any) -> list[domain.WindowFigures]:
    """Each scenario's newest window of each size, its sampled figures (a row from before
    sampling, whose n_sampled is NULL, counted every trial: all of them)."""
    out = []
    for w in store.windows(last=1):
        sampled = w.sampled_tally()
        out.append(
            domain.WindowFigures(
                scenario_id=w.scenario_id,
                window=w.window,
                window_start=w.window_start,
                k=w.k,
                n_sampled=sampled.n,
                passed_sampled=sampled.passed,
                errors_sampled=sampled.errors,
                alert_min_pass_hat_k=w.alert_min_pass_hat_k,
                alert_min_trials=w.alert_min_trials,
            )
        )
    return out


async def serve(
    settings: Any,
    trial_view: Callable[[str], Any],
    *,
    host: str,
    port: int,
    start_timeout: float = 30.0,
) -> None:
    """Follow the labels and the calibrations, then serve the app until stopped. Raises
    what the broker raised when it cannot be read at the start."""
    import uvicorn

    from services.kafka.calibrations import CalibrationFollower
    from services.kafka.labels import LabelFollower, publish_labels
    from services.storage.store import Store

    reviewers = Reviewers(
        settings.review_tokens.get_secret_value() if settings.review_tokens else None
    )
    config = ReviewConfig(
        reviewers=reviewers,
        bar=Bar(settings.calibration_bar, settings.min_labelled),
        overlap=settings.review_overlap,
        sample_rate=settings.review_sample_rate,
        production_runs=settings.review_production_runs,
        min_pass_hat_k=settings.alert_min_pass_hat_k,
        min_trials=settings.alert_min_trials,
    )
    labels, calibrations = LabelFollower(settings), CalibrationFollower(settings)
    await labels.ready(start_timeout)
    await calibrations.ready(start_timeout)
    store = Store(settings.database_url)

    async def refresh() -> None:
        await asyncio.gather(labels.sync(), calibrations.sync())

    source = ReviewSource(
        candidates=lambda: candidates_from(store),
        trial_view=trial_view,
        windows=lambda: windows_from(store),
        labels=lambda: labels.labels,
        calibrations=lambda: list(calibrations.book.all().values()),
        refresh=refresh,
    )
    app = create_app(source, lambda batch: publish_labels(settings, batch), config)
    server = uvicorn.Server(
        uvicorn.Config(
            app, host=host, port=port, log_level="warning", access_log=False, server_header=False
        )
    )
    try:
        await server.serve()
    finally:
        await labels.stop()
        await calibrations.stop()
        store.close()
