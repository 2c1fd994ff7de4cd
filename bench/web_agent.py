"""Web agent (OpAgent): held-out task success on the live local sites for four agents —
the base model as a single policy, the base model inside the operator agent (planner, grounder, reflector,
summarizer), the trained model as a single policy, and the trained model inside the operator agent.

Training is ``recipes/opagent-web.yaml`` as shipped (fast HTML mode), for ``--steps`` steps capped at
``--minutes``; then all four agents play the same held-out tasks (from the evaluation seed, which training
never draws), greedily, in ``--env`` (web: plain HTTP; web_browser: headless Chromium).

    python bench/web_agent.py                       # 20 steps, 15 minutes cap, 4 held-out tasks per family and level
    python bench/web_agent.py --steps 5 --per-level 2 --env web_browser
Prints a table, then ``trained_over_base=X`` (single policy) and ``operator_over_single=Y`` (trained model).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from runs import launch  # bench/runs.py: this script's directory is on sys.path

from autotelic.backends.hf import HFPolicy
from autotelic.config import load_config
from autotelic.evaluate import heldout_tasks
from autotelic.train import evaluate_heldout

RECIPE = Path(__file__).resolve().parent.parent / "recipes" / "opagent-web.yaml"


def _valid_share(records: list[dict]) -> float:
    actions = [a for r in records for a in r["actions"]]
    return sum(a is not None for a in actions) / max(1, len(actions))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--minutes", type=float, default=15.0)
    parser.add_argument("--per-level", type=int, default=4)
    parser.add_argument("--env", default="web", choices=["web", "web_browser"])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--runs-dir", type=Path, default=None)
    args = parser.parse_args()
    runs_dir = args.runs_dir or Path(tempfile.mkdtemp(prefix="bench_web_"))
    runs_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    process = launch("trained", ["eval.per_level=1", "eval.levels=[1]"], runs_dir, args.minutes, args.threads,
                     recipe=RECIPE, steps=args.steps)
    if process.wait() != 0:
        sys.exit(f"training failed: see {runs_dir / 'trained.log'}")
    run_dir = runs_dir / "trained"
    trained_steps = json.loads((run_dir / "summary.json").read_text())["steps"]
    print(f"trained {trained_steps} steps in {(time.perf_counter() - started) / 60:.1f} min ({run_dir})")

    threads = [f"model.threads={args.threads}"] if args.threads else []
    config = load_config(RECIPE, [f"generate.env={args.env}", *threads])
    levels = config.eval.levels
    tasks = heldout_tasks(config.curriculum.families, levels, args.per_level, config.eval.seed)
    operator = load_config(RECIPE, [f"generate.env={args.env}", "eval.agent=operator", *threads])
    models = {"base": HFPolicy(config.model), "trained": HFPolicy(load_config(RECIPE, [
        f"model.path={run_dir / 'model'}", *threads]).model)}
    rows = []
    for model_name, policy in models.items():
        for agent_name, agent_config in (("single policy", config), ("operator agent", operator)):
            began = time.perf_counter()
            result = evaluate_heldout(agent_config, policy, tasks)
            rows.append({"model": model_name, "agent": agent_name, "success": result.accuracy,
                         "by_level": result.by_level, "valid_actions": _valid_share(result.records),
                         "turns": sum(r["turns"] for r in result.records) / len(result.records),
                         "seconds": time.perf_counter() - began})
            (runs_dir / f"eval_{model_name}_{agent_name.split()[0]}.jsonl").write_text(
                "".join(json.dumps(r) + "\n" for r in result.records))
    print(f"\nheld-out web tasks: {len(tasks)} ({args.per_level} per family and level, env={args.env})")
    header = " ".join(f"{'L' + str(level):>6}" for level in levels)
    print(f"{'model':8} {'agent':15} {'success':>8} {header} {'valid actions':>14} {'turns':>6} {'s':>5}")
    for r in rows:
        by_level = " ".join(f"{r['by_level'].get(str(level), 0.0):6.1%}" for level in levels)
        print(f"{r['model']:8} {r['agent']:15} {r['success']:8.1%} {by_level} {r['valid_actions']:14.1%} "
              f"{r['turns']:6.2f} {r['seconds']:5.0f}")
    by = {(r["model"], r["agent"]): r["success"] for r in rows}

    def ratio(a: float, b: float) -> float:  # 0 over 0 counts as no change
        return a / b if b else float("inf") if a else 1.0

    print(f"trained_over_base={ratio(by['trained', 'single policy'], by['base', 'single policy']):.2f}")
    print(f"operator_over_single={ratio(by['trained', 'operator agent'], by['trained', 'single policy']):.2f}")
    (runs_dir / "bench_web_agent.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
