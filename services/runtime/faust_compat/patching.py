"""How a patch is put on faust: at most once per process."""

from __future__ import annotations

from collections.abc import Callable


class Patch:
    """A patch on faust's classes, installed at most once: the classes are shared by every
    app in the process, and installing twice would wrap the wrapper."""

    def __init__(self, install: Callable[[], None]) -> None:
        self._install = install
        self.installed = False

    def apply(self) -> None:
        if not self.installed:
            self._install()
            self.installed = True
