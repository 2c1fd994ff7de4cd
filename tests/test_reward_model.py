"""The reward_model reward on a real (randomly initialised, tiny) sequence-classification model saved to disk:
batched scores equal one-at-a-time scores (padding never changes a score), scores are cached by pair, the
sigmoid scale maps into (0, 1), a bad model is named before anything loads, and a run trains with it."""

import json

import pytest
import torch

from autotelic.rewards import build_reward
from autotelic.types import Task

TASK = Task("What is 2 + 3?", "5", "add", 1, "add:x")


@pytest.fixture(scope="module")
def reward_model_dir(tmp_path_factory):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from autotelic.backends.embedded import random_model_dir

    body = random_model_dir("qwen2-tiny")
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(body, num_labels=1, dtype=torch.float32)
    directory = tmp_path_factory.mktemp("rm")
    model.save_pretrained(directory)
    AutoTokenizer.from_pretrained(body).save_pretrained(directory)
    return directory


def test_batched_scores_equal_single_ones_and_are_cached(reward_model_dir):
    reward = build_reward("reward_model", {"model": str(reward_model_dir), "batch_size": 3})
    completions = ["5", "The answer is 5, since 2 + 3 = 5.", "six", "I do not know what to say here at all."]
    batched = reward(TASK, completions)
    single = [build_reward("reward_model", {"model": str(reward_model_dir)})(TASK, [c])[0] for c in completions]
    assert batched == pytest.approx(single, abs=1e-5) and len(set(round(s, 5) for s in batched)) == 4
    calls = []
    reward.model.register_forward_hook(lambda module, args, output: calls.append(1))
    assert reward(TASK, completions[::-1]) == batched[::-1] and not calls  # every pair cached
    assert reward(TASK, ["a new answer"]) and len(calls) == 1
    squashed = build_reward("reward_model", {"model": str(reward_model_dir), "scale": "sigmoid"})(TASK, completions)
    assert squashed == pytest.approx(torch.sigmoid(torch.tensor(batched)).tolist(), abs=1e-5)


def test_a_missing_model_is_named_before_the_run(tmp_path):
    from autotelic.checks import check_run
    from autotelic.config import ConfigError
    from autotelic.loading import load_config

    config = load_config(None, ["filter.rewards=[{name: reward_model, options: {model: /nowhere/rm}}]"])
    with pytest.raises(ConfigError, match=r"filter.rewards\[0\].options.model"):
        check_run(config)


@pytest.mark.slow
def test_a_run_trains_on_reward_model_scores(tmp_path, reward_model_dir):
    import autotelic

    summary = autotelic.train(overrides=[
        "train.export_model=false", "logging.report=false", 
        "train.steps=1", "generate.group_size=2", "control.tasks_per_step=2", "control.max_new_tokens=6",
        "eval.per_level=1", "eval.max_new_tokens=6", "eval.every=0", "model.lora=true", "model.lora_rank=8",
        "logging.progress=false", "train.max_minutes=null", f"logging.runs_dir={tmp_path}", "logging.run_name=rm",
        f"filter.rewards=[{{name: reward_model, options: {{model: {reward_model_dir}}}}}]",
        "filter.drop_zero_variance=false"])
    assert summary["steps"] == 1
    rows = [json.loads(line) for line in (tmp_path / "rm" / "rollouts.jsonl").read_text().splitlines()]
    rescored = build_reward("reward_model", {"model": str(reward_model_dir)})
    for row in rows:  # the rewards trained on are the model's scores of the logged answers
        task = Task(row["prompt"], "", "add", 1, "x")
        assert row["reward"] == pytest.approx(rescored(task, [row["completion"]])[0], abs=1e-4)


@pytest.mark.slow
def test_eva_on_reward_model_scores_ranks_its_pool_by_graded_informativeness(tmp_path, reward_model_dir):
    """The eva recipe with a reward model instead of its vote: every observed prompt gets an informativeness of its
    own (the best minus the worst score of its group), where a 0/1 vote allows only 0 and 1."""
    from pathlib import Path

    import autotelic

    autotelic.train(config=Path(__file__).resolve().parent.parent / "recipes" / "eva.yaml", overrides=[
        "model.path=random:qwen2-tiny", "model.lora=false", "train.export_model=false", "logging.report=false",
        "train.steps=2", "generate.group_size=3", "control.tasks_per_step=4", "control.max_new_tokens=6",
        "eval.per_level=1", "eval.max_new_tokens=6", "eval.win_rate.enabled=false", "curriculum.evolve.every=1",
        "curriculum.evolve.max_new_tokens=8", "logging.progress=false", "train.max_minutes=null",
        f"logging.runs_dir={tmp_path}", "logging.run_name=eva-rm",
        f"filter.rewards=[{{name: reward_model, options: {{model: {reward_model_dir}}}}}]"])
    rows = [json.loads(line) for line in (tmp_path / "eva-rm" / "metrics.jsonl").read_text().splitlines()]
    observed = [row for row in rows if "curriculum/informativeness_distinct" in row]
    assert observed and all(row["curriculum/informativeness_zero_share"] == 0.0 for row in observed)
    assert max(row["curriculum/informativeness_distinct"] for row in observed) >= 3
