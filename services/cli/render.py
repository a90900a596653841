"""What `passk status` and `passk topics create` print, with rich."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from services.cli.status import StatusReport
    from services.kafka.admin import TopicStatus


def print_topics(statuses: Iterable[TopicStatus], out: Console) -> None:
    table = Table("topic", "partitions", "status")
    for status in statuses:
        state = "created" if status.created else "exists"
        table.add_row(status.name, str(status.partitions), state)
    out.print(table)


def status_json(report: StatusReport) -> str:
    return json.dumps(
        {
            "dead_letters": report.letters,
            "processors": [
                {
                    "processor": s.processor,
                    "group": s.group,
                    "state": s.state,
                    "members": s.members,
                    "lag": s.lag,
                    "restarts": s.restarts,
                    "health": s.health,
                    "healthy": s.healthy,
                    "degraded": list(s.degraded),
                    "down": s.down,
                    "stalled": s.stalled,
                    "member_ids": list(s.member_names),
                }
                for s in report.statuses
            ],
            "input_leaders": [
                {
                    "topic": p.topic,
                    "partition": p.partition,
                    "leader": p.leader,
                    "in_sync": list(p.in_sync),
                }
                for p in report.leaders
            ],
        }
    )


def print_status(report: StatusReport, out: Console, partitions: bool) -> None:
    """The processors' table, the input partitions (one line, and a row for each without
    a leader or with a replica out of sync; every one with `partitions`), the dead
    letters per reason."""
    table = Table(
        "processor", "consumer group", "state", "members", "lag", "restarts", "health", "member ids"
    )
    for s in report.statuses:
        table.add_row(
            s.processor,
            s.group,
            s.state,
            str(s.members),
            "-" if s.lag is None else str(s.lag),
            "-" if s.restarts is None else str(s.restarts),
            s.health,
            "\n".join(s.member_names),
        )
    out.print(table)
    every = report.leaders
    widest = max((len(p.in_sync) for p in every), default=0)
    # A partition is worth a row when it has no leader or fewer replicas in sync than
    # the best of them; the rest is one line (a hundred rows said nothing on one broker).
    shown = (
        every if partitions else [p for p in every if p.leader is None or len(p.in_sync) < widest]
    )
    out.print(
        f"input partitions: {len(every)} across {len({p.topic for p in every})} "
        f"topics, {len(every) - len([p for p in every if p.leader is None])} led, "
        f"{len([p for p in every if len(p.in_sync) < widest])} with a replica out "
        "of sync" + ("" if partitions else " (--partitions lists them all)"),
        markup=False,
        soft_wrap=True,
    )
    if shown:
        leaders = Table("input topic", "partition", "leader broker", "in-sync replicas")
        for p in shown:
            leaders.add_row(
                p.topic,
                str(p.partition),
                "none" if p.leader is None else str(p.leader),
                ",".join(map(str, p.in_sync)),
            )
        out.print(leaders)
    if report.letters is None:
        out.print("dead letters: unknown (the dead-letters topic could not be read)")
    else:
        out.print(
            "dead letters by reason: "
            + (", ".join(f"{r} {n}" for r, n in report.letters.items()) or "none")
            + " (`passk dead-letters` lists them)",
            markup=False,
            highlight=False,
        )
