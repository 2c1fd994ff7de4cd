"""bench/web_agent.py's arms: every flag's arm is a configuration the trainer accepts, under the overrides the
web benches in docs/results.md pass, with the recipe arm's budget."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from runs import Budget, arm_config  # noqa: E402
from web_agent import ABLATIONS, TRAINED  # noqa: E402

from autotelic.checks import check_run  # noqa: E402

OVERRIDES = ("filter.rewards=[{name: web_success}]", "curriculum.families=[web_shop,web_forum,web_wiki]",
             "curriculum.levels=[1,2]", "eval.levels=[1,2]", "eval.pass_k=[]")


@pytest.mark.parametrize("ablation", ABLATIONS, ids=[a.flag for a in ABLATIONS])
def test_every_arm_is_a_run_the_trainer_accepts(ablation):
    budget = Budget(steps=20, max_minutes=150, seeds=5, heldout=60, parallel=True, overrides=OVERRIDES)
    config, recipe = arm_config(ablation.arm, budget), arm_config(TRAINED, budget)
    check_run(config)
    assert config.train == recipe.train and config.control == recipe.control and config.generate == recipe.generate


def test_step_groups_change_only_what_a_turn_is_compared_with():
    budget = Budget(steps=20, max_minutes=150, seeds=5, heldout=60, parallel=True, overrides=OVERRIDES)
    (step_groups,) = [a for a in ABLATIONS if a.flag == "step_groups"]
    config, recipe = arm_config(step_groups.arm, budget), arm_config(TRAINED, budget)
    assert (config.algorithm.turn_baseline, recipe.algorithm.turn_baseline) == ("state", "group")
    assert config.algorithm.turn_credit and config.filter == recipe.filter
