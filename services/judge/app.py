"""Judge processor wiring: conversation-finished -> one JudgeVerdict per judge of the scenario.

Its own Faust app and consumer group. The agent reads trials in bounded batches
(PASSK_BATCH_MAX, PASSK_BATCH_WITHIN_S) and grades a batch's trials at once; model
requests are bounded by the client (`PASSK_JUDGE_CONCURRENCY`), so many calls are in
flight, never one at a time. A batch's verdicts are sent together and the batch is acked
only after all are delivered (at-least-once; a redelivered trial yields the same event
ids). A scenario with skip_when_gates_fail is graded from the gate's JudgeRequest instead
of its conversation, once its gates are decided (the model is not called when they failed).
During a model outage the calls wait in the client and the batch is not acked; the
backlog drains when the model answers (see `client`). `PASSK_JUDGE_CACHE=0` makes every
judge ask the model (the worker's `--no-cache`).
"""

from __future__ import annotations

import asyncio
import logging
import time

import faust
from sqlalchemy.exc import SQLAlchemyError

from schemas.events import ConversationFinished, JudgeRequest
from services.contract.codec import Rejection, decode, decode_or_reject, encode
from services.contract.eventtime import in_future, reference_time
from services.contract.processors import PROCESSORS
from services.contract.settings import Settings
from services.contract.topics import Topic
from services.judge import domain
from services.judge.grading import Grader, build_grader
from services.judge.metrics import default_metrics
from services.kafka.catalog import ScenarioCatalog, unknown_scenario
from services.runtime.app import DeadLetters, Delivery, make_app, raw_topic, run_alongside
from services.runtime.metrics import common_metrics
from services.runtime.outage import STORE, Dependency
from services.runtime.outbox import Outbox
from services.runtime.regrades import read_regrade

PROCESSOR = "judge"
SPEC = PROCESSORS[PROCESSOR]  # its topics
log = logging.getLogger(__name__)


def build(settings: Settings) -> faust.App:
    """The judge's Faust app, its topics, agents and timer, from `settings`."""
    app = make_app(PROCESSOR, settings)

    # ----------------------------------------------------------------------- topics
    (conversations_in,) = SPEC.agents["judge_trials"]
    (regrades_in,) = SPEC.agents["regrade_trials"]
    (judge_requests_in,) = SPEC.agents["judge_after_gates"]
    conversations = raw_topic(app, conversations_in, settings)
    regrade_requests = raw_topic(app, regrades_in, settings)
    judge_requests = raw_topic(app, judge_requests_in, settings)
    judge_verdicts = raw_topic(app, Topic.JUDGE_VERDICTS, settings)
    reject = DeadLetters(app, PROCESSOR, settings)
    deliver = Delivery(PROCESSOR)  # re-grades: each awaited (rare, and apart from the batches)
    outbox = Outbox(PROCESSOR)
    request_outbox = Outbox(PROCESSOR)  # its own batches: the two agents run side by side

    catalog = ScenarioCatalog(settings)
    run_alongside(app, settings, catalog)
    metrics = default_metrics()
    metrics.set_prices(settings.judge_price_per_mtok_in, settings.judge_price_per_mtok_out)
    common = common_metrics()

    made: Grader | None = None
    grader_lock = asyncio.Lock()
    store = Dependency(STORE, "judge: creating the verdict cache")

    async def grader() -> Grader:
        nonlocal made
        async with grader_lock:
            if made is None:  # creating the cache table needs the store: wait for it
                made = await store.call(
                    "create_cache", lambda: asyncio.to_thread(build_grader, settings, metrics),
                    retry_on=(SQLAlchemyError,))
        return made

    # ----------------------------------------------------------------------- agents
    async def judge_trials(stream: faust.StreamT) -> None:
        await catalog.ready()
        known_judges_now()
        # A batch's trials are graded at once: its model calls overlap (bounded by the client).
        await outbox.run(stream, lambda event: reject.guard(event, handle), concurrently=True,
                         batch_max=settings.batch_max, within_s=settings.batch_within_s)

    def known_judges_now() -> None:
        metrics.known_judges({j.id for s in catalog.latest().values() for j in s.judges})

    async def known_judges() -> None:
        """Every judge of the catalog has its verdict series from the start (see
        metrics.py), and a judge of a scenario published since within seconds."""
        if catalog.is_ready:
            known_judges_now()

    async def judge_after_gates(stream: faust.StreamT) -> None:
        await catalog.ready()
        await request_outbox.run(stream, lambda event: reject.guard(event, handle_request),
                                 concurrently=True, batch_max=settings.batch_max,
                                 within_s=settings.batch_within_s)

    async def regrade_trials(stream: faust.StreamT) -> None:
        await catalog.ready()
        async for event in stream.events():
            await reject.guard(event, regrade)

    async def regrade(event: faust.types.EventT) -> None:
        """Grade a trial again, against the scenario version it was graded against, under
        the request's attempt (new event ids: the verdict does not drop them as repeats)."""
        found = await read_regrade(event, catalog, reject, settings)
        if found is None:
            return
        request, scenario = found
        verdicts = await (await grader()).grade(request.conversation, scenario)
        await asyncio.gather(*(deliver(judge_verdicts, request.trial_id.encode(), encode(v))
                               for v in domain.for_attempt(verdicts, request.attempt)))
        common.events.labels(PROCESSOR, "regraded").inc()

    async def handle(event: faust.types.EventT) -> None:
        trial = decode_or_reject(event.value, ConversationFinished, settings)
        if isinstance(trial, Rejection):
            return await reject(event, trial)
        # The gate refuses the same record (same reference time): no trial, nothing to judge.
        reference = reference_time(event.message.timestamp, time.time())
        if future := in_future(trial.occurred_at, reference, settings.max_clock_skew_s):
            return await reject(event, future)
        # A scenario published moments before its traffic may not have been read yet.
        scenario = await catalog.published(trial.scenario_id)
        if scenario is None:
            return await reject(event, unknown_scenario(trial.scenario_id))
        if scenario.skips_judges_when_gates_fail(settings.judge_skip_when_gates_fail):
            # Graded when the gate's JudgeRequest says how the gates went (handle_request).
            common.events.labels(PROCESSOR, "awaiting_gates").inc()
            return None
        verdicts = await (await grader()).grade(trial, scenario)
        # Delivered with the batch before it is acked: a crash in between re-grades the
        # trial (the cache answers) and re-sends the same event ids, which consumers drop.
        for v in verdicts:
            await outbox.send(judge_verdicts, trial.trial_id.encode(), encode(v))
        common.events.labels(PROCESSOR, "graded").inc()

    async def handle_request(event: faust.types.EventT) -> None:
        """A skip_when_gates_fail trial whose gates are decided: every judge when they
        passed; when they failed, the LLM judges are recorded as skipped (no model call)."""
        request = decode(event.value, JudgeRequest, max_bytes=2 * settings.max_event_bytes,
                         max_depth=settings.max_json_depth + 2)
        if isinstance(request, Rejection):
            return await reject(event, request)
        trial = request.conversation
        scenario = await catalog.published(trial.scenario_id)
        if scenario is None:
            return await reject(event, unknown_scenario(trial.scenario_id))
        failed = [] if request.gates_passed else (request.failed_gates or ["?"])
        verdicts = await (await grader()).grade_after_gates(trial, scenario, failed)
        for v in verdicts:
            await request_outbox.send(judge_verdicts, trial.trial_id.encode(), encode(v))
        common.events.labels(PROCESSOR, "graded" if not failed else "skipped").inc()

    app.agent(conversations)(judge_trials)
    app.timer(interval=5.0)(known_judges)
    app.agent(judge_requests)(judge_after_gates)
    app.agent(regrade_requests, concurrency=settings.judge_concurrency)(regrade_trials)
    return app
