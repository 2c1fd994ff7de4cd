"""bench/memory.py's choice of recipes and its floor: the CPU recipes are every shipped one but the GPU's, and the
parameters it counts on the meta device are those the embedded model's weights file holds."""

from __future__ import annotations

import math
import sys
from pathlib import Path

from safetensors import safe_open

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))  # bench/ is a directory of scripts, not a package

import memory  # noqa: E402

from autotelic.backends.memory import full_finetune_floor  # noqa: E402
from autotelic.loading import load_config  # noqa: E402


def test_cpu_recipes_are_the_shipped_ones_but_the_gpus():
    shipped = {path.stem for path in memory.RECIPES.glob("*.yaml")}
    assert set(memory.cpu_recipes()) == shipped - {"gpu-vllm", "gpu-vllm-0.5b"}


def test_the_floor_counts_the_embedded_models_parameters(embedded_dir):
    with safe_open(str(next(Path(embedded_dir).glob("*.safetensors"))), "pt") as weights:
        stored = sum(math.prod(weights.get_slice(name).get_shape()) for name in weights.keys())
    parameters = memory.parameter_count(load_config(None))
    assert parameters == stored  # the tied LM head is stored once and counted once
    assert full_finetune_floor(parameters) / 2**30 > 2.0  # the 2.2 GB: 16 bytes a parameter
