"""Bad input, table by table: every user error stops with one line naming the key, file or row and the fix (exit
code 2, no traceback) before the model loads, and leaves no run directory behind; an environment answers a
malformed tool call with an observation naming the problem; a verifier scores a garbage completion 0.

The CLI cases drive the real app in-process (typer's runner) and a few end to end as subprocesses. A user's data
files (``curriculum.families=[file:PATH]``: JSONL, JSON, CSV, Parquet) name the line (CSV: the line the record
ends on) or row."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from autotelic.backends.embedded import embedded_model_dir
from autotelic.cli import app
from autotelic.config import RunConfig, save_config
from autotelic.envs.tools import calculator_env
from autotelic.rewards import build_reward
from autotelic.tasks import get_family

runner = CliRunner()


def _refused(args: list[str], runs: Path) -> str:
    """The one error line of a CLI call that must stop as a user error, having left no run directory in ``runs``."""
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.output
    assert not runs.exists() or not any(runs.iterdir()), f"left behind: {list(runs.iterdir())}"
    return errors[0]


# ---- settings: overrides on `autotelic run` ------------------------------------------------------
OVERRIDES = [
    # each value out of its range
    (["algorithm.lr=-0.001"], "algorithm.lr must be above 0, got -0.001"),
    (["algorithm.lr=0"], "algorithm.lr must be above 0, got 0.0"),
    (["algorithm.lr=nan"], "algorithm.lr must be above 0, got nan"),
    (["algorithm.lr=.inf"], "algorithm.lr must be above 0, got inf"),
    (["train.steps=-1"], "train.steps must be at least 1, got -1"),
    (["train.steps=0"], "train.steps must be at least 1, got 0"),
    (["control.max_new_tokens=0"], "control.max_new_tokens must be at least 1, got 0"),
    (["generate.group_size=0"], "generate.group_size must be at least 1, got 0"),
    (["generate.temperature=0"], "generate.temperature must be above 0"),
    (["generate.temperature=-1"], "generate.temperature must be above 0"),
    (["generate.top_p=0"], "generate.top_p must lie in (0, 1], got 0.0"),
    (["generate.top_p=1.5"], "generate.top_p must lie in (0, 1], got 1.5"),
    (["tree.branches=0"], "tree.branches must be at least 1"),
    (["tree.depth=0"], "tree.depth must be at least 1"),
    (["curriculum.memory.fraction=1.5"], "curriculum.memory.fraction must lie in [0, 1]"),
    (["curriculum.memory.examples=0"], "curriculum.memory.examples must be at least 1"),
    (["curriculum.prefixes.iteration_steps=-1"], "curriculum.prefixes.iteration_steps must be 0 or more"),
    (["value.train_body=true"], "config key 'value.train_body' is now 'value.body (frozen, lora or full)'"),
    (["value.body=half"], "value.body"),
    (["filter.rewards=[{name: process_value}]"], "filter.rewards[0].options.model=None: not a value model directory"),
    (["partial.segment_tokens=0"], "partial.segment_tokens must be at least 1"),
    (["control.tasks_per_step=0"], "control.tasks_per_step must be at least 1"),
    (["control.min_group_size=8", "control.max_group_size=4"],
     "control.max_group_size must be at least control.min_group_size (8), got 4"),
    (["control.max_tokens_per_step=0"], "control.max_tokens_per_step must be at least 1"),
    (["control.max_samples_per_step=0"], "control.max_samples_per_step must be at least 1"),
    (["control.early_exit_probe=0"], "control.early_exit_probe must be at least 1"),
    (["episode.max_turns=0"], "episode.max_turns must be at least 1"),
    (["filter.keep_top_fraction=0"], "filter.keep_top_fraction must lie in (0, 1]"),
    (["filter.pass_rate_band=[0.8, 0.2]"], "filter.pass_rate_band must be [low, high] within [0, 1]"),
    (["filter.pass_rate_band=[0.5]"], "filter.pass_rate_band must be [low, high] within [0, 1], got [0.5]"),
    (["filter.min_reward_std=-0.1"], "filter.min_reward_std must be 0 or more"),
    (["filter.max_rounds=0"], "filter.max_rounds must be at least 1"),
    (["filter.rewards=[]"], "filter.rewards must name at least one reward"),
    (["filter.rewards=[{name: verifier, weight: .nan}]"], "filter.rewards[0].weight must be a finite number"),
    (["curriculum.families=[]"], "curriculum.families is empty"),
    (["curriculum.levels=[0]"], "curriculum.levels entry must be at least 1, got 0"),
    (["curriculum.ema=0"], "curriculum.ema must lie in (0, 1]"),
    (["curriculum.decay=1"], "curriculum.decay must lie in [0, 1)"),
    (["curriculum.prefixes.fraction=1.5"], "curriculum.prefixes.fraction must lie in [0, 1]"),
    (["curriculum.gate=[0.9, 0.1]"], "curriculum.gate must be [low, high] within [0, 1]"),
    (["curriculum.pool_size=0"], "curriculum.pool_size must be at least 1"),
    (["curriculum.evolve.variants=0"], "curriculum.evolve.variants must be at least 1"),
    (["curriculum.evolve.operations=[]"], "curriculum.evolve.operations is empty"),
    (["algorithm.max_grad_norm=0"], "algorithm.max_grad_norm must be above 0"),
    (["algorithm.beta=-1"], "algorithm.beta must be 0 or more"),
    (["algorithm.clip_low=1.5"], "algorithm.clip_low must lie in [0, 1)"),
    (["algorithm.dpo_label_smoothing=0.5"], "algorithm.dpo_label_smoothing must lie in [0, 0.5)"),
    (["algorithm.rae_decay=1.5"], "algorithm.rae_decay must lie in [0, 1]"),
    (["algorithm.micro_batch_groups=0"], "algorithm.micro_batch_groups must be at least 1"),
    (["algorithm.updates_per_batch=0"], "algorithm.updates_per_batch must be at least 1"),
    (["algorithm.is_cap=0.5"], "algorithm.is_cap must be at least 1"),
    (["train.checkpoint_every=0"], "train.checkpoint_every must be at least 1"),
    (["train.keep_checkpoints=0"], "train.keep_checkpoints must be at least 1"),
    (["train.max_minutes=-5"], "train.max_minutes must be above 0"),
    (["eval.per_level=0"], "eval.per_level must be at least 1"),
    (["eval.every=-1"], "eval.every must be 0 (before and after training only) or more, got -1"),
    (["eval.batch_size=0"], "eval.batch_size must be at least 1"),
    (["eval.levels=[]"], "eval.levels is empty"),
    (["eval.max_new_tokens=0"], "eval.max_new_tokens must be at least 1"),
    (["model.device=gpu"], "model.device must be cpu, cuda, cuda:N, mps or auto, got 'gpu'"),
    (["model.lora_rank=0"], "model.lora_rank must be at least 1"),
    (["model.threads=0"], "model.threads must be at least 1"),
    (["model.lora=true", "model.lora_targets=[]"], "model.lora_targets is empty"),
    (["model.path=''"], "model.path is empty"),
    (["replay.capacity=0"], "replay.capacity must be at least 1"),
    (["dist.rollout_workers=-1"], "dist.rollout_workers must be 0 or more, got -1"),
    (["dist.cpus_per_worker=0"], "dist.cpus_per_worker must be above 0"),
    (["vllm.gpu_memory_utilization=1.5"], "vllm.gpu_memory_utilization must lie in (0, 1], got 1.5"),
    (["propose.answers_per_task=1"], "propose.answers_per_task must be at least 2 (a vote)"),
    (["discussion.grade_low=3"], "discussion.grade_low must be below discussion.grade_high (3)"),
    (["discussion.unparsed_penalty=0.5"], "discussion.unparsed_penalty must be at most 0 (a penalty)"),
    (["logging.run_name=a/b"], "logging.run_name must be a plain directory name"),
    (["value.search.children=0"], "value.search.children must be at least 1"),
    (["eval.search.temperature=0"], "eval.search.temperature must be above 0"),
    (["operator.plan_tokens=0"], "operator.plan_tokens must be at least 1"),
    (["train.steps=-1", "algorithm.lr=-1"], "algorithm.lr must be above 0, got -1.0; train.steps must be at least 1"),
    # keys, types and the override's own syntax
    (["train.stepz=3"], "unknown config key 'train.stepz'; valid keys here: steps, seed"),
    (["control.max_turns=3"], "config key 'control.max_turns' is now 'episode.max_turns': rename it"),
    (["nope=1"], "unknown config key 'nope'; valid keys here: model, generate"),
    (["train.steps=abc"], "config key 'train.steps' must be int, got 'abc'"),
    (["algorithm.lr=fast"], "config key 'algorithm.lr' must be float, got 'fast'"),
    (["model.lora=maybe"], "config key 'model.lora' must be bool"),
    (["generate.mode=beam"], "generate.mode: unknown generation mode 'beam'; valid: "),
    (["train=3"], "config section 'train' must be a mapping"),
    (["curriculum.levels=3"], "config key 'curriculum.levels' must be a list"),
    (["filter.rewards=[{name: verifier, wieght: 1}]"], "unknown config key 'filter.rewards.wieght'"),
    (["train.steps"], "override 'train.steps' must look like key=value (e.g. train.steps=30)"),
    (["=3"], "override '=3' names no key"),
    (["train.steps=[1,"], "override 'train.steps=[1,': the value is not valid YAML"),
    (["model.system_prompt=You", "are", "terse"],
     "the shell split a value at its spaces; quote the whole override: 'model.system_prompt=You are terse'"),
    (["model.system_prompt=Be", "brief", "train.steps=3"], "quote the whole override: 'model.system_prompt=Be brief'"),
    # settings that are each valid and do not work together
    (["generate.group_size=1"], "generate.group_size=1 makes groups of one sample, and grpo learns"),
    (["generate.group_size=1", "algorithm.name=rloo"], "generate.group_size=1 makes groups of one sample, and rloo"),
    (["generate.group_size=1", "algorithm.name=dapo"], "and dapo learns from the differences"),
    (["generate.group_size=1", "algorithm.name=gspo"], "and gspo learns from the differences"),
    (["generate.group_size=1", "algorithm.name=dr_grpo"], "and dr_grpo learns from the differences"),
    (["generate.group_size=1", "algorithm.name=online_dpo"], "and online_dpo learns from the differences"),
    (["control.adaptive_group_size=true", "control.min_group_size=1"],
     "control.min_group_size=1 makes groups of one sample"),
    (["algorithm.name=ppo"], "unknown algorithm.name 'ppo'; available: grpo"),
    (["generate.mode=tree", "algorithm.name=rloo"], "generate.mode=tree credits tree segments with group baselines"),
    (["generate.mode=episode"], "generate.mode=episode needs generate.env (e.g. guess_number)"),
    (["generate.mode=episode", "generate.env=chess"], "unknown environment 'chess'"),
    (["algorithm.name=offline_dpo"], "algorithm.name=offline_dpo needs algorithm.dataset"),
    (["filter.rewards=[{name: vibes}]"], "unknown reward 'vibes' in filter.rewards; valid:"),
    (["curriculum.name=test_time"], "curriculum.name=test_time trains on the held-out prompts"),
    (["curriculum.name=test_time", "filter.rewards=[{name: majority_vote}]", "curriculum.memory.at_eval=true"],
     "curriculum.name=test_time trains on the held-out prompts as they are, so curriculum.memory.at_eval would be "
     "ignored: turn it off or pick another curriculum"),
    (["curriculum.name=test_time", "filter.rewards=[{name: majority_vote}]", "curriculum.prefixes.iteration_steps=2"],
     "so curriculum.prefixes.iteration_steps would be ignored"),
    (["curriculum.prefixes.iteration_steps=2", "filter.dynamic_sampling=true"],
     "curriculum.prefixes.iteration_steps counts the rounds its curriculum observes"),
    (["generate.mode=episode", "generate.env=guess_number", "episode.tree_roots=8"],
     "episode.tree_roots=8 starts as many episodes as generate.group_size=8 holds, so the tree would copy none: set "
     "it below 8, or 0 for no tree"),
    (["episode.tree_roots=2", "episode.max_turns=3", "episode.branch_turns=[2, 1]"],
     "episode.branch_turns must be increasing turn counts from 1 to episode.max_turns - 1 = 2, got [2, 1]"),
    (["episode.tree_roots=2", "episode.max_turns=3", "episode.branch_turns=[3]"], "got [3]"),
    (["episode.tree_roots=2"], "episode.tree_roots branches the episodes of generate.mode=episode, not sample: set "
                               "episode.tree_roots=0"),
    (["curriculum.evolve.every=2"], "evolves the prompt pool of curriculum.name=regret"),
    (["selfplay.opponent=frozen"], "selfplay.opponent=frozen needs generate.mode=selfplay"),
    (["dist.async_steps=1"], "dist.async_steps needs dist.rollout_workers >= 1"),
    (["value.decodings=[beam]"], "unknown decoding 'beam' in value.decodings"),
    (["generate.mode=selfplay", "generate.env=textarena", "curriculum.memory.at_eval=true"],
     "curriculum.memory.at_eval writes into the questions that generate.mode sample, tree, partial, episode or "
     "discussion answers, not selfplay: turn it off"),
    (["value.enabled=true", "train.export_model=false"],
     "train.export_model=false writes none: set train.export_model=true or value.base_model=<model directory>"),
    (["dist.env_workers=1"], "generate.mode=sample has none"),
    (["control.max_tokens_per_step=100"], "control.max_tokens_per_step=100 fits no task (generate.group_size "
                                           "x control.max_new_tokens = 192 tokens at most): set it to 192 or more"),
    (["control.max_samples_per_step=4"], "control.max_samples_per_step=4 fits no task (one task is "
                                          "generate.group_size = 8 samples): set it to 8 or more"),
    (["curriculum.families=[add, algebra]"], "unknown task family 'algebra'"),  # found as the run starts
]


@pytest.mark.parametrize("overrides, message", OVERRIDES, ids=[" ".join(o) for o, _ in OVERRIDES])
def test_bad_setting_is_one_line_before_the_run_starts(tmp_path, overrides, message):
    runs = tmp_path / "runs"
    assert message in _refused(["run", *overrides, f"logging.runs_dir={runs}"], runs)


# ---- optional packages: named with the pip extra, before anything starts -------------------------------
PACKAGES = [
    ("ray", ["dist.rollout_workers=1"], "dist.rollout_workers=1 needs the 'ray' package: pip install ray, or pip "
                                        "install 'autotelic[dist]'"),
    ("ray", ["dist.reward_workers=2"], "dist.reward_workers=2 needs the 'ray' package"),
    ("textarena", ["generate.mode=selfplay", "generate.env=textarena", "algorithm.name=spiral",
                   "curriculum.families=[ta_kuhn_poker]"], "generate.env=textarena needs the 'textarena' package"),
    ("textarena", ["curriculum.families=[ta_tictactoe]"], "autotelic[games]"),
    ("playwright", ["generate.mode=episode", "generate.env=web_browser"],
     "generate.env=web_browser needs the 'playwright' package: pip install playwright, or pip install "
     "'autotelic[web]'"),
    ("tensorboard", ["logging.tensorboard=true"], "logging.tensorboard=true needs the 'tensorboard' package"),
    ("wandb", ["logging.wandb=true"], "logging.wandb=true needs the 'wandb' package: pip install wandb"),
    ("mlflow", ["logging.mlflow=true"], "pip install 'autotelic[mlflow]'"),
    ("vllm", ["vllm.enabled=true"], "vllm.enabled=true needs the vllm package (not installed)"),
]


@pytest.mark.parametrize("package, overrides, message", PACKAGES, ids=[f"{p}:{o[0]}" for p, o, _ in PACKAGES])
def test_missing_optional_package_is_named_with_its_extra(tmp_path, monkeypatch, package, overrides, message):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",  # this machine has most of them: hide the one in question
                        lambda name, *args: None if name == package else find_spec(name, *args))
    runs = tmp_path / "runs"
    assert message in _refused(["run", *overrides, f"logging.runs_dir={runs}"], runs)


# ---- recipe files ------------------------------------------------------------------------------
RECIPES = [
    (None, "config file not found: {path}"),
    ("train: [unclosed\n", "config file {path} is not valid YAML"),
    ("train:\n\tsteps: 3\n", "config file {path} is not valid YAML"),
    (b"\xff\xfe\x00garbage", "config file {path} is not text: a recipe is a UTF-8 YAML file"),
    ("- 1\n- 2\n", "config file {path} must hold a mapping at the top level"),
    ("just words\n", "config file {path} must hold a mapping at the top level"),
    ("trian:\n  steps: 3\n", "unknown config key 'trian'; valid keys here: model, generate"),
    ("train:\n  stepz: 3\n", "unknown config key 'train.stepz'"),
    ("train: 5\n", "config section 'train' must be a mapping, got 5"),
    ("generate:\n  group_size: many\n", "config key 'generate.group_size' must be int, got 'many'"),
    ("algorithm:\n  lr: -1.0e-5\n", "algorithm.lr must be above 0, got -1e-05"),
    ("generate:\n  group_size: 1\n", "generate.group_size=1 makes groups of one sample"),
    ("filter:\n  rewards:\n  - name: verifier\n    options: [1]\n",
     "config key 'filter.rewards.options' must be a mapping"),
]


@pytest.mark.parametrize("text, message", RECIPES, ids=[str(i) for i in range(len(RECIPES))])
def test_bad_recipe_file_is_named(tmp_path, text, message):
    recipe, runs = tmp_path / "recipe.yaml", tmp_path / "runs"
    if isinstance(text, str):
        recipe.write_text(text)
    elif text is not None:
        recipe.write_bytes(text)
    assert message.format(path=recipe) in _refused(["run", "--config", str(recipe), f"logging.runs_dir={runs}"], runs)


# ---- datasets: offline DPO preference pairs (JSONL) ---------------------------------------------------
PAIR = '{"prompt": "p", "chosen": "a", "rejected": "b"}\n'
DATASETS = [
    (None, "preference dataset not found: {path}"),
    (PAIR + "{not json\n", "{path}:2: not valid JSON"),
    ('{"prompt": "p", "chosen": "a"}\n', "{path}:1: needs string fields prompt, chosen, rejected; missing or not text: "
                                         "rejected"),
    (PAIR + '{"prompt": "p", "chosen": 3, "rejected": "b"}\n', "{path}:2: needs string fields"),
    ('["p", "a", "b"]\n', "{path}:1: needs string fields prompt, chosen, rejected; missing or not text: prompt"),
    ('"just a string"\n', "{path}:1: needs string fields"),
    ("", "preference dataset {path} holds no pairs"),
    ("\n\n  \n", "preference dataset {path} holds no pairs"),
    (b"\xff\xfe{garbage", "{path}:1: not valid JSON"),
    (PAIR * 3 + '{"prompt": "p", "chosen": "a", "rejected": null}\n', "{path}:4: needs string fields"),
]


@pytest.mark.parametrize("content, message", DATASETS, ids=[str(i) for i in range(len(DATASETS))])
def test_bad_preference_dataset_names_file_and_line(tmp_path, content, message):
    data, runs = tmp_path / "pairs.jsonl", tmp_path / "runs"
    if isinstance(content, bytes):
        data.write_bytes(content)
    elif content is not None:
        data.write_text(content)
    error = _refused(["run", "algorithm.name=offline_dpo", f"algorithm.dataset={data}", f"logging.runs_dir={runs}"],
                     runs)
    assert message.format(path=data) in error


# ---- own data files and reward functions ---------------------------------------------------------------
ROW = '{"prompt": "What is 1 + 1?", "answer": "2"}\n'
DATA_FILES = [  # (file name, what it holds: text, or rows for Parquet; the message; more overrides)
    ("data.jsonl", None, "data file not found: {path}"),
    ("data.jsonl", "", "{path} holds no rows: give at least one row with a prompt"),
    ("data.jsonl", "\n \n", "{path} holds no rows"),
    ("data.jsonl", ROW + "{not json\n", "{path}:2: not valid JSON"),
    ("data.jsonl", ROW + '{"answer": "3"}\n', "{path}:2: no 'prompt': every row needs a prompt (text or chat "
                                              "messages), or map another column with curriculum.columns="
                                              "{{prompt: NAME}}"),
    ("data.jsonl", ROW * 2 + '{"prompt": 7}\n', "{path}:3: 'prompt' must be text or a list of chat messages, got int"),
    ("data.jsonl", '{"prompt": [{"role": "user"}]}\n', "{path}:1: 'prompt' as chat messages must be a list of"),
    ("data.jsonl", '{"prompt": "q", "answer": [1]}\n', "{path}:1: 'answer' must be text or a number, got list"),
    ("data.jsonl", '["q", "a"]\n', "{path}:1: a row must be an object of columns, got list"),
    ("data.jsonl", '{"prompt": "q", "tests": "assert f(1) =="}\n', "{path}:1: 'tests' is not valid Python (line 1: "),
    ("data.jsonl", '{"prompt": "p", "level": 2}\n{"prompt": "q", "level": 0}\n', "{path}:2: level must be an integer "
                                                                                "from 1, got 0"),
    ("data.jsonl", '{"prompt": "p", "level": 2}\n' + ROW, "{path}:2: no level or difficulty, while other rows "
                                                        "have one"),
    ("data.jsonl", '{"prompt": "q", "difficulty": "brutal"}\n', "{path}:1: difficulty 'brutal' is neither a number"),
    ("data.jsonl", '{"question": "q"}\n', "{path}:1: no 'text': every row needs a prompt",
     ["curriculum.columns={prompt: text}"]),
    ("data.txt", "q\n", "{path}: unknown data format '.txt'; use one of .jsonl, .json, .csv, .parquet"),
    ("data.json", '{"prompt": "q"}', "{path}: a JSON data file holds a list of row objects, not a dict"),
    ("data.json", '[{"prompt": "q"}, {"answer": "1"}]', "{path} row 2: no 'prompt'"),
    ("data.json", '[{"prompt": "q"},', "{path}: not valid JSON"),
    ("data.csv", "prompt,answer\nq1,1\n,2\n", "{path}:3: no 'prompt'"),
    ("data.csv", 'prompt,answer\n"a question\non two lines",1\n,2\n', "{path}:4: no 'prompt'"),
    ("data.csv", "question,answer\nq,1\n", "{path}:2: no 'prompt'"),
    ("data.csv", "prompt,answer\nq,1,extra\n", "{path}:2: 1 more value(s) than the header's columns"),
    ("data.csv", "", "{path} holds no rows"),
    ("data.parquet", [{"prompt": "q"}, {"prompt": None}], "{path} row 2: no 'prompt'"),
    ("data.parquet", "not parquet at all", "{path}: not a readable Parquet file"),
]


@pytest.mark.parametrize("name, content, message, more", [(*case, [])[:4] for case in DATA_FILES],
                         ids=[f"{i}-{case[0]}" for i, case in enumerate(DATA_FILES)])
def test_bad_data_file_names_file_and_line(tmp_path, name, content, message, more):
    data, runs = tmp_path / name, tmp_path / "runs"
    if isinstance(content, list):
        import pandas

        pandas.DataFrame(content).to_parquet(data)
    elif content is not None:
        data.write_text(content)
    error = _refused(["run", f"curriculum.families=[file:{data}]", *more, f"logging.runs_dir={runs}"], runs)
    assert message.format(path=data) in error


REWARD_FUNCTIONS = [  # (filter.rewards name, the message)
    ("no_such_module_xyz:fn", "filter.rewards[0]: reward 'no_such_module_xyz:fn': cannot import no_such_module_xyz "
                              "(ModuleNotFoundError: No module named 'no_such_module_xyz'); put its module on "
                              "PYTHONPATH (or pip install it), or name a file as path/to/file.py:fn"),
    ("json:no_such_fn", "reward 'json:no_such_fn': json has no 'no_such_fn'"),
    ("json:__doc__", "reward 'json:__doc__': json.__doc__ is a str, not a function"),
    ("missing/rewards.py:fn", "reward 'missing/rewards.py:fn': file missing/rewards.py not found"),
    ("{dir}/broken.py:fn", "cannot import {dir}/broken.py (SyntaxError: "),
    ("json:", "reward 'json:' must look like my_pkg.rewards:fn or path/to/file.py:fn"),
]


@pytest.mark.parametrize("name, message", REWARD_FUNCTIONS, ids=[n for n, _ in REWARD_FUNCTIONS])
def test_bad_reward_function_is_named_before_the_run_starts(tmp_path, name, message):
    (tmp_path / "broken.py").write_text("def fn(completions:\n")
    runs = tmp_path / "runs"
    error = _refused(["run", f"filter.rewards=[{{name: '{name.format(dir=tmp_path)}'}}]", f"logging.runs_dir={runs}"],
                     runs)
    assert message.format(dir=tmp_path) in error


# ---- environments: a module by dotted path, named before the run starts ------------------------------------
ENV_MODULES = {  # module name -> its source, written to a folder on sys.path
    "broken_env_xyz": "def load_environment(:\n",
    "needs_dep_env_xyz": "import no_such_dependency_xyz\n",
    "dict_env_xyz": "def load_environment():\n    return {}\n",
    "mixed_env_xyz": ("from autotelic.envs.guess_number import GuessNumberEnv\n"
                      "from autotelic.envs.registry import EnvironmentSpec\nfrom autotelic.types import Task\n"
                      "def load_environment():\n    return EnvironmentSpec(GuessNumberEnv, "
                      "[Task('a', '1', 'x', 1, 'a'), Task('b', '2', 'y', 1, 'b')])\n"),
    "unclosable_env_xyz": ("from autotelic.envs.registry import EnvironmentSpec\n"
                           "class Game:\n    def reset(self, task):\n        return ''\n"
                           "    def step(self, action):\n        return None\n"
                           "def load_environment():\n    return EnvironmentSpec(Game)\n"),
}
ENVIRONMENTS = [  # (generate.env and its args, the message)
    (["generate.env=no_such_env_xyz"], "unknown environment 'no_such_env_xyz'; built in: guess_number, calculator, "
     "python, textarena, web, web_browser, web_screenshot; or a module with load_environment(**kwargs) by dotted "
     "path (my_pkg.my_env, found on PYTHONPATH) or installed under the 'autotelic.environments' entry point"),
    (["generate.env=my_pkg_xyz.env"], "unknown environment 'my_pkg_xyz.env'; built in:"),
    (["generate.env=json"], "unknown environment 'json': the module json has no load_environment(**kwargs) returning "
                            "an EnvironmentSpec; built in:"),
    (["generate.env=broken_env_xyz"], "environment module 'broken_env_xyz' failed to import: SyntaxError: "),
    (["generate.env=needs_dep_env_xyz"], "environment module 'needs_dep_env_xyz' failed to import: No module named "
                                         "'no_such_dependency_xyz'"),
    (["generate.env=dict_env_xyz"], "load_environment of environment 'dict_env_xyz' returned dict, not an "
                                    "autotelic.envs.registry.EnvironmentSpec"),
    (["generate.env=mixed_env_xyz"], "environment 'mixed_env_xyz': an environment's tasks must share one family name, "
                                     "got ['x', 'y']"),
    (["generate.env=unclosable_env_xyz"], "environment 'unclosable_env_xyz': its Game has no close(); an environment "
                                          "has reset(task), step(action) and close() (which may do nothing)"),
    (["generate.env=guess_number", "generate.env_args={level: 3}"], "load_environment of environment 'guess_number' "
     "raised TypeError: load_environment() got an unexpected keyword argument 'level'"),
]


@pytest.mark.parametrize("overrides, message", ENVIRONMENTS, ids=[" ".join(o) for o, _ in ENVIRONMENTS])
def test_bad_environment_is_named_before_the_run_starts(tmp_path, monkeypatch, overrides, message):
    for module, source in ENV_MODULES.items():
        (tmp_path / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    runs = tmp_path / "runs"
    assert message in _refused(["run", "generate.mode=episode", *overrides, f"logging.runs_dir={runs}"], runs)


# ---- model directories ----------------------------------------------------------------------------
def _tokenizer_files(directory: Path) -> None:
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(embedded_model_dir() / name, directory / name)


MODEL_DIRS = [  # (what the directory holds, the message)
    ("absent", "model.path={path}: no such directory; give a local Hugging Face model directory"),
    ("a file", "model.path={path}: no such directory"),
    ("empty", "model.path={path}: not a Hugging Face model directory (no config.json there)"),
    ("config not json", "model.path={path}: config.json cannot be read"),
    ("config a list", "model.path={path}: config.json names no model_type"),
    ("config without model_type", "model.path={path}: config.json names no model_type"),
    ("no weights", "model.path={path}: no weights (model.safetensors or pytorch_model.bin)"),
    ("no tokenizer", "model.path={path}: no tokenizer (tokenizer.json, tokenizer.model, vocab.json)"),
    ("damaged weights", "cannot load model from {path}"),  # found only by loading them
]


def _model_dir(path: Path, holds: str) -> None:
    if holds == "absent":
        return
    if holds == "a file":
        path.write_text("not a directory")
        return
    path.mkdir()
    config = {"config not json": "{model_type: llama", "config a list": "[1, 2]",
              "config without model_type": "{}"}.get(holds, json.dumps({"model_type": "llama"}))
    if holds != "empty":
        (path / "config.json").write_text(config)
    if holds in ("no tokenizer", "damaged weights"):
        (path / "model.safetensors").write_bytes(b"\x00" * 1000)
    if holds in ("no weights", "damaged weights"):
        _tokenizer_files(path)


@pytest.mark.parametrize("holds, message", MODEL_DIRS, ids=[h for h, _ in MODEL_DIRS])
def test_bad_model_directory_is_named(tmp_path, holds, message):
    model, runs = tmp_path / "model", tmp_path / "runs"
    _model_dir(model, holds)
    assert message.format(path=model) in _refused(["run", "--model", str(model), f"logging.runs_dir={runs}"], runs)


OTHER_MODELS = [
    (["model.path=random:llama-70b"], "random:llama-70b: unknown shape; known: qwen2-0.5b"),
    (["filter.rewards=[{name: judge, options: {model: /nowhere/judge}}]", "curriculum.name=uniform"],
     "filter.rewards[0].options.model=/nowhere/judge: no such directory"),
    (["curriculum.name=regret", "curriculum.evolve.every=2", "curriculum.evolve.model=/nowhere/evolver",
      "filter.rewards=[{name: majority_vote}]"], "curriculum.evolve.model=/nowhere/evolver: no such directory"),
    (["value.enabled=true", "value.base_model=/nowhere/body"], "value.base_model=/nowhere/body: no such directory"),
    pytest.param(["model.device=cuda:0"], "model.device=cuda:0: no CUDA GPU is visible (use cpu or auto)",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible here")),
    (["model.path=hf:nobody-xyz/no-model"], "model.path=hf:nobody-xyz/no-model: not in the local Hugging Face cache ("),
    (["model.path='hf:'"], "model.path=hf:: name a model, e.g. hf:HuggingFaceTB/SmolLM2-135M-Instruct"),
    (["model.chat_template=/nowhere/template.jinja"], "model.chat_template=/nowhere/template.jinja: neither a Jinja "
     "template (no {{ or {%) nor a file; give the template text or the path of a .jinja file"),
    (["model.dtype=fp8"], "config key 'model.dtype' must be one of float32, bf16-mixed, bfloat16, auto; got 'fp8'"),
]


@pytest.mark.parametrize("overrides, message", OTHER_MODELS,
                         ids=["random", "judge", "evolver", "value", "device", "hub", "hub_empty", "template", "dtype"])
def test_bad_model_setting_is_named(tmp_path, overrides, message):
    runs = tmp_path / "runs"
    assert message in _refused(["run", *overrides, f"logging.runs_dir={runs}"], runs)


# ---- run directories: resume, eval, export, pairs --------------------------------------------------------
def _run_dir(path: Path) -> Path:
    path.mkdir(parents=True)
    save_config(RunConfig(), path / "config.yaml")
    return path


RESUMES = [  # overrides that must not touch the run's config.yaml
    (["train.steps=-1"], "train.steps must be at least 1, got -1"),
    (["train.stepz=80"], "unknown config key 'train.stepz'"),
    (["model.path=/nowhere/model"], "model.path=/nowhere/model: no such directory"),
    (["model.system_prompt=Be", "brief"], "quote the whole override: 'model.system_prompt=Be brief'"),
    (["generate.group_size=1"], "generate.group_size=1 makes groups of one sample"),
]


@pytest.mark.parametrize("overrides, message", RESUMES, ids=[" ".join(o) for o, _ in RESUMES])
def test_resume_with_a_bad_override_keeps_the_run_as_it_was(tmp_path, overrides, message):
    run = _run_dir(tmp_path / "runs" / "r")
    before = (run / "config.yaml").read_bytes()
    result = runner.invoke(app, ["resume", str(run), *overrides])
    assert result.exit_code == 2 and "Traceback" not in result.output and message in result.output, result.output
    assert (run / "config.yaml").read_bytes() == before and sorted(p.name for p in run.iterdir()) == ["config.yaml"]


def _broken_config(run: Path) -> None:
    (run / "config.yaml").write_text("train: [unclosed\n")


def _rollouts(run: Path, text: str) -> None:
    (run / "rollouts.jsonl").write_text(text)


ROLLOUT = '{"step": 1, "prompt": "p", "completion": "c", "reward": 1.0}\n'
RUN_DIRS = [  # (command, how the run directory is damaged, the message); {run} is the directory
    (["resume"], None, "{run} is not a run directory (no config.yaml)"),
    (["resume"], _broken_config, "config file {run}/config.yaml is not valid YAML"),
    (["export"], None, "{run} is not a run directory (no config.yaml)"),
    (["export"], lambda run: None, "{run} has no checkpoint to export"),
    (["eval"], None, "{run} is neither a run directory (no config.yaml) nor a Hugging Face model directory"),
    (["eval"], lambda run: None, "{run} has no exported model yet: run `autotelic export {run}` first"),
    (["eval"], _broken_config, "is not valid YAML"),
    (["eval", "-c", "recipes/rest-rl-code.yaml"], lambda run: None,
     "{run} is a run directory, which brings its own config: drop the recipe (recipes/rest-rl-code.yaml)"),
    (["pairs", "--out", "OUT"], lambda run: None, "{run} has no rollouts.jsonl"),
    (["pairs", "--out", "OUT"], lambda run: _rollouts(run, ROLLOUT + "{half a row"),
     "{run}/rollouts.jsonl:2: not valid JSON"),
    (["pairs", "--out", "OUT"], lambda run: _rollouts(run, '{"step": 1, "prompt": "p"}\n'),
     "{run}/rollouts.jsonl:1: a rollout row needs step (int), prompt and completion (text) and reward"),
    (["pairs", "--out", "OUT"],
     lambda run: _rollouts(run, ROLLOUT + '{"step": "one", "prompt": "p", "completion": "c", "reward": "high"}\n'),
     "{run}/rollouts.jsonl:2: a rollout row"),
]


@pytest.mark.parametrize("command, damage, message", RUN_DIRS,
                         ids=[f"{command[0]}-{i}" for i, (command, _, _) in enumerate(RUN_DIRS)])
def test_bad_run_directory_is_named(tmp_path, command, damage, message):
    run = tmp_path / "run"
    if damage is not None:
        damage(_run_dir(run))
    before = sorted(p.name for p in tmp_path.rglob("*"))
    args = [*command[:1], str(run), *[str(tmp_path / "pairs.jsonl") if a == "OUT" else a for a in command[1:]]]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert message.format(run=run) in result.output
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing written, nothing lost


def test_a_run_directory_that_holds_a_run_is_not_overwritten(tmp_path):
    run = _run_dir(tmp_path / "runs" / "r")
    before = (run / "config.yaml").read_bytes()
    result = runner.invoke(app, ["run", f"logging.runs_dir={tmp_path / 'runs'}", "logging.run_name=r"])
    assert result.exit_code == 2 and f"run directory {run} already holds a run: use `autotelic resume {run}`" in \
        result.output and "Traceback" not in result.output
    assert (run / "config.yaml").read_bytes() == before


def test_a_runs_dir_that_cannot_hold_runs_is_named(tmp_path):
    (tmp_path / "file").write_text("")
    runs = tmp_path / "file"
    result = runner.invoke(app, ["run", f"logging.runs_dir={runs}"])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert f"logging.runs_dir={runs}: cannot make run directory" in result.output


# ---- end to end: the installed command, in its own process --------------------------------------------
SUBPROCESSES = [
    (["run", "algorithm.lr=-1"], "error: algorithm.lr must be above 0, got -1.0"),
    (["run", "model.system_prompt=You", "are", "terse"],
     "quote the whole override: 'model.system_prompt=You are terse'"),
    (["resume", "nowhere"], "error: nowhere is not a run directory (no config.yaml)"),
]


def test_the_command_exits_2_with_one_line_and_no_traceback(tmp_path):
    runs = tmp_path / "runs"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    started = [subprocess.Popen([sys.executable, "-m", "autotelic.cli", *args, f"logging.runs_dir={runs}"]
                                if args[0] == "run" else [sys.executable, "-m", "autotelic.cli", *args],
                                cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for args, _ in SUBPROCESSES]  # at once: each pays the imports
    for process, (args, message) in zip(started, SUBPROCESSES):
        out, err = process.communicate(timeout=120)
        assert process.returncode == 2, (args, out, err)
        assert "Traceback" not in out + err and message in err, (args, err)
        assert len([line for line in err.splitlines() if line.startswith("error:")]) == 1
    assert not runs.exists() or not any(runs.iterdir())


# ---- tool calls: the environment answers with the problem, never raises -------------------------------------
def _call(name: str, arguments: object) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


TOOL_CALLS = [
    ('<tool_call>{"name": "calculator", "arguments": {"expression": "2+3"</tool_call>', "not valid JSON"),
    ("<tool_call></tool_call>", "not valid JSON"),
    ("<tool_call>{oops}</tool_call>", "not valid JSON"),
    ("<tool_call>[1, 2]</tool_call>", "must be a JSON object with 'name' and 'arguments'"),
    ('<tool_call>{"arguments": {}}</tool_call>', "needs a 'name' string"),
    ('<tool_call>{"name": 7, "arguments": {}}</tool_call>', "needs a 'name' string"),
    ('<tool_call>{"name": "", "arguments": {}}</tool_call>', "needs a 'name' string"),
    (_call("search", {"query": "x"}), "unknown tool 'search'; available: calculator"),
    (_call("calculator", {"expr": "1"}), "'calculator' has no argument 'expr'"),
    (_call("calculator", {}), "'calculator' needs argument 'expression'"),
    (_call("calculator", {"expression": 5}), "argument 'expression' of 'calculator' must be of type string"),
    (_call("calculator", {"expression": True}), "must be of type string"),
    (_call("calculator", [1, 2]), "the arguments of 'calculator' must be a JSON object"),
    ('{"name": "calculator", "arguments": "{not json"}', "the arguments of 'calculator' are not valid JSON"),
    ('{"type": "function", "function": {"name": "calculator", "arguments": "[1]"}}', "must be a JSON object"),
    (_call("calculator", {"expression": "1 / 0"}), "division by zero"),
    (_call("calculator", {"expression": "import os"}), "not an arithmetic expression"),
    (_call("calculator", {"expression": "2**100000"}), "too large"),
    (_call("calculator", {"expression": "(" * 400 + "1" + ")" * 400}), "longer than 300"),
]


@pytest.mark.parametrize("action, problem", TOOL_CALLS, ids=[str(i) for i in range(len(TOOL_CALLS))])
def test_malformed_tool_call_is_an_observation(action, problem):
    env = calculator_env()
    env.reset(get_family("add").generate(random.Random(0), 1))
    observation, reward, done, info = env.step(action)
    assert observation.startswith("Error: ") and problem in observation, observation
    assert reward == 0.0 and not done and info["ok"] is False and info["valid"] is False


# ---- model outputs: garbage completions score 0 (or nan: unscorable), never crash ------------------------------
GARBAGE = ["", "\x00\xff\ufffd", "NaN", "e+999999", "-" * 5000, "∞", "None", "<tool_call>{", "```python\nwhile True:",
           "\n\n\n", "the answer is: [", "{'answer': }"]
VERIFIED = [(reward, family) for reward in ("verifier", "math_verify") for family in ("add", "compare")]


@pytest.mark.parametrize("reward, family", VERIFIED, ids=[f"{r}-{f}" for r, f in VERIFIED])
def test_garbage_completions_score_nothing(reward, family):
    task = get_family(family).generate(random.Random(1), 2)
    scores = build_reward(reward)(task, GARBAGE)
    assert len(scores) == len(GARBAGE)
    assert all(score == 0.0 or math.isnan(score) for score in scores), list(zip(GARBAGE, scores))


@pytest.mark.parametrize("family", ["add", "subtract", "compare", "successor", "guess_number", "pyfunc"])
def test_family_scores_garbage_zero(family):
    task = get_family(family).generate(random.Random(2), 1)
    assert [get_family(family).score(task, text) for text in GARBAGE] == [0.0] * len(GARBAGE)


def test_format_and_majority_rewards_survive_garbage():
    task = get_family("add").generate(random.Random(3), 1)
    assert build_reward("format", {"pattern": r"^\d+$"})(task, GARBAGE) == [0.0] * len(GARBAGE)
    votes = build_reward("majority_vote")(task, GARBAGE)  # no two garbage answers agree on a number
    assert len(votes) == len(GARBAGE) and all(math.isnan(v) or 0.0 <= v <= 1.0 for v in votes)
