"""Bring your own data and rewards: every loader on real files (JSONL, JSON, CSV, Parquet, a ``save_to_disk``
directory), column mapping, levels, the data's own checks (answers strictly, tests in the real sandbox), reward
functions by path (TRL's calling convention, None, raising, async), and both examples trained for real on the
embedded model: one through the CLI in a subprocess, one through ``autotelic.train``, each found on PYTHONPATH."""

from __future__ import annotations

import importlib
import json
import logging
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

import autotelic
from autotelic.config import ConfigError
from autotelic.heldout import build_heldout, heldout_tasks
from autotelic.loading import load_config
from autotelic.rewards import build_reward
from autotelic.rollout.filter import RewardErrors, score_groups
from autotelic.tasks import get_family
from autotelic.tasks.files import answer_score, data_family, read_hf
from autotelic.build import build_curriculum
from autotelic.types import Group, Sample, Task
from autotelic.user_code import UserCodeError

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
ROWS = [
    {"prompt": "What is 2 + 3?", "answer": "5", "level": 1, "topic": "sums"},
    {"prompt": "What is 12 + 30?", "answer": "42", "level": 2, "topic": "sums"},
    {"prompt": "Spell cat backwards.", "answer": "tac", "level": 2, "topic": "words"},
]


def _write(path: Path, rows: list[dict]) -> str:
    """``rows`` in the format ``path``'s extension names; returns the family name."""
    import pandas

    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    elif path.suffix == ".json":
        path.write_text(json.dumps(rows))
    elif path.suffix == ".csv":
        pandas.DataFrame(rows).to_csv(path, index=False)
    else:
        pandas.DataFrame(rows).to_parquet(path)
    return f"file:{path}"


def _tasks(name: str) -> list[Task]:
    family = get_family(name)
    return sorted((family.task(row, level) for level, rows in family.rows.items() for row in rows),
                  key=lambda task: task.prompt)


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".csv", ".parquet"])
def test_each_file_format_gives_the_same_tasks(tmp_path, suffix):
    name = _write(tmp_path / f"data{suffix}", ROWS)
    data_family(name, {})
    tasks = _tasks(name)
    assert [(t.prompt, t.answer, t.level) for t in tasks] == [
        ("Spell cat backwards.", "tac", 2), ("What is 12 + 30?", "42", 2), ("What is 2 + 3?", "5", 1)]
    assert get_family(name).levels == (1, 2)
    assert tasks[0].uid == f"{name}:Spell cat backwards." and tasks[0].meta["columns"]["topic"] == "words"


def test_a_saved_dataset_directory_and_its_splits(tmp_path):
    import datasets

    rows = {key: [row[key] for row in ROWS] for key in ("prompt", "topic")} | {"answer": ["5", "42", "tac"]}
    datasets.Dataset.from_dict(rows).save_to_disk(str(tmp_path / "plain"))
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows),
                          "test": datasets.Dataset.from_dict({k: v[:1] for k, v in rows.items()})}
                         ).save_to_disk(str(tmp_path / "splits"))
    assert [t.answer for t in _tasks(f"hf:{tmp_path / 'plain'}")] == ["tac", "42", "5"]
    assert len(_tasks(f"hf:{tmp_path / 'splits'}")) == 3 and len(_tasks(f"hf:{tmp_path / 'splits'}:test")) == 1
    with pytest.raises(ConfigError, match="has no split 'dev'; its splits: train, test"):
        read_hf(f"{tmp_path / 'splits'}:dev")


def test_a_named_split_is_held_out_whole_and_never_trained_on(tmp_path):
    """eval.families=[hf:DIR:test] holds the test split out whole; a test prompt repeated in the train split (a
    common leak in real data sets) is not trained on either."""
    import datasets

    train = [{"prompt": f"What is {a} + 7?", "answer": str(a + 7)} for a in range(30)]
    test = [{"prompt": f"What is {a} + 9?", "answer": str(a + 9)} for a in range(6)] + [train[0]]
    datasets.DatasetDict({split: datasets.Dataset.from_list(rows) for split, rows in
                          (("train", train), ("test", test))}).save_to_disk(str(tmp_path / "data"))
    config = load_config(None, [f"curriculum.families=[hf:{tmp_path / 'data'}:train]", "curriculum.levels=[1]",
                                f"eval.families=[hf:{tmp_path / 'data'}:test]", "eval.levels=[1]", "eval.per_level=50"])
    heldout = build_heldout(config)
    assert sorted(task.prompt for task in heldout) == sorted(row["prompt"] for row in test)
    drawn = {task.prompt for task in build_curriculum(config, heldout).next_tasks(400)}
    assert drawn == {row["prompt"] for row in train[1:]}  # every train row but the one the test split repeats


def test_a_hub_name_offline_names_the_fix(monkeypatch):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)  # this machine has no network: fail fast
    with pytest.raises(ConfigError, match=r"cannot load 'someone/missing'.*save_to_disk\(DIR\)\) and use hf:DIR"):
        read_hf("someone/missing:main:test")


def test_columns_are_mapped_and_carried_to_rewards(tmp_path):
    name = _write(tmp_path / "qa.jsonl", [{"question": "What is 1 + 1?", "solution": "2", "hardness": "hard",
                                           "source": "mine"}])
    family = data_family(name, {"prompt": "question", "answer": "solution", "difficulty": "hardness"})
    (task,) = _tasks(name)
    assert family is get_family(name)  # the run's mapping stays with the family
    assert (task.prompt, task.answer, task.level) == ("What is 1 + 1?", "2", 3)
    assert task.meta["columns"] == {"solution": "2", "answer": "2", "hardness": "hard", "source": "mine"}


def test_a_fresh_process_reads_mapped_data_through_the_config(tmp_path):
    """As ``autotelic eval`` or a Ray worker does: the held-out set is built from the config alone."""
    name = _write(tmp_path / "qa.jsonl", [{"question": f"q{i}", "solution": str(i)} for i in range(4)])
    code = ("from autotelic.loading import load_config; from autotelic.heldout import build_heldout; "
            f"config = load_config(None, ['curriculum.families=[{name}]', 'curriculum.columns={{prompt: question, "
            "answer: solution}', 'eval.per_level=2']); print(sorted(t.answer for t in build_heldout(config).tasks))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-1000:]
    answers = json.loads(result.stdout.replace("'", '"'))
    assert len(set(answers)) == 2 and set(answers) <= {"0", "1", "2", "3"}  # the mapped answer column, not ""


def test_levels_from_difficulty_numbers_and_none(tmp_path):
    rows = [{"prompt": f"q{i}", "answer": 1, "difficulty": d} for i, d in enumerate([0.1, 0.5, 0.9, 0.9, 0.2])]
    assert [t.level for t in sorted(_tasks(_write(tmp_path / "d.jsonl", rows)), key=lambda t: t.prompt)] == [
        1, 2, 3, 3, 1]
    plain = _write(tmp_path / "p.jsonl", [{"prompt": "q", "answer": "1"}])
    assert get_family(plain).levels == (1,)  # no level or difficulty: all level 1


def test_chat_prompts_reach_the_chat_template(tmp_path, embedded_dir):
    from transformers import AutoTokenizer

    from autotelic.backends.hf import encode_chat

    chat = [{"role": "system", "content": "Answer in French."}, {"role": "user", "content": "Count to 2."}]
    (task,) = _tasks(_write(tmp_path / "chat.jsonl", [{"prompt": chat, "answer": "un deux"}]))
    assert task.chat == chat and task.prompt == "system: Answer in French.\nuser: Count to 2."
    tokenizer = AutoTokenizer.from_pretrained(embedded_dir)
    text = tokenizer.decode(encode_chat(tokenizer, task.chat, "", system_prompt="ignored"))
    assert "Answer in French." in text and "ignored" not in text


def test_answers_are_checked_strictly_and_tests_run_in_the_sandbox(tmp_path):
    assert answer_score("42", "42, or maybe 41") == 1.0 and answer_score("42", "41 or 42") == 0.0
    assert answer_score("0.5", "\\frac{1}{2}") == 1.0 and answer_score("0.5", "1/3") == 0.0
    assert answer_score("Paris", " paris. ") == 1.0 and answer_score("Paris", "It is Paris") == 0.0
    name = _write(tmp_path / "code.jsonl", [{"prompt": "Write inc(x).", "tests": "assert inc(1) == 2"},
                                            {"prompt": "Say hi.", "topic": "free"}])
    family = get_family(name)
    free, code = _tasks(name)  # by prompt
    assert family.runs_code
    assert family.score(code, "```python\ndef inc(x):\n    return x + 1\n```") == 1.0
    assert family.score(code, "def inc(x):\n    return x") == 0.0
    assert math.isnan(family.score(free, "hi"))  # no check of its own: a reward function's job


APPS_CASES = {"inputs": ["1 2\n", "10 -3\n", "5 5\n"], "outputs": ["3\n", "7\n", "10"]}


@pytest.mark.parametrize("cell", [APPS_CASES, json.dumps(APPS_CASES)], ids=["object", "json-text"])
def test_standard_input_cases_run_each_case_and_grade_by_share(tmp_path, cell):
    """APPS-style input/output cases: the program runs once per case with its input as stdin, in the sandbox."""
    name = _write(tmp_path / "apps.jsonl", [{"prompt": "Read two integers and print their sum.", "tests": cell}])
    family, (task,) = get_family(name), _tasks(name)
    assert family.runs_code and task.meta["io"] == [[i, o] for i, o in zip(APPS_CASES["inputs"], APPS_CASES["outputs"])]
    summing = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    assert family.score(task, summing) == 1.0
    assert family.score(task, "import sys\na, b = map(int, sys.stdin.read().split())\nprint(a + b)\nexit()") == 1.0
    assert family.score(task, "a, b = map(int, input().split())\nprint(a - b)") == 0.0
    from autotelic.rewards.unit_tests import UnitTestReward

    reward = UnitTestReward()  # graded: the share of cases passed (only 5 5 -> 10 by doubling the first number)
    doubling = "a, b = map(int, input().split())\nprint(2 * a)"
    assert reward(task, [summing, doubling, "import os\nprint(3)\nos._exit(0)"]) == pytest.approx([1.0, 1 / 3, 0.0])


SAMPLES = Path(__file__).resolve().parent.parent / "recipes" / "data"
SOLVED = {  # a right program for each shipped sample problem, by its first words
    "Read two integers": "a, b = map(int, input().split())\nprint(a + b)",
    "Read a word": "print(input()[::-1])",
    "Read an integer n": "input()\nprint(max(map(int, input().split())))",
    "Write a function double": "def double(x):\n    return 2 * x",
    "Write a function count_vowels": "def count_vowels(s):\n    return sum(c in 'aeiou' for c in s)",
    "Write a function is_even": "def is_even(n):\n    return n % 2 == 0",
    "Write a function task_func(words)": "def task_func(words):\n    return {w: words.count(w) for w in words}",
    "Write a function task_func(text)": "def task_func(text):\n    return ' '.join(text.upper().split())",
    "Write a function task_func(numbers)": "def task_func(numbers):\n    return sum(numbers) / len(numbers) if numbers "
                                           "else None",
}


@pytest.mark.parametrize("sample, columns", [
    ("apps-sample.jsonl", {"prompt": "question", "tests": "input_output"}),  # APPS's own column names
    ("mbpp-sample.jsonl", {"prompt": "text", "tests": "test_list"}),  # MBPP's: a list of asserts
    ("bigcodebench-sample.jsonl", {"prompt": "instruct_prompt", "tests": "test"}),  # BigCodeBench's: unittest classes
])
def test_the_shipped_code_samples_load_by_their_own_columns_and_check_solutions(sample, columns):
    name = f"file:{SAMPLES / sample}"
    family = data_family(name, columns)
    tasks = _tasks(name)
    assert len(tasks) == 3 and family.runs_code
    for task in tasks:
        solution = next(code for start, code in SOLVED.items() if task.prompt.startswith(start))
        assert family.score(task, f"```python\n{solution}\n```") == 1.0, task.prompt
        assert family.score(task, "print(0)") == 0.0


def test_bad_standard_input_cases_stop_at_load_naming_the_row(tmp_path):
    from autotelic.tasks.files import data_problems

    name = _write(tmp_path / "bad.jsonl", [{"prompt": "p", "tests": {"inputs": ["1"], "outputs": []}}])
    (problem,) = data_problems([name], {})
    assert "bad.jsonl:1: 'tests' as standard-input cases must be" in problem


# ---- reward functions by path ---------------------------------------------------------------------------
REWARDS = '''
import asyncio

calls = []

def trl_style(completions, prompts, answer, topic, **kwargs):
    calls.append((prompts, completions, answer, topic, sorted(kwargs)))
    return [float(c == a) for c, a in zip(completions, answer)]

def named_only(completions):
    return [len(c) for c in completions]

def chat(completions, **kwargs):
    return [float(c[0]["content"] == "un deux") for c in completions]

def partly(completions, **kwargs):
    return [None if c == "skip" else 1.0 for c in completions]

def broken(completions, **kwargs):
    raise KeyError("solution")

async def slow(completions, **kwargs):
    await asyncio.sleep(0)
    return [0.25] * len(completions)

not_a_function = 3
'''


@pytest.fixture
def reward_module(tmp_path, monkeypatch):
    (tmp_path / "user_rewards.py").write_text(REWARDS)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "user_rewards"
    sys.modules.pop("user_rewards", None)


def _group(task: Task, texts: list[str]) -> Group:
    return Group(task, [1], [Sample(text, [7, i], [0.0, 0.0], True) for i, text in enumerate(texts)])


def _scored(name: str, task: Task, texts: list[str]) -> Group:
    group = _group(task, texts)
    score_groups([group], build_reward(name))
    return group


def test_rows_without_levels_are_ranked_by_their_own_pass_rates(tmp_path):
    """curriculum.name=regret over a data set without levels: each row's pass rate comes from its groups, scored by
    the data's own answers, and the gate keeps drawing the rows the policy gets partly right."""
    rows = [{"prompt": f"What is {a} + 7?", "answer": str(a + 7)} for a in range(12)]
    family = _write(tmp_path / "rows.jsonl", rows)
    config = load_config(None, [f"curriculum.families=[{family}]", "curriculum.levels=[1]", "curriculum.name=regret",
                                "curriculum.pool_size=12", "curriculum.gate=[0.2,0.8]", "eval.levels=[1]",
                                "eval.per_level=1"])
    heldout = build_heldout(config)
    curriculum = build_curriculum(config, heldout)
    first = curriculum.next_tasks(11)
    assert len({task.uid for task in first}) == 11  # the pool: every row but the held-out one
    right = {task.uid: [task.answer] * 4 for task in first[:4]}  # always solved
    right |= {task.uid: ["1"] * 4 for task in first[4:8]}  # never solved
    right |= {task.uid: [task.answer, "1", task.answer, "1"] for task in first[8:]}  # solved half the time
    groups = [_group(task, right[task.uid]) for task in first]
    for group in groups:  # scored by the data's own check (the answer column, strictly)
        for sample in group.samples:
            sample.reward = get_family(family).score(group.task, sample.text)
    curriculum.observe(groups)
    partly = {task.uid for task in first[8:]}
    assert {task.uid for task in curriculum.next_tasks(9)} == partly
    assert [curriculum.estimated_pass_rate(task) for task in first[::4]] == [1.0, 0.0, 0.5]


def test_a_trl_style_reward_gets_prompts_completions_and_columns(tmp_path, reward_module):
    (task,) = [t for t in _tasks(_write(tmp_path / "d.jsonl", ROWS)) if t.answer == "tac"]
    group = _scored(f"{reward_module}:trl_style", task, ["tac", "cat"])
    assert [s.reward for s in group.samples] == [1.0, 0.0] and group.kept
    prompts, completions, answer, topic, others = sys.modules[reward_module].calls[-1]
    assert prompts == [task.prompt] * 2 and completions == ["tac", "cat"]
    assert answer == ["tac"] * 2 and topic == ["words"] * 2 and others == ["completion_ids", "level"]
    assert [s.reward for s in _scored(f"{reward_module}:named_only", task, ["ab", "abc"]).samples] == [2.0, 3.0]


def test_a_file_path_reward_and_chat_completions(tmp_path, reward_module):
    chat = [{"role": "user", "content": "Count to 2."}]
    (task,) = _tasks(_write(tmp_path / "chat.jsonl", [{"prompt": chat, "answer": "un deux"}]))
    group = _scored(f"{tmp_path / 'user_rewards.py'}:chat", task, ["un deux", "one two"])
    assert [s.reward for s in group.samples] == [1.0, 0.0]


def test_none_drops_the_group_as_unscorable_and_async_runs(reward_module):
    task = get_family("add").generate(random.Random(0), 1)
    group = _scored(f"{reward_module}:partly", task, ["1", "skip"])
    assert group.dropped_by == "unscorable" and math.isnan(group.samples[1].reward)
    assert [s.reward for s in _scored(f"{reward_module}:slow", task, ["1", "2"]).samples] == [0.25, 0.25]


def test_a_raising_reward_stops_or_drops_only_its_group_naming_itself_the_task_and_the_line(reward_module,
                                                                                              caplog):
    first, second = (get_family("add").generate(random.Random(seed), 1) for seed in (1, 2))
    groups = [_group(first, ["1", "2"]), _group(second, ["3", "4"])]
    reward = build_reward(f"{reward_module}:broken")
    with pytest.raises(UserCodeError) as stopped:
        score_groups(groups[:1], reward)
    line = REWARDS.splitlines().index('    raise KeyError("solution")') + 1
    assert f"{reward_module}:broken raised KeyError: 'solution' on task {first.uid[:20]}" in str(stopped.value)
    assert str(stopped.value).count(f"user_rewards.py:{line} in broken") == 1
    with caplog.at_level(logging.WARNING):
        score_groups(groups[:1], reward, RewardErrors(drop=True))
        score_groups(groups[1:], build_reward(f"{reward_module}:slow"), RewardErrors(drop=True))
    assert [g.dropped_by for g in groups] == ["reward_error", None]
    (warned,) = [r.getMessage() for r in caplog.records]
    assert warned == str(stopped.value).split("; fix it")[0] + "; group dropped"


# ---- the examples, trained for real ---------------------------------------------------------------------
TINY = ["train.steps=1", "generate.group_size=2", "control.tasks_per_step=2", "control.max_new_tokens=6",
        "eval.per_level=1", "eval.max_new_tokens=6", "eval.every=0", "model.lora=true", "model.lora_rank=8",
        "logging.progress=false", "train.max_minutes=null", "train.export_model=false", "logging.report=false"]


def _rollouts(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]


def _check_trained_on_the_file(example: Path, family: str, run_dir: Path, summary: dict, columns: dict) -> None:
    rows = [json.loads(line) for line in (example / "data.jsonl").read_text().splitlines()]
    data_family(family, columns)
    prompts = {get_family(family).task(row, 1).prompt for level in get_family(family).rows.values() for row in level}
    assert len(prompts) == len({json.dumps(row["prompt"]) for row in rows})
    heldout = {t.prompt for t in heldout_tasks([family], [1, 2, 3], 1, 987_654_321)}
    trained = {row["prompt"] for row in _rollouts(run_dir)}
    assert trained and trained <= prompts and not trained & heldout
    assert summary == json.loads((run_dir / "summary.json").read_text()) and summary["steps"] == 1
    assert summary["heldout_tasks"] == len(heldout)


@pytest.mark.slow
def test_own_data_and_reward_example_trains_through_the_cli(tmp_path, monkeypatch):
    example = EXAMPLES / "own_data_reward"
    env = {**os.environ, "PYTHONPATH": str(example)}
    command = [sys.executable, "-m", "autotelic.cli", "run", "curriculum.families=[file:data.jsonl]",
               'filter.rewards=[{name: "my_rewards:correct_and_brief"}]', *TINY, f"logging.runs_dir={tmp_path}",
               "logging.run_name=cli"]
    result = subprocess.run(command, cwd=example, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    run_dir = tmp_path / "cli"
    sys.path.insert(0, str(example))
    try:
        from my_rewards import correct_and_brief
    finally:
        sys.path.remove(str(example))
    monkeypatch.chdir(example)  # the family's name is the path as given, relative to the example
    _check_trained_on_the_file(example, "file:data.jsonl", run_dir, json.loads((run_dir / "summary.json").read_text()),
                               {})
    rows = _rollouts(run_dir)
    # the logged rewards are the example's (its brevity penalty gives values no verifier gives)
    assert all(r["reward"] == pytest.approx(correct_and_brief([r["completion"]], [r["answer"]])[0]) for r in rows)
    assert any(r["reward"] not in (0.0, 1.0) for r in rows)


@pytest.mark.slow
def test_trl_reward_example_trains_through_the_python_api(tmp_path, monkeypatch):
    example = EXAMPLES / "trl_reward"
    monkeypatch.chdir(example)
    monkeypatch.syspath_prepend(str(example))
    columns = {"answer": "solution"}
    summary = autotelic.train(
        overrides=TINY + [f"logging.runs_dir={tmp_path}", "logging.run_name=api"],
        curriculum={"families": ["file:data.jsonl"], "columns": columns},
        filter={"rewards": [{"name": "trl_rewards:accuracy_reward"},
                            {"name": "trl_rewards:reward_len", "weight": 0.05}]})
    from trl_rewards import accuracy_reward, reward_len

    run_dir = tmp_path / "api"
    _check_trained_on_the_file(example, "file:data.jsonl", run_dir, summary, columns)
    for row in _rollouts(run_dir):
        chat = [[{"role": "assistant", "content": row["completion"]}]]
        expected = accuracy_reward(chat, [row["answer"]])[0] + 0.05 * reward_len(chat)[0]
        assert row["reward"] == pytest.approx(expected)
    assert summary["eval_before"]["by_family"].keys() == {"file:data.jsonl"}


# ---- own environments: load_environment by module path or entry point -------------------------------------
OWN_ENV = EXAMPLES / "own_env"


def test_an_environment_module_is_found_by_path_and_gives_its_defaults(monkeypatch):
    from autotelic.loading import load_config
    from autotelic.envs.registry import BUILT_IN, EnvironmentSpec, load_environment

    monkeypatch.syspath_prepend(str(OWN_ENV))
    config = load_config(None, ["generate.mode=episode", "generate.env=counting_game", "generate.env_args={turns: 3}"])
    # its own tasks, levels and reward where the run names none
    assert config.curriculum.families == ["counting"] and config.curriculum.levels == config.eval.levels == [1, 2]
    assert [(r.name, r.weight) for r in config.filter.rewards] == [("env", 1.0)]
    assert get_family("counting").score(Task("q", "7", "counting", 1, "u"), "it is 7") == 1.0
    env = load_environment("counting_game", {"turns": 3}).make_env()
    task = get_family("counting").generate(random.Random(0), 1)
    env.reset(task)
    first = int(task.answer)
    steps = [env.step(str(first)), env.step("no idea"), env.step(str(first + 5)), env.step(str(first + 2))]
    assert [s.reward for s in steps] == [pytest.approx(1 / 3), 0.0, 0.0, pytest.approx(1 / 3)]
    assert [s.done for s in steps] == [False, False, False, True] and steps[1].info == {"valid": False}
    # what a recipe or override names wins
    config = load_config(None, ["generate.mode=episode", "generate.env=counting_game", "curriculum.families=[add]",
                                "filter.rewards=[{name: verifier}]"])
    assert config.curriculum.families == ["add"] and [r.name for r in config.filter.rewards] == ["verifier"]
    # the built-in environments are modules found the same way
    assert all(isinstance(load_environment(name), EnvironmentSpec) for name in BUILT_IN)
    assert load_config(None, ["generate.mode=episode", "generate.env=guess_number"]).curriculum.families == [
        "guess_number"]


def _dist_info(site: Path, name: str, entry_points: str) -> None:
    """What pip install leaves in ``site`` for a package ``name`` announcing ``entry_points`` (entry_points.txt)."""
    dist = site / f"{name.replace('-', '_')}-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(entry_points)


def _install_counting_game(site: Path, monkeypatch) -> None:
    """A package announcing the example under two entry points (its module and its function), in a folder on
    sys.path."""
    _dist_info(site, "counting-game-env", "[autotelic.environments]\ncounting = counting_game\n"
                                          "counting_fn = counting_game:load_environment\n")
    monkeypatch.syspath_prepend(str(OWN_ENV))
    monkeypatch.syspath_prepend(str(site))


def test_an_installed_package_announces_its_environment_by_entry_point(tmp_path, monkeypatch):
    """A real distribution's metadata (what pip writes) on sys.path: importlib.metadata reads its entry points."""
    from autotelic.loading import load_config
    from autotelic.envs.registry import load_environment

    _install_counting_game(tmp_path, monkeypatch)
    for name in ("counting", "counting_fn"):
        spec = load_environment(name, {"turns": 4})
        assert spec.make_env().env.turns == 4 and spec.family.name == "counting"  # within its GuardedEnvironment
    assert load_config(None, ["generate.mode=episode", "generate.env=counting"]).curriculum.families == ["counting"]


# ---- own rewards by name: an installed package's entry point, or registered by a module ---------------------------
SHOUTING = '''
from dataclasses import dataclass


@dataclass
class Shouting:
    """1 for a reply in capitals of at least ``least`` letters: its options are its constructor's arguments."""

    least: int = 1
    name = "shouting"

    def __call__(self, task, completions):
        return [float(c.isupper() and len(c) >= self.least) for c in completions]
'''


def test_an_installed_package_announces_its_reward_by_entry_point(tmp_path, monkeypatch):
    """A real distribution's metadata on sys.path: its reward is named in filter.rewards like a built-in."""
    from autotelic.algorithms import get_algorithm
    from autotelic.checks import check_combination
    from autotelic.rewards import REWARDS, reward_names

    (tmp_path / "shouting_reward.py").write_text(SHOUTING)
    _dist_info(tmp_path, "shouting-reward", "[autotelic.rewards]\nshouting = shouting_reward:Shouting\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "shouting" in reward_names() and "shouting" in REWARDS
    task = get_family("add").generate(random.Random(0), 1)
    assert build_reward("shouting", {"least": 2})(task, ["YES", "no", "A"]) == [1.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="unknown option 'loud' for reward 'shouting'; valid options: least"):
        build_reward("shouting", {"loud": True})
    config = load_config(None, ["filter.rewards=[{name: shouting, options: {least: 2}}, {name: verifier}]"])
    check_combination(config, get_algorithm("grpo"))  # a known reward: no problem
    sys.modules.pop("shouting_reward", None)


def test_a_module_registers_its_own_reward(tmp_path, monkeypatch):
    """Adding a reward is one file: it registers its class under a name, and build_reward finds it."""
    import autotelic.rewards
    from autotelic.registry import Registry

    monkeypatch.setattr(autotelic.rewards, "REWARDS", Registry("reward"))  # this test's names only
    (tmp_path / "shouted_reward.py").write_text(SHOUTING + "\nfrom autotelic.rewards import REWARDS\n"
                                                             "REWARDS.register('shouted', Shouting)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("shouted_reward")
    assert autotelic.reward_names() == ["shouted"]
    task = get_family("add").generate(random.Random(0), 1)
    assert build_reward("shouted")(task, ["LOUD", "quiet"]) == [1.0, 0.0]
    with pytest.raises(ValueError, match="reward 'shouted' is already registered"):
        autotelic.rewards.REWARDS.register("shouted", object)
    sys.modules.pop("shouted_reward", None)


@pytest.mark.slow
def test_a_user_environment_episode_masks_the_environment_turns(embedded_dir, monkeypatch):
    """The episode generator treats a user's environment as ours: the game's replies are in the transcript,
    masked out of the loss (log-prob 0), the policy's turns are trained on."""
    from autotelic.backends.hf import HFPolicy
    from autotelic.config import ModelConfig
    from autotelic.envs import make_env_factory
    from autotelic.rollout.generate import EpisodeSampler

    monkeypatch.syspath_prepend(str(OWN_ENV))
    policy = HFPolicy(ModelConfig(path=str(embedded_dir), threads=2), seed=0)
    make_env = make_env_factory("counting_game", {"turns": 3})
    family = get_family("counting")
    tasks = [family.generate(random.Random(seed), 1) for seed in (1, 2)]
    groups = EpisodeSampler(policy, make_env, temperature=1.0, max_turns=3, turn_tokens=8).generate(tasks, 2, 64)
    samples = [s for g in groups for s in g.samples]
    assert len(samples) == 4 and any(s.info["turns"] > 1 for s in samples)
    for sample in samples:
        mask = sample.loss_mask()
        assert len(mask) == len(sample.token_ids) == len(sample.logprobs)
        assert all(lp == 0.0 for lp, m in zip(sample.logprobs, mask) if not m)
        if sample.info["turns"] > 1:
            observed = policy.tokenizer.decode([t for t, m in zip(sample.token_ids, mask) if not m])
            assert sample.info["observations"][0] in observed and "<|im_start|>user" in observed
            assert any(mask) and not all(mask)


@pytest.mark.slow
def test_own_environment_example_trains_through_the_cli(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(OWN_ENV)}
    command = [sys.executable, "-m", "autotelic.cli", "run", "generate.mode=episode", "generate.env=counting_game",
               "episode.max_turns=2", "episode.turn_tokens=6", "filter.drop_zero_variance=false", *TINY,
               "eval.levels=[1]",
               f"logging.runs_dir={tmp_path}", "logging.run_name=env"]
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    run_dir = tmp_path / "env"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 1 and summary["eval_before"]["by_family"].keys() == {"counting"}
    rows = _rollouts(run_dir)
    assert rows and all(r["prompt"].startswith("Let's count up from") for r in rows)
    assert all(1 <= r["turns"] <= 2 and len(r["observations"]) == r["turns"] for r in rows)


@pytest.mark.slow
def test_an_installed_environment_trains_through_the_python_api(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    _install_counting_game(site, monkeypatch)
    summary = autotelic.train(overrides=TINY + [f"logging.runs_dir={tmp_path}", "logging.run_name=api_env"],
                              generate={"mode": "episode", "env": "counting_fn", "env_args": {"turns": 2}},
                              episode={"max_turns": 2, "turn_tokens": 6}, filter={"drop_zero_variance": False},
                              eval={"levels": [1]})
    assert summary["steps"] == 1 and summary["eval_before"]["by_family"].keys() == {"counting"}
    rows = _rollouts(tmp_path / "api_env")
    assert rows and all(r["prompt"].startswith("Let's count up from") and r["turns"] >= 1 for r in rows)


# ---- the Python API ------------------------------------------------------------------------------------------
def test_import_autotelic_is_cheap_and_exports_the_api_and_registries():
    code = ("import sys, autotelic; heavy = [m for m in ('torch', 'transformers', 'datasets') if m in sys.modules]; "
            "print(heavy, sorted(autotelic.__all__))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-1000:]
    heavy, names = result.stdout.strip().split("] ", 1)
    assert heavy == "["
    for name in ("train", "evaluate", "load_config", "get_family", "family_names", "build_reward", "reward_names",
                 "load_environment", "environment_names", "EnvironmentSpec", "Task", "Step"):
        assert repr(name) in names and getattr(autotelic, name) is not None
    assert "add" in autotelic.family_names() and "verifier" in autotelic.reward_names()
    assert "guess_number" in autotelic.environment_names()
    assert autotelic.get_family("add").name == "add"
    # importing the modules that do the work leaves the API's functions in place (Python binds an imported
    # submodule as the package's attribute: none may share a function's name)
    importlib.import_module("autotelic.evaluation")
    importlib.import_module("autotelic.trainer")
    assert autotelic.train.__module__ == autotelic.evaluate.__module__ == "autotelic"


def test_evaluate_names_a_target_that_is_not_a_model(tmp_path):
    from autotelic.checks import TrainingError

    with pytest.raises(TrainingError, match="is neither a run directory"):
        autotelic.evaluate(tmp_path, eval={"per_level": 1})


COMMIT = "0123456789abcdef0123456789abcdef01234567"


# ---- own models: hf:NAME from the local Hugging Face cache, chat template, dtype ------------------------------
def test_a_model_from_the_local_hugging_face_cache_with_its_own_chat_template(tmp_path):
    """A real cache layout (what huggingface-cli download leaves): refs/main names the snapshot; read offline."""
    from autotelic.backends.embedded import embedded_model_dir

    snapshot = tmp_path / "hub" / "models--me--tiny" / "snapshots" / COMMIT  # a commit hash: 40 hex digits
    snapshot.mkdir(parents=True)
    for file in embedded_model_dir().iterdir():
        (snapshot / file.name).symlink_to(file)
    (tmp_path / "hub" / "models--me--tiny" / "refs").mkdir()
    (tmp_path / "hub" / "models--me--tiny" / "refs" / "main").write_text(COMMIT)
    template = tmp_path / "plain.jinja"
    template.write_text("{% for m in messages %}<<{{ m['content'] }}>>{% endfor %}{% if add_generation_prompt %}A:"
                        "{% endif %}")
    code = ("import torch; from autotelic.backends.hf import HFPolicy; "
            "from autotelic.backends.model_dir import model_dir_problem, resolve_model_dir; "
            "from autotelic.config import ModelConfig; "
            f"print(resolve_model_dir('hf:me/tiny'), resolve_model_dir('hf:me/tiny@{COMMIT}')); "
            "print(model_dir_problem('model.path', 'hf:me/tiny')); "
            f"policy = HFPolicy(ModelConfig(path='hf:me/tiny', chat_template={str(template)!r}, dtype='bfloat16')); "
            "print(repr(policy.tokenizer.decode(policy.encode_prompt('hi'))), "
            "next(policy.model.parameters()).dtype)")
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    resolved, problem, rendered = result.stdout.strip().splitlines()
    assert resolved == f"{snapshot} {snapshot}" and problem == "None"
    assert rendered == "'<<hi>>A:' torch.bfloat16"


# ---- an own generation mode: an installed package's entry point -------------------------------------------------
@pytest.mark.slow
def test_an_installed_generation_mode_is_selected_by_name_and_trains(tmp_path, monkeypatch):
    """The example mode (examples/own_mode) announced under ``autotelic.generation_modes``: the run generates
    every group with it (half the samples at twice the temperature) and trains, knowing the mode only by name."""
    _dist_info(tmp_path, "temperature-ladder-mode", "[autotelic.generation_modes]\n"
                                                      "temperature_ladder = temperature_ladder:MODE\n")
    monkeypatch.syspath_prepend(str(OWN_ENV.parent / "own_mode"))
    monkeypatch.syspath_prepend(str(tmp_path))
    import temperature_ladder  # the module the entry point names: its real generate runs, and says it did

    calls, generate = [], temperature_ladder.TemperatureLadder.generate
    monkeypatch.setattr(temperature_ladder.TemperatureLadder, "generate",
                        lambda self, tasks, sizes, n: calls.append(list(sizes)) or generate(self, tasks, sizes, n))
    summary = autotelic.train(overrides=TINY + [f"logging.runs_dir={tmp_path}", "logging.run_name=own_mode",
                                                "generate.mode=temperature_ladder", "generate.group_size=3",
                                                "filter.drop_zero_variance=false"])
    assert summary["steps"] == 1
    rows = _rollouts(tmp_path / "own_mode")
    per_prompt = {}
    for row in rows:
        per_prompt[row["prompt"]] = per_prompt.get(row["prompt"], 0) + 1
    assert len(per_prompt) == 2 and set(per_prompt.values()) == {3}  # the cool and the hot halves, merged
    assert calls == [[3, 3]]  # the one training step's groups came from the mode
