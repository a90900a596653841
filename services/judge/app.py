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
judge ask the model (the worker's `--no-cache`). Each record's handling: steps.py.
"""

from __future__ import annotations

from functools import partial

import faust

from services.contract.processors import PROCESSORS
from services.contract.settings import Settings
from services.contract.topics import Topic
from services.judge.grading import build_grader
from services.judge.metrics import default_metrics
from services.judge.steps import Steps
from services.kafka.catalog import ScenarioCatalog
from services.runtime.agents import each_record, subscribe, through_outbox
from services.runtime.app import DeadLetters, Delivery, make_app, raw_topic, run_alongside
from services.runtime.metrics import common_metrics
from services.runtime.outage import STORE, Dependency
from services.runtime.outbox import Outbox

PROCESSOR = "judge"
SPEC = PROCESSORS[PROCESSOR]  # its topics


def build(settings: Settings) -> faust.App:
    """The judge's Faust app, its topics, agents and timer, from `settings`."""
    app = make_app(PROCESSOR, settings)
    judge_verdicts = raw_topic(app, Topic.JUDGE_VERDICTS, settings)
    reject = DeadLetters(app, PROCESSOR, settings)
    outbox, request_outbox = Outbox(PROCESSOR), Outbox(PROCESSOR)  # the agents run side by side
    catalog = ScenarioCatalog(settings)
    run_alongside(app, settings, catalog)
    metrics = default_metrics()
    metrics.set_prices(settings.judge_price_per_mtok_in, settings.judge_price_per_mtok_out)
    steps = Steps(
        settings,
        catalog=catalog,
        reject=reject,
        send_verdict=partial(outbox.send, judge_verdicts),
        send_verdict_after_gates=partial(request_outbox.send, judge_verdicts),
        deliver_regraded=partial(Delivery(PROCESSOR), judge_verdicts),
        make_grader=partial(build_grader, settings, metrics),
        store=Dependency(STORE, "judge: creating the verdict cache"),
        metrics=metrics,
        processor=PROCESSOR,
        common=common_metrics(),
    )
    # A batch's trials are graded at once: its model calls overlap (bounded by the client).
    batched = partial(
        through_outbox,
        reject=reject,
        concurrently=True,
        batch_max=settings.batch_max,
        within_s=settings.batch_within_s,
    )
    subscribe(
        app,
        SPEC,
        settings,
        {
            "judge_trials": batched(outbox, handle=steps.judge_trial, before=steps.ready),
            "judge_after_gates": batched(
                request_outbox, handle=steps.judge_after_gates, before=catalog.ready
            ),
            "regrade_trials": each_record(reject, steps.regrade, before=catalog.ready),
        },
        concurrency={"regrade_trials": settings.judge_concurrency},
    )
    app.timer(interval=5.0)(steps.known_judges)
    return app
