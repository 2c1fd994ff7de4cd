"""A user's own code that fails stops the run loudly, through the real command line: a reward function that raises
or returns the wrong count, strings, nan or inf, an environment whose step raises and an installed task family whose
generate raises, each end the run before its update in one ``error:`` line naming the function, the problem and the
user's file and line, with exit code 2, no traceback and no exported model. ``filter.on_reward_error=drop`` drops
such groups knowingly, until more than ``filter.max_dropped_share`` of a step's groups are lost."""

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from autotelic.envs import Step
from autotelic.envs.registry import GuardedEnvironment
from autotelic.rewards.custom import MalformedRewards, checked_rewards
from autotelic.types import Task
from autotelic.user_code import UserCodeError

TINY = ["model.path=random:qwen2-tiny", "model.lora=false", "model.threads=1", "train.steps=2",
        "train.max_minutes=null", "control.tasks_per_step=2", "generate.group_size=4", "control.max_new_tokens=6",
        "curriculum.families=[add]", "curriculum.levels=[1]", "eval.levels=[1]", "eval.per_level=2",
        "eval.max_new_tokens=4"]

REWARDS = '''import math

calls = []


def loud(text):
    raise ValueError("too loud")


def shout(completions, **kwargs):
    return [loud(text) for text in completions]


def short(completions, **kwargs):
    return [1.0] * (len(completions) - 1)


def words(completions, **kwargs):
    return ["high" for _ in completions]


def not_a_number(completions, **kwargs):
    return [math.nan if index == 2 else 0.0 for index, _ in enumerate(completions)]


def unbounded(completions, **kwargs):
    return [math.inf] * len(completions)


def needs_solution(completions, solution):
    return [float(text == solution) for text in completions]


def first_fails(completions, **kwargs):
    calls.append(len(completions))
    if len(calls) == 1:
        raise KeyError("solution")
    return [float(len(text) % 2) for text in completions]
'''

ENV = '''from autotelic.envs import Step
from autotelic.envs.registry import EnvironmentSpec
from autotelic.types import Task


class Countdown:
    def reset(self, task):
        self.left = int(task.answer)
        return task.prompt

    def step(self, action):
        raise RuntimeError("the board is gone")

    def close(self):
        pass


def load_environment():
    tasks = [Task(f"Count down from {n}.", str(n), "countdown", 1, f"countdown:{n}") for n in range(3, 9)]
    return EnvironmentSpec(Countdown, tasks, [{"name": "env"}])
'''

FAMILY = '''from autotelic.types import Task


class Lookup:
    name = "lookup"
    levels = (1,)

    def generate(self, rng, level):
        table = {}
        return Task(f"Say {table['x']}.", "1", self.name, level, "lookup:1")

    def score(self, task, completion):
        return float(completion.strip() == task.answer)


FAMILY = Lookup()
'''


def _line(source: str, text: str) -> int:
    """The line number of the first line of ``source`` that starts with ``text``."""
    return next(number for number, line in enumerate(source.splitlines(), 1) if line.lstrip().startswith(text))


def _run(tmp_path: Path, *overrides: str, name: str = "run") -> tuple[subprocess.CompletedProcess, Path]:
    """The CLI run in ``tmp_path``, which holds the user's files and, as pip would leave it, a package announcing
    the ``lookup`` family (its folder on PYTHONPATH)."""
    (tmp_path / "my_rewards.py").write_text(REWARDS)
    (tmp_path / "countdown.py").write_text(ENV)
    (tmp_path / "lookup_family.py").write_text(FAMILY)
    dist = tmp_path / "lookup_family-0.1.dist-info"
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: lookup-family\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[autotelic.task_families]\nlookup = lookup_family:FAMILY\n")
    command = [sys.executable, "-m", "autotelic.cli", "run", *TINY, *overrides, f"logging.runs_dir={tmp_path}",
               f"logging.run_name={name}"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(tmp_path), os.environ.get("PYTHONPATH"))))}
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    return result, tmp_path / name


def _assert_stopped(result: subprocess.CompletedProcess, run_dir: Path, *expected: str) -> str:
    """The run ended with exit 2 and one ``error:`` line holding each of ``expected``, no traceback, no model."""
    output = result.stdout + result.stderr
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and len(errors) == 1, output[-3000:]
    assert all(part in errors[0] for part in expected), errors[0]
    assert "Traceback" not in output and not (run_dir / "model").exists()
    return errors[0]


@pytest.mark.slow
@pytest.mark.parametrize("function, problem, at", [
    ("shout", "raised ValueError: too loud", 'raise ValueError("too loud")'),
    ("short", "returned 3 rewards for 4 completions", "def short"),
    ("words", "returned a str ('high') for completion 0", "def words"),
    ("not_a_number", "returned nan for completion 2", "def not_a_number"),
    ("unbounded", "returned inf for completion 0", "def unbounded"),
    ("needs_solution", "raised TypeError: needs_solution() missing 1 required positional argument: 'solution'",
     "def needs_solution"),  # called without a column it names: no frame of its own, so where it is defined
], ids=lambda value: value if value.isidentifier() else "")
def test_a_failing_reward_stops_the_run_in_one_line_with_the_users_file_and_line(tmp_path, function, problem, at):
    result, run_dir = _run(tmp_path, f"filter.rewards=[{{name: my_rewards.py:{function}}}]")
    line = _assert_stopped(result, run_dir, f"reward function my_rewards.py:{function} {problem} on task add:",
                           f"my_rewards.py:{_line(REWARDS, at)}", "filter.on_reward_error=drop")
    assert "autotelic" not in line.split(" at ")[-1].split("; ")[0]  # the user's frames only
    assert line.endswith("nothing of step 1 was applied; last good checkpoint: none (resuming starts over); "
                         f"resume with: autotelic resume {run_dir}")  # trainer.run's stop: resumable
    assert not (run_dir / "rollouts.jsonl").exists()  # stopped before the first update


@pytest.mark.slow
def test_drop_mode_drops_within_the_share_and_stops_beyond_it(tmp_path):
    """The first group's reward raises: one of the first step's two groups is lost. Half is within a share of 0.5,
    beyond the default's quarter."""
    reward = "filter.rewards=[{name: my_rewards.py:first_fails}]"
    within, run_dir = _run(tmp_path, reward, "filter.on_reward_error=drop", "filter.max_dropped_share=0.5")
    assert within.returncode == 0, within.stderr[-3000:]
    (warning,) = [line for line in within.stderr.splitlines() if "group dropped" in line]
    assert "reward function my_rewards.py:first_fails raised KeyError: 'solution'" in warning
    assert f"my_rewards.py:{_line(REWARDS, 'raise KeyError')}" in warning and (run_dir / "model").is_dir()
    beyond, run_dir = _run(tmp_path, reward, "filter.on_reward_error=drop", name="beyond")
    _assert_stopped(beyond, run_dir, "1 of the step's 2 groups were dropped for reward errors, more than "
                    "filter.max_dropped_share=0.25", "first_fails raised KeyError")


@pytest.mark.slow
def test_an_environment_whose_step_raises_stops_the_run_in_one_line(tmp_path):
    result, run_dir = _run(tmp_path, "generate.mode=episode", "generate.env=countdown.py", "episode.max_turns=2",
                           "episode.turn_tokens=6", "curriculum.families=[countdown]")
    _assert_stopped(result, run_dir, "environment countdown.py: Countdown.step raised RuntimeError: the board is gone",
                    "on task countdown:", f"countdown.py:{_line(ENV, 'raise RuntimeError')} in step")


@pytest.mark.slow
def test_an_installed_task_family_whose_generate_raises_stops_the_run_in_one_line(tmp_path):
    result, run_dir = _run(tmp_path, "curriculum.families=[lookup]")
    _assert_stopped(result, run_dir, "your code lookup_family.py:generate raised KeyError: 'x'",
                    f"lookup_family.py:{_line(FAMILY, 'return Task')} in generate")


class Scripted:
    """A user's environment that answers each call with what it is given: its reset returns ``first``, its steps
    ``returns``."""

    def __init__(self, first: object, returns: object) -> None:
        self.first, self.returns = first, returns

    def reset(self, task: Task) -> object:
        return self.first

    def step(self, action: str) -> object:
        return self.returns

    def close(self) -> None:
        pass


@pytest.mark.parametrize("first, returns, problem", [
    (None, Step("ok", 0.0, True, {}), r"Scripted.reset returned the observation None \(NoneType\), not a str"),
    ("go", ("ok", 0.0, True), r"Scripted.step returned tuple \(\('ok', 0.0, True\)\), not a Step\(observation, reward, done, info\)"),
    ("go", Step("ok", float("nan"), True, {}), r"Scripted.step returned the reward nan, not a finite number"),
    ("go", Step("ok", "1", True, {}), r"Scripted.step returned the reward '1', not a finite number"),
    ("go", Step(3, 1.0, True, {}), r"Scripted.step returned the observation 3 \(int\), not a str"),
    ("go", ("ok", 1.0, True, ["right"]), r"Scripted.step returned info \['right'\], not a dict"),
])
def test_a_malformed_return_from_a_user_environment_is_one_line(first, returns, problem):
    task = Task("Count down from 3.", "3", "countdown", 1, "countdown:3")
    env = GuardedEnvironment(Scripted(first, returns), "scripted.py")
    with pytest.raises(UserCodeError, match=rf"^environment scripted.py: {problem} on task countdown:3 "
                                            r"\('Count down from 3.'\); fix it$"):
        env.reset(task)
        env.step("3")
    assert GuardedEnvironment(Scripted("go", ("ok", 1, False, {})), "scripted.py").step("3") == ("ok", 1, False, {})


@pytest.mark.parametrize("values, problem", [
    (0.5, "returned a float (0.5), not a list of one reward per completion"),
    ({"reward": 1.0}, "returned a dict ({'reward': 1.0}), not a list"),
    ("1.0", "returned a str ('1.0'), not a list"),
    ((value for value in [1.0]), "returned 1 rewards for 2 completions"),
    ([1.0, "0.5"], "returned a str ('0.5') for completion 1"),
    ([1.0, [1.0]], "returned a list ([1.0]) for completion 1"),
    ([1.0, -math.inf], "returned -inf for completion 1"),
    (np.array(0.5), "returned a ndarray (array(0.5)), not a list"),
])
def test_what_a_reward_function_may_not_return(values, problem):
    with pytest.raises(MalformedRewards, match=f"^{re.escape(problem)}"):
        checked_rewards(values, 2)


def test_what_a_reward_function_may_return():
    """Numbers of any kind (bools, numpy scalars and arrays), and None, TRL's "does not apply", which is nan."""
    assert checked_rewards((value for value in (True, np.float32(0.5))), 2) == [1.0, 0.5]
    assert checked_rewards(np.array([1, 0]), 2) == [1.0, 0.0]
    first, second = checked_rewards([None, 2], 2)
    assert math.isnan(first) and second == 2.0
