"""VM-MCTS's kept attention state (``eval.search.cache_mb``): seconds and peak memory of one decoding per bound.

Tree search keeps each expanded node's attention state (``PrefixCache``) so that the next expansion of a leaf runs
only its new line; every kept node holds its prompt and path again, so memory grows with trees and depth. Each
``--cache-mb`` value (``none``: unbounded) decodes the same first ``--problems`` held-out problems of
``recipes/rest-rl-code.yaml`` by VM-MCTS at the recipe's token budget, guided by ``--value-model`` (a trained one,
e.g. a ``bench/decoding.py`` seed's ``value_model``), each in a fresh process (its peak resident memory is the
process's own), one after another, one torch thread, from the same sampling seed. The bound only chooses what is
computed again: the answers may part only where a 1e-5 difference in the logits moves a draw, which the artifact
counts against the unbounded run.

    python bench/search_cache.py --value-model RUNS/decoding-s0/value_model --problems 16 --cache-mb 0 256 1024 none

Writes bench/results/search_cache-*.json: a row per bound (seconds, peak GiB, tokens per problem, accuracy, answers
equal to the unbounded run's); the last lines: cache_<mb>: seconds_ratio=X peak_ratio=Y, each against unbounded.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import artifacts  # bench/artifacts.py: this script's directory is on sys.path

RECIPE = Path(__file__).resolve().parent.parent / "recipes" / "rest-rl-code.yaml"
UNBOUNDED = 2**40  # MB: more than any machine holds


def label(bound: int) -> str:
    return "none" if bound == UNBOUNDED else str(bound)


def decode(value_model: Path, problems: int, cache_mb: int, overrides: list[str]) -> dict:
    """One VM-MCTS decoding of the first ``problems`` held-out problems, in this process."""
    import torch

    from autotelic.backends.hf import HFPolicy
    from autotelic.backends.memory import peak_rss_mib
    from autotelic.checks import sandbox_isolation
    from autotelic.evaluation import evaluate
    from autotelic.heldout import build_heldout
    from autotelic.loading import load_config
    from autotelic.value_model import ValueModel
    from autotelic.vm_mcts import decoding_for

    config = load_config(RECIPE, [*overrides, f"eval.search.cache_mb={cache_mb}"])
    sandbox_isolation(config)
    torch.set_num_threads(1)
    tasks = list(build_heldout(config).tasks)[:problems]
    policy = HFPolicy(config.model, seed=config.train.seed)
    model = ValueModel.load(value_model)
    started = time.perf_counter()
    result = evaluate(policy, tasks, config.eval.max_new_tokens, config.eval.batch_size,
                      decoding_for(config, "vm_mcts", model))
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "peak_gib": peak_rss_mib() / 1024,
            "accuracy": result.accuracy, "tokens_per_task": result.tokens_per_task,
            "answers": [record["completion"] for record in result.records]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--value-model", type=Path, required=True, help="a trained value model directory")
    parser.add_argument("--problems", type=int, default=16, help="held-out problems decoded per bound")
    parser.add_argument("--cache-mb", nargs="+", default=["0", "256", "1024", "none"],
                        help="bounds on the kept state in MB; none: unbounded")
    parser.add_argument("--results-dir", type=Path, default=artifacts.RESULTS)
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)  # one bound, in a child
    parser.add_argument("overrides", nargs="*", help="extra config overrides of the recipe")
    args = parser.parse_args()
    if args.worker is not None:
        print(json.dumps(decode(args.value_model, args.problems, args.worker, args.overrides)))
        return
    bounds = [UNBOUNDED if value == "none" else int(value) for value in args.cache_mb]
    if UNBOUNDED not in bounds:
        bounds.append(UNBOUNDED)  # the reference every ratio is taken against
    measured = {}
    for bound in bounds:
        done = subprocess.run([sys.executable, __file__, "--value-model", str(args.value_model), "--problems",
                               str(args.problems), "--worker", str(bound), *args.overrides],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"cache_mb={bound}: the decoding failed: {done.stderr.strip().splitlines()[-1]}")
        measured[bound] = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"cache_mb={label(bound)}: {measured[bound]['seconds']:.0f} s, peak "
              f"{measured[bound]['peak_gib']:.2f} GiB", flush=True)
    reference = measured[UNBOUNDED]
    rows = [{"arm": f"cache_mb={label(bound)}", "seed": 0,
             "cache_mb": None if bound == UNBOUNDED else bound,
             **{key: value for key, value in result.items() if key != "answers"},
             "answers_equal_unbounded": sum(a == b for a, b in zip(result["answers"], reference["answers"]))}
            for bound, result in measured.items()]
    lines = [f"cache_{row['cache_mb']}: seconds_ratio={row['seconds'] / reference['seconds']:.2f} "
             f"peak_ratio={row['peak_gib'] / reference['peak_gib']:.2f}" for row in rows if row["cache_mb"] is not None]
    path = artifacts.write("search_cache", rows, [], {"problems": args.problems, "value_model": str(args.value_model),
                                                      "overrides": args.overrides, "threads": 1},
                           directory=args.results_dir)
    print(f"artifact: {path}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
