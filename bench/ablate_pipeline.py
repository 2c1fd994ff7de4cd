"""Ablation of the rollout pipeline at equal wall-clock: does dynamic sampling + a bandit curriculum
beat plain GRPO with uniform task sampling on the default CPU recipe?

Both arms are the default recipe (embedded SmolLM2-135M, full fine-tuning, same seed, same held-out
set of 192 tasks) with the same training-time budget (``train.max_minutes``; the step cap is set
high so time is what binds):
- plain:    GRPO on every group (zero-variance ones included, as TRL does), tasks drawn uniformly
            over family x level;
- pipeline: GRPO with DAPO dynamic sampling (zero-variance groups dropped, the batch refilled) and
            the Self-Evolving-Curriculum bandit over family x level.
The arms run one after the other with every core (``--parallel``: side by side, one thread each,
about a third of the compute per arm). Prints both held-out accuracies and, last,
``gain_points=X`` (pipeline minus plain, in points).

    python bench/ablate_pipeline.py                 # 12 training minutes per arm, ~28 min in all
    python bench/ablate_pipeline.py --minutes 6     # quicker, noisier
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from runs import launch  # bench/runs.py: this script's directory is on sys.path

ARMS = {
    "plain": ["curriculum.name=uniform", "filter.drop_zero_variance=false"],
    "pipeline": ["curriculum.name=sec", "filter.drop_zero_variance=true", "filter.dynamic_sampling=true"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=12.0, help="training minutes per arm")
    parser.add_argument("--parallel", action="store_true", help="both arms at once, one thread each")
    parser.add_argument("--runs-dir", type=Path, default=None, help="keep the two runs here")
    args = parser.parse_args()
    runs_dir = args.runs_dir or Path(tempfile.mkdtemp(prefix="ablate-"))
    runs_dir.mkdir(parents=True, exist_ok=True)
    if args.parallel:
        processes = {name: launch(name, overrides, runs_dir, args.minutes, threads=1) for name, overrides in ARMS.items()}
    else:
        processes = {}
        for name, overrides in ARMS.items():
            processes[name] = launch(name, overrides, runs_dir, args.minutes, threads=None)
            processes[name].wait()
    for name, process in processes.items():
        if process.wait() != 0:
            sys.exit(f"arm {name} failed: see {runs_dir / (name + '.log')}")
    results = {}
    for name in ARMS:
        summary = json.loads((runs_dir / name / "summary.json").read_text())
        results[name] = summary
        print(f"{name:9s} held-out {summary['eval_before']['accuracy']:.1%} -> {summary['eval_after']['accuracy']:.1%}"
              f"  ({summary['steps']} steps in {summary['train_seconds'] / 60:.1f} training min, "
              f"{summary['completion_tokens']} completion tokens)")
    gain = 100 * (results["pipeline"]["eval_after"]["accuracy"] - results["plain"]["eval_after"]["accuracy"])
    print(f"runs in {runs_dir}")
    print(f"gain_points={gain:.1f}")


if __name__ == "__main__":
    main()
