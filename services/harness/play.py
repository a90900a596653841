"""`passk run` as a use case: scenarios and a target in, the trials played and published,
the run's summary out. The `run` command wraps it with a progress bar and a table;
`passk ci` calls it as one step of its own.

Kafka errors escape (the CLI makes them exit 4); a target whose agent cannot be built is a
UsageError; missing topics are Unreachable.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from schemas.scenario import Scenario
from services.contract.exits import Unreachable, UsageError
from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.harness.adaptive_run import AdaptiveOptions, AdaptiveResult
from services.harness.domain import AgentError, PlannedTrial, RunSummary, plan_trials
from services.harness.runner import Harness, UserFactory
from services.harness.target import Target


@dataclass(frozen=True)
class Unpinned:
    """A scenario file `passk run` would run against another version than the one its
    trials would be graded against, and why."""

    file: str
    scenario_id: str
    why: str

    def __str__(self) -> str:
        return f"{self.file}: scenario {self.scenario_id!r} {self.why}"


def unpinned(
    scenarios: Sequence[Scenario], sources: Mapping[str, str], latest: Mapping[str, Scenario]
) -> list[Unpinned]:
    """Each scenario that is not published, or whose local file differs from the latest
    published version (its content hash, `version`, is another)."""
    out = []
    for s in scenarios:
        file = sources.get(s.id, s.id)
        published = latest.get(s.id)
        if published is None:
            out.append(Unpinned(file, s.id, "is not published"))
        elif published.version != s.version:
            out.append(
                Unpinned(
                    file,
                    s.id,
                    f"differs from its published version "
                    f"{published.version} (the file is {s.version})",
                )
            )
    return out


def users_for(
    scenarios: Sequence[Scenario],
    settings: Settings,
    user_model: str | None,
    standin_url: str | None = None,
) -> tuple[UserFactory, str | None]:
    """The users' factory, and a warning to show when the offline stand-in plays them.
    `standin_url`: the stand-in's /v1 URL (default: 127.0.0.1:PASSK_STANDIN_PORT)."""
    if not any(s.user and s.user.script is None for s in scenarios):
        return UserFactory(), None
    from openai import AsyncOpenAI

    stand_in = not settings.openai_api_key and not settings.openai_base_url
    base_url = settings.openai_base_url or None
    if stand_in:
        base_url = standin_url or (
            f"http://127.0.0.1:{os.environ.get('PASSK_STANDIN_PORT', '8400')}/v1"
        )
    users = UserFactory(
        AsyncOpenAI(
            base_url=base_url, api_key=settings.openai_api_key or "stand-in", max_retries=2
        ),
        "passk-standin" if stand_in else (user_model or settings.judge_model),
        stand_in,
    )
    warning = (
        (f"users without a script are played by the offline stand-in (not a model) at {base_url}")
        if stand_in
        else None
    )
    return users, warning


def _open(producer: Any, target: Target, settings: Settings) -> tuple[Any, Any]:
    """The agent's client and the state probe, once the input topics are known to exist
    (Unreachable, nothing sent, otherwise; a target whose agent cannot be built is a
    UsageError)."""
    from services.harness.adapters import make_client
    from services.harness.probes import make_probe

    missing = producer.missing_topics(
        [topic_name(t, settings) for t in (Topic.CONVERSATION_FINISHED, Topic.SESSION_PERSISTED)]
    )
    if missing:
        raise Unreachable(
            f"missing topics: {', '.join(missing)}; nothing sent "
            "(create them with `passk topics create`)"
        )
    try:
        agent = make_client(target.agent)
    except AgentError as exc:
        raise UsageError(f"agent: {exc.reason}") from None
    return agent, make_probe(target.state)


def play(
    scenarios: Sequence[Scenario],
    target: Target,
    run_id: str,
    settings: Settings,
    *,
    users: UserFactory,
    trials: int = 0,
    concurrency: int = 4,
    agent_version: str | None = None,
    on_plan: Callable[[list[PlannedTrial]], None] = lambda todo: None,
    on_trial: Callable[[str, str], None] = lambda trial_id, what: None,
) -> RunSummary:
    """Plan max(trials, k) trials per scenario, skip those of this run already in the log,
    play the rest and publish each (SIGINT/SIGTERM stop it cleanly: see runner.py)."""
    from services.harness.log import published_trials, publisher
    from services.kafka.producer import TrafficProducer

    done = published_trials(run_id, settings)
    plan = plan_trials(list(scenarios), run_id, trials)
    todo = [p for p in plan if p.trial_id not in done]
    producer = TrafficProducer(settings)
    # set on SIGINT: a publish stops waiting for its acknowledgement (runner.py)
    stop_waiting = threading.Event()
    try:
        agent, probe = _open(producer, target, settings)
        on_plan(todo)
        harness = Harness(
            run_id=run_id,
            agent=agent,
            probe=probe,
            users=users,
            publish=publisher(producer, stop_waiting),
            timeout_s=target.agent.timeout_s,
            agent_version=agent_version,
            concurrency=concurrency,
            stop_waiting=stop_waiting,
            on_trial=on_trial,
        )
        harness.summary.planned = len(plan)
        harness.summary.skipped = len(plan) - len(todo)

        async def main() -> None:
            try:
                await harness.run(todo)
            finally:
                await agent.close()
                await probe.close()
                if users.model_client is not None:
                    await users.model_client.close()

        asyncio.run(main())
    finally:
        # Every publish has had its wait (bounded); what is left is given up at once.
        producer.close(timeout_s=0)
    return harness.summary


def play_adaptive(
    scenarios: Sequence[Scenario],
    target: Target,
    run_id: str,
    settings: Settings,
    *,
    users: UserFactory,
    options: AdaptiveOptions,
    concurrency: int = 4,
    agent_version: str | None = None,
    on_trial: Callable[[str, str], None] = lambda trial_id, what: None,
    on_round: Callable[[int, dict[str, int]], None] = lambda number, given: None,
) -> AdaptiveResult:
    """`passk run --adaptive`: k trials each, then rounds for the undecided scenarios
    (services/harness/adaptive_run.py), each round's verdicts read from the projection."""
    from services.harness.adaptive_run import run_adaptive
    from services.harness.log import published_trials, publisher
    from services.kafka.producer import TrafficProducer
    from services.storage.store import Store

    done = published_trials(run_id, settings)
    producer = TrafficProducer(settings)
    stop_waiting = threading.Event()
    try:
        agent, probe = _open(producer, target, settings)

        async def one_round(round_plan: list[PlannedTrial]) -> tuple[RunSummary, set[str]]:
            sent: set[str] = set()

            def on_each(trial_id: str, what: str) -> None:
                on_trial(trial_id, what)
                if what not in ("interrupted", "not published"):
                    sent.add(trial_id)

            harness = Harness(
                run_id=run_id,
                agent=agent,
                probe=probe,
                users=users,
                publish=publisher(producer, stop_waiting),
                timeout_s=target.agent.timeout_s,
                agent_version=agent_version,
                concurrency=concurrency,
                stop_waiting=stop_waiting,
                on_trial=on_each,
            )
            harness.summary.planned = len(round_plan)
            return await harness.run(round_plan), sent

        async def main() -> AdaptiveResult:
            store = Store(settings.database_url)
            try:
                return await run_adaptive(
                    run_id=run_id,
                    scenarios=list(scenarios),
                    options=options,
                    default_goal=settings.alert_min_pass_hat_k,
                    in_log=done,
                    play=one_round,
                    verdicts=lambda: {t.trial_id: t.outcome for t in store.trials(run_id)},
                    on_round=on_round,
                )
            finally:
                store.close()
                await agent.close()
                await probe.close()
                if users.model_client is not None:
                    await users.model_client.close()

        return asyncio.run(main())
    finally:
        producer.close(timeout_s=0)
