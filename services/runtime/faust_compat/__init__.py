"""Everything passk does to or inside faust-streaming, in one place (docs/faust.md).

passk runs on one faust-streaming release, pinned in requirements.lock. The patches here
change that release's behaviour where it lost or stalled records, and the accessors are
the only code that reads or writes a private faust name. `apply()` is called by the app
factory (`make_app`) before any app is built: it refuses any other faust-streaming
release, then installs each patch once. Nothing here patches on import.
"""

from __future__ import annotations

import faust

from services.runtime.faust_compat import (
    controller,
    delivery,
    fetch,
    flush,
    seek_guard,
    stop,
    worker_log,
)
from services.runtime.faust_compat.fetch import set_fetch
from services.runtime.faust_compat.internals import (
    RECOVERY_ORDER,
    as_current_event,
    current_event,
    forget_paused,
    on_disk_table,
    on_recovery_completed,
    pause_keeping_fetched,
    paused_partitions,
    resume_paused,
)
from services.runtime.faust_compat.seek_guard import awaiting_seek

PINNED_VERSION = "0.15.3"  # requirements.lock and pyproject.toml pin this one

# Each patch: its name (docs/faust.md has a section per name) and the module installing it.
PATCHES = (
    ("seek_guard", seek_guard.PATCH),
    ("flush", flush.PATCH),
    ("delivery", delivery.PATCH),
    ("fetch", fetch.PATCH),
    ("controller", controller.PATCH),
    ("worker_log", worker_log.PATCH),
    ("stop", stop.PATCH),
)


class FaustVersionError(RuntimeError):
    """Another faust-streaming release than the one the patches were written for."""


def check_version(version: str) -> None:
    """Refuse another release: the patches replace internals of this exact one, and on
    another they could silently do the wrong thing."""
    if version != PINNED_VERSION:
        raise FaustVersionError(
            f"passk's Faust compatibility layer (services/runtime/faust_compat) is written "
            f"for faust-streaming {PINNED_VERSION}, but {version} is installed. Install the "
            f"pinned requirements.lock; before moving the pin, re-check each patch and "
            f"private access listed in docs/faust.md against the new release."
        )


def apply() -> None:
    """Check the installed faust-streaming, then install every patch (each only once)."""
    check_version(faust.__version__)
    for _name, patch in PATCHES:
        patch.apply()


def applied() -> dict[str, bool]:
    """Which patches are installed in this process (for tests and diagnostics)."""
    return {name: patch.installed for name, patch in PATCHES}


__all__ = [
    "PATCHES",
    "PINNED_VERSION",
    "RECOVERY_ORDER",
    "FaustVersionError",
    "applied",
    "apply",
    "as_current_event",
    "awaiting_seek",
    "check_version",
    "current_event",
    "forget_paused",
    "on_disk_table",
    "on_recovery_completed",
    "pause_keeping_fetched",
    "paused_partitions",
    "resume_paused",
    "set_fetch",
]
