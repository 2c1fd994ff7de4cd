"""Scale-out on one machine: does the default recipe learn the same on Ray rollout workers, and what do the
workers and asynchronous rollouts cost or save per step?

Three arms of the default recipe (embedded SmolLM2-135M, full fine-tuning GRPO), one after the other with
every core (the actors need them: no --parallel):
- in_process: generation, scoring and the update in one process (the peer);
- ray:        rollouts on ``--workers`` Ray actors, weights published after every update;
- ray_async:  the same with ``dist.async_steps=1`` and the decoupled off-policy loss.
Budgets bind the same way (bench/runs.py): ``--steps`` updates per arm and seed with the recipe's samples
per step, ``--max-minutes`` a safety net flagged if it binds; ``--seeds`` training seeds, one held-out set of
at least ``--heldout`` tasks for all. Each row has the arm's seconds per step (median and spread, the first
step left out as warm-up). On 2 CPU cores the actors compete with the update for the same cores: step times
there measure overhead, not the speed-up a GPU machine gets.

    python bench/dist_learning.py                  # 30 steps, 3 seeds, 204 held-out tasks
    python bench/dist_learning.py --steps 10 --heldout 96
Prints a row per arm and seed and the step times, writes bench/results/dist_learning-*.json and, last, the
comparison lines ray_vs_in_process and ray_async_vs_in_process (held-out accuracy, points).
"""

from __future__ import annotations

import argparse
import json

import stats
from runs import (Arm, ArmRun, Measure, add_budget_arguments, budget_from, compare, report, run_arms, runs_dir_from,
                  runs_of)


def arms(workers: int) -> tuple[Arm, Arm, Arm]:
    ray = (f"dist.rollout_workers={workers}",)
    return (Arm("in_process"), Arm("ray", ray),
            Arm("ray_async", (*ray, "dist.async_steps=1", "algorithm.off_policy=decoupled")))


def step_times(run: ArmRun) -> stats.Timing:
    rows = [json.loads(line) for line in (run.run_dir / "metrics.jsonl").read_text().splitlines()]
    return stats.timing([r["time/step"] for r in rows if "time/step" in r][1:] or [float("nan")])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="Ray rollout actors")
    add_budget_arguments(parser, steps=30, max_minutes=60.0, heldout=200)
    args = parser.parse_args()
    if args.parallel:
        parser.error("the Ray arms need every core: no --parallel")
    budget = budget_from(args)
    peer, ray, ray_async = arms(args.workers)
    runs = run_arms([peer, ray, ray_async], budget, runs_dir_from(args, "dist"))
    times = {(run.arm.name, run.seed): {"seconds_per_step": step_times(run)} for run in runs}
    for (arm, seed), row in times.items():
        timing = row["seconds_per_step"]
        print(f"{arm:10s} seed {seed}: median {timing['median']:.1f} s/step (q1 {timing['q1']:.1f}, "
              f"q3 {timing['q3']:.1f}, n {timing['n']})")
    of = {arm.name: Measure(runs_of(runs, arm)) for arm in (peer, ray, ray_async)}
    report("dist_learning", runs, [compare("ray_vs_in_process", of["in_process"], of["ray"]),
                                   compare("ray_async_vs_in_process", of["in_process"], of["ray_async"])],
           budget, args.results_dir, times, {"workers": args.workers})


if __name__ == "__main__":
    main()
