"""What the verdict does with each record the keyed join hands it: a gate result or a judge
verdict of a trial (joined by trial_id), or a tick of a pending trial's deadline. The
decisions are domain.py's; this publishes the one TrialVerdict they assemble, refuses what
cannot be used, and counts it."""

from __future__ import annotations

import logging
import time
from dataclasses import KW_ONLY, dataclass, field
from datetime import UTC, datetime

from schemas.events import GateResult, JudgeVerdict
from schemas.scenario import Scenario
from services.contract.codec import Rejection, encode
from services.contract.settings import Settings
from services.grading.calibration import Bar, GatingPolicy
from services.kafka.calibrations import CalibrationFollower
from services.runtime.app import OutputTopic, Record
from services.runtime.keyed_join import JoinSteps, KeyedJoin
from services.runtime.metrics import CommonMetrics
from services.verdict import domain
from services.verdict.metrics import VerdictMetrics

log = logging.getLogger(__name__)


@dataclass
class Steps(JoinSteps):
    settings: Settings
    timing: domain.Timing
    join: KeyedJoin[domain.TrialState]
    _: KW_ONLY
    calibrations: CalibrationFollower
    trial_verdicts: OutputTopic
    metrics: VerdictMetrics
    common: CommonMetrics
    policy: GatingPolicy = field(init=False)

    def __post_init__(self) -> None:
        self.policy = GatingPolicy(
            bar=Bar(self.settings.calibration_bar, self.settings.min_labelled),
            uncalibrated=self.settings.uncalibrated_judges,
        )

    # ------------------------------------------------------------------ the agent
    async def before(self) -> None:
        """Once the catalog is read, before the first record."""
        self.metrics.known_scenarios(self.catalog.latest())
        await self.calibrations.ready()

    async def on_gate_result(self, event: Record) -> None:
        await self._on_result(event, GateResult)

    async def on_judge_verdict(self, event: Record) -> None:
        await self._on_result(event, JudgeVerdict)

    async def on_tick(self, event: Record, key: str, state: domain.TrialState, now: float) -> None:
        decision = domain.on_tick(state, now, self.timing, self._scenario_for(state))
        if decision.action == "forget":
            self.join.store(key, None)
        elif (
            decision.action == "emit"
            and (done := await self._emit(state, decision.missing, decision.waited_s)) is not None
        ):
            self.join.store(key, done)
            self.common.events.labels(self.processor, "deadline").inc()

    # ------------------------------------------------------------------ a timer
    async def known_scenarios(self) -> None:
        """Each scenario's trial series exist from the start, at 0 (see metrics.py)."""
        if self.catalog.is_ready:
            self.metrics.known_scenarios(self.catalog.latest())

    # ------------------------------------------------------------------ what they share
    async def _on_result(self, event: Record, model: type[GateResult | JudgeVerdict]) -> None:
        now = time.time()
        result = await self.join.decoded(event, model)
        if (
            result is None
            or await self.join.scenario(event, result.scenario_id, result.scenario_version) is None
        ):
            return
        state = self.join.load(result.trial_id)
        # Before the repeat check: a reused id with the first trial's attempt is no repeat.
        if conflict := domain.identity_conflict(state, result):
            return await self.reject(event, Rejection("trial_id_conflict", conflict))
        if domain.is_duplicate(state, result):
            self.metrics.duplicates.inc()
            self.common.events.labels(self.processor, "duplicate").inc()
            return
        if isinstance(result, GateResult):
            state = domain.on_gate_result(state, result, now)
        else:
            state = domain.on_judge_verdict(state, result, now)
        # the broker's arrival time of this input (LogAppendTime; faust gives seconds)
        emitted = (
            None
            if domain.missing_checks(state, self._scenario_for(state))
            else (await self._emit(state, [], 0.0, arrived_at=event.message.timestamp))
        )
        self.common.events.labels(self.processor, "waiting" if emitted is None else "emitted").inc()
        self.join.store(result.trial_id, state if emitted is None else emitted)

    def _scenario_for(self, state: domain.TrialState) -> Scenario | None:
        version = state.scenario_version
        if version is None and state.judges:
            version = next(iter(state.judges.values())).scenario_version
        return self.catalog.get(state.scenario_id, version) or self.catalog.get(state.scenario_id)

    async def _emit(
        self,
        state: domain.TrialState,
        missing: list[str],
        waited_s: float,
        arrived_at: float | None = None,
    ) -> domain.TrialState | None:
        """Publish the trial's verdict; None (nothing published, state kept for the next
        tick) if its scenario is no longer in the catalog, which arrival checked it was."""
        if (scenario := self._scenario_for(state)) is None:
            log.error(
                "verdict: scenario %r of trial %r left the catalog; verdict held",
                state.scenario_id,
                state.trial_id,
            )
            self.common.events.labels(self.processor, "scenario_missing").inc()
            return None
        # Gating is decided on every calibration published before the last input arrived.
        await self.calibrations.sync(arrived_at)
        verdict = domain.assemble(
            state,
            scenario,
            missing=missing,
            waited_s=waited_s,
            policy=self.policy,
            book=self.calibrations.book,
        )
        # Published before the trial is remembered as emitted (the join's Outbox): a crash
        # in between re-emits the same event id, which consumers drop.
        await self.join.send(self.trial_verdicts, state.trial_id, encode(verdict))
        self.metrics.count(verdict)
        if verdict.finished_at is not None and verdict.attempt == 1:  # a re-grade is not latency
            latency = (datetime.now(UTC) - verdict.finished_at).total_seconds()
            self.common.verdict_latency.observe(max(latency, 0.0))
        return domain.emitted(state, verdict, time.time())
