"""The audit's use cases: read the log and the projection into a ledger and reconcile every
trial (`audit`); repair what it found (`repair`). The commands only render."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from schemas.events import TrialIdentity, TrialVerdict
from services.audit.domain import AggregateTable, Audit, AuditReport, Repaired, bounds
from services.audit.ledger import Ledger
from services.contract.codec import Rejection, decode_or_reject
from services.contract.settings import Settings
from services.contract.topics import Topic, topic_name
from services.grading.windows import parse_windows
from services.kafka.catalog import read_catalog
from services.kafka.scan import scan
from services.storage.store import Store

Progress = Callable[[str, int, int | None], None]  # (step, done, total)
# What the audit is handed of other processors (services/cli/wiring.py):
TableReader = Callable[[Settings, Path], AggregateTable]  # (settings, a scratch directory)
# (settings, [(identity, attempt of its newest grading)], reason) -> how many were sent
Regrader = Callable[[Settings, Sequence[tuple[TrialIdentity, int]], str], int]
Recounter = Callable[[Settings, set[str]], int]  # -> scopes whose counts moved

READ = (  # (topic, how the ledger folds it, read from `since` less the clock skew)
    (Topic.GATE_RESULTS, "gate_results"),
    (Topic.JUDGE_VERDICTS, "judge_verdicts"),
    (Topic.TRIAL_VERDICTS, "trial_verdicts"),
    (Topic.DEAD_LETTERS, "dead_letters"),
)


def default_grace_s(settings: Settings) -> float:
    """How long a trial may still be in flight: the pipeline's deadlines (the gate's wait
    for its session, the verdict's for its judges) and a minute for the records between."""
    return settings.session_wait_s + settings.judge_wait_s + 60


@dataclass(frozen=True)
class Scope:
    run_id: str | None = None
    since_s: float | None = None  # seconds back from now
    grace_s: float = 0.0  # a trial younger than this is in flight, not unaccounted


@dataclass
class Audited:
    report: AuditReport
    ledger: Ledger
    catalog_versions: dict[str, str]  # scenario id -> its latest published version


@contextmanager
def audit(
    settings: Settings, scope: Scope, read_table: TableReader, progress: Progress | None = None
) -> Iterator[Audited]:
    """The audit of every trial in `scope`; the ledger stays open inside the block (a
    repair needs what it gathered)."""

    def tell(step: str) -> Callable[[int, int], None]:
        return lambda done, total: progress(step, done, total) if progress else None

    now = time.time()
    since = now - scope.since_s if scope.since_s is not None else None
    since_ms = int(since * 1000) if since is not None else None
    derived_ms = int((since - settings.max_clock_skew_s) * 1000) if since is not None else None
    with tempfile.TemporaryDirectory(prefix="passk-audit-") as scratch:
        ledger = Ledger(Path(scratch) / "ledger.db", settings, run_id=scope.run_id)
        try:
            scan(
                settings,
                topic_name(Topic.CONVERSATION_FINISHED, settings),
                ledger.conversations,
                since_ms=since_ms,
                progress=tell("conversations"),
            )
            for topic, fold in READ:
                scan(
                    settings,
                    topic_name(topic, settings),
                    getattr(ledger, fold),
                    since_ms=derived_ms,
                    progress=tell(topic.value),
                )
            ledger.projection(Store(settings.database_url).verdict_ids(scope.run_id))
            state = read_catalog(settings)
            catalog = state.latest()

            def judges_of(scenario_id: str, version: str | None) -> frozenset[str]:
                """The judges of the version the trial's gate graded against (the latest
                when none is known)."""
                scenario = state.get(scenario_id, version) or state.get(scenario_id)
                return frozenset(j.id for j in scenario.judges) if scenario else frozenset()

            table = read_table(settings, Path(scratch))
            b = bounds(
                parse_windows(settings.windows),
                now=now,
                retention_s=settings.dedup_retention_s,
                max_skew_s=settings.max_clock_skew_s,
                grace_s=scope.grace_s,
                newest_finished=ledger.newest_finished,
            )
            folded = Audit(b, table)
            for facts in ledger.facts(judges_of):
                folded.add(facts)
            report = folded.report(run_id=scope.run_id, since=since)
            yield Audited(report, ledger, {sid: s.version or "" for sid, s in catalog.items()})
        finally:
            ledger.close()


def repair(
    settings: Settings, audited: Audited, *, regrade: Regrader, recount: Recounter
) -> Repaired:
    """Re-grade the trials stuck before their verdict, write the newest verdict of the
    trials the projection lacks, and recount the scenarios whose counts are off."""
    report, ledger = audited.report, audited.ledger
    stuck = [
        u.trial_id
        for u in report.unaccounted
        if u.trial_id and u.stopped_at in ("gate", "judge", "verdict")
    ]
    identities = []
    for trial_id, run_id, scenario_id, session_id, version in ledger.identities(stuck):
        version = version or audited.catalog_versions.get(scenario_id)
        if version:
            identities.append(
                (
                    TrialIdentity(
                        trial_id=trial_id,
                        run_id=run_id,
                        scenario_id=scenario_id,
                        scenario_version=version,
                        session_id=session_id,
                    ),
                    ledger.attempt_of(trial_id),
                )
            )
    regraded = regrade(settings, identities, "passk audit --repair") if identities else 0

    unprojected = [
        u.trial_id for u in report.unaccounted if u.trial_id and u.stopped_at == "projection"
    ]
    verdicts: list[Any] = []
    for value in ledger.verdict_values(unprojected):
        verdict = decode_or_reject(value, TrialVerdict, settings)
        if not isinstance(verdict, Rejection):
            verdicts.append(verdict)
    if verdicts:
        store = Store(settings.database_url)
        store.create_schema()
        store.apply_many(verdicts)

    miscounted = {
        u.scenario_id
        for u in report.unaccounted
        if u.stopped_at in ("aggregate_run", "aggregate_window")
    }
    miscounted |= {s.scenario_id for s in report.scopes}
    recounted = recount(settings, miscounted) if miscounted else 0
    return Repaired(regraded=regraded, reprojected=len(verdicts), recounted_scopes=recounted)


def audit_until_clean(
    settings: Settings,
    scope: Scope,
    read_table: TableReader,
    within_s: float,
    progress: Progress | None = None,
) -> AuditReport:
    """Audit again until clean or `within_s` passed (the repairs' verdicts and counts take
    the pipeline's own time); the last audit's report."""
    deadline = time.monotonic() + within_s
    while True:
        with audit(settings, scope, read_table, progress) as audited:
            report = audited.report
        if report.clean or time.monotonic() >= deadline:
            return report
        time.sleep(2.0)


def audit_and_repair(
    settings: Settings,
    scope: Scope,
    *,
    read_table: TableReader,
    repair_log: bool,
    repair_wait_s: float,
    regrade: Regrader,
    recount: Recounter,
    described: str,
) -> AuditReport:
    """`passk audit`: every trial in `scope` accounted for; with `repair_log` and not
    clean, repaired and audited again until clean or `repair_wait_s` (the report then
    says what was repaired). NothingToJudge when the scope (`described`) has no trial."""
    from services.contract.exits import NothingToJudge

    with audit(settings, scope, read_table) as audited:
        report = audited.report
        if report.trials == 0:
            raise NothingToJudge("nothing to audit: no trial in " + described)
        repaired = None
        if repair_log and not report.clean:
            repaired = repair(settings, audited, regrade=regrade, recount=recount)
    if repaired is not None:
        report = audit_until_clean(settings, scope, read_table, repair_wait_s)
        report.repaired = repaired
    return report
