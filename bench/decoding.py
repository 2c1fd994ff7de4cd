"""ReST-RL's test-time half alone: decoding strategies on one fixed policy at an enforced equal completion-token
budget per task, on a held-out code set of at least ``--heldout`` problems (``recipes/rest-rl-code.yaml``'s).

For each seed (``train.seed``): value targets by MCTS with test-scored rollouts on training problems drawn with
that seed (the held-out set excluded), a value model fit on them (``value.*``, the recipe's), then the held-out
set decoded, sampling seeded by the seed too:
- greedy (one answer, no value model);
- best_of_n: samples while another whole one fits in ``eval.token_budget``, picked by the value model's score of
  the whole answer (an outcome reward model); the same candidates picked again by the weakest step's value (the
  value model read as a PRM, prm_best_of_n) and by the hidden tests (oracle: the headroom of a perfect picker);
- vm_mcts: line-level tree search guided by the value model, progressive widening, the same token budget.
The policy is ``--model`` (a run directory's exported model or any model directory; default the recipe's, the
embedded SmolLM2-135M), the same for every seed. Seeds run side by side with ``--parallel``, an equal share of the
cores (one at least) and one torch thread each (``--at-once 3``: three seeds sharing 2 cores, where memory allows: a
VM-MCTS worker reached 8 GiB, and three of them were killed for memory on a 23.5 GiB machine). ``--reuse`` keeps
a seed finished earlier with the same command on the same src/, recipes/ and this file (bench/runs.py: a seed's
steps are this file's ``decode_seed``). A seed alone on one core at the defaults, estimated from runs that shared
their cores: value targets ~10 minutes and fit ~2, best-of-n of 201 problems at 384 tokens ~20, VM-MCTS ~50 (15 s a
problem in a probe of 8), PRM reselection not yet timed.

    python bench/decoding.py --seeds 3 --heldout 200 --parallel
Prints a row per seed, writes bench/results/decoding-*.json and, last, the comparison lines:
vm_mcts_vs_best_of_n (the issue's: tree search against sampling at the same budget), best_of_n_vs_greedy,
vm_mcts_vs_greedy, prm_best_of_n_vs_best_of_n, oracle_vs_best_of_n.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import artifacts  # bench/artifacts.py: the importing script's directory is on sys.path
from runs import (Arm, ArmRun, Budget, Measure, compare, comparison_line, core_sets, finished_earlier,
                  heldout_overrides, run_commands, runs_dir_from, shares_cores)

from autotelic.backends.hf import HFPolicy
from autotelic.build import build_scorer
from autotelic.checks import sandbox_isolation
from autotelic.evaluation import EvalResult, evaluate, reselect
from autotelic.heldout import build_heldout
from autotelic.loading import load_config
from autotelic.rollout.filter import response_scorer
from autotelic.run_log import write_jsonl
from autotelic.vm_mcts import decoding_for, train_value_model

RECIPE = Path(__file__).resolve().parent.parent / "recipes" / "rest-rl-code.yaml"
ARM = Arm("decoding", (), RECIPE)
RESELECT = {"prm_best_of_n": "process_value", "oracle": "verifier"}  # best-of-n's candidates picked again by
DECODINGS = ("greedy", "best_of_n", "vm_mcts", *RESELECT)


def seed_overrides(args: argparse.Namespace, seed: int) -> list[str]:
    """The recipe's overrides for one seed: the held-out size, the seed, the policy, the threads."""
    budget = Budget(0, 0.0, 1, args.heldout, args.parallel, tuple(args.overrides))  # no training
    return [*args.overrides, *heldout_overrides(ARM, budget), f"train.seed={seed}",
            *([f"model.path={args.model}"] if args.model else []), f"model.threads={1 if args.parallel else 'null'}"]


def execution(args: argparse.Namespace, runs: int) -> str:
    if not args.parallel:
        return "sequential, every core"
    if shares_cores(args.at_once):
        return f"parallel: {args.at_once} at once sharing the cores, 1 thread each"
    share = len(core_sets(runs)[0])
    return f"parallel: {'one pinned core' if share == 1 else f'{share} pinned cores'}, 1 thread each"


def decode_seed(overrides: list[str], out: Path) -> None:
    """One seed's value model and every decoding of the held-out set, records in ``out/eval_<decoding>.jsonl``."""
    config = load_config(RECIPE, overrides)
    sandbox_isolation(config)
    heldout = build_heldout(config)
    tasks = list(heldout.tasks)
    policy = HFPolicy(config.model, seed=config.train.seed)
    started = time.perf_counter()
    model, metrics = train_value_model(policy, config, response_scorer(build_scorer(config, policy)), heldout,
                                       config.model.path, out / "value_model")
    seconds = {"value": time.perf_counter() - started}
    results: dict[str, EvalResult] = {}
    for name in DECODINGS:
        started = time.perf_counter()
        if name in RESELECT:  # among best-of-n's own candidates
            results[name] = reselect(tasks, results["best_of_n"].records, RESELECT[name], model)
        else:
            results[name] = evaluate(policy, tasks, config.eval.max_new_tokens, config.eval.batch_size,
                                     decoding_for(config, name, model))
        seconds[name] = time.perf_counter() - started
        write_jsonl(out / f"eval_{name}.jsonl", results[name].records)
    (out / "summary.json").write_text(json.dumps({
        "heldout_tasks": len(tasks), "token_budget": config.eval.token_budget, "value": metrics,
        "decodings": {name: result.summary() for name, result in results.items()},
        "seconds": {name: round(value, 1) for name, value in seconds.items()}}, indent=1))


def row(run: ArmRun) -> dict:
    summary = run.summary()
    return {"arm": run.arm.name, "seed": run.seed, "heldout_n": summary["heldout_tasks"], "run_dir": str(run.run_dir),
            "reused": run.reused, "value_examples": summary["value"]["value/examples"],
            "minutes": round(sum(summary["seconds"].values()) / 60, 1),
            **{f"{name}_{key}": result[key] for name, result in summary["decodings"].items()
               for key in ("accuracy", "tokens_per_task")}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="value-model and sampling seeds (train.seed 0, 1, ...)")
    parser.add_argument("--heldout", type=int, default=200, help="held-out problems, at least")
    parser.add_argument("--model", default=None, help="the policy: a model directory (default: the recipe's)")
    parser.add_argument("--parallel", action="store_true", help="seeds side by side, an equal share of the cores each")
    parser.add_argument("--at-once", type=int, default=None,
                        help="with --parallel, seeds run at once (default one a core, pinned; more share the cores)")
    parser.add_argument("--runs-dir", type=Path, default=None, help="keep each seed's records here")
    parser.add_argument("--results-dir", type=Path, default=artifacts.RESULTS, help="where the artifact goes")
    parser.add_argument("--reuse", action="store_true", help="keep seeds finished with the same command and code")
    parser.add_argument("--seed-worker", type=int, default=None, help=argparse.SUPPRESS)  # one seed, in a child
    parser.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help="extra config overrides (the recipe's, for every seed)")
    args = parser.parse_args()
    if args.seed_worker is not None:
        return decode_seed(seed_overrides(args, args.seed_worker), args.out)
    runs_dir = runs_dir_from(args, "decoding")
    model = [f"--model={args.model}"] if args.model else []
    jobs = []
    for seed in range(args.seeds):
        out = runs_dir / f"decoding-s{seed}"
        command = [sys.executable, str(Path(__file__).resolve()), "--seed-worker", str(seed), "--out", str(out),
                   f"--heldout={args.heldout}", *model,
                   *(["--parallel"] if args.parallel else []), *args.overrides]
        jobs.append((ArmRun(ARM, seed, out, 0, args.reuse and finished_earlier(out, command)), command))
    run_commands(jobs, args.parallel, args.at_once)
    runs = [run for run, _ in jobs]
    measure = {name: Measure(runs, f"eval_{name}") for name in DECODINGS}
    comparisons = [compare("vm_mcts_vs_best_of_n", measure["best_of_n"], measure["vm_mcts"]),
                   compare("best_of_n_vs_greedy", measure["greedy"], measure["best_of_n"]),
                   compare("vm_mcts_vs_greedy", measure["greedy"], measure["vm_mcts"]),
                   compare("prm_best_of_n_vs_best_of_n", measure["best_of_n"], measure["prm_best_of_n"]),
                   compare("oracle_vs_best_of_n", measure["best_of_n"], measure["oracle"])]
    rows = [row(run) for run in runs]
    for r in rows:
        print(f"seed {r['seed']}: " + "  ".join(
            f"{name} {r[f'{name}_accuracy']:.1%} ({r[f'{name}_tokens_per_task']:.0f} tokens)" for name in DECODINGS))
    path = artifacts.write("decoding", rows, comparisons, {
        "seeds": args.seeds, "heldout_wanted": args.heldout, "model": args.model or "the recipe's",
        "token_budget": load_config(RECIPE, seed_overrides(args, 0)).eval.token_budget, "overrides": args.overrides,
        "execution": execution(args, sum(not run.reused for run in runs))},
        directory=args.results_dir)
    print(f"artifact: {path}")
    for comparison in comparisons:
        print(comparison_line(comparison))


if __name__ == "__main__":
    main()
