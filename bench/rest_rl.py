"""ReST-RL on code: pass@1 on a held-out code set for plain GRPO, ReST-GRPO, and ReST-GRPO with value-model
decoding (best-of-n picked by the value model, and VM-MCTS) at the same completion-token budget per task.

Every arm runs ``recipes/rest-rl-code.yaml`` (embedded SmolLM2-135M, unit-test rewards in the sandbox), its
guided rollouts switched off (``curriculum.hints.fraction=0``) except in the demonstrations arm:
- grpo: GRPO on groups with any reward spread; no partial-solution prompts, no dynamic sampling;
- rest: ReST-GRPO (groups of reward std < 0.05 dropped, partial-solution prompts cut from correct answers),
        then VM-MCTS: MCTS with test-scored rollouts on training problems labels partial
        programs, a value model learns them, and the held-out set is decoded with it: best-of-n picked by the
        value of the whole answer (an outcome reward model) and VM-MCTS, and with ``--prm`` best-of-n picked by
        the weakest step's value (the value model read as a PRM, ``eval.select_by=process_value``);
- rest_dpo (``--rest-dpo``): the ReST-DPO baseline: the same sampling, each group's best and worst answers by
        the unit tests as a DPO pair (``algorithm.name=online_dpo``), no partial-solution prompts;
- demonstrations (``--demonstrations``): the grpo arm with guided rollouts by demonstration (bench/strategies.py's
        ``demonstrations``, LUFFY's off-policy guidance): a problem none of whose answers passes its tests (best
        reward at most 0.9, ReST-GRPO's bar for solved) comes back with its reference function (the ``solution``
        column) as one of its 8 samples, half of each step's problems at first, a share that shrinks by a tenth
        every step; the GFCR strategy against the same run without it (demonstrations_vs_grpo);
- process_reward (``--process-reward VALUE_DIR``): the grpo arm rewarded by the unit tests plus 0.15 times a
        process reward, the value model in VALUE_DIR (``autotelic value``) read over each answer's lines, its
        weakest step (``process_value``, min): the GFCR survey's process rewards in training. Below the 0.2 that one
        of pyfunc's 5 assertions is worth, so the tests decide wherever they differ and the value model orders only
        the answers they tie on. Its weight bounds that order, not its pull: a group all wrong or all right, which
        grpo drops, now spreads by the value model alone and GRPO scales its advantages to full size, so this arm
        also trains on groups grpo would not (process_reward_vs_grpo);
- answer_stop (``--answer-stop``): the grpo arm with early stop inside a trajectory once its outcome is fixed
        (``control.stop_pattern``, the code block the unit tests grade, closed): a reply ends at its first closed
        code block, so the explanations and usage examples the small model writes after it, which no reward reads,
        are neither generated nor trained; rollouts, evaluation and rewards are otherwise the grpo arm's
        (answer_stop_vs_grpo, at equal steps and samples: it spends fewer tokens);
- memory (``--memory``): the grpo arm keeps a memory (``curriculum.memory.at_eval``, ``fraction`` 0: it only banks,
        so it trains exactly as without): problems it solved with its own answers. Its held-out set is answered
        twice on the same weights: alone (eval_after, the grpo numbers) and with the 2 nearest remembered problems
        written before each (eval_after_memory); skill/memory replay as a deployed agent's, paired on one policy
        (memory_vs_grpo), at no extra training run;
- memory_replay (``--memory-replay``): skill/memory replay in training too (``curriculum.memory.fraction`` 0.5):
        half of each step's problems are served the 2 nearest problems the arm solved earlier, with its own passing
        answers, before their question, and its held-out set is answered with its memory as well
        (memory_replay_vs_grpo: the agent as it would be deployed, against grpo's weights alone) and without it
        (memory_replay_weights_vs_grpo: what the weights learnt, the memory left out);
- tree (``--tree``): the grpo arm with tree rollouts of several branch points (bench/strategies.py's ``tree``,
        TreeRL): each problem's 4 samples branch at their highest-entropy token, 2 of them once each, and the first
        2 of those continuations branch again inside their own tokens (``tree.depth=2``): grpo's 8 samples a group
        (fewer where a sample has no token to branch at), siblings sharing the tokens before their branch point
        (tree_vs_grpo: the same samples a step, fewer tokens generated).
Budgets bind the same way (bench/runs.py): ``--steps`` updates per arm and seed; the same samples per step for
every arm (``control.max_samples_per_step`` = tasks_per_step x group_size, which leaves refills, where dynamic
sampling is turned on, nothing to spend); ``--max-minutes`` a safety net flagged if it binds; decodings at
``eval.token_budget`` completion tokens per task, which best-of-n never exceeds.
Every arm and seed is a fresh run of the checked-out code unless ``--reuse`` keeps one finished earlier with the
same command on the same code (bench/runs.py). ``--seeds`` training seeds, one held-out set of at least ``--heldout``
problems for all.

    python bench/rest_rl.py                          # 40 steps, 3 seeds, 201 held-out problems
    python bench/rest_rl.py --steps 10 --heldout 60 --oracle
    python bench/rest_rl.py --training-only --rest-dpo  # the training arms alone: rest_vs_grpo, rest_dpo_vs_grpo
    python bench/rest_rl.py --training-only --demonstrations --memory --steps 20 --heldout 200 --parallel
    python bench/rest_rl.py --training-only --no-rest --process-reward VALUE_DIR --steps 20 --heldout 200 --parallel
Prints a row per arm and seed, writes bench/results/rest_rl-*.json and, last, the comparison lines:
rest_vs_grpo (greedy), rest_dpo_vs_grpo with --rest-dpo, demonstrations_vs_grpo with --demonstrations,
process_reward_vs_grpo with --process-reward, answer_stop_vs_grpo with --answer-stop, memory_vs_grpo with --memory,
memory_replay_vs_grpo and memory_replay_weights_vs_grpo with --memory-replay, tree_vs_grpo with --tree,
best_of_n_vs_greedy, vm_mcts_vs_greedy and with --prm
prm_best_of_n_vs_greedy (on the rest runs), vm_mcts_vs_best_of_n (the same runs at the same token budget),
oracle_vs_greedy with --oracle (best-of-n picked by the hidden tests: the headroom a perfect value model would
have). --prm and --oracle pick again among the candidates the run's best-of-n sampled (``evaluation.reselect``):
the three selections compare on the same samples, and cost no decoding. ``--training-only`` leaves the rest arm's
value model and decodings out (``value.enabled=false``): only the training comparisons, without the VM-MCTS stage
that takes longer than training on a CPU; with ``--no-rest`` also the rest arm itself, when only the strategies
against grpo are asked for. bench/decoding.py compares the decodings alone on one fixed policy, over
seeds of the value model and of sampling.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from runs import (Arm, ArmRun, Budget, Measure, add_budget_arguments, arm_config, budget_from, compare, heldout_of,
                  report, run_arms, runs_dir_from, runs_of)
from strategies import TREE, demonstrations

from autotelic.evaluation import reselect
from autotelic.tasks.code import CLOSED_CODE_BLOCK
from autotelic.run_log import write_jsonl
from autotelic.value_model import ValueModel, value_model_problem

RECIPE = Path(__file__).resolve().parent.parent / "recipes" / "rest-rl-code.yaml"
NO_VALUE = "value.enabled=false"
REMEMBERED = "eval_after_memory"  # the grpo arm's held-out answers with its memory's examples in the prompt
# the recipe ships guided rollouts since they beat grpo here (gd8); every other arm keeps them off, as when measured
NO_HINTS = "curriculum.hints.fraction=0"
PLAIN_GRPO = ("curriculum.prefixes.fraction=0", "filter.min_reward_std=0", "filter.dynamic_sampling=false",
              NO_VALUE)
ARMS = (Arm("grpo", (*PLAIN_GRPO, NO_HINTS), RECIPE),
        Arm("rest", (NO_HINTS,), RECIPE))
REST_DPO = Arm("rest_dpo", ("algorithm.name=online_dpo", *PLAIN_GRPO, NO_HINTS), RECIPE)
# code tasks are guided by their reference function in a ```python block, as their instruction asks a reply to be
GUIDED = Arm("demonstrations", (*PLAIN_GRPO, *demonstrations("solution"), "curriculum.hints.max_reward=0.9"),
             RECIPE)
ANSWER_STOP = Arm("answer_stop", (*ARMS[0].overrides, f"control.stop_pattern='{CLOSED_CODE_BLOCK}'"), RECIPE)
REMEMBERS = "curriculum.memory.at_eval=true"
MEMORY_REPLAY = Arm("memory_replay", (*ARMS[0].overrides, "curriculum.memory.fraction=0.5", REMEMBERS), RECIPE)
# group_size 4 and 4 branches on top of it: with_sample_budget's cap of 6 x 4 leaves grpo's 48 samples a step
TREES = Arm("tree", (*ARMS[0].overrides, *TREE), RECIPE)
PROCESS_WEIGHT = 0.15  # of the value model's score beside the unit tests' (the docstring says why)


def process_reward(value_dir: Path) -> Arm:
    rewards = (f"filter.rewards=[{{name: unit_tests}}, {{name: process_value, weight: {PROCESS_WEIGHT}, "
               f"options: {{model: {value_dir.resolve()}}}}}]")
    return Arm("process_reward", (*ARMS[0].overrides, rewards), RECIPE)


def with_sample_budget(arm: Arm, budget: Budget) -> Arm:
    """The arm generating exactly tasks_per_step x group_size samples a step, as plain GRPO does: refills (dynamic
    sampling, which the recipe no longer turns on) would find no budget left, so ReST-GRPO drops its low-spread
    groups and trains on the rest, as the paper's does. (A token cap of tasks x group x max_new_tokens let the
    refills spend what GRPO's shorter answers left: 12-54% more samples a step, and more groups trained, than the
    arm it was compared with.)"""
    config = arm_config(arm, budget)
    samples = config.control.tasks_per_step * config.generate.group_size
    return Arm(arm.name, (*arm.overrides, f"control.max_samples_per_step={samples}"), arm.recipe, arm.label)


def reselected(run: ArmRun, budget: Budget, select_by: str, name: str) -> dict[str, float]:
    """The run's best-of-n candidates picked again by ``select_by`` (the hidden tests for the oracle, the run's value
    model read as a PRM for process_value): the same samples as its ORM pick, written to ``eval_after_<name>.jsonl``."""
    records = [json.loads(line) for line in (run.run_dir / "eval_after_best_of_n.jsonl").read_text().splitlines()]
    value_model = None if select_by == "verifier" else ValueModel.load(run.run_dir / "value_model")
    result = reselect(heldout_of(run.arm, budget), records, select_by, value_model)
    write_jsonl(run.run_dir / f"eval_after_{name}.jsonl", result.records)
    return {f"{name}_accuracy": result.accuracy, f"{name}_tokens_per_task": result.tokens_per_task}


def decodings(run: ArmRun) -> dict[str, float]:
    """The rest arm's decodings: accuracy and completion tokens per task of each."""
    found = run.summary()["value"]["decodings"]
    return {f"{name}_{key}": result[key] for name, result in found.items() for key in ("accuracy", "tokens_per_task")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--oracle", action="store_true", help="also best-of-n picked by the hidden tests")
    parser.add_argument("--rest-dpo", action="store_true", help="also the ReST-DPO baseline arm")
    parser.add_argument("--demonstrations", action="store_true",
                        help="also the grpo arm with guided rollouts by demonstration")
    parser.add_argument("--answer-stop", action="store_true",
                        help="also the grpo arm with each reply ended at its first closed code block")
    parser.add_argument("--memory", action="store_true", help="also evaluate the grpo arm with its memory")
    parser.add_argument("--memory-replay", action="store_true",
                        help="also the grpo arm with memory replay in training, evaluated with its memory and without")
    parser.add_argument("--tree", action="store_true",
                        help="also the grpo arm with tree rollouts of two levels of branch points (8 samples a group)")
    parser.add_argument("--process-reward", type=Path, default=None, metavar="VALUE_DIR",
                        help="also the grpo arm with this value model's process reward beside the unit tests")
    # the value model's score of every step of every candidate, in this process once all runs end
    parser.add_argument("--prm", action="store_true", help="also best-of-n picked by the value model read as a PRM")
    parser.add_argument("--training-only", action="store_true",
                        help="only the training comparisons: no value model or decodings for the rest arm")
    parser.add_argument("--no-rest", action="store_true",
                        help="with --training-only: leave the rest arm out (only the strategies against grpo)")
    add_budget_arguments(parser, steps=40, max_minutes=90.0, heldout=200)
    args = parser.parse_args()
    if args.training_only and (args.prm or args.oracle):
        parser.error("--prm and --oracle pick among the rest arm's best-of-n answers, which --training-only leaves "
                     "out; drop one of them")
    if args.no_rest and not args.training_only:
        parser.error("--no-rest leaves out the arm whose value model the decodings use: add --training-only")
    budget = budget_from(args)
    rest = Arm("rest", (*ARMS[1].overrides, NO_VALUE), RECIPE) if args.training_only else ARMS[1]
    grpo = Arm("grpo", (*ARMS[0].overrides, REMEMBERS), RECIPE) if args.memory else ARMS[0]
    if args.process_reward is not None and (problem := value_model_problem(args.process_reward)) is not None:
        parser.error(f"--process-reward {args.process_reward}: {problem}")
    process = [process_reward(args.process_reward)] if args.process_reward is not None else []
    arms = [with_sample_budget(arm, budget) for arm in (grpo, *([GUIDED] if args.demonstrations else []), *process,
                                                        *([ANSWER_STOP] if args.answer_stop else []),
                                                        *([MEMORY_REPLAY] if args.memory_replay else []),
                                                        *([TREES] if args.tree else []),
                                                        *([] if args.no_rest else [rest]),
                                                        *([REST_DPO] if args.rest_dpo else []))]
    runs = run_arms(arms, budget, runs_dir_from(args, "rest-rl"))
    trained = {arm.name: runs_of(runs, arm) for arm in arms}
    against_grpo = [name for name in ("rest", "rest_dpo", "demonstrations", "process_reward", "answer_stop", "tree")
                    if name in trained]
    training = [*(compare(f"{name}_vs_grpo", Measure(trained["grpo"]), Measure(trained[name]))
                  for name in against_grpo),
                *([compare("memory_vs_grpo", Measure(trained["grpo"]), Measure(trained["grpo"], REMEMBERED))]
                  if args.memory else []),
                *([compare("memory_replay_vs_grpo", Measure(trained["grpo"]),
                           Measure(trained["memory_replay"], REMEMBERED)),
                   compare("memory_replay_weights_vs_grpo", Measure(trained["grpo"]),
                           Measure(trained["memory_replay"]))]
                  if args.memory_replay else [])]
    if args.training_only:
        report("rest_rl", runs, training, budget, args.results_dir, {}, {"training_only": True})
        return
    selections = [*([("process_value", "prm_best_of_n")] if args.prm else []),
                  *([("verifier", "oracle")] if args.oracle else [])]
    extra = {(run.arm.name, run.seed): decodings(run) for run in trained["rest"]}
    for run in trained["rest"]:
        for select_by, name in selections:
            extra[(run.arm.name, run.seed)].update(reselected(run, budget, select_by, name))
    greedy = Measure(trained["rest"])
    comparisons = [*training,
                   *[compare(f"{name}_vs_greedy", greedy, Measure(trained["rest"], f"eval_after_{name}"))
                     for name in ("best_of_n", "vm_mcts", *(name for _, name in selections))],
                   # the comparison: the tree search against sampling at the same token budget per task
                   compare("vm_mcts_vs_best_of_n", Measure(trained["rest"], "eval_after_best_of_n"),
                           Measure(trained["rest"], "eval_after_vm_mcts"))]
    report("rest_rl", runs, comparisons, budget, args.results_dir, extra,
           {"token_budget": arm_config(rest, budget).eval.token_budget})


if __name__ == "__main__":
    main()
