"""The judge cost panels' PromQL, evaluated by `promtool test rules` on series shaped like
the workers': tokens per trial and the estimated cost per trial come out as hand-computed,
and with no price set the cost is NaN (unknown), never 0."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from services.monitoring.dashboard import build, queries
from tests.integration.infra.test_alerts_promtool import promtool

# Per 30 s: 500 prompt and 50 completion tokens, one trial verdict (two workers' series).
SERIES = [
    ('passk_judge_tokens_total{judge="a",kind="input",instance="judge-1"}', "0+300x20"),
    ('passk_judge_tokens_total{judge="b",kind="input",instance="judge-2"}', "0+200x20"),
    ('passk_judge_tokens_total{judge="a",kind="output",instance="judge-1"}', "0+50x20"),
    ('passk_trials_total{scenario="s",outcome="passed",instance="verdict-1"}', "0+1x20"),
]


def panel(title: str) -> str:
    (expr,) = [e for t, e in queries(build()) if t == title]
    return expr


def run(
    tmp_path: Path, prices: tuple[str, str], *cost_checks: tuple[str, float]
) -> subprocess.CompletedProcess[str]:
    """`cost_checks`: (PromQL around the cost panel's query as `COST`, expected value)."""
    series = [
        *SERIES,
        *(
            (f'passk_judge_price_per_mtok{{kind="{k}",instance="judge-{i}"}}', " ".join([p] * 21))
            for k, p in zip(("input", "output"), prices, strict=True)
            for i in (1, 2)
        ),
    ]
    cost = panel("Judge cost per trial (estimated)")
    spec = {
        "rule_files": [],
        "evaluation_interval": "30s",
        "tests": [
            {
                "interval": "30s",
                "input_series": [{"series": s, "values": v} for s, v in series],
                "promql_expr_test": [
                    {
                        "expr": panel("Judge tokens per trial"),
                        "eval_time": "5m",
                        "exp_samples": [
                            {"labels": '{kind="input"}', "value": 500},
                            {"labels": '{kind="output"}', "value": 50},
                        ],
                    },
                    *(
                        {
                            "expr": wrap.replace("COST", f"({cost})"),
                            "eval_time": "5m",
                            "exp_samples": [{"labels": "{}", "value": value}],
                        }
                        for wrap, value in cost_checks
                    ),
                ],
            }
        ],
    }
    (tmp_path / "panels.test.yml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    return subprocess.run(
        [promtool(), "test", "rules", "panels.test.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_tokens_and_cost_per_trial(tmp_path: Path) -> None:
    # (500 * 0.15 + 50 * 0.60) / 1e6 per trial
    done = run(tmp_path, ("0.15", "0.6"), ("COST", 0.000105))
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_price_no_cost(tmp_path: Path) -> None:
    # One series (the panel has data), whose value is no number: NaN, not 0.
    done = run(tmp_path, ("NaN", "NaN"), ("count(COST)", 1), ("absent(COST >= 0)", 1))
    assert done.returncode == 0, done.stdout + done.stderr
    wrong = run(tmp_path, ("NaN", "NaN"), ("COST", 0.0))
    assert wrong.returncode != 0  # the check has teeth: it is not 0
