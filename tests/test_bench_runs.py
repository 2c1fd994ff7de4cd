"""bench/runs.py end to end: a real bench (bench/ablate_pipeline.py) at a tiny size on the embedded model,
two seeds per arm side by side, with a time cap so small that it binds after the first of two steps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
# the bench's bookkeeping does not depend on the weights: Qwen2's architecture at two layers, random weights
TINY = ["model.path=random:qwen2-tiny", "control.tasks_per_step=2", "generate.group_size=2", "control.max_new_tokens=8",
        "eval.max_new_tokens=8", "curriculum.families=[add]", "eval.levels=[1]"]


@pytest.mark.slow
def test_a_bench_writes_comparisons_with_intervals_and_flags_a_time_cap_that_binds(tmp_path):
    done = subprocess.run([sys.executable, str(BENCH / "ablate_pipeline.py"), "--steps", "2", "--max-minutes", "0.0001",
                           "--seeds", "2", "--heldout", "4", "--parallel", "--budget", "samples",
                           "--runs-dir", str(tmp_path / "runs"),
                           "--results-dir", str(tmp_path / "results"), *TINY],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = (tmp_path / "results").glob("ablate_pipeline-*.json")
    record = json.loads(path.read_text())
    (comparison,) = record["comparisons"]
    assert comparison["name"] == "pipeline_vs_plain" and comparison["seeds"] == 2 and comparison["heldout_n"] == 4
    lo, hi = comparison["ci95"]
    assert lo <= comparison["gain_points"] <= hi
    rows = record["rows"]
    assert sorted((row["arm"], row["seed"]) for row in rows) == [("pipeline", 0), ("pipeline", 1), ("plain", 0),
                                                                  ("plain", 1)]
    assert all(row["time_cap_bound"] and row["steps"] == 1 and row["steps_wanted"] == 2 for row in rows)
    assert len(record["summary"]["time_cap_bound"]) == 4 and record["summary"]["execution"].startswith("parallel")
    # --budget samples: both arms capped at tasks_per_step x group_size = 4 samples (and 32 tokens) a step
    assert {k: record["summary"][k] for k in ("budget", "max_samples_per_step", "max_tokens_per_step")} == \
        {"budget": "samples", "max_samples_per_step": 4, "max_tokens_per_step": 32}
    assert all(row["samples_per_step"] <= 4 for row in rows)
    assert {row["samples_per_step"] for row in rows if row["arm"] == "plain"} == {4}
    assert "FLAG plain seed 0: the time cap bound" in done.stdout
    assert done.stdout.strip().splitlines()[-1].startswith("pipeline_vs_plain: gain_points=")
    # the weights go once the artifact is written (2 GB a run filled the disk); the per-task records stay
    for row in rows:
        run_dir = Path(row["run_dir"])
        assert (run_dir / "eval_after.jsonl").is_file() and (run_dir / "metrics.jsonl").is_file()
        assert not (run_dir / "model").exists() and not (run_dir / "checkpoints").exists()
