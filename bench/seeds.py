"""The spread of a recipe over training seeds (issue #89): does every seed learn, and where do they part?

Runs a recipe as shipped (default: recipes/default.yaml) on ``--seeds`` training seeds (``train.seed`` from
``--first-seed``), ``--at-once`` at a time, each pinned to its share of the cores with one torch thread per core
(two at once on two cores: one core and one thread each). Nothing that changes learning is overridden: only the
checkpoint cadence (checkpoints serve a resume, and each run's are deleted as it ends) and the export (no model is
kept). Extra overrides after the options apply to every seed, for a variant of the recipe.

Per seed it reads back:
- held-out accuracy at the recipe's evaluation points (before, every ``eval.every`` steps, after), and after
  training by family and by level;
- training minutes, the steps reached, and whether the time cap (``train.max_minutes``) bound first;
- the bare-answer share of the held-out answers, before and after: answers holding exactly one integer. The
  numeric families' strict verifiers read an answer's first integer (``text.first_integer``), so "To solve this,
  3 + 4 = 7" is read as 3, and "The answer is: 7" as 7: a seed whose answers keep their working is marked wrong;
- the curriculum mix: each arm's mean draw share over the first ``EARLY_STEPS`` steps and over the whole run
  (``curriculum/share/*``), and the mean training reward over the first and the last ``EARLY_STEPS`` steps.
The artifact (bench/results/seeds-*.json) names the split the accuracy is measured on and summarises the final
accuracy over the seeds: the worst, the median, the mean, the SD, and the share of seeds within 5 points of the
median (the issue's targets: worst >= 55%, SD <= 5 points, median >= 70%).

    python bench/seeds.py --seeds 8
    python bench/seeds.py --seeds 8 --runs-dir /work/bench-runs/seeds --reuse   # a bench finished over sessions
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import artifacts  # bench/artifacts.py: the importing script's directory is on sys.path
from runs import Arm, ArmRun, core_sets, finished_earlier, run_commands, runs_dir_from

from autotelic.loading import load_config
from autotelic.recipes import find_recipe
from autotelic.text import integers
from autotelic.types import SHARE_PREFIX

ARM = "recipe"
EARLY_STEPS = 10
NEAR_MEDIAN = 0.05  # "within 5 points of the median"


def seed_command(recipe: Path, seed: int, runs_dir: Path, threads: int, overrides: list[str]) -> list[str]:
    """``autotelic run`` of the recipe at ``train.seed=seed``, as shipped but for checkpoints and the export."""
    return [sys.executable, "-m", "autotelic.cli", "run", "--config", str(recipe), *overrides, f"train.seed={seed}",
            f"model.threads={threads}", "train.checkpoint_every=100000", "train.export_model=false",
            "logging.progress=false", f"logging.runs_dir={runs_dir}",
            f"logging.run_name={artifacts.run_name(ARM, seed)}"]


def bare_answer_share(records: list[dict[str, Any]]) -> float:
    """The share of answers holding one integer, however often written (the form the numeric verifiers read
    whole)."""
    bare = [len(set(integers(r["completion"]))) == 1 for r in records]
    return sum(bare) / max(1, len(bare))


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def curriculum_mix(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Each arm's mean draw share over ``rows`` (steps without a share for an arm count as 0)."""
    totals: dict[str, float] = defaultdict(float)
    for row in rows:
        for key, value in row.items():
            if key.startswith(SHARE_PREFIX):
                totals[key.removeprefix(SHARE_PREFIX)] += value
    return {arm: round(total / max(1, len(rows)), 3) for arm, total in sorted(totals.items())}


def mean_reward(rows: list[dict[str, Any]]) -> float | None:
    rewards = [row["reward/mean"] for row in rows if "reward/mean" in row]
    return round(sum(rewards) / len(rewards), 4) if rewards else None


def seed_details(run: ArmRun) -> dict[str, Any]:
    """What the bench reads beyond ``ArmRun.row``: the accuracy curve, the answers' form, the curriculum mix."""
    summary = run.summary()
    steps = [row for row in _jsonl(run.run_dir / "metrics.jsonl") if "reward/mean" in row]
    return {"evals": summary["evals"], "by_family_after": summary["eval_after"]["by_family"],
            "by_level_after": summary["eval_after"]["by_level"],
            "bare_answer_share_before": round(bare_answer_share(_jsonl(run.run_dir / "eval_before.jsonl")), 4),
            "bare_answer_share_after": round(bare_answer_share(_jsonl(run.run_dir / "eval_after.jsonl")), 4),
            "curriculum_early": curriculum_mix(steps[:EARLY_STEPS]), "curriculum_whole": curriculum_mix(steps),
            "reward_early": mean_reward(steps[:EARLY_STEPS]), "reward_late": mean_reward(steps[-EARLY_STEPS:])}


def spread(accuracies: list[float]) -> dict[str, float]:
    """The final accuracy over the seeds, in points: worst, median, mean, SD, and the share near the median."""
    median = statistics.median(accuracies)
    return {"worst": round(100 * min(accuracies), 1), "median": round(100 * median, 1),
            "mean": round(100 * statistics.fmean(accuracies), 1),
            "sd": round(100 * statistics.stdev(accuracies), 1) if len(accuracies) > 1 else 0.0,
            "within_5_of_median": round(sum(abs(a - median) <= NEAR_MEDIAN + 1e-9 for a in accuracies)
                                        / len(accuracies), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", type=find_recipe, default="default", help="the recipe as shipped: a name or a path")
    parser.add_argument("--seeds", type=int, default=8, help="training seeds")
    parser.add_argument("--first-seed", type=int, default=0, help="the first train.seed")
    parser.add_argument("--at-once", type=int, default=2, help="runs side by side, each pinned to its cores")
    parser.add_argument("--runs-dir", type=Path, default=None, help="keep the runs here (default: a temp dir)")
    parser.add_argument("--results-dir", type=Path, default=artifacts.RESULTS, help="where the artifact goes")
    parser.add_argument("--reuse", action="store_true",
                        help="keep the runs in --runs-dir that finished with the same command on the same code")
    parser.add_argument("overrides", nargs="*", help="config overrides for every seed (a variant of the recipe)")
    args = parser.parse_args()
    runs_dir = runs_dir_from(args, "seeds")
    arm = Arm(ARM, tuple(args.overrides), args.recipe)
    config = load_config(args.recipe, list(args.overrides))
    threads = len(core_sets(args.at_once)[0])
    planned = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        command = seed_command(args.recipe, seed, runs_dir, threads, list(args.overrides))
        run_dir = runs_dir / artifacts.run_name(ARM, seed)
        planned.append((ArmRun(arm, seed, run_dir, config.train.steps,
                                args.reuse and finished_earlier(run_dir, command)), command))
    for start in range(0, len(planned), args.at_once):  # a batch at a time, so at most --at-once run together
        run_commands(planned[start:start + args.at_once], parallel=True)
    runs = [run for run, _ in planned]
    rows = [{**run.row(), **seed_details(run)} for run in runs]
    print(f"\n{'seed':>4s} {'steps':>7s} {'minutes':>7s} {'before':>7s} {'after':>7s} {'bare after':>10s}  evals")
    for row in rows:
        curve = " ".join(f"{e['step']}:{e['accuracy']:.1%}" for e in row["evals"])
        print(f"{row['seed']:4d} {row['steps']:3d}/{row['steps_wanted']:<3d} {row['train_minutes']:7.1f} "
              f"{row['accuracy_before']:7.1%} {row['accuracy_after']:7.1%} {row['bare_answer_share_after']:10.1%}  "
              f"{curve}")
    final = spread([row["accuracy_after"] for row in rows])
    path = artifacts.write("seeds", rows, [], {
        "recipe": artifacts.script_from_root(str(args.recipe)), "seeds": args.seeds, "first_seed": args.first_seed,
        "overrides": list(args.overrides), "split": rows[0]["split"] if rows else "",
        "execution": f"{args.at_once} at a time, each pinned to {threads} core(s) with {threads} torch thread(s)",
        artifacts.TIME_CAP_BOUND: [f"seed {row['seed']}" for row in rows if row["time_cap_bound"]],
        "final_accuracy": final}, directory=args.results_dir)
    print(f"artifact: {path}")
    print("final accuracy over seeds: " + ", ".join(f"{key} {value}" for key, value in final.items()))


if __name__ == "__main__":
    main()
