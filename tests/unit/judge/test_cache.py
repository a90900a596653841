from __future__ import annotations

from pathlib import Path

import pytest

from services.judge.cache import JudgeCacheEntry, VerdictCache, cache_key
from services.storage.db import engine_for

BASE = ("gpt-4o-mini", "0123456789abcdef", "The agent asked about parts.", "a" * 64)


@pytest.mark.parametrize(
    "changed",
    [
        ("gpt-4o", *BASE[1:]),
        (BASE[0], "fedcba9876543210", *BASE[2:]),
        (*BASE[:2], "The agent asked about tests.", BASE[3]),
        (*BASE[:3], "b" * 64),
    ],
)
def test_each_part_of_the_key_matters(changed: tuple[str, str, str, str]) -> None:
    assert cache_key(*changed) != cache_key(*BASE)


def test_key_is_stable_and_ignores_surrounding_whitespace_of_the_assertion() -> None:
    assert cache_key(*BASE) == cache_key(BASE[0], BASE[1], f"  {BASE[2]}\n", BASE[3])


def entry(key: str, passed: bool = True) -> JudgeCacheEntry:
    return JudgeCacheEntry(
        key=key,
        model=BASE[0],
        prompt_hash=BASE[1],
        assertion=BASE[2],
        transcript_hash=BASE[3],
        passed=passed,
        reason="r",
        answered_by="passk-standin",
        input_tokens=10,
        output_tokens=2,
    )


class CacheContract:
    """The cache's behaviour, written once; run on SQLite here and on PostgreSQL in
    tests/integration/test_judge.py."""

    @pytest.fixture
    def url(self, tmp_path: Path) -> str:
        return f"sqlite:///{tmp_path / 'cache.db'}"

    def test_store_round_trip_and_lookups_off(self, url: str) -> None:
        engine = engine_for(url)
        cache = VerdictCache(engine)
        cache.create()
        cache.create()  # idempotent
        key = cache_key(*BASE)
        assert cache.get(key) is None
        cache.put(entry(key, passed=False))
        cache.put(entry(key, passed=False))  # a second worker storing the same answer
        hit = cache.get(key)
        assert hit is not None and hit.passed is False and hit.answered_by == "passk-standin"
        assert (hit.input_tokens, hit.output_tokens) == (10, 2)
        assert VerdictCache(engine, lookups=False).get(key) is None  # PASSK_JUDGE_CACHE=0

    async def test_async_access(self, url: str) -> None:
        cache = VerdictCache(engine_for(url))
        cache.create()
        key = cache_key("m", "p", "a long assertion " * 200, "t")
        await cache.aput(entry(key))
        hit = await cache.aget(key)
        assert hit is not None and hit.passed is True


class TestSqliteCache(CacheContract):
    pass
