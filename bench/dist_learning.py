"""Scale-out on one machine: does the default recipe learn the same on Ray rollout workers, and what
do the workers and asynchronous rollouts cost or save per step?

Three arms of the default recipe (embedded SmolLM2-135M, full fine-tuning GRPO, same seed, same
192-task held-out set, the same number of steps), one after the other:
- in_process: generation, scoring and the update in one process (the peer);
- ray:        rollouts on ``--workers`` Ray actors, weights published after every update;
- ray_async:  the same with ``dist.async_steps=1`` and the decoupled off-policy loss.
Prints each arm's held-out accuracy before and after and its seconds per step, then ratios against
in_process: ``accuracy_ratio_ray=X accuracy_ratio_async=Y step_time_ratio_ray=Z step_time_ratio_async=W``.
On 2 CPU cores the actors compete with the update for the same cores: the step-time ratios there
measure overhead, not the speed-up a GPU machine gets.

    python bench/dist_learning.py                  # 30 steps per arm, ~20 min on 2 cores
    python bench/dist_learning.py --steps 60       # the recipe's full length
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from runs import launch  # bench/runs.py: this script's directory is on sys.path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="training steps per arm")
    parser.add_argument("--workers", type=int, default=2, help="Ray rollout actors")
    parser.add_argument("--minutes", type=float, default=30.0, help="cap on training minutes per arm")
    parser.add_argument("--runs-dir", type=Path, default=None, help="keep the runs here")
    args = parser.parse_args()
    ray = [f"dist.rollout_workers={args.workers}"]
    arms = {"in_process": [], "ray": ray, "ray_async": [*ray, "dist.async_steps=1", "algorithm.off_policy=decoupled"]}
    runs_dir = args.runs_dir or Path(tempfile.mkdtemp(prefix="autotelic-dist-"))
    runs_dir.mkdir(parents=True, exist_ok=True)
    results = {}
    for name, overrides in arms.items():
        if launch(name, overrides, runs_dir, args.minutes, None, steps=args.steps).wait() != 0:
            sys.exit(f"arm {name} failed: see {runs_dir / (name + '.log')}")
        summary = json.loads((runs_dir / name / "summary.json").read_text())
        rows = [json.loads(line) for line in (runs_dir / name / "metrics.jsonl").read_text().splitlines()]
        step_times = [r["time/step"] for r in rows if "time/step" in r][1:]  # the first step warms up
        results[name] = {"before": summary["eval_before"]["accuracy"], "after": summary["eval_after"]["accuracy"],
                         "steps": summary["steps"], "seconds_per_step": statistics.median(step_times)}
        print(f"{name:>10}: held-out {results[name]['before']:.1%} -> {results[name]['after']:.1%} "
              f"in {summary['steps']} steps, median {results[name]['seconds_per_step']:.1f} s/step", flush=True)
    peer = results["in_process"]
    print(f"runs in {runs_dir}")
    print(" ".join(f"accuracy_ratio_{name}={results[arm]['after'] / max(peer['after'], 1e-9):.2f}"
                   for name, arm in (("ray", "ray"), ("async", "ray_async"))),
          " ".join(f"step_time_ratio_{name}={results[arm]['seconds_per_step'] / peer['seconds_per_step']:.2f}"
                   for name, arm in (("ray", "ray"), ("async", "ray_async"))))


if __name__ == "__main__":
    main()
