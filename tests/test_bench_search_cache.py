"""bench/search_cache.py end to end at a tiny size (Qwen2's architecture at two layers, random weights, and a value
model fit on two examples): each bound decodes in its own process and the artifact compares it with unbounded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from autotelic.value_model import ValueExample, ValueModel

BENCH = Path(__file__).resolve().parent.parent / "bench"
TINY = ["model.path=random:qwen2-tiny", "eval.token_budget=32", "eval.max_new_tokens=16", "control.max_new_tokens=16"]


def test_each_bound_decodes_the_same_problems_and_is_measured_against_unbounded(tmp_path):
    value = ValueModel("random:qwen2-tiny")
    value.fit([ValueExample("p", "def f():\n    return 1\n", 1.0), ValueExample("p", "I cannot", 0.0)], epochs=1)
    value.save(tmp_path / "value_model")
    done = subprocess.run([sys.executable, str(BENCH / "search_cache.py"), "--value-model",
                           str(tmp_path / "value_model"), "--problems", "2", "--cache-mb", "0",
                           "--results-dir", str(tmp_path / "results"), *TINY],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = (tmp_path / "results").glob("search_cache-*.json")
    rows = json.loads(path.read_text())["rows"]
    assert [row["cache_mb"] for row in rows] == [0, None]  # unbounded added as the reference
    for row in rows:
        assert row["seconds"] > 0 and row["peak_gib"] > 0.1 and 32 <= row["tokens_per_task"] <= 33 + 16
        assert 0 <= row["answers_equal_unbounded"] <= 2
    assert rows[1]["answers_equal_unbounded"] == 2
    assert done.stdout.strip().splitlines()[-1].startswith("cache_0: seconds_ratio=")
