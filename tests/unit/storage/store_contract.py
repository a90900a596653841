"""The store's contract, written once and run against every backend by subclassing
(as eventsourcing does): SQLite in tests/unit/storage/test_store.py, PostgreSQL in
tests/integration/test_store_postgres.py. A subclass provides the `store` fixture."""

from __future__ import annotations

import logging
import random
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import inspect

from services.storage.records import WindowRecord, summarize
from services.storage.store import METADATA, TABLES, TRIALS, Store
from tests.unit.storage import factories as f

WINDOWS = TABLES[WindowRecord].table


class StoreContract:
    store: Store

    def test_a_schema_created_halfway_is_no_schema_to_its_readers(self, store: Store) -> None:
        TRIALS.create(store.engine, checkfirst=True)
        assert not store.has_schema()  # the sink is still creating the rest
        # read as empty, not as a table missing in the middle of a query
        assert store.dump() == {table.name: [] for table in METADATA.sorted_tables}
        assert store.runs() == [] and store.trials("run-1") == []
        store.create_schema()
        assert store.has_schema()

    def test_a_projection_older_than_a_table_says_which_table_it_lacks(
        self, store: Store, caplog: pytest.LogCaptureFixture
    ) -> None:
        store.create_schema()
        WINDOWS.drop(store.engine)  # as a projection made before the windows existed
        fresh = Store(store.url)
        try:
            with caplog.at_level(logging.WARNING, logger="services.storage.store"):
                assert not fresh.has_schema() and not fresh.has_schema()
            told = [r.getMessage() for r in caplog.records]
            assert len(told) == 1 and "no table scenario_windows yet" in told[0]
            fresh.create_schema()  # what a sink does when it starts
            assert fresh.has_schema()
        finally:
            fresh.close()

    def test_an_empty_store_answers_with_nothing(self, store: Store) -> None:
        assert store.trials("run-1") == []
        assert store.summaries("run-1") == []
        assert store.runs() == []

    def test_each_event_produces_its_row(self, store: Store) -> None:
        store.apply_many(f.run_events())
        dump = store.dump()
        assert len(dump["trials"]) == 7
        assert len(dump["trial_attempts"]) == 7
        assert len(dump["gate_results"]) == 14
        assert len(dump["judge_verdicts"]) == 7
        assert len(dump["transcripts"]) == 7
        assert [s["scenario_id"] for s in dump["scenario_summaries"]] == [
            "billing",
            "followup",
            "triage",
        ]
        assert store.runs() == ["run-1"]

    def test_reapplying_the_same_events_gives_the_same_rows(self, store: Store) -> None:
        events = f.run_events()
        store.apply_many(events)
        first = store.dump()
        for event in events:  # redelivered one by one, as a restarted worker would
            store.apply(event)
        assert store.dump() == first

    def test_duplicate_derived_events_make_one_row(self, store: Store) -> None:
        v = f.verdict("t-dup", "failed")
        g = f.gate("t-dup", "state", False)
        j = f.judge("t-dup", "polite", "failed")
        store.apply_many([v, g, j, v, g, j])
        store.apply(v)
        dump = store.dump()
        assert [t["trial_id"] for t in dump["trials"]] == ["t-dup"]
        assert len(dump["gate_results"]) == 1
        assert len(dump["judge_verdicts"]) == 1
        assert dump["scenario_summaries"][0]["n"] == 1

    def test_another_trial_reusing_the_id_replaces_no_row(self, store: Store) -> None:
        # Newer in time, same trial id, another run/scenario or session (issue 21): the
        # rows the graded trial's verdict was computed from stay; a re-grade still replaces.
        kept = [f.conversation("t"), f.gate("t", "state", True), f.judge("t", "polite", "passed")]
        store.apply_many(kept)
        first = store.dump()
        other = dict(run_id="run-2", scenario_id="followup", when=30)
        store.apply_many(
            [
                f.conversation("t", **other),
                f.gate("t", "state", False, **other),
                f.judge("t", "polite", "failed", **other),
            ]
        )
        store.apply_many(
            [
                f.conversation("t", when=40).model_copy(update={"session_id": "s2"}),
                f.gate("t", "state", False, when=40).model_copy(update={"session_id": "s2"}),
            ]
        )
        assert store.dump() == first
        store.apply(f.gate("t", "state", False, version="v2", when=50))
        assert [g.scenario_version for g in store.trial_gates("t")] == ["v2"]

    def test_arrival_order_does_not_change_the_rows(self, store: Store) -> None:
        regrade = f.verdict("run-1-f2", "passed", scenario_id="followup", version="v2", when=50)
        events = f.run_events() + [regrade]
        store.apply_many(events)
        in_order = store.dump()
        store.reset()
        shuffled = events[:]
        random.Random(7).shuffle(shuffled)
        for event in shuffled:
            store.apply(event)
        assert store.dump() == in_order

    def test_a_regrade_replaces_the_verdict_and_a_stale_copy_does_not(self, store: Store) -> None:
        old = f.verdict("t-1", "failed", version="v1", when=10)
        new = f.verdict("t-1", "passed", version="v2", when=20)
        store.apply(old)
        store.apply(new)
        store.apply(old)  # a late redelivery of the superseded verdict
        (trial,) = store.trials("run-1")
        assert (trial.outcome, trial.scenario_version) == ("passed", "v2")
        assert trial.failed_checks == []

    def test_a_regrade_supersedes_the_trial_and_the_history_keeps_every_attempt(
        self, store: Store
    ) -> None:
        first = f.verdict("t-1", "error", when=10, failed=[("judge:polite", "error: none")])
        second = f.verdict(
            "t-1", "passed", when=20, attempt=2, ids={"event_id": "verdict:t-1:attempt-2"}
        )
        store.apply_many([f.verdict("t-2", "passed", when=5), first])
        store.apply(second)
        store.apply(first)  # a late redelivery of the superseded attempt
        assert {t.trial_id: t.outcome for t in store.trials("run-1")} == {
            "t-1": "passed",
            "t-2": "passed",
        }
        (summary,) = store.summaries("run-1")
        assert (summary.n, summary.passed, summary.errors) == (2, 2, 0)  # moved, not added
        history = [(h.trial_id, h.attempt, h.outcome, h.event_id) for h in store.history("run-1")]
        assert history == [
            ("t-1", 1, "error", "verdict:t-1"),
            ("t-1", 2, "passed", "verdict:t-1:attempt-2"),
            ("t-2", 1, "passed", "verdict:t-2"),
        ]

    def test_a_trial_moved_to_another_scenario_leaves_its_old_summary(self, store: Store) -> None:
        store.apply(f.verdict("t-1", "failed", scenario_id="typo", when=1))
        store.apply(f.verdict("t-2", "passed", scenario_id="billing", when=1))
        store.apply(f.verdict("t-1", "passed", scenario_id="billing", version="v2", when=2))
        assert [(s.scenario_id, s.n, s.passed) for s in store.summaries("run-1")] == [
            ("billing", 2, 2)
        ]

    def test_a_new_gate_result_for_the_same_gate_replaces_the_old(self, store: Store) -> None:
        store.apply(f.gate("t-1", "state", False, version="v1", when=1))
        store.apply(f.gate("t-1", "state", True, version="v2", when=2))
        (row,) = store.gate_results("run-1")
        assert (row.passed, row.scenario_version, row.reasons) == (True, "v2", [])

    @pytest.mark.parametrize(
        ("outcomes", "k", "expected"),
        [
            # n < k: insufficient, no estimate, not passed
            (["passed", "passed"], 3, (2, 2, 0, 0, None, None, False)),
            # n == k, all passed
            (["passed"] * 3, 3, (3, 3, 0, 0, 1.0, 1.0, True)),
            # n > k, unbiased: pass^3 = C(4,3)/C(5,3) = 0.4, pass@3 = 1
            (["passed"] * 4 + ["failed"], 3, (5, 4, 1, 0, 1.0, 0.4, False)),
            # an error counts in n and never as a pass
            (["passed", "passed", "error"], 3, (3, 2, 0, 1, 1.0, 0.0, False)),
        ],
    )
    def test_the_summary_is_recomputed_from_the_trials(
        self, store: Store, outcomes: list[str], k: int, expected: tuple
    ) -> None:
        for i, outcome in enumerate(outcomes):
            store.apply(f.verdict(f"t{i}", outcome, k=k, when=i))
        (s,) = store.summaries("run-1")
        assert (
            s.n,
            s.passed,
            s.failed,
            s.errors,
            s.pass_at_k,
            s.pass_hat_k,
            s.scenario_passed,
        ) == pytest.approx(expected)
        assert s.k == k

    def test_concurrent_writers_never_lose_a_trial_from_the_summary(self, store: Store) -> None:
        # Several sink workers land trials of one scenario at the same moment.
        verdicts = [f.verdict(f"t{i:02d}", "passed", when=i) for i in range(24)]
        with ThreadPoolExecutor(max_workers=6) as pool:
            list(pool.map(store.apply, verdicts))
        (s,) = store.summaries("run-1")
        assert (s.n, s.passed) == (24, 24)

    def test_a_regrade_updates_the_summary(self, store: Store) -> None:
        store.apply_many([f.verdict(f"t{i}", "passed", when=i) for i in range(3)])
        assert store.summaries("run-1")[0].scenario_passed is True
        store.apply(f.verdict("t1", "failed", version="v2", when=9))
        (s,) = store.summaries("run-1")
        assert (s.passed, s.failed, s.scenario_passed) == (2, 1, False)

    def test_summaries_are_per_run_and_scenario(self, store: Store) -> None:
        store.apply(f.verdict("a", "passed", run_id="r1", scenario_id="s1"))
        store.apply(f.verdict("b", "failed", run_id="r1", scenario_id="s2"))
        store.apply(f.verdict("c", "passed", run_id="r2", scenario_id="s1"))
        assert [(s.scenario_id, s.n) for s in store.summaries("r1")] == [("s1", 1), ("s2", 1)]
        assert [(s.scenario_id, s.passed) for s in store.summaries("r2")] == [("s1", 1)]
        assert store.runs() == ["r1", "r2"]

    def test_the_runs_of_each_scenario_name_the_previous_run(self, store: Store) -> None:
        from services.report.domain import previous_run

        store.apply(f.verdict("a", "passed", run_id="r1", scenario_id="s1", when=1))
        store.apply(f.verdict("b", "passed", run_id="r2", scenario_id="s1", when=5))
        store.apply(f.verdict("c", "passed", run_id="r3", scenario_id="s2", when=9))
        rows = store.run_scenarios()
        assert sorted((r, s) for r, s, _ in rows) == [("r1", "s1"), ("r2", "s1"), ("r3", "s2")]
        assert previous_run("r2", rows) == "r1"
        assert previous_run("r3", rows) is None

    def test_a_projection_older_than_a_column_gets_it_and_keeps_its_rows(
        self, store: Store
    ) -> None:
        store.apply(f.verdict("t-old", "failed", failed=[("judge:polite", "was rude")]))
        with store.engine.begin() as conn:  # as a projection made before these columns
            for name in ("advisory_checks", "exit_source", "completion"):
                conn.exec_driver_sql(f"ALTER TABLE trials DROP COLUMN {name}")
        fresh = Store(store.url)
        try:
            (old,) = fresh.trials("run-1")  # read before any sink started on it
            assert (old.outcome, old.exit_source, old.completion) == ("failed", None, "product")
            fresh.create_schema()  # what a sink does when it starts
            assert {"advisory_checks", "exit_source", "completion"} <= {
                c["name"] for c in inspect(fresh.engine).get_columns("trials")
            }
            fresh.apply(
                f.verdict("t-new", "passed", exit_source="session", completion="conversation")
            )
            rows = {t.trial_id: t for t in fresh.trials("run-1")}
            # the old row as it was, with what every trial then was; the new one as sent
            assert (
                rows["t-old"].failed_checks,
                rows["t-old"].exit_source,
                rows["t-old"].completion,
                rows["t-old"].advisory_checks,
            ) == ([{"check": "judge:polite", "reason": "was rude"}], None, "product", [])
            assert (rows["t-new"].exit_source, rows["t-new"].completion) == (
                "session",
                "conversation",
            )
            fresh.create_schema()
            Store(store.url).create_schema()  # again, by another process: nothing to add
        finally:
            fresh.close()

    def test_whose_exit_and_the_completion_are_kept(self, store: Store) -> None:
        store.apply(f.verdict("t-1", "passed", exit_source="session", completion="conversation"))
        (trial,) = store.trials("run-1")
        assert (trial.exit_source, trial.completion) == ("session", "conversation")

    def test_the_transcript_keeps_tool_calls_for_debugging(self, store: Store) -> None:
        store.apply(f.conversation("t-1"))
        transcript = store.transcript("t-1")
        assert transcript is not None
        roles = [m["role"] for m in transcript.messages]
        assert roles == ["user", "assistant", "tool", "assistant"]
        assert transcript.tool_calls == [
            {
                "message_index": 1,
                "id": "call-1",
                "name": "save_report",
                "arguments": '{"fault": "pump"}',
                "result": '{"ok": true}',
            }
        ]
        assert store.transcript("nope") is None

    def test_trial_rows_keep_what_the_report_needs(self, store: Store) -> None:
        store.apply(f.verdict("t-1", "failed", failed=[("judge:polite", "was rude")]))
        (trial,) = store.trials("run-1")
        assert trial.failed_checks == [{"check": "judge:polite", "reason": "was rude"}]
        assert trial.metrics is not None and trial.metrics["turns"] == 6
        assert trial.verdict_at == f.at(1.0)
        assert trial.finished_at == f.at(0)

    def test_reset_leaves_an_empty_projection(self, store: Store) -> None:
        store.apply_many(f.run_events())
        store.reset()
        assert all(rows == [] for rows in store.dump().values())
        store.apply(f.verdict("t-1", "passed"))
        assert len(store.trials("run-1")) == 1

    # ------------------------------------------------ incremental summaries == rebuild

    def _summaries_incremental_and_rebuilt(self, store: Store) -> tuple[list, list]:
        live = store.dump()["scenario_summaries"]
        store.recompute_summaries()
        return live, store.dump()["scenario_summaries"]

    def test_a_regraded_and_a_duplicated_trial_move_the_summary_as_a_rebuild_does(
        self, store: Store
    ) -> None:
        first = [f.verdict(f"t{i}", "passed", when=i) for i in range(4)]
        store.apply_many(first)
        store.apply_many([first[1], first[1]])  # duplicated, in one batch and again
        store.apply(first[1])
        regrade = f.verdict("t2", "failed", k=5, version="v2", when=10)
        store.apply_many([regrade, first[2]])  # re-graded, then a stale copy of the old grade
        store.apply(regrade)  # and the re-grade duplicated
        live, rebuilt = self._summaries_incremental_and_rebuilt(store)
        assert live == rebuilt
        (s,) = store.summaries("run-1")
        # Counted by hand: t0, t1, t3 passed, t2 failed; k from the newest verdict (t2's).
        assert (s.n, s.passed, s.failed, s.errors, s.k) == (4, 3, 1, 0, 5)
        assert (s.pass_at_k, s.pass_hat_k, s.scenario_passed) == (None, None, False)  # n < k

    def test_a_trial_moving_away_takes_its_count_and_its_k_with_it(self, store: Store) -> None:
        store.apply_many(
            [
                f.verdict("a", "passed", k=2, when=1),
                f.verdict("b", "failed", k=4, scenario_id="typo", when=2),
            ]
        )
        store.apply(f.verdict("c", "error", k=3, when=3))  # newest of billing: k 3
        store.apply(f.verdict("c", "passed", k=3, scenario_id="typo", when=4))  # c moves out
        live, rebuilt = self._summaries_incremental_and_rebuilt(store)
        assert live == rebuilt
        by_scenario = {
            s.scenario_id: (s.n, s.passed, s.failed, s.errors, s.k)
            for s in store.summaries("run-1")
        }
        assert by_scenario == {"billing": (1, 1, 0, 0, 2), "typo": (2, 1, 1, 0, 3)}
        store.apply(f.verdict("a", "passed", k=2, scenario_id="typo", when=5))  # billing empties
        assert [s.scenario_id for s in store.summaries("run-1")] == ["typo"]

    def test_any_order_and_batching_of_regrades_and_repeats_agrees_with_a_rebuild(
        self, store: Store
    ) -> None:
        rng = random.Random(11)
        events = []
        for i in range(60):
            trial = f"t{rng.randrange(15)}"
            events.append(
                f.verdict(
                    trial,
                    rng.choice(["passed", "failed", "error"]),
                    k=rng.choice([1, 3]),
                    scenario_id=rng.choice(["billing", "triage"]),
                    run_id=rng.choice(["r1", "r2"]),
                    version=f"v{i}",
                    when=rng.randrange(20),
                )
            )
        events += events[:10]  # redelivered
        rng.shuffle(events)
        at = 0
        while at < len(events):
            size = rng.randrange(1, 9)
            store.apply_many(events[at : at + size])
            at += size
        live, rebuilt = self._summaries_incremental_and_rebuilt(store)
        assert live == rebuilt
        # And both equal the pure recomputation over the stored trial rows.
        for run in ("r1", "r2"):
            rows = store.trials(run)
            expected = {
                sid: summarize(run, sid, rows).model_dump(mode="json")
                for sid in {r.scenario_id for r in rows}
            }
            assert {
                s.scenario_id: s.model_dump(mode="json") for s in store.summaries(run)
            } == expected

    def test_a_projection_made_before_advisory_checks_is_read_then_given_the_column(
        self, store: Store
    ) -> None:
        from schemas.events import ExternalCheckResult

        store.apply(f.verdict("t-old", "failed", failed=[("external:pii_scan", "leak")]))
        with store.engine.begin() as conn:  # as the table was before the column existed
            conn.exec_driver_sql("ALTER TABLE trials DROP COLUMN advisory_checks")
        reader = Store(store.url)  # a report run before any sink started on it
        try:
            [old] = reader.trials("run-1")
            assert old.advisory_checks == [] and old.failed_checks[0]["check"] == (
                "external:pii_scan"
            )
        finally:
            reader.close()
        writer = Store(store.url)
        try:
            tone = ExternalCheckResult(
                check="external:tone", passed=False, gating=False, reason="curt"
            )
            writer.apply(f.verdict("t-new", "passed", advisory_checks=[tone]))
            writer.apply(f.verdict("t-new", "passed", advisory_checks=[tone]))  # idempotent
            rows = {t.trial_id: t for t in writer.trials("run-1")}
            assert rows["t-old"].advisory_checks == []
            assert rows["t-new"].advisory_checks == [tone.model_dump(mode="json")]
        finally:
            writer.close()
        again = Store(store.url)
        try:
            again.create_schema()  # the column is there: adding it again is a no-op
        finally:
            again.close()
