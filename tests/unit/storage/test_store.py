from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from services.storage.store import Store
from tests.unit.storage.store_contract import StoreContract


class TestSQLiteStore(StoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[Store]:
        store = Store(f"sqlite:///{tmp_path / 'projection.db'}")
        yield store
        store.close()
