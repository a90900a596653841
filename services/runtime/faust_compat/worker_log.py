"""Keeping the root logger at the level asked for in a Faust worker (installed by `apply`).

At WARN and above faust-streaming 0.15.3's worker adds a handler for its terminal
spinner and sets the root logger to DEBUG, and leaves it there: every debug call in
Faust and aiokafka then built a log record that the handlers dropped (7 % of the
aggregate's profile, 5 % of a busy gate's, py-spy). Without the spinner handler the root
logger stays at the level `--loglevel` set. The spinner itself is left alone: a worker
still prints its "starting" line and its " OK ^" when it is ready.
"""

from __future__ import annotations

import logging
from typing import Any

from faust.worker import Worker

from services.runtime.faust_compat.patching import Patch

_ORIGINAL: dict[str, Any] = {}


def _setup_spinner_handler(self: Any, logger: logging.Logger, level: int) -> None:
    """Faust's sets the root's first handler to `level`, adds the spinner's DEBUG handler
    and lowers the root logger to DEBUG; this does none of it."""


def _install() -> None:
    _ORIGINAL["setup"] = Worker._setup_spinner_handler
    Worker._setup_spinner_handler = _setup_spinner_handler  # type: ignore[method-assign]


PATCH = Patch(_install)
