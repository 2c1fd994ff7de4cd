"""One arm against its baseline in a bench artifact, seed by seed: what a results section reports beside the
comparison's interval (per-seed accuracies and gains, the seeds it leads and trails on, each arm's spread), and the
checks a plan promises (accuracy before training equal on every seed, steps, samples a step, completion tokens and
training minutes, and whether a budget flag was raised).

    python bench/paired.py bench/results/rest_rl-20261206T162014Z.json --base grpo --arm answer_stop
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import artifacts  # bench/artifacts.py: the importing script's directory is on sys.path


@dataclass(frozen=True)
class Pair:
    seed: int
    base: dict[str, Any]
    arm: dict[str, Any]

    @property
    def gain_points(self) -> float:
        return 100 * (self.arm["accuracy_after"] - self.base["accuracy_after"])


def pairs(record: dict[str, Any], base: str, arm: str) -> list[Pair]:
    """The artifact's rows of ``arm`` and ``base``, paired by seed; a seed one of them lacks is refused."""
    rows = {(row["arm"], row["seed"]): row for row in record["rows"]}
    arms = sorted({name for name, _ in rows})
    absent = [name for name in (base, arm) if name not in arms]
    if absent:
        raise ValueError(f"no rows of arm {' or '.join(absent)} (arms here: {', '.join(arms)})")
    seeds = sorted({seed for name, seed in rows if name in (base, arm)})
    missing = [f"{name} seed {seed}" for seed in seeds for name in (base, arm) if (name, seed) not in rows]
    if missing:
        raise ValueError(f"unpaired seeds: no {', '.join(missing)}")
    return [Pair(seed, rows[(base, seed)], rows[(arm, seed)]) for seed in seeds]


def arm_totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One arm over its seeds: accuracy range and spread (points), steps, samples a step, tokens, minutes."""
    after = [100 * row["accuracy_after"] for row in rows]
    return {"accuracy_min": round(min(after), 1), "accuracy_max": round(max(after), 1),
            "accuracy_sd": round(statistics.stdev(after), 1) if len(after) > 1 else 0.0,
            "steps": sorted({row["steps"] for row in rows}),
            "samples_per_step": sorted({row["samples_per_step"] for row in rows}),
            "completion_tokens": sum(row["completion_tokens"] for row in rows),
            "train_minutes": round(sum(row["train_minutes"] for row in rows), 1)}


def describe(record: dict[str, Any], base: str, arm: str) -> dict[str, Any]:
    seeds = pairs(record, base, arm)
    gains = [pair.gain_points for pair in seeds]
    return {
        "seeds": [{"seed": p.seed, base: round(100 * p.base["accuracy_after"], 1),
                   arm: round(100 * p.arm["accuracy_after"], 1), "gain_points": round(p.gain_points, 1),
                   "steps": [p.base["steps"], p.arm["steps"]],
                   "train_minutes": [p.base["train_minutes"], p.arm["train_minutes"]]} for p in seeds],
        "leads": sum(gain > 0 for gain in gains), "trails": sum(gain < 0 for gain in gains),
        "ties": sum(gain == 0 for gain in gains),
        "before_equal": all(p.base["accuracy_before"] == p.arm["accuracy_before"] for p in seeds),
        "heldout_n": sorted({row["heldout_n"] for p in seeds for row in (p.base, p.arm)}),
        base: arm_totals([p.base for p in seeds]), arm: arm_totals([p.arm for p in seeds]),
        "flags": {key: record["summary"][key] for key in artifacts.BUDGET_FLAGS if record["summary"].get(key)},
        "comparisons": record["comparisons"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifact", type=Path)
    parser.add_argument("--base", default="grpo", help="the baseline arm (default grpo)")
    parser.add_argument("--arm", required=True, help="the arm compared with it")
    args = parser.parse_args()
    try:
        record = json.loads(args.artifact.read_text())
        described = describe(record, args.base, args.arm)
    except KeyError as bad:  # its message is the key alone
        sys.exit(f"{args.artifact}: no {bad} field; pass a bench artifact (bench/results/<bench>-*.json)")
    except (OSError, json.JSONDecodeError, ValueError) as bad:
        sys.exit(f"{args.artifact}: {bad!s}; pass a bench artifact (bench/results/<bench>-*.json) and two of its arms")
    print(f"{'seed':>4s} {args.base:>12s} {args.arm:>14s} {'gain':>6s}  steps  training minutes")
    for row in described["seeds"]:
        print(f"{row['seed']:4d} {row[args.base]:12.1f} {row[args.arm]:14.1f} {row['gain_points']:+6.1f}  "
              f"{row['steps'][0]}/{row['steps'][1]}  {row['train_minutes'][0]:.1f}/{row['train_minutes'][1]:.1f}")
    for key, value in described.items():
        if key != "seeds":
            print(f"{key}: {json.dumps(value)}")


if __name__ == "__main__":
    main()
