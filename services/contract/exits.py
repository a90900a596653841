"""How every `passk` command ends: one exit code per kind of answer, one clear line on stderr,
never a traceback for a broker or store that is down or a setting that is malformed.

| code | `ExitCode`         | meaning                                                        |
|------|--------------------|----------------------------------------------------------------|
| 0    | `OK`               | done; the answer is yes                                        |
| 1    | `NO`               | the answer is no (gate failed, not settled, timed out, wrong)  |
| 2    | `USAGE`            | usage error: bad arguments, invalid files, malformed settings  |
| 3    | `NOTHING_TO_JUDGE` | nothing to judge: the run has no trials, no valid line to send |
| 4    | `UNREACHABLE`      | infrastructure unreachable: the Kafka broker or the database   |
| 5    | `KAFKA_REFUSED`    | Kafka refused us: wrong SASL credentials, or outside our ACLs  |

Using it from a command (new commands need nothing else):

- raise `CliError("what went wrong", ExitCode.NO)` (or `Unreachable(...)`,
  `NothingToJudge(...)`, `UsageError(...)`): `services.cli.main` prints `error: <message>`
  on stderr and exits with the code (plain exceptions: the CLI layer turns them into
  click's, `services.cli.main.PasskGroup`);
- let a Kafka, SQLAlchemy or settings exception escape: `main` maps it with `classify`
  (unreachable broker or database -> 4, malformed URL or setting -> 2);
- take `wait: float | None = BROKER_WAIT` (the one `--wait`, `services.clikit`) and call
  `services.kafka.reach.require_broker(wait, settings)` before the first Kafka client: it
  answers "unreachable" within `wait_s` (`--wait`, else `PASSK_BROKER_WAIT_S`) instead of
  kafka-python's 30 s bootstrap timeout, and "refused" as soon as a SASL broker turns our
  credentials down (kafka-python would retry them for those 30 s too).
"""

from __future__ import annotations

import errno
import sys
from collections.abc import Callable
from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    NO = 1
    USAGE = 2
    NOTHING_TO_JUDGE = 3
    UNREACHABLE = 4
    KAFKA_REFUSED = 5  # see services.kafka.kafka_client.refusal_message


EXIT_CODES_HELP = (
    "Exit codes: 0 ok; 1 the answer is no (gate failed, not ready, timed out); 2 usage "
    "error; 3 nothing to judge (no trials); 4 broker or database unreachable; 5 Kafka "
    "refused our credentials or an operation outside our ACLs."
)


class CliError(Exception):
    """A command's answer that is not a plain success: a message and its exit code.

    A plain exception: the CLI layer (`services.cli.main`) prints `error: <message>` and
    exits with `code`, whether typer's own main loop or `main` meets it."""

    code: ExitCode = ExitCode.NO

    def __init__(self, message: str, code: ExitCode | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class UsageError(CliError):
    code = ExitCode.USAGE


class NothingToJudge(CliError):
    code = ExitCode.NOTHING_TO_JUDGE


class Unreachable(CliError):
    code = ExitCode.UNREACHABLE


class KafkaRefused(CliError):
    code = ExitCode.KAFKA_REFUSED


# kafka-python's names for "no broker answered" (some exist only in some versions).
_KAFKA_UNREACHABLE = (
    "NoBrokersAvailable",
    "KafkaTimeoutError",
    "KafkaConnectionError",
    "BrokerNotAvailableError",
    "NodeNotReadyError",
    "RequestTimedOutError",
)


def classify(
    exc: BaseException,
    bootstrap: Callable[[], str] = lambda: "KAFKA_BOOTSTRAP_SERVERS",
) -> tuple[ExitCode, str] | None:
    """The exit code and message for an exception a command let escape; None: a bug.
    `bootstrap`: the broker address to name when it is unreachable (the caller reads it
    from the settings; this module reads none)."""
    if isinstance(exc, CliError):
        return exc.code, str(exc)
    from kafka import errors as kafka_errors
    from pydantic import ValidationError
    from sqlalchemy.exc import ArgumentError, InterfaceError, NoSuchModuleError, OperationalError

    unreachable = tuple(
        getattr(kafka_errors, name) for name in _KAFKA_UNREACHABLE if hasattr(kafka_errors, name)
    )
    if isinstance(exc, unreachable):
        return ExitCode.UNREACHABLE, f"the Kafka broker at {bootstrap()} is unreachable ({exc})"
    if isinstance(exc, ArgumentError | NoSuchModuleError):
        return ExitCode.USAGE, f"PASSK_DATABASE_URL (or --database-url) is not usable: {exc}"
    if isinstance(exc, OperationalError | InterfaceError):
        detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        return ExitCode.UNREACHABLE, f"the database is unreachable: {detail}"
    if isinstance(exc, ValidationError) and exc.title == "Settings":
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {str(e['msg']).removeprefix('Value error, ')}"
            for e in exc.errors()
        )
        return ExitCode.USAGE, f"invalid setting: {problems}"
    if isinstance(exc, ConnectionError):
        return ExitCode.UNREACHABLE, f"a connection failed: {exc}"
    if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
        return ExitCode.USAGE, f"the port is already in use ({exc}); choose another with --port"
    return None


def say_error(message: str) -> None:
    """One line on stderr; plain text, so a pipe or a log keeps it whole."""
    print(f"error: {message}", file=sys.stderr)
