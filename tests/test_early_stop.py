"""In-trajectory early stops, in the real decoder: a sample that loops ends there (control.stop_repeats), and one
whose answer is complete ends there (control.stop_pattern)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from autotelic.backends import DecoderStops
from autotelic.backends.hf import HFPolicy
from autotelic.backends.sampling import looping
from autotelic.config import ConfigError, ModelConfig


def test_a_loop_is_one_block_repeated_at_the_end():
    assert looping([5, *[3, 4, 5, 6] * 3], 3)  # (3, 4, 5, 6) three times: 12 tokens
    assert not looping([5, *[3, 4, 5, 6] * 2, 3, 4, 5, 7], 3) and not looping([3, 4, 5, 6] * 2, 3)
    assert looping(list(range(16)) * 2, 2) and not looping(list(range(17)) * 2, 2)  # blocks up to 16 tokens
    # short blocks repeat until they cover 12 tokens: a number such as 7777 (digits are one token each) is no loop
    assert not looping([9, 7, 7, 7, 7], 4) and not looping([1, 0, 0, 0, 0, 0, 0], 4)
    assert looping([7] * 12, 4) and not looping([8, *[7] * 11], 4)
    assert looping([1, 2] * 6, 3) and not looping([1, 2] * 5, 3)


LOOPING_PROMPT = "List the letter a: a a a a a a a a"  # the embedded model answers "A, A, A, ..." to the cap


def test_the_decoder_cuts_a_looping_sample_and_marks_it():
    policy = HFPolicy(ModelConfig(), seed=0)
    prompt = [policy.encode_prompt(LOOPING_PROMPT)]
    (full,), = policy.generate(prompt, 1, 40, greedy=True)
    assert len(full.token_ids) == 40 and not full.looped  # off by default: the loop runs to the cap
    policy.stops = DecoderStops(repeats=4)
    (cut,), = policy.generate(prompt, 1, 40, greedy=True)
    assert cut.looped and not cut.finished and len(cut.token_ids) < 20
    assert cut.token_ids == full.token_ids[:len(cut.token_ids)] and looping(cut.token_ids, 4)


def test_a_run_logs_the_share_of_samples_it_cut(tmp_path):
    from autotelic.loading import load_config
    from autotelic.trainer import train

    data = tmp_path / "loops.jsonl"
    data.write_text(json.dumps({"prompt": LOOPING_PROMPT, "answer": "a"}) + "\n")
    train(load_config(None, [
        "train.export_model=false", "logging.report=false", 
        f"curriculum.families=[file:{data}]", "curriculum.levels=[1]", "eval.families=[add]", "eval.levels=[1]",
        "eval.per_level=1", "train.steps=1", "control.tasks_per_step=1", "generate.group_size=2",
        "generate.temperature=0.01", "control.max_new_tokens=40", "control.stop_repeats=4", "model.lora=true",
        "filter.drop_zero_variance=false", "logging.progress=false", f"logging.runs_dir={tmp_path}",
        "logging.run_name=loops"]))
    (step,) = [json.loads(line) for line in (tmp_path / "loops" / "metrics.jsonl").read_text().splitlines()
               if '"reward/mean"' in line]
    assert step["generate/looped_share"] == 1.0
    rows = [json.loads(line) for line in (tmp_path / "loops" / "rollouts.jsonl").read_text().splitlines()]
    assert rows and all(row["looped"] and not row["finished"] for row in rows)


def test_stop_repeats_needs_a_repeat_and_the_transformers_decoder():
    from autotelic.checks import TrainingError, check_run
    from autotelic.loading import load_config

    with pytest.raises(ConfigError, match="control.stop_repeats must be 0 \\(off\\) or at least 2"):
        load_config(None, ["control.stop_repeats=1"])
    with pytest.raises(TrainingError, match="control.stop_repeats stops looping samples"):
        check_run(load_config(None, ["control.stop_repeats=3", "vllm.enabled=true"]))


def test_a_stop_pattern_is_a_regular_expression_for_single_replies_in_the_transformers_decoder():
    from autotelic.checks import TrainingError, check_run
    from autotelic.loading import load_config

    with pytest.raises(ConfigError, match="control.stop_pattern must be a Python regular expression"):
        load_config(None, ["control.stop_pattern=(unclosed"])
    with pytest.raises(TrainingError, match="control.stop_pattern stops complete answers"):
        check_run(load_config(None, ["control.stop_pattern=done", "vllm.enabled=true"]))
    web = Path(__file__).resolve().parent.parent / "recipes" / "opagent-web.yaml"
    with pytest.raises(TrainingError, match="control.stop_pattern ends single replies"):
        check_run(load_config(web, ["control.stop_pattern=done"]))


def test_the_decoder_ends_a_sample_once_its_text_matches_the_stop_pattern():
    """The sample ends at the token that completes the pattern's first match (the same tokens as without the stop up
    to there), finished and marked answered; a sample that never matches runs as before."""
    policy = HFPolicy(ModelConfig(), seed=0)
    prompt = [policy.encode_prompt("Write a short sentence about the sea.")]
    (full,), = policy.generate(prompt, 1, 40, greedy=True)
    words = policy.decode(full.token_ids).split()
    assert len(words) >= 4 and not full.answered
    pattern = re.escape(f"{words[1]} {words[2]}")  # the reply's second and third words
    policy.stops = DecoderStops(pattern=pattern)
    (cut,), = policy.generate(prompt, 1, 40, greedy=True)
    assert cut.answered and cut.finished and len(cut.token_ids) < len(full.token_ids)
    assert cut.token_ids == full.token_ids[:len(cut.token_ids)]
    assert re.search(pattern, policy.decode(cut.token_ids))
    assert not re.search(pattern, policy.decode(cut.token_ids[:-1]))
    policy.stops = DecoderStops(pattern="no reply writes this")
    (unmatched,), = policy.generate(prompt, 1, 40, greedy=True)
    assert unmatched.token_ids == full.token_ids and not unmatched.answered


def test_a_code_run_ends_each_reply_at_its_closed_code_block(tmp_path):
    """The ReST-RL code recipe with control.stop_pattern set to a closed code block: replies that close their block
    end there (nothing after it, which the unit tests never read, is generated or trained), the share is logged, and
    the graded code is the block's."""
    from autotelic.loading import load_config
    from autotelic.tasks.code import CLOSED_CODE_BLOCK, extract_code
    from autotelic.trainer import train

    recipe = Path(__file__).resolve().parent.parent / "recipes" / "rest-rl-code.yaml"
    train(load_config(recipe, [
        "train.export_model=false", "logging.report=false", "value.enabled=false", "curriculum.prefixes.fraction=0",
        "curriculum.hints.fraction=0", "eval.per_level=1", "eval.levels=[1]", "train.steps=1",
        "control.tasks_per_step=2", "generate.group_size=4", "filter.min_reward_std=0",
        f"control.stop_pattern='{CLOSED_CODE_BLOCK}'",
        "logging.progress=false", f"logging.runs_dir={tmp_path}", "logging.run_name=stops"]))
    (step,) = [json.loads(line) for line in (tmp_path / "stops" / "metrics.jsonl").read_text().splitlines()
               if '"reward/mean"' in line]
    rows = [json.loads(line) for line in (tmp_path / "stops" / "rollouts.jsonl").read_text().splitlines()]
    answered = [row for row in rows if row.get("answered")]
    assert answered and step["generate/answered_share"] == len(answered) / len(rows)
    for row in answered:
        text = row["completion"]
        block = re.search(CLOSED_CODE_BLOCK, text)
        assert row["finished"] and text[block.end():].strip() == ""  # at most the closing token's line end
        assert extract_code(text).strip() == block.group(0).split("\n", 1)[1].removesuffix("```").strip()
    assert all(not re.search(CLOSED_CODE_BLOCK, row["completion"]) for row in rows if not row.get("answered"))
