"""Peak resident memory of each CPU recipe's run, next to the floor of full fine-tuning in fp32 with AdamW.

Each recipe runs as shipped but for ``--steps`` steps (and any ``--override``), as a child ``autotelic run``,
one at a time. Its peak is the child's own (``wait4``'s ru_maxrss: load, evaluations, steps, export), and each
step's ``perf/peak_rss_mib`` shows where it was reached. The floor is 16 bytes per parameter of the
recipe's model (fp32 weights, gradients and AdamW's two moments; ``backends.memory.full_finetune_floor``), the
parameters counted on torch's meta device (nothing is read but the model's config). CPU recipes: those whose
model runs on the CPU without vLLM.

    python bench/memory.py                                      # every CPU recipe, 3 steps each
    python bench/memory.py --recipes default lora --steps 15    # the default run's peak plateaus by step 13

Writes bench/results/memory-<UTC time>.json (a row per recipe). Last line: ``default_peak_gib=X floor_gib=Y``
(n/a without the default recipe).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

import artifacts  # bench/artifacts.py: this script's directory is on sys.path

from autotelic.backends.memory import GIB, MIB, full_finetune_floor
from autotelic.backends.model_dir import resolve_model_dir
from autotelic.config import RunConfig
from autotelic.loading import load_config

RECIPES = artifacts.REPO / "recipes"
LAPTOP_BYTES = 8 * 10**9  # "8 GB" as laptops are sold


def cpu_recipes() -> list[str]:
    """The shipped recipes whose model trains on the CPU without vLLM, by name."""
    names = sorted(path.stem for path in RECIPES.glob("*.yaml"))
    return [name for name in names if is_cpu(load_config(RECIPES / f"{name}.yaml"))]


def is_cpu(config: RunConfig) -> bool:
    return config.model.device == "cpu" and not config.vllm.enabled


def parameter_count(config: RunConfig) -> int:
    """The recipe's model's parameters (tied weights once), built on the meta device from its config."""
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        shape = AutoConfig.from_pretrained(resolve_model_dir(config.model.path))
        model = AutoModelForCausalLM.from_config(shape)
    return sum(p.numel() for p in model.parameters())


def run_recipe(name: str, steps: int, overrides: list[str], runs_dir: Path) -> dict[str, Any]:
    """One recipe's run in a child process: how it ended, its peak RSS and each step's."""
    command = [sys.executable, "-m", "autotelic.cli", "run", "--config", str(RECIPES / f"{name}.yaml"),
               f"train.steps={steps}", *overrides, "logging.progress=false", f"logging.runs_dir={runs_dir}",
               f"logging.run_name={name}"]
    log = runs_dir / f"{name}.log"
    with log.open("w") as out:
        child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    metrics = runs_dir / name / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.exists() else []
    steps_rows = [row for row in rows if "perf/peak_rss_mib" in row]
    return {"exit_code": child.returncode, "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),  # Linux: KiB
            "step_peak_rss_mib": [round(row["perf/peak_rss_mib"], 1) for row in steps_rows],
            "median_step_seconds": (round(statistics.median(row["time/step"] for row in steps_rows), 2)
                                    if steps_rows else None),
            "log_tail": log.read_text().splitlines()[-3:] if child.returncode else []}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", nargs="+", help="recipe names (default: every CPU recipe)")
    parser.add_argument("--steps", type=int, default=3, help="training steps of each run")
    parser.add_argument("--override", action="append", default=[],
                        help="a setting for every run, e.g. eval.per_level=4 (repeatable)")
    parser.add_argument("--results-dir", type=Path, default=artifacts.RESULTS, help="where the artifact goes")
    args = parser.parse_args()
    names = args.recipes or cpu_recipes()
    unknown = [name for name in names if not (RECIPES / f"{name}.yaml").exists()]
    if unknown:
        parser.error(f"no recipe {', '.join(unknown)} in {RECIPES}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="memory-bench-") as runs:
        for name in names:
            config = load_config(RECIPES / f"{name}.yaml", args.override)  # as the run reads it
            parameters = parameter_count(config)
            floor = full_finetune_floor(parameters)
            measured = run_recipe(name, args.steps, args.override, Path(runs))
            rows.append({"arm": name, "seed": config.train.seed, "parameters": parameters,
                         "floor_mib": round(floor / MIB, 1), "lora": config.model.lora,
                         "gradient_checkpointing": config.model.gradient_checkpointing, **measured,
                         "fits_8gb": measured["peak_rss_mib"] * MIB <= LAPTOP_BYTES})
            ended = "" if measured["exit_code"] == 0 else f", exit code {measured['exit_code']}"
            print(f"{name}: peak {measured['peak_rss_mib']:,.0f} MiB, floor {floor / MIB:,.0f} MiB "
                  f"({parameters / 1e6:.0f}M parameters), steps' peaks {measured['step_peak_rss_mib']}, "
                  f"median {measured['median_step_seconds']} s/step{ended}", flush=True)
    default = next((row for row in rows if row["arm"] == "default"), None)
    summary = {"steps": args.steps, "overrides": args.override,
               "over_8gb": [row["arm"] for row in rows if not row["fits_8gb"]],
               "failed": [row["arm"] for row in rows if row["exit_code"]]}
    path = artifacts.write("memory", rows, [], summary, args.results_dir)
    print(f"wrote {path}")
    if default is None:
        print("default_peak_gib=n/a floor_gib=n/a")
    else:
        print(f"default_peak_gib={default['peak_rss_mib'] * MIB / GIB:.2f} "
              f"floor_gib={default['floor_mib'] * MIB / GIB:.2f}")


if __name__ == "__main__":
    main()
