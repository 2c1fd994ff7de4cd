"""bench/decoding.py end to end at a tiny size (Qwen2's architecture at two layers, random weights: the bench's
bookkeeping does not depend on them): two seeds side by side, each with its own value model, every decoding of
the same held-out problems, best-of-n's candidates picked again on the same samples, and the artifact."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
TINY = ["model.path=random:qwen2-tiny", "value.tasks=2", "value.iterations=1", "value.epochs=1", "eval.token_budget=32",
        "eval.max_new_tokens=16", "control.max_new_tokens=16"]


@pytest.mark.slow
def test_the_decoding_bench_compares_every_decoding_on_the_same_problems_and_budget(tmp_path):
    done = subprocess.run([sys.executable, str(BENCH / "decoding.py"), "--seeds", "2", "--heldout", "3", "--parallel",
                           "--runs-dir", str(tmp_path / "runs"), "--results-dir", str(tmp_path / "results"), *TINY],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = (tmp_path / "results").glob("decoding-*.json")
    record = json.loads(path.read_text())
    assert [c["name"] for c in record["comparisons"]] == [
        "vm_mcts_vs_best_of_n", "best_of_n_vs_greedy", "vm_mcts_vs_greedy", "prm_best_of_n_vs_best_of_n",
        "oracle_vs_best_of_n"]
    assert all(c["seeds"] == 2 and c["heldout_n"] == 3 for c in record["comparisons"])
    assert [row["seed"] for row in record["rows"]] == [0, 1] and record["summary"]["token_budget"] == 32
    assert done.stdout.strip().splitlines()[-1].startswith("oracle_vs_best_of_n: gain_points=")
    for row in record["rows"]:
        run_dir = Path(row["run_dir"])
        assert row["value_examples"] > 0 and (run_dir / "value_model" / "value_model.json").is_file()
        read = {name: [json.loads(line) for line in (run_dir / f"eval_{name}.jsonl").read_text().splitlines()]
                for name in ("greedy", "best_of_n", "vm_mcts", "prm_best_of_n", "oracle")}
        assert len({tuple(r["prompt"] for r in records) for records in read.values()}) == 1  # the same problems
        assert all(16 < r["tokens"] <= 32 for r in read["best_of_n"])  # samples while a whole one fits
        assert all(32 <= r["tokens"] <= 33 + 16 for r in read["vm_mcts"])  # the budget spent, not much more
        for picked_again in ("prm_best_of_n", "oracle"):  # the same candidates and tokens, picked otherwise
            for first, again in zip(read["best_of_n"], read[picked_again]):
                assert again["candidates"] == first["candidates"] and again["tokens"] == first["tokens"]
                assert again["completion"] in first["candidates"]
        for first, oracle in zip(read["best_of_n"], read["oracle"]):
            assert oracle["correct"] >= first["correct"]
    assert json.loads((tmp_path / "runs" / "decoding-s0.json").read_text())["command"]  # provenance, for --reuse
