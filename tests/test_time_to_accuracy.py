"""bench/time_to_accuracy.py: TRL is prompted with our policy's tokens, when an arm counts as having reached TRL's
final accuracy, and the whole bench on a tiny budget, both arms real (autotelic's Trainer and TRL's GRPOTrainer on
the embedded model)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))  # bench/ is a directory of scripts, not a package

from time_to_accuracy import ArmResult, Point, Schedule, seconds_to_reach, seed_ratio  # noqa: E402
from trl_peer import chat_rows  # noqa: E402

from autotelic.backends.embedded import embedded_model_dir  # noqa: E402
from autotelic.backends.hf import encode_chat  # noqa: E402
from autotelic.loading import load_config  # noqa: E402
from autotelic.tasks import get_family  # noqa: E402

TINY = ["curriculum.families=[add]", "curriculum.levels=[1]", "eval.levels=[1]", "eval.per_level=4",
        "control.tasks_per_step=2", "generate.group_size=2", "control.max_new_tokens=6", "eval.max_new_tokens=6"]


@pytest.mark.parametrize("system_prompt", [None, "Answer with a number."])
def test_trl_gets_the_prompt_tokens_our_policy_generates_from(system_prompt):
    """TRL renders conversational prompts itself (apply_chat_template with the generation prompt, as in its
    GRPOTrainer); for every family of the default recipe the tokens are those encode_chat gives our policy."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(embedded_model_dir())
    rng = random.Random(0)
    recipe = load_config(BENCH.parent / "recipes" / "default.yaml")
    tasks = [get_family(name).generate(rng, level) for name in recipe.curriculum.families
             for level in recipe.curriculum.levels]
    rows = chat_rows(tasks, system_prompt)
    trl_ids = tokenizer.apply_chat_template(conversation=[row["prompt"] for row in rows], add_generation_prompt=True,
                                            tokenize=True, return_dict=True)["input_ids"]
    assert trl_ids == [encode_chat(tokenizer, task.chat, "", system_prompt) for task in tasks]
    assert [row["uid"] for row in rows] == [task.uid for task in tasks]


def arm(name: str, *points: tuple[float, float]) -> ArmResult:
    return ArmResult(arm=name, seed=0, curve=[Point(seconds=s, step=i, accuracy=a) for i, (s, a) in enumerate(points)])


def test_the_first_evaluation_at_or_above_trls_final_accuracy_counts():
    trl = arm("trl", (0, 0.1), (30, 0.3), (61, 0.25))  # TRL passed its own final accuracy at 30 s
    ours = arm("autotelic_default", (0, 0.1), (10, 0.2), (21, 0.26), (30, 0.2))
    assert seconds_to_reach(ours.curve, 0.25) == 21 and seconds_to_reach(ours.curve, 0.9) is None
    entry = seed_ratio(trl, ours)
    assert (entry["target"], entry["trl_seconds"], entry["autotelic_seconds"]) == (0.25, 30, 21)
    assert entry["ratio"] == pytest.approx(30 / 21)


def test_never_reaching_counts_zero_and_a_trl_without_gain_gives_no_ratio():
    trl = arm("trl", (0, 0.1), (30, 0.3))
    assert seed_ratio(trl, arm("autotelic_default", (0, 0.1), (31, 0.29)))["ratio"] == 0.0
    flat = seed_ratio(arm("trl", (0, 0.1), (30, 0.1)), arm("autotelic_default", (0, 0.1), (31, 0.5)))
    assert flat["ratio"] is None and flat["trl_seconds"] == 0


def test_schedule_evaluates_once_per_interval_crossed_and_at_the_budget():
    schedule = Schedule.every(10, budget=25)
    due = [clock for clock in (4, 9, 12, 14, 23, 24, 26) if schedule.due(clock)]
    assert due == [12, 23, 26]  # past 10, past 20, past the budget
    assert not schedule.over(24.9) and schedule.over(25)
    slow = Schedule.every(10, budget=100)  # a step that crosses two marks gives one evaluation
    assert [clock for clock in (35, 39, 40) if slow.due(clock)] == [35, 40]
    uneven = Schedule([5, 10, 40], budget=30)  # explicit marks; one past the budget is the budget's own
    assert [clock for clock in (4, 6, 8, 11, 29, 31) if uneven.due(clock)] == [6, 11, 31]


@pytest.mark.slow
def test_bench_end_to_end_on_a_tiny_budget(tmp_path):
    """Both arms train ~2 s; the artifact holds their curves, and the ratio is the curves' own."""
    sets = [arg for setting in TINY for arg in ("--set", setting)]
    run = subprocess.run([sys.executable, str(BENCH / "time_to_accuracy.py"), "--seconds", "2", "--every", "1",
                          "--seeds", "1", "--results", str(tmp_path), *sets], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    [path] = tmp_path.glob("time_to_accuracy-*.json")
    record = json.loads(path.read_text())
    rows = {row["arm"]: row for row in record["rows"]}
    assert set(rows) == {"autotelic_default", "trl"} and {row["seed"] for row in rows.values()} == {0}
    for row in rows.values():
        curve = row["curve"]
        assert curve[0]["seconds"] == 0 and curve[0]["step"] == 0 and curve[-1]["seconds"] >= 2
        assert all(a["seconds"] < b["seconds"] and a["step"] < b["step"] for a, b in zip(curve, curve[1:]))
        assert len(row["final_scores"]) == len(row["heldout_uids"]) == 4 and set(row["final_scores"]) <= {0.0, 1.0}
        assert row["final_accuracy"] == curve[-1]["accuracy"]
    assert rows["trl"]["heldout_uids"] == rows["autotelic_default"]["heldout_uids"]
    # the same untrained model, the same evaluator: the arms start equal
    assert rows["trl"]["curve"][0]["accuracy"] == rows["autotelic_default"]["curve"][0]["accuracy"]
    assert rows["trl"]["settings"]["group"] == 2 and rows["trl"]["settings"]["prompts"] == 2
    # what each of our steps drew and earned is kept, so a stalled seed can be read from the artifact
    ours = rows["autotelic_default"]["steps"]
    assert [s["step"] for s in ours] == list(range(1, rows["autotelic_default"]["curve"][-1]["step"] + 1))
    assert all(0 <= s["reward/mean"] <= 1 and any(k.startswith("curriculum/share/") for k in s) for s in ours)
    assert rows["trl"]["steps"] == []

    target = rows["trl"]["curve"][-1]["accuracy"]
    reached = {name: seconds_to_reach(row["curve"], target) for name, row in rows.items()}
    [entry] = record["summary"]["per_seed"]
    assert (entry["target"], entry["trl_seconds"], entry["autotelic_seconds"]) == \
        (target, reached["trl"], reached["autotelic_default"])
    expected = None if reached["trl"] == 0 else 0.0 if reached["autotelic_default"] is None else \
        reached["trl"] / reached["autotelic_default"]
    assert entry["ratio"] == expected
    shown = "nan" if expected is None else f"{expected:.2f}"
    assert run.stdout.splitlines()[-1].startswith(f"time_to_accuracy_vs_trl={shown} ")

    [comparison] = record["comparisons"]
    gain = 100 * (rows["autotelic_default"]["final_accuracy"] - rows["trl"]["final_accuracy"])
    assert comparison["seeds"] == 1 and comparison["heldout_n"] == 4
    assert comparison["gain_points"] == pytest.approx(gain, abs=0.01)
