"""Self-evolution, measured rather than assumed: for each self-evolution recipe, held-out accuracy before
training, after it, and after the same budget of the recipe's no-evolution ablation.

Arms (each recipe as shipped in recipes/, then its ablation with the same steps and minutes):
- eva: prompts evolved by the policy (creator) vs a fixed prompt pool (curriculum.evolve.every=0);
- ttrl: majority vote plus EVOL-RL's novelty bonus vs majority vote alone (TTRL), both label-free;
- comas: several agents discussing, graded by each other, vs a single agent playing every role;
- agent0: tasks proposed by the policy (curriculum agent) vs no creator: the executor trained by majority
  vote on fixed family prompts;
- spiral: self-play against the evolving policy itself vs a fixed opponent (the frozen base policy).

Held-out tasks always carry ground truth, read only for the accuracy. A recipe's two arms run at the same
time, each in its own process on one core, so both see the same machine; ``--steps`` binds the budget (the
same number of updates for both arms), ``--minutes`` caps each arm's training time.

    python bench/self_evolution.py                         # every recipe, 20 steps, 10 minutes cap per arm
    python bench/self_evolution.py --recipes eva ttrl --steps 10
Prints a table and, last, ``evolution_gain_points=X`` (mean over recipes of recipe minus ablation, points).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from runs import launch  # bench/runs.py: this script's directory is on sys.path

RECIPES = Path(__file__).resolve().parent.parent / "recipes"
ABLATIONS: dict[str, tuple[str, list[str]]] = {
    "eva": ("fixed prompt pool", ["curriculum.evolve.every=0"]),
    "ttrl": ("majority vote alone", ["filter.rewards=[{name: majority_vote}]"]),
    "comas": ("single agent", ["discussion.agents=1"]),
    "agent0": ("no creator", ["generate.mode=sample", "generate.group_size=8", "filter.rewards=[{name: majority_vote}]",
                              "filter.pass_rate_band=[0.3, 0.8]"]),
    "spiral": ("fixed opponent", ["generate.opponent=frozen"]),
}


def accuracy_of(summary: dict) -> tuple[float, float]:
    return summary["eval_before"]["accuracy"], summary["eval_after"]["accuracy"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", nargs="+", default=list(ABLATIONS), choices=list(ABLATIONS))
    parser.add_argument("--steps", type=int, default=20, help="training steps per arm")
    parser.add_argument("--minutes", type=float, default=10.0, help="training minutes per arm at most")
    parser.add_argument("--runs-dir", type=Path, default=None, help="keep the runs here")
    parser.add_argument("--reuse", action="store_true", help="keep arms already finished in --runs-dir")
    parser.add_argument("overrides", nargs="*", help="extra config overrides for every arm")
    args = parser.parse_args()
    runs_dir = args.runs_dir or Path(tempfile.mkdtemp(prefix="self-evolution-"))
    runs_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for recipe in args.recipes:
        label, ablation = ABLATIONS[recipe]
        arms = {recipe: [], f"{recipe}-ablation": ablation}
        running = {}
        for arm, overrides in arms.items():
            if args.reuse and (runs_dir / arm / "summary.json").is_file():
                print(f"{arm}: reusing {runs_dir / arm}", flush=True)
            else:
                running[arm] = launch(arm, overrides + args.overrides, runs_dir, args.minutes, 1,
                                      RECIPES / f"{recipe}.yaml", steps=args.steps)
        failed = [arm for arm, process in running.items() if process.wait() != 0]
        if failed:
            sys.exit(f"arm {failed[0]} failed: see {runs_dir / (failed[0] + '.log')}")
        summaries = {arm: json.loads((runs_dir / arm / "summary.json").read_text()) for arm in arms}
        for arm, summary in summaries.items():
            print(f"{arm}: {summary['steps']} steps, {summary['train_seconds'] / 60:.1f} training minutes", flush=True)
        before, after = accuracy_of(summaries[recipe])
        _, ablated = accuracy_of(summaries[f"{recipe}-ablation"])
        rows.append((recipe, label, summaries[recipe]["heldout_tasks"], before, after, ablated))
    print(f"\n{'recipe':8s} {'held-out':>8s} {'before':>7s} {'after':>7s} {'ablation':>9s}  ablation arm")
    for recipe, label, tasks, before, after, ablated in rows:
        print(f"{recipe:8s} {tasks:8d} {before:7.1%} {after:7.1%} {ablated:9.1%}  {label}")
    print(f"runs in {runs_dir}")
    gain = 100 * sum(after - ablated for *_, after, ablated in rows) / len(rows)
    print(f"evolution_gain_points={gain:.1f}")


if __name__ == "__main__":
    main()
