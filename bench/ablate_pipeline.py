"""Ablation of the rollout pipeline at equal budgets: does dynamic sampling + a bandit curriculum beat plain
GRPO with uniform task sampling on the default CPU recipe?

Both arms are the default recipe (embedded SmolLM2-135M, full fine-tuning):
- plain:    GRPO on every group (zero-variance ones included, as TRL does), tasks drawn uniformly
            over family x level;
- pipeline: GRPO with DAPO dynamic sampling (zero-variance groups dropped, the batch refilled) and
            the Self-Evolving-Curriculum bandit over family x level.
Budgets bind the same way: ``--steps`` updates per arm and seed, and the same generation budget per step,
``--budget tokens`` (the default: ``control.max_tokens_per_step`` = tasks_per_step x group_size x max_new_tokens, so
dynamic sampling refills only within what plain GRPO may spend; shorter completions leave room for more samples)
or ``--budget samples`` (``control.max_samples_per_step`` = tasks_per_step x group_size as well: the same samples
per step, so the pipeline can drop groups but refill none); ``--max-minutes`` is a safety net, flagged if it binds. ``--seeds``
training seeds per arm, one held-out set of at least ``--heldout`` tasks for all (bench/runs.py).
Measures each arm's held-out accuracy; prints a row per arm and seed, writes bench/results/ablate_pipeline-*.json,
and last ``pipeline_vs_plain: gain_points=X ci95=[lo, hi] ...`` (pipeline minus plain, in points).

    python bench/ablate_pipeline.py                          # 40 steps, 3 seeds, 204 held-out tasks
    python bench/ablate_pipeline.py --steps 10 --seeds 3 --parallel
    python bench/ablate_pipeline.py --steps 10 --parallel --budget samples
"""

from __future__ import annotations

import argparse

from runs import (Arm, Measure, add_budget_arguments, arm_config, budget_from, compare, report, run_arms, runs_dir_from,
                  runs_of)

ARMS = (Arm("plain", ("curriculum.name=uniform", "filter.drop_zero_variance=false")),
        Arm("pipeline", ("curriculum.name=sec", "filter.drop_zero_variance=true", "filter.dynamic_sampling=true")))


def with_caps(arm: Arm, caps: dict[str, int]) -> Arm:
    return Arm(arm.name, (*arm.overrides, *(f"control.{key}={cap}" for key, cap in caps.items())), arm.recipe,
               arm.label)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", choices=("tokens", "samples"), default="tokens",
                        help="what both arms spend equally per step: completion tokens, or samples too")
    add_budget_arguments(parser, steps=40, max_minutes=60.0, heldout=200)
    args = parser.parse_args()
    budget = budget_from(args)
    config = arm_config(ARMS[0], budget)
    samples = config.control.tasks_per_step * config.generate.group_size
    caps = {"max_tokens_per_step": samples * config.control.max_new_tokens}
    if args.budget == "samples":
        caps["max_samples_per_step"] = samples
    plain, pipeline = (with_caps(arm, caps) for arm in ARMS)
    runs = run_arms([plain, pipeline], budget, runs_dir_from(args, "ablate"))
    comparison = compare("pipeline_vs_plain", Measure(runs_of(runs, plain)), Measure(runs_of(runs, pipeline)))
    report("ablate_pipeline", runs, [comparison], budget, args.results_dir, summary={"budget": args.budget, **caps})


if __name__ == "__main__":
    main()
