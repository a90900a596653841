"""Every stream processor's real app subscribes to, and keeps, what the registry says.

Each app is built by its module's `build(settings)` from settings with a topic prefix of
this test's own, in a subprocess (Faust's patches and the metrics registry are
process-wide); it prints what Faust itself holds (each agent's subscribed topic names,
each table's changelog topic name and store) and the registry is checked against that,
not against another dict.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from services.contract.processors import PROCESSORS, WORKERS, ProcessorSpec
from services.contract.settings import Settings
from services.contract.topics import topic_name
from tests.unit.fakes import without_setting_variables

ROOT = Path(__file__).resolve().parents[2]

# Runs in the subprocess: build every worker's app and describe it as Faust built it.
DESCRIBE = """
import importlib, json, sys
from services.contract.settings import Settings
prefix, data = sys.argv[1:3]
settings = Settings(PASSK_TOPIC_PREFIX=prefix, PASSK_DATA_DIR=data,
                    PASSK_DATABASE_URL=f"sqlite:///{data}/passk.db", PASSK_METRICS_PORT=0)
out = {}
for module in sys.argv[3:]:
    app = importlib.import_module(module).build(settings)
    out[module] = {
        "app_id": app.conf.id,
        "agents": {name.rsplit(".", 1)[-1]: sorted(agent.channel.topics)
                   for name, agent in app.agents.items()},
        "tables": {name: {"changelog": table.changelog_topic.get_topic_name(),
                          "store": type(table.data).__module__}
                   for name, table in app.tables.items()},
    }
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def prefix() -> str:
    return f"registry-{uuid.uuid4().hex[:8]}."


@pytest.fixture(scope="module")
def built(prefix: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    data = tmp_path_factory.mktemp("apps")
    modules = [PROCESSORS[name].module for name in WORKERS]
    # A module's fixture is made before conftest clears the environment for a test: the
    # subprocess's settings are its defaults and the values given, whatever the shell says.
    with without_setting_variables():
        done = subprocess.run(
            [sys.executable, "-c", DESCRIBE, prefix, str(data), *modules],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _settings(prefix: str) -> Settings:
    return Settings(PASSK_TOPIC_PREFIX=prefix)  # type: ignore[call-arg]


@pytest.mark.parametrize("spec", [PROCESSORS[n] for n in WORKERS], ids=lambda s: s.name)
def test_agents_subscribe_to_the_registrys_topics(
    spec: ProcessorSpec, built: dict[str, Any], prefix: str
) -> None:
    settings = _settings(prefix)
    declared = {
        agent: sorted(topic_name(t, settings) for t in topics)
        for agent, topics in spec.agents.items()
    }
    assert built[spec.module]["agents"] == declared
    subscribed = {t for ts in built[spec.module]["agents"].values() for t in ts}
    expected = {topic_name(t, settings) for t in spec.inputs}
    if spec.tick is not None:
        expected.add(topic_name(spec.tick, settings))
    assert subscribed == expected


@pytest.mark.parametrize("spec", [PROCESSORS[n] for n in WORKERS], ids=lambda s: s.name)
def test_tables_and_their_changelogs_are_the_registrys(
    spec: ProcessorSpec, built: dict[str, Any], prefix: str
) -> None:
    settings = _settings(prefix)
    app = built[spec.module]
    assert app["app_id"] == f"{prefix}{spec.name}"  # the changelog names rest on it
    expected = {
        t.name: {
            "changelog": topic_name(c, settings),
            "store": "faust.stores.rocksdb" if t.on_disk else "faust.stores.memory",
        }
        for t, c in zip(spec.tables, spec.changelogs, strict=True)
    }
    assert app["tables"] == expected


def test_every_changelog_faust_uses_is_a_topic_passk_creates(
    built: dict[str, Any], prefix: str
) -> None:
    from services.contract.processors import TOPIC_SPECS

    created = {topic_name(s.topic, _settings(prefix)) for s in TOPIC_SPECS}
    used = {t["changelog"] for app in built.values() for t in app["tables"].values()}
    assert used and used <= created


IMPORT_ONLY = """
import importlib, json, sys, types
import faust
from services.runtime import faust_compat
modules = [importlib.import_module(m) for m in sys.argv[1:]]
print(json.dumps({
    "patched": sorted(n for n, on in faust_compat.applied().items() if on),
    "apps": sorted(f"{m.__name__}.{k}" for m in modules for k, v in vars(m).items()
                   if isinstance(v, faust.App) or (hasattr(v, "main") and not isinstance(
                       v, (type, types.ModuleType, types.FunctionType)))),
    "build": sorted(m.__name__ for m in modules if callable(getattr(m, "build", None))),
}))
"""


def test_importing_a_processor_builds_nothing() -> None:
    """An app exists only once `build(settings)` is called: importing its module makes no
    app (nor installs the Faust patches make_app installs)."""
    modules = [spec.module for spec in PROCESSORS.values()]  # the otlp server too
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_ONLY, *modules],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {"patched": [], "apps": [], "build": sorted(modules)}
