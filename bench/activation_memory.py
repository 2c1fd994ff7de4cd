"""Peak memory and seconds of one GRPO update on long samples, with and without ``model.gradient_checkpointing``.

The embedded SmolLM2-135M-Instruct, full fine-tuning, groups shaped like the web recipe's episodes (a long page
prompt shared by the group, long samples; token ids drawn at random: memory and time depend on shapes only) and
the recipe's micro-batch limit. Each arm runs alone in a child process (getrusage's peak is per process): model
load, a tiny warm-up update (which allocates the gradients and optimizer state) and ``--updates`` timed ones of
the measured shape. The peak RSS over those minus the peak before them is the update's own (activation) memory.

    python bench/activation_memory.py                                # 4 groups x 6 samples x 1200 tokens
    python bench/activation_memory.py --sample-tokens 2400 --micro-batch-tokens 8192

Writes bench/results/activation_memory-<UTC time>.json; the last line: memory_ratio=X (the update's own peak
memory with checkpointing over without) seconds_ratio=Y (median update seconds, the same way).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import artifacts  # bench/artifacts.py: this script's directory is on sys.path

ARMS = {"without": False, "checkpointing": True}


def child(args: argparse.Namespace, checkpointed: bool) -> dict[str, float]:
    """One arm in this process: its updates' own peak memory (MiB) and each timed update's seconds."""
    import random

    from autotelic.algorithms import get_algorithm
    from autotelic.backends.hf import HFPolicy
    from autotelic.backends.memory import peak_rss_mib
    from autotelic.config import AlgorithmConfig, ModelConfig
    from autotelic.types import Group, Sample, Task
    from autotelic.update import policy_gradient_update

    policy = HFPolicy(ModelConfig(lora=False, gradient_checkpointing=checkpointed), lr=1e-6, seed=0)
    rng = random.Random(0)
    vocabulary = len(policy.tokenizer)

    def tokens(n: int) -> list[int]:
        return [rng.randrange(vocabulary) for _ in range(n)]

    def groups(count: int, prompt_tokens: int, samples: int, sample_tokens: int) -> list[Group]:
        return [Group(Task(f"q{g}", "", "bench", 1, f"u{g}"), tokens(prompt_tokens),
                      [Sample("", ids, [-1.0] * len(ids), True, reward=float(s % 2))
                       for s, ids in enumerate(tokens(sample_tokens) for _ in range(samples))])
                for g in range(count)]

    algorithm = AlgorithmConfig(name="grpo", micro_batch_tokens=args.micro_batch_tokens)

    def update(batch: list[Group]) -> float:
        start = time.perf_counter()
        policy_gradient_update(policy, batch, get_algorithm("grpo"), algorithm, 1.0, args.sample_tokens)
        return time.perf_counter() - start

    update(groups(1, 16, 2, 16))  # a tiny warm-up allocates the gradients and the optimizer state
    before = peak_rss_mib()
    batch = groups(args.groups, args.prompt_tokens, args.samples, args.sample_tokens)
    seconds = [update(batch) for _ in range(args.updates)]
    peak = peak_rss_mib()
    return {"update_peak_mib": round(peak - before, 1), "peak_rss_mib": round(peak, 1), "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=4, help="groups per update (the web recipe's tasks per step)")
    parser.add_argument("--samples", type=int, default=6, help="samples per group")
    parser.add_argument("--prompt-tokens", type=int, default=800, help="the shared prompt's tokens")
    parser.add_argument("--sample-tokens", type=int, default=1200, help="tokens of each sample")
    parser.add_argument("--micro-batch-tokens", type=int, default=4096, help="algorithm.micro_batch_tokens")
    parser.add_argument("--updates", type=int, default=2, help="timed updates per arm, after one warm-up")
    parser.add_argument("--results-dir", type=Path, default=artifacts.RESULTS, help="where the artifact goes")
    parser.add_argument("--arm", choices=list(ARMS), help=argparse.SUPPRESS)  # a child process's arm
    args = parser.parse_args()
    if args.arm:
        print(json.dumps(child(args, ARMS[args.arm])))
        return
    rows = []
    for arm in ARMS:
        result = subprocess.run([sys.executable, *sys.argv, "--arm", arm], capture_output=True, text=True,
                                check=True)
        measured = json.loads(result.stdout.strip().splitlines()[-1])
        rows.append({"arm": arm, "seed": 0, **measured, "median_seconds": statistics.median(measured["seconds"])})
        print(f"{arm}: update's own peak {measured['update_peak_mib']} MiB (process {measured['peak_rss_mib']}), "
              f"median {rows[-1]['median_seconds']:.1f} s per update", flush=True)
    without, checkpointed = rows
    ratios = {"memory_ratio": round(checkpointed["update_peak_mib"] / without["update_peak_mib"], 3),
              "seconds_ratio": round(checkpointed["median_seconds"] / without["median_seconds"], 3)}
    path = artifacts.write("activation_memory", rows, [], {"ratios": ratios, "shape": {
        k: getattr(args, k) for k in ("groups", "samples", "prompt_tokens", "sample_tokens", "micro_batch_tokens")}},
        args.results_dir)
    print(f"wrote {path}")
    print(" ".join(f"{k}={v}" for k, v in ratios.items()))


if __name__ == "__main__":
    main()
