"""The process reward (rewards/process_value.py): a value model scores an answer's partial responses, line by
line, and the scores are aggregated; a value model trained to tell a right step from a wrong one pays the right
answer more, and a run trains with it beside the verifier."""

from __future__ import annotations

import json

import pytest
from rows import row_task, verified

from autotelic.rewards.process_value import ProcessValueReward, process_scores, step_prefixes
from autotelic.types import Task


def test_steps_are_the_response_cut_after_each_non_empty_line():
    assert step_prefixes("a = 1\n\nb = 2\nreturn a + b", 8) == ["a = 1\n", "a = 1\n\nb = 2\n", "a = 1\n\nb = 2\nreturn a + b"]
    assert step_prefixes("42", 8) == ["42"]
    many = "".join(f"x{i}\n" for i in range(10))
    cuts = step_prefixes(many, 4)
    assert len(cuts) == 4 and cuts[-1] == many and all(a in b for a, b in zip(cuts, cuts[1:]))


TASK = Task("Write the body of add(a, b) that returns their sum.", "", "code", 1, "add")
RIGHT = "def add(a, b):\n    s = a + b\n    return s"
WRONG = "def add(a, b):\n    s = a - b\n    return s"


@pytest.fixture(scope="module")
def value_dir(embedded_dir, tmp_path_factory):
    """A value model on the embedded model's frozen body, trained on partial answers labelled by hand: the step
    that adds is worth 1, the one that subtracts 0 (as tree search would label them from test-scored rollouts)."""
    from autotelic.value_model import ValueExample, ValueModel

    examples = [ValueExample(TASK.prompt, prefix, target)
                for answer, target in ((RIGHT, 1.0), (WRONG, 0.0)) for prefix in step_prefixes(answer, 8)[1:]]
    examples.append(ValueExample(TASK.prompt, "def add(a, b):\n", 0.5))
    model = ValueModel(embedded_dir)
    model.fit(examples * 4, epochs=60, lr=3e-3)
    directory = tmp_path_factory.mktemp("value") / "value_model"
    model.save(directory)
    return directory


@pytest.mark.slow
def test_a_trained_value_model_pays_the_right_answers_steps_more(value_dir):
    lowest = ProcessValueReward(str(value_dir), aggregate="min")
    right, wrong = lowest(TASK, [RIGHT, WRONG])
    assert right > wrong
    values = [lowest.values([(TASK.prompt, prefix)])[0] for prefix in step_prefixes(WRONG, 8)]
    assert wrong == pytest.approx(min(values), abs=1e-4)  # the weakest step (batched apart: padding's rounding)
    mean, last = ProcessValueReward(str(value_dir), aggregate="mean"), ProcessValueReward(str(value_dir), "last")
    assert mean(TASK, [WRONG])[0] == pytest.approx(sum(values) / len(values), abs=1e-4)
    assert last(TASK, [WRONG])[0] == pytest.approx(values[-1], abs=1e-4)  # the whole answer only: an ORM
    assert len(lowest.cache) == 5  # three steps each, the shared first line scored once


@pytest.mark.slow
def test_a_run_trains_with_the_process_reward_beside_the_verifier(value_dir, tmp_path):
    from autotelic.loading import load_config
    from autotelic.trainer import train

    train(load_config(None, [
        "train.export_model=false", "logging.report=false",
        "curriculum.families=[add]", "curriculum.levels=[1]", "eval.levels=[1]", "eval.per_level=2",
        "train.steps=2", "control.tasks_per_step=2", "generate.group_size=3", "control.max_new_tokens=8",
        f"filter.rewards=[{{name: verifier}}, {{name: process_value, weight: 0.5, options: {{model: {value_dir}}}}}]",
        "model.lora=true", "logging.progress=false", f"logging.runs_dir={tmp_path}", "logging.run_name=prm"]))
    rows = [json.loads(line) for line in (tmp_path / "prm" / "rollouts.jsonl").read_text().splitlines()]
    process = ProcessValueReward(str(value_dir))
    for row in rows:  # each reward is the verifier's plus half the value model's, even where that is near 0 (the
        # model knows code, not sums: on some paths all its values here lie within 1e-6 of 0)
        (value,) = process(row_task(row), [row["completion"]])
        assert value > 0 and row["reward"] - verified(row) == pytest.approx(0.5 * value, rel=1e-2)


@pytest.mark.slow
def test_best_of_n_by_process_value_needs_a_value_model_and_keeps_the_token_budget(value_dir, embedded_dir):
    import random

    from autotelic.backends.hf import HFPolicy
    from autotelic.config import ModelConfig
    from autotelic.evaluation import Decoding, evaluate
    from autotelic.tasks import get_family
    from autotelic.value_model import ValueModel

    with pytest.raises(ValueError, match="needs a value model"):
        Decoding("best_of_n", 32, "process_value").check()
    policy = HFPolicy(ModelConfig(path=str(embedded_dir)), seed=0)
    tasks = [get_family("add").generate(random.Random(i), 1) for i in range(3)]
    value_model = ValueModel.load(value_dir)
    result = evaluate(policy, tasks, 8, decoding=Decoding("best_of_n", 24, "process_value", value_model))
    assert len(result.records) == 3
    for task, record in zip(tasks, result.records):  # samples while a whole one fits, then the weakest step's best
        assert 24 - 8 < record["tokens"] <= 24 and len(record["candidates"]) >= 3
        scores = process_scores(value_model.predict, task, record["candidates"])
        assert scores[record["candidates"].index(record["completion"])] == pytest.approx(max(scores), abs=1e-4)


def test_a_directory_without_a_value_model_is_named_in_one_line(tmp_path):
    from autotelic.checks import check_run
    from autotelic.config import ConfigError
    from autotelic.loading import load_config

    config = load_config(None, [f"filter.rewards=[{{name: process_value, options: {{model: {tmp_path}}}}}]"])
    with pytest.raises(ConfigError, match=r"options.model=.*: not a value model directory \(no value_model.json\)"):
        check_run(config)
