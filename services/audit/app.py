"""`passk worker audit`: the continuous auditor, supervised and scraped like the workers
(a server in services/contract/processors.py). Every PASSK_AUDIT_INTERVAL_S it audits the
last PASSK_AUDIT_PERIOD_S of the log (services/audit/continuous.py) and exports what it
found on its /metrics."""

from __future__ import annotations

import logging
import signal
from types import FrameType

from prometheus_client import REGISTRY, CollectorRegistry

from services.audit.continuous import Auditor
from services.audit.domain import AuditReport
from services.audit.metrics import AuditMetrics
from services.audit.reconcile import Scope, TableReader, audit, default_grace_s
from services.audit.settings import AuditSettings
from services.contract.settings import Settings
from services.runtime.metrics import serve_metrics

log = logging.getLogger("passk.audit")


def make_auditor(
    settings: Settings,
    audit_settings: AuditSettings,
    read_table: TableReader,
    registry: CollectorRegistry = REGISTRY,
) -> Auditor:
    grace = (
        audit_settings.grace_s if audit_settings.grace_s is not None else default_grace_s(settings)
    )
    scope = Scope(since_s=audit_settings.period_s, grace_s=grace)

    def audit_once() -> AuditReport:
        with audit(settings, scope, read_table) as audited:
            return audited.report

    return Auditor(
        audit_once,
        AuditMetrics(registry),
        interval_s=audit_settings.interval_s,
        period_s=audit_settings.period_s,
    )


class AuditWorker:
    """What `passk worker audit` runs (the Faust workers' `app.main()` shape)."""

    def __init__(
        self, settings: Settings, audit_settings: AuditSettings, read_table: TableReader
    ) -> None:
        self.settings = settings
        self.audit_settings = audit_settings
        self.read_table = read_table

    def main(self) -> None:
        level = self.settings.log_level.upper()
        logging.basicConfig(level=level if level in logging._nameToLevel else "WARNING")
        # kafka-python logs each scan's consumers closing (a metadata refresh cancelled, a
        # socket closed under a read, slow selector tasks): lines every round, none a
        # finding. An audit that fails is logged below with its exception, and counted.
        logging.getLogger("kafka").setLevel(logging.CRITICAL)
        auditor = make_auditor(self.settings, self.audit_settings, self.read_table)
        if self.settings.metrics_port:
            serve_metrics(self.settings.metrics_port, REGISTRY, self.settings.metrics_host)

        def stop(signum: int, frame: FrameType | None) -> None:
            # An audit only reads: ending it half-way loses nothing (its scratch ledger
            # is removed on the way out).
            auditor.stop.set()
            raise SystemExit(0)

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, stop)
        log.warning(
            "audit: auditing the last %.0f s of the log every %.0f s",
            self.audit_settings.period_s,
            self.audit_settings.interval_s,
        )
        auditor.run()


def build(settings: Settings, *, read_table: TableReader) -> AuditWorker:
    """The auditor from `settings`; its own settings, the PASSK_AUDIT_* variables, are read
    here, once, when the worker is built. `read_table` is the aggregate's table view, handed
    in by the CLI (services/cli/wiring.py): no processor imports another."""
    return AuditWorker(settings, AuditSettings(), read_table)
