"""The GFCR strategies one at a time against the same run without them, at equal budgets: does each help?

Both arms are the default recipe (embedded SmolLM2-135M, full fine-tuning, its task mix, reward and held-out
set); the strategy arm adds one option:
- memory:        skill/memory replay (``curriculum.memory.fraction=0.5``): solved problems with the policy's own
                 answers as worked examples before half of each step's questions;
- stop_repeats:  early stop inside a trajectory (``control.stop_repeats=4``): a sample ends once it loops;
- tree:          tree rollouts with two levels of branch points (``generate.mode=tree tree.depth=2``) from
                 4 roots a task (``TREE``: 8 samples a task at most, as the baseline's 8 independent ones);
- demonstrations: guided rollouts by demonstration (``curriculum.hints``: LUFFY's off-policy guidance): a task
                 whose whole group failed comes back with its answer as one of its 8 samples, half of each
                 step's tasks at first, a share that shrinks by a tenth every step;
- stuck_demonstrations: the same, only for the families stuck at zero (``curriculum.hints.stuck_window=8``: none of
                 the family's last 8 unguided groups solved, about four steps of its groups).
- memory_eval:   memory replay as above, and the trained policy evaluated as an agent that keeps its memory
                 (``curriculum.memory.at_eval``): each held-out question served with its 2 nearest solved training
                 problems. Compared on those answers (``eval_after_memory.jsonl``) against the arm without, and
                 against its own weights-only answers (``memory_eval_vs_its_weights``: the same runs, paired).
Budgets bind the same way: ``--steps`` updates per arm and seed, at most the baseline's completion tokens and
samples per step (``control.max_tokens_per_step``, ``max_samples_per_step``: tasks_per_step x group_size x
max_new_tokens, and tasks_per_step x group_size), ``--max-minutes`` a safety net flagged if it binds;
``--seeds`` training seeds, one held-out set of at least ``--heldout`` tasks for every arm (bench/runs.py).
Prints a row per arm and seed, writes bench/results/strategies-*.json, and last one line per strategy:
``<strategy>_vs_without: gain_points=X ci95=[lo, hi] ...`` (with minus without, in points).

    python bench/strategies.py --strategies memory --steps 30 --parallel
    python bench/strategies.py --strategies memory stop_repeats tree --steps 20 --seeds 3 --parallel
    python bench/strategies.py --strategies demonstrations --steps 20 --seeds 5 --heldout 200 --parallel
    python bench/strategies.py --strategies stuck_demonstrations --steps 20 --seeds 5 --heldout 200 --parallel
    python bench/strategies.py --strategies memory_eval --steps 20 --seeds 3 --heldout 200 --parallel
"""

from __future__ import annotations

import argparse

from runs import (Arm, Measure, add_budget_arguments, arm_config, budget_from, compare, report, run_arms, runs_dir_from,
                  runs_of)

# 4 roots, 2 of them branched once, those 2 branches branched once again: 8 samples a task at most, as the
# baseline's generate.group_size (tree branches come on top of max_samples_per_step, so the shape keeps them equal)
TREE = ("generate.mode=tree", "generate.group_size=4", "tree.branches=2", "tree.branch_samples=1", "tree.depth=2")


def demonstrations(column: str) -> tuple[str, ...]:
    """Guided rollouts by demonstration from the tasks' ``column`` (the arithmetic answer, a code task's reference
    function), half of a step's failed tasks at first."""
    return "curriculum.hints.fraction=0.5", "curriculum.hints.mode=demonstration", f"curriculum.hints.column={column}"


DEMONSTRATIONS = demonstrations("answer")
STRATEGIES: dict[str, tuple[str, ...]] = {
    "memory": ("curriculum.memory.fraction=0.5",),
    "stop_repeats": ("control.stop_repeats=4",),
    "tree": TREE,
    "demonstrations": DEMONSTRATIONS,
    "stuck_demonstrations": (*DEMONSTRATIONS, "curriculum.hints.stuck_window=8"),
    "memory_eval": ("curriculum.memory.fraction=0.5", "curriculum.memory.at_eval=true"),
}
RECORDS = {"memory_eval": "eval_after_memory"}  # a strategy scored on other answers than the weights' alone


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES), choices=list(STRATEGIES))
    add_budget_arguments(parser, steps=30, max_minutes=60.0, heldout=200)
    args = parser.parse_args()
    budget = budget_from(args)
    config = arm_config(Arm("without"), budget)
    samples = config.control.tasks_per_step * config.generate.group_size
    caps = {"max_samples_per_step": samples, "max_tokens_per_step": samples * config.control.max_new_tokens}
    capped = tuple(f"control.{key}={cap}" for key, cap in caps.items())
    arms = [Arm("without", capped), *(Arm(name, (*capped, *STRATEGIES[name])) for name in args.strategies)]
    runs = run_arms(arms, budget, runs_dir_from(args, "strategies"))
    arm_runs = {arm.name: runs_of(runs, arm) for arm in arms}
    without = Measure(arm_runs["without"])
    comparisons = [compare(f"{name}_vs_without", without, Measure(arm_runs[name], RECORDS.get(name, "eval_after")))
                   for name in args.strategies]
    comparisons += [compare(f"{name}_vs_its_weights", Measure(arm_runs[name]), Measure(arm_runs[name], records))
                    for name, records in RECORDS.items() if name in args.strategies]
    report("strategies", runs, comparisons, budget, args.results_dir, summary=caps)


if __name__ == "__main__":
    main()
