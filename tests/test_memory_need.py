"""The memory a run needs (backends/memory.py), estimated at start from the models it loaded: the embedded
model's estimate against the peak bench/memory.py measured for the default run, and the one-line warning when
the machine has less available."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest

from autotelic.backends.hf import HFPolicy
from autotelic.backends.memory import GIB, MIB, full_finetune_floor, run_need, shortage_warning
from autotelic.config import ModelConfig
from autotelic.loading import load_config

RESULTS = Path(__file__).resolve().parent.parent / "bench" / "results"


def _measured_default_peak_mib() -> float:
    """The default recipe's peak RSS in the newest bench/memory.py artifact that ran its model settings as
    shipped (an override of ``model.*``, e.g. checkpointing off for comparison, measured another run)."""
    for path in sorted(RESULTS.glob("memory-*.json"), reverse=True):
        artifact = json.loads(path.read_text())
        if any(override.startswith("model.") for override in artifact["summary"]["overrides"]):
            continue
        rows = [row for row in artifact["rows"] if row["arm"] == "default"]
        if rows:
            return rows[0]["peak_rss_mib"]
    raise AssertionError("no bench/results/memory-*.json holds the default recipe as shipped")


@pytest.fixture(scope="module")
def embedded_policy() -> HFPolicy:
    return HFPolicy(ModelConfig())


@pytest.mark.slow
def test_the_default_runs_estimate_is_near_its_measured_peak(embedded_policy):
    gc.collect()  # models of earlier tests in this process are no longer held
    need = run_need(load_config(None), [embedded_policy])
    parameters = sum(p.numel() for p in embedded_policy.model.parameters())
    assert need.weights == 4 * parameters  # fp32, nothing frozen beside it
    assert need.weights + need.gradients + need.optimizer == full_finetune_floor(parameters)
    measured = _measured_default_peak_mib() * MIB
    assert 0.8 * measured <= need.total <= 1.25 * measured, (need, measured / GIB)


@pytest.mark.slow
def test_frozen_copies_count_and_lora_trains_little(embedded_policy):
    full = run_need(load_config(None), [embedded_policy])
    with_reference = run_need(load_config(None, ["algorithm.beta=0.04"]), [embedded_policy])
    assert with_reference.weights == 2 * full.weights  # the KL term's frozen copy of the starting policy
    lora = HFPolicy(ModelConfig(lora=True))
    judge = HFPolicy(ModelConfig())  # another model the process holds (a judge), frozen beside the policy
    lora_need = run_need(load_config(None, ["model.lora=true"]), [lora])
    assert lora_need.optimizer < full.optimizer / 10  # rank-32 adapters on every projection: 7%
    lora_weights = sum(p.numel() * p.element_size() for p in lora.causal_lm.parameters())
    assert lora_need.weights == lora_weights + 2 * full.weights  # the judge and the module's embedded policy
    del judge


def test_a_warning_line_only_when_less_is_available(embedded_policy):
    need = run_need(load_config(None), [embedded_policy])
    assert shortage_warning(need, need.total) is None
    line = shortage_warning(need, need.total - GIB)
    assert line is not None and "\n" not in line
    assert f"needs about {need.total / GIB:.1f} GiB" in line
    assert f"{(need.total - GIB) / GIB:.1f} GiB is available" in line
