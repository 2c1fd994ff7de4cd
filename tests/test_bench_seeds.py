"""bench/seeds.py: a recipe on several training seeds, two side by side, and the spread of what they reach; its
readers of the answers' form, the curriculum mix and the spread on hand-made records; then the bench end to end
at a tiny size."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))  # bench/ is a directory of scripts, not a package

import seeds  # noqa: E402


def test_the_bare_answer_share_counts_answers_that_hold_one_integer():
    records = [{"completion": c} for c in ("The answer is: 7", "7. So 7.", "To solve this, 3 + 4 = 7", "seven")]
    assert seeds.bare_answer_share(records) == 0.5


def test_the_curriculum_mix_averages_each_arms_share_over_the_steps():
    rows = [{"curriculum/share/add:1": 1.0}, {"curriculum/share/add:1": 0.5, "curriculum/share/compare:2": 0.5}]
    assert seeds.curriculum_mix(rows) == {"add:1": 0.75, "compare:2": 0.25}


def test_the_spread_names_the_worst_seed_the_median_the_sd_and_those_near_the_median():
    final = seeds.spread([0.70, 0.72, 0.30, 0.76])
    assert final["worst"] == 30.0 and final["median"] == 71.0 and final["mean"] == 62.0
    assert final["sd"] == 21.5 and final["within_5_of_median"] == 0.75


@pytest.mark.slow
def test_the_bench_runs_each_seed_as_shipped_and_writes_their_spread(tmp_path):
    tiny = ["model.path=random:qwen2-tiny", "train.steps=2", "eval.every=1", "eval.per_level=2",
            "control.tasks_per_step=2", "generate.group_size=2", "control.max_new_tokens=6", "eval.max_new_tokens=6",
            "curriculum.families=[add, compare]", "curriculum.levels=[1]", "eval.levels=[1]"]
    done = subprocess.run([sys.executable, str(BENCH / "seeds.py"), "--seeds", "2", "--first-seed", "3",
                           "--runs-dir", str(tmp_path / "runs"), "--results-dir", str(tmp_path / "results"), *tiny],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = (tmp_path / "results").glob("seeds-*.json")
    record = json.loads(path.read_text())
    rows = record["rows"]
    assert [row["seed"] for row in rows] == [3, 4] and record["summary"]["split"] == "test"
    for row in rows:
        assert [e["step"] for e in row["evals"]] == [0, 1, 2] and row["steps"] == 2
        assert row["evals"][-1]["accuracy"] == row["accuracy_after"]
        assert set(row["by_family_after"]) == {"add", "compare"}
        assert 0.0 <= row["bare_answer_share_after"] <= 1.0 and row["reward_early"] is not None
        assert sum(row["curriculum_whole"].values()) == pytest.approx(1.0, abs=0.01)
        run_dir = Path(row["run_dir"])  # checkpoints serve a resume only, and no model is exported
        assert not (run_dir / "checkpoints").exists() and not (run_dir / "model").exists()
    final = record["summary"]["final_accuracy"]
    assert final["worst"] == round(100 * min(row["accuracy_after"] for row in rows), 1)
    assert "final accuracy over seeds: worst" in done.stdout
