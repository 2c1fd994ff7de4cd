"""Web agent (OpAgent): held-out task success on the live local sites for four agents: the base model as a
single policy, the base model inside the operator agent (planner, grounder, reflector, summarizer), the
trained model as a single policy, and the trained model inside the operator agent.

Training is ``recipes/opagent-web.yaml`` as shipped (fast HTML mode; pass ``generate.env=web_browser`` for
headless Chromium), ``--steps`` updates per seed with the recipe's samples per step, ``--max-minutes`` a safety
net flagged if it binds (bench/runs.py). Every agent plays the trainer's own held-out set, with the run's
evaluation settings (greedy whole episodes): the single-policy scores are the run's own records
(eval_before.jsonl, eval_after.jsonl) and the operator agent plays the same tasks, so no evaluated task was
trainable. The web families have 226 distinct tasks at levels 1-2 but web_booking only 9 at each level, so the
held-out set stays well below 200 (``--heldout``, default 64: 8 per family and level, the most that leaves a
booking task to train on).

    python bench/web_agent.py                       # 20 steps, 3 seeds, 64 held-out tasks
    python bench/web_agent.py --steps 5 --seeds 3 --heldout 32 generate.env=web_browser
    python bench/web_agent.py --no-operator --success-only --steps 30 --heldout 60 "curriculum.levels=[1]" ...
    python bench/web_agent.py --no-operator --demonstrations --steps 40 --heldout 60 "curriculum.levels=[1]" ...
    python bench/web_agent.py --no-operator --memory --memory-replay --steps 20 --heldout 60 "curriculum.levels=[1]" ...
    python bench/web_agent.py --no-operator --process-reward --steps 20 "filter.rewards=[{name: web_success}]"
    python bench/web_agent.py --no-operator --episode-tree --steps 20 "filter.rewards=[{name: web_success}]" ...
    python bench/web_agent.py --no-operator --episode-tree --inter-tree --reuse --steps 20 ...
    python bench/web_agent.py --no-operator --replay --reuse --steps 20 "filter.rewards=[{name: web_success}]" ...
    python bench/web_agent.py --no-operator --replay --two-epochs --reuse --steps 20 ...
    python bench/web_agent.py --no-operator --step-groups --steps 20 "filter.rewards=[{name: web_success}]" ...
Prints a row per seed, writes bench/results/web_agent-*.json and, last, the comparison lines
trained_vs_base (single policy), operator_vs_single (trained model), operator_vs_single_base (base model), with
``--success-only`` hybrid_vs_success_only (the recipe's hybrid reward against the success check alone, both
trained as the recipe says otherwise), and with ``--demonstrations`` demonstrations_vs_without (the recipe's
guided rollouts, where half of each step's tasks, a share decaying by 0.9 a step, are failed tasks again with one
episode playing the task's scripted solution, against the recipe with them off), and with ``--memory``
memory_vs_without (the same trained agents answering each held-out task again with their 2 nearest solved
training tasks' actions before it, ``curriculum.memory.at_eval`` with ``fraction`` 0: the memory only banks
during training, so the weights are the runs' own and the comparison is paired by seed and task), and with
``--memory-replay`` memory_replay_vs_without (memory replay in training too, ``fraction`` 0.5, answered with its
memory) and memory_replay_weights_vs_without (the same runs' weights alone), and with ``--process-reward``
process_reward_vs_without (the success check plus the decision tree's per-step values and milestone credit, each
turn credited with its return, against the trained arm, which the overrides reward with the success check alone;
the arms' update compute differs at equal samples: no group of the process reward has zero spread to skip), and
with ``--episode-tree`` episode_tree_vs_without (Tree-GRPO's trees at turn boundaries: each group starts half its
episodes and copies them after the first turn, each episode's advantage with the intra-tree term, against
independent episodes; equal episodes and updates, fewer decoded turns), and with ``--inter-tree``
inter_tree_vs_without (the same trees, each episode's advantage against its whole group alone) and, with both,
intra_tree_vs_inter_only, and with ``--replay`` replay_vs_without (experience replay: the kept groups of highest
reward spread, a solved episode or a played demonstration among failed ones, trained once more in a later update,
two a step at most, their age corrected by decoupled PPO's truncated importance weight; equal episodes and steps,
more update compute), and with ``--two-epochs`` two_epochs_vs_without (replay's control at about its update
compute: each batch trained twice, PPO's second epoch, instead of groups trained again in later steps) and, with
both, replay_vs_two_epochs, and with ``--step-groups`` step_groups_vs_without (GiGPO's step groups: each turn's
discounted return against those of the turns its group took from the same state, plus its episode's advantage,
against the recipe's turn credit over every turn of the group; equal episodes and steps).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from runs import (Arm, ArmRun, Budget, Measure, add_budget_arguments, arm_config, budget_from, compare, heldout_of,
                  report, run_arms, runs_dir_from, runs_of, trained_policy)

from autotelic.backends.hf import HFPolicy
from autotelic.run_evaluation import evaluate_heldout

RECIPE = Path(__file__).resolve().parent.parent / "recipes" / "opagent-web.yaml"
TRAINED = Arm("trained", (), RECIPE)
# the hybrid reward's ablation (--success-only): the task's success check alone, no decision tree, milestones or judge
SUCCESS_ONLY = Arm("success_only", ("filter.rewards=[{name: web_success}]",), RECIPE)
# the guided rollouts' ablation (--demonstrations): no failed task comes back with its scripted solution played
WITHOUT_DEMONSTRATIONS = Arm("without_demonstrations", ("curriculum.hints.fraction=0",), RECIPE)
OPERATOR = Arm("trained", ("eval.agent=operator",), RECIPE)  # the same runs' settings, the operator agent
# --memory: the trained arm also keeps what it solved in training and answers the held-out set again with it
REMEMBERING = Arm("trained", ("curriculum.memory.at_eval=true",), RECIPE)
# --memory-replay: memory replay in training too, half of each step's tasks served their 2 nearest solved tasks
MEMORY_REPLAY = Arm("memory_replay", ("curriculum.memory.fraction=0.5", "curriculum.memory.at_eval=true"), RECIPE)
# --process-reward: the recipe's rule-based process reward (decision tree per step, milestone credit, turn credit)
# with the success check and without the judge, against the trained arm rewarded as the bench's overrides say
PROCESS_REWARD = Arm("process_reward", ("filter.rewards=[{name: web_success}, {name: web_progress, options: "
                                        "{step_penalty: 0.1, milestone_weight: 0.5}}]",), RECIPE)
# --episode-tree: Tree-GRPO at turn boundaries: each group of 6 starts 3 episodes and copies each once after the
# first turn (rollout/episode_tree.py), advantages with the intra-tree term
EPISODE_TREE = Arm("episode_tree", ("episode.tree_roots=3", "episode.branch_turns=[1]", "algorithm.intra_tree=true"),
                   RECIPE)
# --inter-tree: the same trees with the inter-tree advantage alone (each episode against its whole group)
INTER_TREE = Arm("inter_tree", ("episode.tree_roots=3", "episode.branch_turns=[1]"), RECIPE)
# --replay: experience replay (ExGRPO/RLEP-style reuse of solved episodes): the highest-spread kept groups trained
# again one later step, two a step at most (about as many as a step keeps fresh: ExGRPO's half-replayed batches),
# with decoupled PPO's importance weight for their age
REPLAY = Arm("replay", ("replay.name=buffer", "replay.replay_groups=2", "replay.max_reuse=1",
                        "algorithm.off_policy=decoupled"), RECIPE)
# --step-groups: GiGPO's step groups: each turn's discounted return against those of the group's turns taken from
# the same state, besides its episode's advantage, instead of against every turn of the group
STEP_GROUPS = Arm("step_groups", ("algorithm.turn_baseline=state",), RECIPE)
# --two-epochs: replay's equal-compute control: every batch trained for two epochs (clipped against its sampling)
TWO_EPOCHS = Arm("two_epochs", ("algorithm.updates_per_batch=2",), RECIPE)


@dataclass(frozen=True)
class Ablation:
    """An arm a flag trains besides the recipe's, and its comparison (recipe_is_baseline: the arm adds a strategy
    to the recipe; otherwise it takes one away)."""
    flag: str
    arm: Arm
    comparison: str
    recipe_is_baseline: bool
    help: str


ABLATIONS = [
    Ablation("success_only", SUCCESS_ONLY, "hybrid_vs_success_only", False,
             "also train the hybrid reward's ablation: the success check alone (same steps, samples)"),
    Ablation("demonstrations", WITHOUT_DEMONSTRATIONS, "demonstrations_vs_without", False,
             "also train the guided rollouts' ablation: no demonstrations (same steps, samples)"),
    Ablation("process_reward", PROCESS_REWARD, "process_reward_vs_without", True,
             "also train with the rule-based process reward added to the success check, no judge (same steps, "
             "samples)"),
    Ablation("episode_tree", EPISODE_TREE, "episode_tree_vs_without", True,
             "also train with tree rollouts branched after the first turn (same steps, episodes)"),
    Ablation("inter_tree", INTER_TREE, "inter_tree_vs_without", True,
             "also train the same trees without the intra-tree term; with --episode-tree, also "
             "intra_tree_vs_inter_only (same steps, episodes)"),
    Ablation("replay", REPLAY, "replay_vs_without", True,
             "also train with experience replay: kept groups trained again one later step (same steps, episodes)"),
    Ablation("step_groups", STEP_GROUPS, "step_groups_vs_without", True,
             "also train with GiGPO's step groups: each turn ranked against the turns taken from the same state "
             "(same steps, episodes)"),
    Ablation("two_epochs", TWO_EPOCHS, "two_epochs_vs_without", True,
             "also train with two epochs on every batch: replay's control at about its update compute (same "
             "steps, episodes)"),
]


def valid_share(records: list[dict]) -> float:
    actions = [a for r in records for a in r.get("actions", [])]
    return sum(a is not None for a in actions) / max(1, len(actions))


def operator_records(policy: HFPolicy, budget: Budget) -> list[dict]:
    return evaluate_heldout(arm_config(OPERATOR, budget), policy, heldout_of(OPERATOR, budget)).records


def write_records(run: ArmRun, name: str, records: list[dict]) -> dict[str, float]:
    (run.run_dir / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return {f"{name}_success": sum(r["correct"] for r in records) / len(records),
            f"{name}_valid_actions": valid_share(records)}


def operator_evaluations(hybrid: list[ArmRun], budget: Budget) -> dict[tuple[str, int], dict[str, float]]:
    """The operator agent on the held-out tasks with the base model and each run's trained model."""
    config = arm_config(TRAINED, budget)
    base = operator_records(HFPolicy(config.model, seed=config.eval.seed), budget)  # greedy: the same for every seed
    return {(run.arm.name, run.seed): {**write_records(run, "eval_before_operator", base),
                                       **write_records(run, "eval_after_operator",
                                                       operator_records(trained_policy(run, config), budget))}
            for run in hybrid}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_budget_arguments(parser, steps=20, max_minutes=60.0, heldout=64)
    parser.add_argument("--no-operator", action="store_true",
                        help="skip the operator agent's evaluations (four roles a turn: the longest part after "
                             "training)")
    parser.add_argument("--memory", action="store_true",
                        help="the trained runs also answer the held-out set with their memory of solved training "
                             "tasks (the same weights: no further training)")
    parser.add_argument("--memory-replay", action="store_true",
                        help="also train with memory replay (half of each step's tasks served solved ones) and "
                             "answer the held-out set with that memory (same steps, samples)")
    for ablation in ABLATIONS:
        parser.add_argument(f"--{ablation.flag.replace('_', '-')}", action="store_true", help=ablation.help)
    args = parser.parse_args()
    budget = budget_from(args)
    trained = REMEMBERING if args.memory else TRAINED
    chosen = [ablation for ablation in ABLATIONS if vars(args)[ablation.flag]]
    arms = [trained, *(ablation.arm for ablation in chosen), *([MEMORY_REPLAY] if args.memory_replay else [])]
    runs = run_arms(arms, budget, runs_dir_from(args, "web-agent"))
    hybrid = runs_of(runs, trained)
    comparisons = [compare("trained_vs_base", Measure(hybrid, "eval_before"), Measure(hybrid, "eval_after"))]
    extra = {}
    if not args.no_operator:
        extra = operator_evaluations(hybrid, budget)
        comparisons += [compare("operator_vs_single", Measure(hybrid, "eval_after"),
                                Measure(hybrid, "eval_after_operator")),
                        compare("operator_vs_single_base", Measure(hybrid, "eval_before"),
                                Measure(hybrid, "eval_before_operator"))]
    for ablation in chosen:
        other = Measure(runs_of(runs, ablation.arm))
        comparisons.append(compare(ablation.comparison, *((Measure(hybrid), other) if ablation.recipe_is_baseline
                                                          else (other, Measure(hybrid)))))
    if args.episode_tree and args.inter_tree:
        comparisons.append(compare("intra_tree_vs_inter_only", Measure(runs_of(runs, INTER_TREE)),
                                   Measure(runs_of(runs, EPISODE_TREE))))
    if args.replay and args.two_epochs:
        comparisons.append(compare("replay_vs_two_epochs", Measure(runs_of(runs, TWO_EPOCHS)),
                                   Measure(runs_of(runs, REPLAY))))
    if args.memory:
        comparisons.append(compare("memory_vs_without", Measure(hybrid), Measure(hybrid, "eval_after_memory")))
    if args.memory_replay:
        replayed = runs_of(runs, MEMORY_REPLAY)
        comparisons += [compare("memory_replay_vs_without", Measure(hybrid), Measure(replayed, "eval_after_memory")),
                        compare("memory_replay_weights_vs_without", Measure(hybrid), Measure(replayed))]
    report("web_agent", runs, comparisons, budget, args.results_dir, extra)


if __name__ == "__main__":
    main()
