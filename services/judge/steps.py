"""What the judge does with each trial, gate decision and re-grade request it reads.

A trial is refused (dead-lettered) before any model is asked when it cannot be used; a
usable one gets one JudgeVerdict per judge of its scenario. The verdicts of a batch go out
through its outbox and are delivered before the batch is acked: a crash in between
re-grades the trial (the verdict cache answers) and re-sends the same event ids, which
consumers drop as repeats.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from sqlalchemy.exc import SQLAlchemyError

from schemas.events import ConversationFinished, JudgeRequest
from services.contract.codec import Rejection, decode, encode
from services.contract.eventtime import in_future, reference_time
from services.contract.settings import Settings
from services.grading.production import llm_judges_sampled
from services.judge import domain
from services.judge.grading import Grader
from services.judge.metrics import JudgeMetrics
from services.kafka.catalog import ScenarioCatalog, unknown_scenario
from services.runtime.app import DeadLetters, Record
from services.runtime.metrics import CommonMetrics
from services.runtime.outage import Dependency
from services.runtime.regrades import read_regrade

# Sends one verdict (key: the trial id) to the judge-verdicts topic.
Send = Callable[[bytes, bytes], Awaitable[None]]


class Steps:
    """The judge's handling of one record, for its three agents and its timer.

    `send_verdict` and `send_verdict_after_gates` hold a verdict in their agent's batch
    (each agent has its own outbox: they run side by side); `deliver_regraded` awaits each
    re-grade's verdict on its own (re-grades are rare, and apart from the batches).
    `make_grader` builds the grader, which creates the verdict cache's table: it is called
    once, on the first trial, through `store`, so it waits for a store that is down."""

    def __init__(
        self,
        settings: Settings,
        *,
        catalog: ScenarioCatalog,
        reject: DeadLetters,
        send_verdict: Send,
        send_verdict_after_gates: Send,
        deliver_regraded: Send,
        make_grader: Callable[[], Grader],
        store: Dependency,
        metrics: JudgeMetrics,
        processor: str,
        common: CommonMetrics,
    ) -> None:
        self.settings = settings
        self.catalog = catalog
        self.reject = reject
        self.send_verdict = send_verdict
        self.send_verdict_after_gates = send_verdict_after_gates
        self.deliver_regraded = deliver_regraded
        self.make_grader = make_grader
        self.store = store
        self.metrics = metrics
        self.common = common
        self.processor = processor
        self._grader: Grader | None = None
        self._grader_lock = asyncio.Lock()

    async def grader(self) -> Grader:
        async with self._grader_lock:
            if self._grader is None:  # creating the cache table needs the store: wait for it
                self._grader = await self.store.call(
                    "create_cache",
                    lambda: asyncio.to_thread(self.make_grader),
                    retry_on=(SQLAlchemyError,),
                )
        return self._grader

    async def ready(self) -> None:
        """Before the first trial: the catalog read, and each of its judges' series shown."""
        await self.catalog.ready()
        self.known_judges_now()

    def known_judges_now(self) -> None:
        self.metrics.known_judges({j.id for s in self.catalog.latest().values() for j in s.judges})

    async def known_judges(self) -> None:
        """Every judge of the catalog has its verdict series from the start (see
        metrics.py), and a judge of a scenario published since within seconds."""
        if self.catalog.is_ready:
            self.known_judges_now()

    async def judge_trial(self, record: Record) -> None:
        if (trial := await self.reject.decoded(record, ConversationFinished)) is None:
            return
        # The gate refuses the same record (same reference time): no trial, nothing to judge.
        reference = reference_time(record.message.timestamp, time.time())
        if future := in_future(trial.occurred_at, reference, self.settings.max_clock_skew_s):
            return await self.reject(record, future)
        # A scenario published moments before its traffic may not have been read yet.
        scenario = await self.catalog.published(trial.scenario_id, trial.scenario_version)
        if scenario is None:
            return await self.reject(
                record, unknown_scenario(trial.scenario_id, trial.scenario_version)
            )
        if scenario.skips_judges_when_gates_fail(self.settings.judge_skip_when_gates_fail) and (
            llm_judges_sampled(trial, scenario)
        ):
            # Graded when the gate's JudgeRequest says how the gates went (judge_after_gates).
            self.common.events.labels(self.processor, "awaiting_gates").inc()
            return None
        verdicts = await (await self.grader()).grade(trial, scenario)
        for v in verdicts:
            await self.send_verdict(trial.trial_id.encode(), encode(v))
        self.common.events.labels(self.processor, "graded").inc()

    async def judge_after_gates(self, record: Record) -> None:
        """A skip_when_gates_fail trial whose gates are decided: every judge when they
        passed; when they failed, the LLM judges are recorded as skipped (no model call)."""
        request = decode(
            record.value,
            JudgeRequest,
            max_bytes=2 * self.settings.max_event_bytes,
            max_depth=self.settings.max_json_depth + 2,
        )
        if isinstance(request, Rejection):
            return await self.reject(record, request)
        trial = request.conversation
        scenario = await self.catalog.published(trial.scenario_id, trial.scenario_version)
        if scenario is None:
            return await self.reject(
                record, unknown_scenario(trial.scenario_id, trial.scenario_version)
            )
        failed = [] if request.gates_passed else (request.failed_gates or ["?"])
        verdicts = await (await self.grader()).grade_after_gates(trial, scenario, failed)
        for v in verdicts:
            await self.send_verdict_after_gates(trial.trial_id.encode(), encode(v))
        self.common.events.labels(self.processor, "graded" if not failed else "skipped").inc()

    async def regrade(self, record: Record) -> None:
        """Grade a trial again, against the scenario version it was graded against, under
        the request's attempt (new event ids: the verdict does not drop them as repeats)."""
        found = await read_regrade(record, self.catalog, self.reject, self.settings)
        if found is None:
            return
        request, scenario = found
        verdicts = await (await self.grader()).grade(
            request.conversation, scenario, request.sample_rate
        )
        await asyncio.gather(
            *(
                self.deliver_regraded(request.trial_id.encode(), encode(v))
                for v in domain.for_attempt(verdicts, request.attempt)
            )
        )
        self.common.events.labels(self.processor, "regraded").inc()
