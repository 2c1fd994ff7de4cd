"""Pairwise win rate (win_rate.py): verdicts and position-swapped scores, the real embedded model as policy,
reference and judge, and a run that measures it after training from its own instructions file."""

from __future__ import annotations

import json

import pytest
import torch

from autotelic.backends.hf import HFPolicy
from autotelic.config import ConfigError, ModelConfig
from autotelic.win_rate import OPEN_PROMPTS, pair_score, verdict, win_rate


@pytest.mark.parametrize("reply, found", [("A", "A"), (" B.", "B"), ("Response B is better", "B"),
                                          ("A and B are both fine", "A"), ("neither", None), ("ABBA", None)])
def test_the_verdict_is_the_first_standalone_letter(reply, found):
    assert verdict(reply) == found


def test_swapping_positions_cancels_a_judge_that_always_picks_one_position():
    assert pair_score("A", "B") == 1.0  # the policy's answer wins as A and as B
    assert pair_score("B", "A") == 0.0
    assert pair_score("A", "A") == 0.5 and pair_score("B", "B") == 0.5  # a position, not an answer, won
    assert pair_score(None, "B") == 1.0 and pair_score("B", None) == 0.0 and pair_score(None, None) is None


def test_the_policy_against_a_copy_of_itself_on_the_real_model():
    policy, judge = HFPolicy(ModelConfig(), seed=0), HFPolicy(ModelConfig(), seed=1)
    prompts = list(OPEN_PROMPTS[:4])
    result = win_rate(policy, policy, judge, prompts, max_new_tokens=16)
    assert [r["prompt"] for r in result.records] == prompts
    for record in result.records:  # greedy answers of the same weights are the same answer
        assert record["policy"] == record["reference"] and record["policy"].strip()
        first, second = record["verdicts"]  # so both orders ask the same text: the same verdict, a position
        assert first == second and record["score"] == (None if first is None else 0.5)  # a tie, or unread
    readable = [v for r in result.records for v in r["verdicts"] if v is not None]
    assert result.win_rate == 0.5 and result.parse_rate == len(readable) / 8
    assert result.first_position_rate == (readable.count("A") / len(readable) if readable else 0.5)
    assert result.summary()["pairs"] == 4


class RecordedJudge:
    """The real judge, keeping each instruction it is asked to judge, in order."""

    def __init__(self, judge: HFPolicy):
        self.judge, self.asked = judge, []

    def encode_prompt(self, prompt):
        self.asked.append(prompt)
        return self.judge.encode_prompt(prompt)

    def generate(self, *args, **kwargs):
        return self.judge.generate(*args, **kwargs)

    def decode(self, token_ids):
        return self.judge.decode(token_ids)


def test_two_different_answers_are_judged_in_both_orders_and_scored_for_the_policy():
    policy, reference = HFPolicy(ModelConfig(), seed=0), HFPolicy(ModelConfig(), seed=0)
    with torch.no_grad():  # other weights, so other greedy answers
        generator = torch.Generator().manual_seed(0)
        for weights in reference.model.parameters():
            weights.add_(torch.randn(weights.shape, generator=generator) * 0.02)
    judge = RecordedJudge(HFPolicy(ModelConfig(), seed=1))
    prompts = list(OPEN_PROMPTS[4:7])
    result = win_rate(policy, reference, judge, prompts, max_new_tokens=16)
    assert len(judge.asked) == 2 * len(prompts)
    for index, (prompt, record) in enumerate(zip(prompts, result.records)):
        assert record["policy"] != record["reference"]
        policy_first, policy_second = judge.asked[2 * index], judge.asked[2 * index + 1]
        assert f"Instruction: {prompt}" in policy_first and f"Instruction: {prompt}" in policy_second
        assert f"Response A: {record['policy']}\n\nResponse B: {record['reference']}" in policy_first
        assert f"Response A: {record['reference']}\n\nResponse B: {record['policy']}" in policy_second
        assert record["score"] == pair_score(*record["verdicts"])  # the first verdict is the policy-as-A order's


def test_a_bad_instructions_file_stops_the_run_in_one_line(tmp_path):
    from autotelic.checks import check_run
    from autotelic.loading import load_config

    bad = tmp_path / "prompts.jsonl"
    bad.write_text('{"instruction": "Say hi."}\n')
    with pytest.raises(ConfigError, match='has a line that is not a JSON object with a "prompt"'):
        check_run(load_config(None, ["eval.win_rate.enabled=true", f"eval.win_rate.prompts={bad}"]))


@pytest.mark.slow
def test_a_run_measures_its_win_rate_after_training(tmp_path, capsys):
    from autotelic.loading import load_config
    from autotelic.trainer import train

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in OPEN_PROMPTS[:3]))
    summary = train(load_config(None, [
        "train.export_model=false", "logging.report=false",
        "train.steps=1", "control.tasks_per_step=2", "generate.group_size=2", "control.max_new_tokens=8",
        "curriculum.families=[add]", "eval.levels=[1]", "eval.per_level=1", "eval.max_new_tokens=8",
        "model.lora=true", "eval.win_rate.enabled=true", f"eval.win_rate.prompts={prompts}",
        "eval.win_rate.max_new_tokens=12", "logging.progress=false", f"logging.runs_dir={tmp_path}",
        "logging.run_name=wins"]))
    wins = summary["win_rate"]
    assert wins["pairs"] == 3 and wins["reference"] == "base" and wins["judge"] == "base"
    records = [json.loads(line) for line in (tmp_path / "wins" / "eval_after_win_rate.jsonl").read_text().splitlines()]
    assert [r["prompt"] for r in records] == list(OPEN_PROMPTS[:3])
    assert all(r["score"] == pair_score(*r["verdicts"]) for r in records)  # the summary is these pairs'
    judged = [r["score"] for r in records if r["score"] is not None]
    assert wins["win_rate"] == pytest.approx(sum(judged) / len(judged) if judged else 0.5)
    assert wins["parse_rate"] == pytest.approx(sum(v is not None for r in records for v in r["verdicts"]) / 6)
    assert "win rate against base (judge base, both orders)" in capsys.readouterr().err  # the closing lines
