"""Self-evolution, measured rather than assumed: for each self-evolution recipe, held-out accuracy after
training against its no-evolution ablation at the same budget.

Arms (each recipe as shipped in recipes/, then its ablation):
- eva: prompts evolved by the creator (a frozen copy of the starting model) vs a fixed prompt pool
  (curriculum.evolve.every=0); eva-dpo the same with DPO on best-vs-worst pairs instead of RLOO; with
  ``--train-creator`` a third arm whose creator learns from the solver's informativeness on its rewrites
  (curriculum.evolve.train=true), compared with the shipped frozen creator;
- ttrl: majority vote plus EVOL-RL's novelty bonus vs majority vote alone (TTRL), both label-free and both
  test-time: they train on the evaluation prompts themselves (without answers), so their accuracy is
  labelled "test-time (trained on the evaluation prompts)", never held-out;
- comas: several agents discussing, graded by each other, vs a single agent playing every role; compared on
  the greedy discussion's final answer (eval_after_discussion.jsonl); each row also says how well the grades
  tracked the truth in the held-out discussions before and after training (``grade_reliability``);
- agent0: tasks proposed by the policy (curriculum agent) vs no creator: the executor trained by majority
  vote on fixed family prompts, with as many tasks per step as gives it the samples per step the creator arm
  actually drew (its runs go first; invalid or out-of-band proposals get no answers, so it draws well below its
  cap, which sized the ablation before 2026-11-25 and gave it 2-4 times the samples);
- spiral: self-play against the evolving policy itself vs a fixed opponent (the frozen base policy), the
  fixed-opponent arm with twice the games per task so that both train on the same samples per step. The
  recipe's own score (legal opening moves) saturates for both arms and cannot separate them; the comparison
  is the win rate against a rule player (``kuhn_poker_rules``: bets or calls with the king, folds the jack),
  an opponent neither arm trained with, in at least ``--heldout`` games on the evaluation deals (Kuhn poker has
  6 deals, which self-play training plays too), the trained policy in either seat, at the recipe's temperature
  from a fixed seed. With ``--spiral-vs-base`` the win rate against the base policy is reported too but not
  compared: the base policy is the fixed-opponent arm's training opponent, which favours that arm (compared before
  2026-11-26).

Budgets bind the same way (bench/runs.py): ``--steps`` updates per arm and seed, the same samples per step,
``--max-minutes`` a safety net flagged if it binds; ``--seeds`` training seeds, one held-out set of at least
``--heldout`` tasks per recipe for every arm and seed (Kuhn poker deals for spiral).

    python bench/self_evolution.py                                   # every recipe, 20 steps, 3 seeds
    python bench/self_evolution.py --recipes eva ttrl --steps 10 --heldout 100
    python bench/self_evolution.py --recipes eva --train-creator --steps 20 --parallel
Prints a row per arm and seed, writes bench/results/self_evolution-*.json and, last, one comparison line
per recipe (recipe minus ablation, points, 95% interval).
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from pathlib import Path

import torch
from runs import (TEST_TIME, Arm, ArmRun, Budget, Measure, add_budget_arguments, arm_config, budget_from, compare,
                  heldout_of, report, run_arms, runs_dir_from, runs_of, trained_policy)

from autotelic.backends.hf import HFPolicy
from autotelic.config import RunConfig
from autotelic.envs import make_game_factory
from autotelic.rollout.discussion import ROLES, SCORER, SOLVER, round_rewards
from autotelic.rollout.filter import verifier_reward
from autotelic.rollout.selfplay import SelfPlaySampler
from autotelic.tasks.textarena_games import kuhn_poker_rules
from autotelic.types import Task

RECIPES = Path(__file__).resolve().parent.parent / "recipes"
ABLATIONS: dict[str, tuple[str, ...]] = {
    "eva": ("curriculum.evolve.every=0",),
    "eva-dpo": ("curriculum.evolve.every=0",),
    "ttrl": ("filter.rewards=[{name: majority_vote}]",),
    "comas": ("discussion.agents=1",),
    "agent0": ("generate.mode=sample", "generate.group_size=8", "filter.rewards=[{name: majority_vote}]",
               "filter.pass_rate_band=[0.3, 0.8]"),
    "spiral": ("selfplay.opponent=frozen",),
}
ABLATION_GROUP = 8  # agent0's ablation: answers per fixed prompt
EVOLVING = ("eva", "eva-dpo")  # recipes whose creator can learn (--train-creator)


def arms_of(recipe: str, budget: Budget) -> tuple[Arm, Arm]:
    """The recipe and its ablation, the ablation sized to the recipe's samples per step (agent0's once its
    creator arm ran: ``matched``)."""
    path = RECIPES / f"{recipe}.yaml"
    label = TEST_TIME if recipe == "ttrl" else ""
    shipped = Arm(recipe, (), path, label)
    config = arm_config(shipped, budget)
    sizing: tuple[str, ...] = ()
    if recipe == "spiral":  # a fixed opponent's seats are not trained: twice the games, the same samples
        sizing = (f"generate.group_size={2 * config.generate.group_size}",)
    return shipped, Arm(f"{recipe}-ablation", (*ABLATIONS[recipe], *sizing), path, label)


def matched(ablation: Arm, creator_runs: list[ArmRun]) -> Arm:
    """agent0's ablation with the tasks per step that give it the samples per step the creator arm drew (mean over
    its seeds), ``ABLATION_GROUP`` answers each."""
    drawn = sum(run.row()["samples_per_step"] for run in creator_runs) / len(creator_runs)
    tasks = max(1, round(drawn / ABLATION_GROUP))
    return Arm(ablation.name, (*ablation.overrides, f"control.tasks_per_step={tasks}"), ablation.recipe,
               ablation.label)


def spiral_wins(policy: HFPolicy, run_dir: Path, arm: Arm, budget: Budget, against: str) -> float:
    """Games of ``policy`` against ``against`` ("base": the base policy; "rules": ``kuhn_poker_rules``, a player
    neither arm trained with) on the evaluation deals, at least ``budget.heldout`` of them (Kuhn poker has 6 deals:
    each is played many times, ``policy`` in either seat, at the recipe's temperature from a fixed seed), to
    ``<run_dir>/eval_after_wins_<against>.jsonl``, 1 for a win; returns the win rate."""
    config: RunConfig = arm_config(arm, budget)
    opponent = {"opponent": HFPolicy(config.model, seed=config.eval.seed)} if against == "base" else {
        "rules": kuhn_poker_rules}
    sampler = SelfPlaySampler(policy, make_game_factory(config.generate.env), config.generate.temperature,
                              max_turns=config.episode.max_turns, **opponent)
    deals = heldout_of(arm, budget)
    games = 2 * -(-budget.heldout // (2 * len(deals)))  # per deal, even: as many in either seat
    torch.manual_seed(config.eval.seed)
    records = []
    for deal in deals:
        for group in sampler.generate([deal], games, config.control.max_new_tokens):
            records += [{"family": deal.family, "level": deal.level, "prompt": deal.prompt,
                         "unit": f"seat {sample.info['player']} game {index}",
                         "correct": float(sample.info["return"] > 0)} for index, sample in enumerate(group.samples)]
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / f"eval_after_wins_{against}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return sum(r["correct"] for r in records) / len(records)


def spiral_rows(runs: list[ArmRun], budget: Budget, runs_dir: Path, opponents: tuple[str, ...]
                ) -> tuple[dict, dict]:
    """Each trained policy's win rates against ``opponents``: the rules (the compared one) and, if asked, the base
    policy; and the base policy's own win rate against the rules, what training started from."""
    rows = {}
    for run in runs:
        policy = trained_policy(run, arm_config(run.arm, budget))
        rows[(run.arm.name, run.seed)] = {f"win_rate_vs_{against}": spiral_wins(policy, run.run_dir, run.arm,
                                                                                budget, against)
                                          for against in opponents}
        rows[(run.arm.name, run.seed)]["note"] = "accuracy: legal opening moves, saturated, not compared"
    arm = runs[0].arm
    config = arm_config(arm, budget)
    base = spiral_wins(HFPolicy(config.model, seed=config.eval.seed), runs_dir / "spiral-base", arm, budget, "rules")
    return rows, {"spiral_base_win_rate_vs_rules": base}


def grade_reliability(records: list[dict], tasks: dict[str, Task], low: int, high: int) -> dict[str, dict]:
    """Whether a greedy discussion's grades track the truth, the one thing that makes them a reward: over the
    exchanges whose grade parsed, the solver's answer right or wrong by the task's verifier, and the solver's
    CoMAS reward for it (``round_rewards`` of the scorer's reply, 0 to 1) on average for each."""
    earned: dict[bool, list[float]] = {True: [], False: []}
    for record in records:
        task = tasks[record["prompt"]]
        exchanges: dict[tuple[int, int], dict[str, str]] = defaultdict(dict)
        for turn in record["turns"]:
            exchanges[(turn["round"], turn["solution"])][turn["role"]] = turn["text"]
        for turns in exchanges.values():
            reward = round_rewards(turns[ROLES[SCORER]], low, high, unparsed_penalty=-1.0).returns[SOLVER]
            if math.isfinite(reward):  # nan: the grade did not parse, so the answer was not rewarded
                earned[verifier_reward(task, turns[ROLES[SOLVER]]) >= 1.0].append(reward)
    return {("right" if right else "wrong"): {"graded": len(scores),
                                              "mean_reward": round(sum(scores) / len(scores), 3) if scores else None}
            for right, scores in earned.items()}


def comas_rows(runs: list[ArmRun], budget: Budget) -> dict:
    """Each run's grade reliability in its held-out discussions before and after training (``grade_reliability``)."""
    config = arm_config(runs[0].arm, budget)
    tasks = {task.prompt: task for task in heldout_of(runs[0].arm, budget)}
    low, high = config.discussion.grade_low, config.discussion.grade_high
    return {(run.arm.name, run.seed): {f"grades_{tag}": grade_reliability(
        [json.loads(line) for line in (run.run_dir / f"eval_{tag}_discussion.jsonl").read_text().splitlines()],
        tasks, low, high) for tag in ("before", "after")} for run in runs}


def measure(recipe: str, runs: list[ArmRun]) -> Measure:
    if recipe == "comas":
        return Measure(runs, "eval_after_discussion", "final")
    if recipe == "spiral":
        return Measure(runs, "eval_after_wins_rules")
    return Measure(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", nargs="+", default=list(ABLATIONS), choices=list(ABLATIONS))
    parser.add_argument("--train-creator", action="store_true",
                        help="eva recipes: also an arm whose creator learns, compared with the frozen one")
    parser.add_argument("--spiral-vs-base", action="store_true",
                        help="spiral: also the win rates against the base policy (not compared; as long again)")
    add_budget_arguments(parser, steps=20, max_minutes=60.0, heldout=200)
    args = parser.parse_args()
    budget = budget_from(args)
    runs_dir = runs_dir_from(args, "self-evolution")
    runs, comparisons, extra, summary = [], [], {}, {}
    for recipe in args.recipes:
        shipped, ablation = arms_of(recipe, budget)
        if recipe == "agent0":  # the creator arm first: its draws size the ablation
            first = run_arms([shipped], budget, runs_dir)
            ablation = matched(ablation, first)
            these = first + run_arms([ablation], budget, runs_dir)
        else:
            trained = [Arm(f"{recipe}-trained-creator", ("curriculum.evolve.train=true",), shipped.recipe)
                       ] if args.train_creator and recipe in EVOLVING else []
            these = run_arms([shipped, ablation, *trained], budget, runs_dir)
            if trained:
                comparisons.append(compare(f"{recipe}_trained_creator_vs_frozen",
                                           measure(recipe, runs_of(these, shipped)),
                                           measure(recipe, runs_of(these, trained[0]))))
        if recipe == "spiral":
            opponents = ("rules", "base") if args.spiral_vs_base else ("rules",)
            rows, base = spiral_rows(these, budget, runs_dir, opponents)
            extra |= rows
            summary |= base
        if recipe == "comas":
            extra |= comas_rows(these, budget)
        name = f"{recipe}_vs_ablation" + (f" [{TEST_TIME}]" if shipped.label else "")
        comparisons.append(compare(name, measure(recipe, runs_of(these, ablation)),
                                   measure(recipe, runs_of(these, shipped))))
        runs += these
    report("self_evolution", runs, comparisons, budget, args.results_dir, extra, summary or None)


if __name__ == "__main__":
    main()
