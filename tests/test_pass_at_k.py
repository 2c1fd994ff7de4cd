"""pass@k (evaluation.pass_at_k, run_evaluation.heldout_pass_at_k): the unbiased estimator by hand, sampled
answers of the real model, and sampled whole episodes in an environment, after a real run."""

from __future__ import annotations

import json
import random

import pytest

from autotelic.backends.hf import HFPolicy
from autotelic.config import ModelConfig
from autotelic.evaluation import evaluate_pass_at_k, pass_at_k
from autotelic.rollout.filter import verifier_reward
from autotelic.rollout.generate import PolicySampler
from autotelic.tasks import get_family


def test_the_estimator_by_hand():
    assert pass_at_k(4, 1, 1) == 0.25
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)  # C(3, 2) / C(4, 2): both draws miss the one success
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 4, 1) == 1.0 and pass_at_k(4, 3, 2) == 1.0
    with pytest.raises(ValueError, match="1 <= k <= the 4 samples"):
        pass_at_k(4, 1, 5)


def test_sampled_answers_of_the_real_model():
    family, rng = get_family("add"), random.Random(3)
    tasks = [family.generate(rng, 1) for _ in range(6)]
    worker = PolicySampler(HFPolicy(ModelConfig(), seed=0), temperature=1.0)
    summary, records = evaluate_pass_at_k(worker, tasks, 4, [1, 4], 8,
                                          lambda task, sample: verifier_reward(task, sample.text), batch_size=8)
    assert [r["prompt"] for r in records] == [t.prompt for t in tasks]
    assert all(r["samples"] == 4 and 0 <= r["successes"] <= 4 for r in records)
    assert summary["pass@1"] == pytest.approx(sum(r["successes"] for r in records) / 24)  # pass@1: the mean
    assert summary["pass@1"] <= summary["pass@4"] == sum(r["successes"] > 0 for r in records) / 6


@pytest.mark.slow
def test_a_run_reports_pass_at_k_of_sampled_episodes(tmp_path, capsys):
    from autotelic.loading import load_config
    from autotelic.trainer import train

    summary = train(load_config("recipes/guess-number.yaml", [
        "train.export_model=false", "logging.report=false", 
        "train.steps=1", "control.tasks_per_step=2", "generate.group_size=2", "episode.max_turns=3",
        "control.max_new_tokens=24", "eval.per_level=2", "eval.levels=[1]", "eval.pass_k=[1, 3]",
        "eval.pass_samples=3", "model.lora=true", "logging.progress=false", f"logging.runs_dir={tmp_path}",
        "logging.run_name=passes"]))
    passes = summary["pass_at_k"]
    assert passes["samples"] == 3 and 0 <= passes["pass@1"] <= passes["pass@3"] <= 1
    records = [json.loads(line) for line in (tmp_path / "passes" / "eval_after_pass_at_k.jsonl").read_text().splitlines()]
    assert len(records) == summary["heldout_tasks"] and all(r["samples"] == 3 for r in records)
    assert all(0 <= r["successes"] <= 3 for r in records)  # the summary is these records' pass@k
    assert passes["pass@1"] == pytest.approx(sum(r["successes"] for r in records) / (3 * len(records)))
    assert passes["pass@3"] == pytest.approx(sum(r["successes"] > 0 for r in records) / len(records))
    assert "(3 samples per task at temperature 0.8)" in capsys.readouterr().err
