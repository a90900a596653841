"""Grading one trial: every judge of its scenario at once, LLM calls bounded by the client."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from sqlalchemy.exc import SQLAlchemyError

from schemas.events import ConversationFinished, JudgeVerdict
from schemas.scenario import JudgeSpec, Scenario
from services.contract.settings import Settings
from services.grading.calibration import judge_version
from services.grading.production import llm_judges_sampled
from services.grading.user_checks import user_check_specs, user_view
from services.judge import domain
from services.judge.cache import CachedAnswer, JudgeCacheEntry, VerdictCache, cache_key
from services.judge.client import JudgeClient, RetryPolicy
from services.judge.metrics import JudgeMetrics
from services.judge.prompt import PROMPT_HASH, transcript_hash
from services.runtime.outage import STORE, Dependency
from services.storage.db import engine_for

log = logging.getLogger(__name__)


# How long a judgement waits for the verdict cache: a locked or slow store (SQLite holds a
# write for its 30 s busy timeout) turns a lookup into a miss and an answer unremembered,
# instead of holding the verdict past PASSK_JUDGE_WAIT_S (red-team re-run: a 60 s lock
# turned good trials into `error` with a 45 s wait).
CACHE_WAIT_S = 2.0


class Grader:
    def __init__(
        self,
        *,
        client: JudgeClient | None,
        cache: VerdictCache | None,
        metrics: JudgeMetrics | None = None,
        model: str,
    ) -> None:
        self.client, self.cache, self.metrics, self.model = client, cache, metrics, model
        # The cache saves model calls; it is never a reason not to grade. A store that is
        # down makes a lookup a miss and an answer unremembered (counted, logged once).
        self.store = Dependency(STORE, "judge: verdict cache")

    def _skip_cache(self) -> bool:
        # While the store is down, only the retry that is due touches it: every other call
        # would park a thread on a locked file for the driver's busy timeout.
        return not self.store.up and not self.store.due()

    async def _cached(self, key: str) -> CachedAnswer | None:
        assert self.cache is not None
        if self._skip_cache():
            return None
        try:
            hit = await asyncio.wait_for(self.cache.aget(key), CACHE_WAIT_S)
        except (SQLAlchemyError, TimeoutError) as exc:
            self.store.failed("cache_get", exc)
            return None
        self.store.succeeded()
        return hit

    async def _remember(self, entry: JudgeCacheEntry) -> None:
        assert self.cache is not None
        if self._skip_cache():
            return
        try:
            await asyncio.wait_for(self.cache.aput(entry), CACHE_WAIT_S)
        except (SQLAlchemyError, TimeoutError) as exc:
            self.store.failed("cache_put", exc)
        else:
            self.store.succeeded()

    def version_of(self, spec: JudgeSpec) -> str | None:
        """The judge version a verdict of this spec is made by; None for deterministic kinds."""
        if not domain.is_llm(spec):
            return None
        return judge_version(spec.id, spec.assertion or "", PROMPT_HASH, self.model)

    async def grade(
        self, trial: ConversationFinished, scenario: Scenario, sample_rate: float | None = None
    ) -> list[JudgeVerdict]:
        """Every judge of the scenario; for a production trial outside the sample (at
        `sample_rate`, else the scenario's), the LLM judges are recorded `not_sampled`."""
        users = await self.grade_user(trial, scenario)
        if llm_judges_sampled(trial, scenario, sample_rate):
            return [*await self.grade_judges(trial, scenario, scenario.judges), *users]
        rate = scenario.llm_judge_rate if sample_rate is None else sample_rate
        out = await self._llm_judges_not_asked(
            trial,
            scenario,
            lambda spec: domain.not_sampled_verdict(trial, scenario, spec, rate),
            # not a verdict of the model: the error rate stays honest
            self.metrics.unsampled if self.metrics else None,
        )
        return [*out, *users]

    async def _llm_judges_not_asked(
        self,
        trial: ConversationFinished,
        scenario: Scenario,
        recorded: Callable[[JudgeSpec], JudgeVerdict],
        count: Callable[[str], None] | None,
    ) -> list[JudgeVerdict]:
        """The deterministic judges graded; each LLM judge, not asked of the model, given
        the verdict `recorded` makes for it (skipped, not sampled), counted by `count`."""
        asked = [s for s in scenario.judges if not domain.is_llm(s)]
        graded = {v.judge_id: v for v in await self.grade_judges(trial, scenario, asked)}
        out = []
        for spec in scenario.judges:
            if spec.id in graded:
                out.append(graded[spec.id])
                continue
            out.append(recorded(spec).model_copy(update={"judge_version": self.version_of(spec)}))
            if count is not None:
                count(spec.id)
        return out

    async def grade_user(
        self, trial: ConversationFinished, scenario: Scenario
    ) -> list[JudgeVerdict]:
        """The scenario's user checks over the user's view of the trial, as `user:<id>`
        verdicts; graded whatever the gates said (a spoiled trial is invalid, not failed)."""
        specs = user_check_specs(scenario)
        if not specs:
            return []
        return await self.grade_judges(user_view(trial, scenario), scenario, specs)

    async def grade_judges(
        self, trial: ConversationFinished, scenario: Scenario, specs: list[JudgeSpec]
    ) -> list[JudgeVerdict]:
        verdicts = [
            v.model_copy(update={"judge_version": self.version_of(s)})
            for s, v in zip(
                specs,
                await asyncio.gather(*(self._one(trial, scenario, s) for s in specs)),
                strict=True,
            )
        ]
        if self.metrics:
            for v in verdicts:
                self.metrics.verdict(v.judge_id, v.result)
                self.metrics.spent(v.judge_id, v.input_tokens, v.output_tokens)
                if v.attempts and not v.cached and v.latency_ms is not None:
                    self.metrics.called(v.judge_id, v.latency_ms / 1000)
        return list(verdicts)

    async def grade_after_gates(
        self, trial: ConversationFinished, scenario: Scenario, failed_gates: list[str]
    ) -> list[JudgeVerdict]:
        """skip_when_gates_fail: every judge when the gates passed; when they failed, the
        deterministic judges (they cost nothing) and each LLM judge recorded as skipped."""
        if not failed_gates or not llm_judges_sampled(trial, scenario):
            return await self.grade(trial, scenario)
        out = await self._llm_judges_not_asked(
            trial,
            scenario,
            lambda spec: domain.skipped_verdict(trial, scenario, spec, failed_gates),
            self.metrics.skip if self.metrics else None,
        )
        return [*out, *await self.grade_user(trial, scenario)]

    async def _one(
        self, trial: ConversationFinished, scenario: Scenario, spec: JudgeSpec
    ) -> JudgeVerdict:
        if not domain.is_llm(spec):
            return domain.deterministic_verdict(trial, scenario, spec)
        if self.client is None:
            return domain.not_configured_verdict(trial, scenario, spec)
        assertion = spec.assertion or ""
        key = cache_key(self.model, PROMPT_HASH, assertion, transcript_hash(trial.transcript))
        if self.cache is not None:
            hit = await self._cached(key)
            if hit is not None:
                if self.metrics:
                    self.metrics.cache_hit(spec.id)
                return domain.cached_verdict(trial, scenario, spec, hit)
        call = await self.client.judge(spec.id, assertion, trial.transcript)
        verdict = domain.llm_verdict(trial, scenario, spec, call)
        if self.cache is not None and call.answer is not None:  # errors are never cached
            await self._remember(
                JudgeCacheEntry(
                    key=key,
                    model=self.model,
                    prompt_hash=PROMPT_HASH,
                    assertion=assertion.strip(),
                    transcript_hash=transcript_hash(trial.transcript),
                    passed=call.answer.passed,
                    reason=call.answer.reason,
                    answered_by=call.model,
                    input_tokens=call.input_tokens,
                    output_tokens=call.output_tokens,
                )
            )
        return verdict


def build_grader(settings: Settings, metrics: JudgeMetrics | None) -> Grader:
    """The grader from the settings; without a model configured, LLM judges are `error`."""
    client = None
    if settings.openai_base_url or settings.openai_api_key:
        client = JudgeClient(
            model=settings.judge_model,
            base_url=settings.openai_base_url,
            api_key=settings.openai_api_key,
            timeout_s=settings.judge_timeout_s,
            concurrency=settings.judge_concurrency,
            policy=RetryPolicy(max_retries=settings.judge_max_retries),
            metrics=metrics,
        )
    else:
        log.error("no judge model configured (OPENAI_BASE_URL / OPENAI_API_KEY): llm judges error")
    cache = VerdictCache(engine_for(settings.database_url), lookups=settings.judge_cache)
    cache.create()
    return Grader(client=client, cache=cache, metrics=metrics, model=settings.judge_model)
