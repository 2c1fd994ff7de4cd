"""The Python API with Python objects in (python_api.py): a TRL GRPOTrainer script ported by changing at most five
lines trains (a reward function object, a ``datasets.Dataset``), and a resume from another process says what it
needs; a callback stops a run after N steps; wrong types are one-line ConfigErrors."""

from __future__ import annotations

import difflib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import autotelic
from autotelic.config import ConfigError

HEADER = '''import json, sys
from datasets import Dataset
MODEL, OUT = "random:qwen2-tiny", sys.argv[1]
TOPICS = ["rain", "salt", "maps", "owls", "jazz", "tea", "ice", "kites", "moss", "gold", "clay", "wind"]
'''
TRL_SCRIPT = HEADER + '''from trl import GRPOConfig, GRPOTrainer

def reward_len(completions, **kwargs):
    return [-abs(12 - len(completion)) / 12 for completion in completions]

dataset = Dataset.from_list([{"prompt": f"Write one word about {topic}."} for topic in TOPICS])
args = GRPOConfig(output_dir=OUT, max_steps=2, num_generations=4, max_completion_length=8)
trainer = GRPOTrainer(model=MODEL, reward_funcs=reward_len, args=args, train_dataset=dataset)
trainer.train()
'''
PORTED = HEADER + '''import autotelic

def reward_len(completions, **kwargs):
    return [-abs(12 - len(completion)) / 12 for completion in completions]

dataset = Dataset.from_list([{"prompt": f"Write one word about {topic}."} for topic in TOPICS])
args = dict(train={"steps": 2}, generate={"group_size": 4}, control={"max_new_tokens": 8, "tasks_per_step": 2}, eval={"per_level": 1, "max_new_tokens": 8}, logging={"runs_dir": OUT, "run_name": "trl", "progress": False})
summary = autotelic.train(model=MODEL, reward_funcs=reward_len, train_dataset=dataset, **args)
print(json.dumps(summary))
'''


def _changed_lines(before: str, after: str) -> int:
    """Lines of ``after`` that are new or changed, or removed from ``before``, whichever is more."""
    diff = list(difflib.ndiff(before.splitlines(), after.splitlines()))
    return max(sum(line.startswith("+ ") for line in diff), sum(line.startswith("- ") for line in diff))


@pytest.mark.slow
def test_a_trl_grpo_script_ported_by_five_lines_trains_and_a_resume_elsewhere_says_what_it_needs(tmp_path):
    assert _changed_lines(TRL_SCRIPT, PORTED) <= 5
    script = tmp_path / "train.py"
    script.write_text(PORTED)
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "runs")], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["steps"] == 2 and Path(summary["model_dir"]).is_dir()
    run_dir = Path(summary["run_dir"])
    rows = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    assert rows and all(row["reward"] == pytest.approx(-abs(12 - len(row["completion"])) / 12) for row in rows)
    assert all(row["prompt"].startswith("Write one word about") for row in rows)  # the Dataset's rows
    # the config records the function by reference, which another process cannot import from a script
    assert "__main__:reward_len" in (run_dir / "config.yaml").read_text()
    resumed = subprocess.run([sys.executable, "-m", "autotelic.cli", "resume", str(run_dir), "train.steps=3"],
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 2 and "Traceback" not in resumed.stderr
    assert "was a function passed from Python" in resumed.stderr and "reward_funcs" in resumed.stderr


def _reward_len(completions, **kwargs):
    return [-abs(12 - len(completion)) / 12 for completion in completions]


TINY = dict(train={"steps": 5, "checkpoint_every": 1}, generate={"group_size": 2},
            control={"max_new_tokens": 6, "tasks_per_step": 2}, eval={"per_level": 1, "max_new_tokens": 6},
            curriculum={"families": ["add"], "levels": [1]}, logging={"progress": False, "report": False})


@pytest.mark.slow
def test_a_callback_sees_each_steps_metrics_and_stops_the_run_after_two_steps(tmp_path):
    seen: list[tuple[int, float]] = []

    def stop_after_two(step: int, metrics: dict[str, float]) -> bool:
        seen.append((step, metrics["reward/mean"]))
        return step == 2

    run = autotelic.Run(model="random:qwen2-tiny", reward_funcs=[_reward_len], callbacks=[stop_after_two],
                        **{**TINY, "logging": {**TINY["logging"], "runs_dir": str(tmp_path), "run_name": "cb"}})
    summary = run.train()
    assert [step for step, _ in seen] == [1, 2] and summary["steps"] == 2
    assert run.run_dir == tmp_path / "cb" and run.model_dir is not None and run.model_dir.is_dir()
    assert len((tmp_path / "cb" / "metrics.jsonl").read_text().splitlines()) >= 2


@pytest.mark.parametrize("arguments, message", [
    ({"model": object()}, "model takes a local model directory, hf:NAME or random:SHAPE, got a object"),
    ({"reward_funcs": [3]}, "reward_funcs takes functions, reward names"),
    ({"train_dataset": 42}, "train_dataset takes a datasets.Dataset, a list of dicts"),
    ({"eval_dataset": [1, 2]}, "eval_dataset takes a datasets.Dataset, a list of dicts"),
    ({"filter": {"rewards": [_reward_len]}}, "pass functions as reward_funcs="),
])
def test_wrong_types_are_one_line_config_errors(arguments, message):
    with pytest.raises(ConfigError, match=message) as raised:
        autotelic.Run(**arguments)
    assert "\n" not in str(raised.value)


def test_functions_and_data_are_recorded_by_reference():
    from autotelic.python_api import build_config

    rows = [{"prompt": f"What is {n} + 1?", "answer": str(n + 1)} for n in range(40)]
    config = build_config(reward_funcs=[_reward_len, "verifier"], train_dataset=rows, eval_dataset=rows[:4])
    assert [r.name for r in config.filter.rewards] == [f"{__name__}:_reward_len", "verifier"]
    (trained,), (held,) = config.curriculum.families, config.eval.families
    for family, written in ((trained, rows), (held, rows[:4])):
        path = Path(family.removeprefix("file:"))
        assert family.startswith("file:") and [json.loads(line) for line in path.read_text().splitlines()] == written
    assert build_config(train_dataset=[dict(row) for row in rows]).curriculum.families == [trained]  # fingerprint
