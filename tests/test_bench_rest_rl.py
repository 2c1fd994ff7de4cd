"""bench/rest_rl.py's training comparisons alone (--training-only) end to end at a tiny size (Qwen2's architecture
at two layers, random weights: the bench's bookkeeping does not depend on them), unit tests run in the sandbox."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from autotelic.tasks.code import CLOSED_CODE_BLOCK

BENCH = Path(__file__).resolve().parent.parent / "bench"
TINY = ["model.path=random:qwen2-tiny", "control.max_new_tokens=16", "eval.max_new_tokens=16",
        "control.tasks_per_step=2", "generate.group_size=2"]


def run_bench(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH / "rest_rl.py"), "--runs-dir", str(tmp_path / "runs"),
                           "--results-dir", str(tmp_path / "results"), *args], capture_output=True, text=True,
                          timeout=900)


def jsonl(path: Path) -> list[dict]:
    """A run log's rows (metrics.jsonl, rollouts.jsonl), one JSON object a line."""
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_training_only_refuses_the_selections_it_leaves_out_in_one_line(tmp_path):
    done = run_bench(tmp_path, "--training-only", "--oracle", *TINY)
    assert done.returncode == 2 and "--training-only" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "runs").exists()  # refused before any run started


@pytest.mark.slow
def test_training_only_compares_the_training_arms_without_a_value_model(tmp_path):
    done = run_bench(tmp_path, "--training-only", "--rest-dpo", "--demonstrations", "--answer-stop", "--memory",
                     "--memory-replay", "--steps", "1", "--seeds", "1", "--heldout", "3", "--parallel", *TINY)
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = (tmp_path / "results").glob("rest_rl-*.json")
    record = json.loads(path.read_text())
    assert [c["name"] for c in record["comparisons"]] == ["rest_vs_grpo", "rest_dpo_vs_grpo", "demonstrations_vs_grpo",
                                                          "answer_stop_vs_grpo", "memory_vs_grpo",
                                                          "memory_replay_vs_grpo", "memory_replay_weights_vs_grpo"]
    assert record["summary"]["training_only"] is True
    assert sorted(row["arm"] for row in record["rows"]) == ["answer_stop", "demonstrations", "grpo", "memory_replay",
                                                            "rest", "rest_dpo"]
    for row in record["rows"]:
        run_dir = Path(row["run_dir"])
        assert row["steps"] == 1 and not (run_dir / "value_model").exists()  # no VM-MCTS stage in any arm
        remembers = row["arm"] in ("grpo", "memory_replay")  # answered again with its memory
        assert [path.name for path in run_dir.glob("eval_after_*.jsonl")] == (["eval_after_memory.jsonl"]
                                                                               if remembers else [])
    run_dirs = {row["arm"]: Path(row["run_dir"]) for row in record["rows"]}  # one seed: one run an arm
    for run_dir in run_dirs.values():  # every arm generates tasks x group samples a step: refills find no budget
        steps = jsonl(run_dir / "metrics.jsonl")
        assert [r["generate/samples"] for r in steps if "generate/samples" in r] == [4]
    step = json.loads((run_dirs["demonstrations"] / "metrics.jsonl").read_text().splitlines()[0])
    assert step["hint/fraction"] == 0.5  # the guided arm's curriculum, at its first step's share
    configs = {arm: yaml.safe_load((run_dir / "config.yaml").read_text()) for arm, run_dir in run_dirs.items()}
    stops = {arm: config["control"]["stop_pattern"] for arm, config in configs.items()}
    assert stops.pop("answer_stop") == CLOSED_CODE_BLOCK and set(stops.values()) == {""}  # only that arm stops early
    replays = {arm: config["curriculum"]["memory"]["fraction"] for arm, config in configs.items()}
    assert replays.pop("memory_replay") == 0.5 and set(replays.values()) == {0.0}  # only that arm replays in training
    # the memory's answers: a second pass over the same held-out set on the same weights (that banking alone leaves
    # training as it was is test_memory's)
    grpo = run_dirs["grpo"]
    answered = [(grpo / name).read_text().splitlines() for name in ("eval_after.jsonl", "eval_after_memory.jsonl")]
    assert len(answered[0]) == len(answered[1]) == 3
    assert done.stdout.strip().splitlines()[-1].startswith("memory_replay_weights_vs_grpo: gain_points=")


@pytest.mark.slow
def test_the_tree_arm_branches_twice_inside_grpos_samples(tmp_path):
    shape = [override for override in TINY if not override.startswith("generate.group_size")]  # the recipe's 8
    done = run_bench(tmp_path, "--training-only", "--no-rest", "--tree", "--steps", "1", "--seeds", "1", "--heldout",
                     "3", "--parallel", *shape)
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = (tmp_path / "results").glob("rest_rl-*.json")
    record = json.loads(path.read_text())
    assert [c["name"] for c in record["comparisons"]] == ["tree_vs_grpo"]
    run_dirs = {row["arm"]: Path(row["run_dir"]) for row in record["rows"]}
    assert sorted(run_dirs) == ["grpo", "tree"]
    for run_dir in run_dirs.values():  # 2 problems x 8 samples a step in both arms: the tree's as 4 roots + 4 branches
        steps = jsonl(run_dir / "metrics.jsonl")
        assert [r["generate/samples"] for r in steps if "generate/samples" in r] == [16]
    rows = jsonl(run_dirs["tree"] / "rollouts.jsonl")
    groups = [rows[start:start + 8] for start in range(0, len(rows), 8)]
    # two levels: roots 0 and 1 branch, then their branches 4 and 5 branch again inside their own tokens (either order)
    for group in groups:
        parents = [row.get("parent") for row in group]
        assert parents[:4] == [None] * 4 and sorted(parents[4:]) == [0, 1, 4, 5]
    assert len(groups) == 2
    plain = jsonl(run_dirs["grpo"] / "rollouts.jsonl")
    assert len(plain) == 16 and not any("parent" in row for row in plain)


def test_a_process_reward_arm_needs_a_value_model_directory_and_no_rest_needs_training_only(tmp_path):
    done = run_bench(tmp_path, "--training-only", "--process-reward", str(tmp_path), *TINY)
    assert done.returncode == 2 and "not a value model directory" in done.stderr and "Traceback" not in done.stderr
    done = run_bench(tmp_path, "--no-rest", *TINY)
    assert done.returncode == 2 and "add --training-only" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_the_process_reward_arm_adds_the_value_models_score_to_the_unit_tests(tmp_path):
    from autotelic.value_model import ValueExample, ValueModel

    value = ValueModel("random:qwen2-tiny")
    value.fit([ValueExample("p", "def f():\n    return 1\n", 1.0), ValueExample("p", "I cannot", 0.0)], epochs=1)
    value.save(tmp_path / "vm")
    done = run_bench(tmp_path, "--training-only", "--no-rest", "--process-reward", str(tmp_path / "vm"), "--steps",
                     "1", "--seeds", "1", "--heldout", "3", "--parallel", *TINY)
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = (tmp_path / "results").glob("rest_rl-*.json")
    record = json.loads(path.read_text())
    assert [c["name"] for c in record["comparisons"]] == ["process_reward_vs_grpo"]
    assert sorted(row["arm"] for row in record["rows"]) == ["grpo", "process_reward"]  # no rest arm trained
    run_dirs = {row["arm"]: Path(row["run_dir"]) for row in record["rows"]}
    rewards = {arm: [row["reward"] for row in jsonl(run_dirs[arm] / "rollouts.jsonl")]
               for arm in ("grpo", "process_reward")}
    assert all(round(5 * r, 6).is_integer() for r in rewards["grpo"])  # 5 assertions: the tests pay in fifths
    assert rewards["process_reward"] and not any(round(5 * r, 6).is_integer() for r in rewards["process_reward"])
    assert 0.0 < min(rewards["process_reward"]) and max(rewards["process_reward"]) <= 1.15
