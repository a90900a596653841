"""The store contract on PostgreSQL. Needs PASSK_TEST_POSTGRES_URL (`make pg-up` then
`infra/postgres/pg-url.sh`); skipped without it unless PASSK_REQUIRE_POSTGRES=1."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import quote

import pytest
from sqlalchemy import create_engine, text

from services.storage.store import Store
from tests.unit.storage.store_contract import StoreContract

pytestmark = pytest.mark.postgres


def postgres_url() -> str:
    """The test database's URL, or skip (fail when PostgreSQL is required)."""
    url = os.environ.get("PASSK_TEST_POSTGRES_URL", "")
    if not url:
        if os.environ.get("PASSK_REQUIRE_POSTGRES") == "1":
            pytest.fail("PASSK_REQUIRE_POSTGRES=1 but PASSK_TEST_POSTGRES_URL is not set")
        pytest.skip("PASSK_TEST_POSTGRES_URL is not set (make pg-up; infra/postgres/pg-url.sh)")
    return url


@contextmanager
def fresh_schema(url: str) -> Iterator[str]:
    """A URL whose connections see only a new, empty schema, dropped afterwards: tests
    sharing the database never see each other's tables."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine("postgresql+psycopg://" + url.removeprefix("postgresql://"))
    try:
        with admin.begin() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    except Exception as exc:
        admin.dispose()
        if os.environ.get("PASSK_REQUIRE_POSTGRES") == "1":
            raise
        pytest.skip(f"PostgreSQL at {url} is not usable: {exc}")
    sep = "&" if "?" in url else "?"
    try:
        yield f"{url}{sep}options={quote(f'-csearch_path={schema}')}"
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


class TestPostgresStore(StoreContract):
    @pytest.fixture
    def store(self) -> Iterator[Store]:
        with fresh_schema(postgres_url()) as url:
            store = Store(url)
            yield store
            store.close()
