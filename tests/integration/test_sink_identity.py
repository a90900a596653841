"""A trial id reused by another trial (issue 21, item 2, as the red team found it): the sink
through the real broker, then `passk show --json` of the graded trial. The verdict grades
the first trial and dead-letters the second's results, but the sink used to upsert the
second's transcript, gate and judge rows over the first's, so `passk show` printed the
other trial's conversation (or a retry's empty state) under the first one's verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from schemas.events import Message
from services.contract.settings import Settings
from services.storage.store import Store
from tests.integration.test_sink import BACKENDS, database, passk, send
from tests.support import isolated_env, running, settled, wait_for
from tests.unit.storage import factories as f

pytestmark = pytest.mark.integration


def graded(trial_id: str, **kw) -> list:
    """A trial as the pipeline emits it: conversation, two gates, a judge, the verdict."""
    return [
        f.conversation(trial_id, **kw),
        f.gate(trial_id, "exit", True, **kw),
        f.gate(trial_id, "state", True, **kw),
        f.judge(trial_id, "polite", "passed", **kw),
        f.verdict(trial_id, "passed", **kw),
    ]


def impostor(trial_id: str, session: str, *, text: str, **kw) -> list:
    """Another trial under the same id (its own session), later: what the verdict refuses
    as trial_id_conflict. It gets no verdict; its rows still reach the sink."""
    cf = f.conversation(trial_id, when=30, **kw).model_copy(
        update={
            "session_id": session,
            "event_id": f"cf:{session}",
            "transcript": [Message(role="user", content=text)],
        }
    )
    return (
        [cf]
        + [
            ev.model_copy(update={"session_id": session})
            for ev in (
                f.gate(trial_id, "exit", True, when=30, **kw),
                f.gate(trial_id, "state", False, when=30, **kw),
            )
        ]
        + [f.judge(trial_id, "polite", "failed", when=30, **kw)]
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_trial_reusing_an_id_never_replaces_the_graded_trial_in_the_projection(
    settings: Settings, tmp_path: Path, backend: str
) -> None:
    with database(backend, tmp_path, "live") as url:
        store = Store(url)
        first = graded("shared", run_id="run-A", scenario_id="billing") + graded(
            "retried", run_id="run-A", scenario_id="billing"
        )
        # the same id in another run and scenario; the same trial re-sent on a new session
        second = impostor(
            "shared",
            "sess-other",
            text="The compressor is back-ordered.",
            run_id="run-B",
            scenario_id="followup",
        ) + impostor(
            "retried",
            "sess-retry",
            text="Retry with nothing saved.",
            run_id="run-A",
            scenario_id="billing",
        )
        env = isolated_env(settings, PASSK_DATABASE_URL=url)
        with running(["worker", "sink"], env, tmp_path / "sink.log"):
            send(settings, first)
            # every row of the first trials (they come on four topics) before the second
            wait_for(
                lambda: (
                    store.has_schema()
                    and len(store.transcripts(["shared", "retried"])) == 2
                    and len(store.trials("run-A")) == 2
                    and len(store.gate_results("run-A")) == 4
                    and len(store.judge_verdicts("run-A")) == 2
                ),
                timeout=120,
                what="the first trials projected",
            )
            send(settings, second)
            wait_for(lambda: settled(settings, ["sink"]), timeout=60, what="sink caught up")

        for trial_id in ("shared", "retried"):
            kept = store.transcript(trial_id)
            assert kept is not None and kept.session_id == f"session-{trial_id}", kept
            assert (kept.run_id, kept.scenario_id) == ("run-A", "billing")
            gates = store.trial_gates(trial_id)
            assert [(g.gate, g.passed, g.session_id) for g in gates] == [
                ("exit", True, f"session-{trial_id}"),
                ("state", True, f"session-{trial_id}"),
            ]
            if trial_id == "shared":
                # Judge rows carry no session: a retry's judge rows (same run and scenario)
                # still replace the first's (a known limit, docs/producers.md).
                assert [(j.judge_id, j.result, j.run_id) for j in store.trial_judges(trial_id)] == [
                    ("polite", "passed", "run-A")
                ]

            done = passk(settings, "show", trial_id, "--json", url=url)
            assert done.returncode == 0, done.stderr
            view = json.loads(done.stdout)
            assert view["outcome"] == "passed"
            assert [m.get("content") for m in view["transcript"]][
                0
            ] == "The pump was broken, I replaced it."
            assert view["session_id"] == f"session-{trial_id}"
            if trial_id == "shared":
                assert [(j["judge_id"], j["result"]) for j in view["judges"]] == [
                    ("polite", "passed")
                ]
            assert [e for e in view["expectations"] if not e["passed"]] == []
            assert "back-ordered" not in done.stdout and "nothing saved" not in done.stdout
        store.close()


def test_a_row_of_another_trial_stored_first_is_not_shown_as_the_graded_ones(
    settings: Settings, tmp_path: Path
) -> None:
    """The other order: the refused trial's rows reached the sink before the graded one's
    (they come on other partitions). The first written stays; `passk show` of the graded
    trial does not present it as its own."""
    with database("sqlite", tmp_path, "raced") as url:
        store = Store(url)
        env = isolated_env(settings, PASSK_DATABASE_URL=url)
        with running(["worker", "sink"], env, tmp_path / "sink.log"):
            send(
                settings,
                impostor(
                    "raced",
                    "sess-other",
                    text="The compressor is back-ordered.",
                    run_id="run-B",
                    scenario_id="followup",
                ),
            )
            wait_for(
                lambda: store.has_schema() and store.transcript("raced") is not None,
                timeout=120,
                what="the other trial's rows projected",
            )
            send(settings, graded("raced", run_id="run-A", scenario_id="billing"))
            wait_for(lambda: store.trial("raced") is not None, timeout=60, what="the verdict")
            wait_for(lambda: settled(settings, ["sink"]), timeout=60, what="sink caught up")
        store.close()
        view = json.loads(passk(settings, "show", "raced", "--json", url=url).stdout)
        assert view["run_id"] == "run-A" and view["outcome"] == "passed"
        shown = json.dumps(view)
        assert "back-ordered" not in shown and "sess-other" not in shown
        assert not view["transcript"]
