"""Divergence, with the real CLI on ``random:qwen2-tiny``: a learning rate of 1e9 blows the weights up in one
update; the run stops with one line naming the step, what went non-finite, the learning rate and the last good
checkpoint, keeps no diverged weights, exports nothing, and resumes with a smaller learning rate. The gradient
norm's running range is checked on a real model's updates."""

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from autotelic.backends.hf import HFPolicy
from autotelic.config import ModelConfig
from autotelic.divergence import WARM_UP, DivergenceGuard, GradNormRange, NonFiniteRewards
from autotelic.types import Group, Sample, Task

pytestmark = pytest.mark.slow

TINY = [
    "model.path=random:qwen2-tiny", "model.lora=false", "model.threads=1", "train.checkpoint_every=1",
    "train.keep_checkpoints=3", "train.max_minutes=null", "control.tasks_per_step=2", "generate.group_size=4",
    "control.max_new_tokens=6", "curriculum.families=[add]", "curriculum.levels=[1]", "eval.levels=[1]",
    "eval.per_level=2", "eval.max_new_tokens=4", "eval.every=0", "logging.progress=false", "logging.report=false",
    "filter.rewards=[{name: verifier}, {name: length, options: {max_chars: 20}}]",
]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autotelic.cli", *args], capture_output=True, text=True,
                          timeout=300)


def _checkpoints(run_dir: Path) -> list[str]:
    root = run_dir / "checkpoints"
    return sorted(path.name for path in root.iterdir()) if root.is_dir() else []


def _one_error_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0]


def test_a_diverging_learning_rate_stops_at_the_step_keeping_the_good_checkpoint_and_resumes(tmp_path):
    run_dir = tmp_path / "run"
    trained = _cli("run", *TINY, "train.steps=2", "algorithm.lr=1e-3", "train.export_model=false",
                   f"logging.runs_dir={tmp_path}", "logging.run_name=run")
    assert trained.returncode == 0, trained.stderr
    assert _checkpoints(run_dir) == ["step_000001", "step_000002"]

    line = _one_error_line(_cli("resume", str(run_dir), "train.steps=4", "algorithm.lr=1e9",
                                "train.export_model=true"))
    assert line.startswith("error: step 3: "), line
    assert "not finite" in line and "algorithm.lr=1e+09" in line, line
    assert f"last good checkpoint: {run_dir}/checkpoints/step_000002;" in line, line
    assert line.endswith(f"resume with: autotelic resume {run_dir} algorithm.lr=2e-05"), line
    assert _checkpoints(run_dir) == ["step_000001", "step_000002"]  # nothing of the diverged step 3
    assert not (run_dir / "model").exists()

    command = line.split("resume with: autotelic ")[1].split()
    resumed = _cli(*command)
    assert resumed.returncode == 0, resumed.stderr
    assert _checkpoints(run_dir)[-1] == "step_000004"
    assert (run_dir / "model" / "model.safetensors").is_file()


def test_a_run_that_diverges_at_its_first_step_keeps_nothing_and_starts_over_on_resume(tmp_path):
    run_dir = tmp_path / "run"
    line = _one_error_line(_cli("run", *TINY, "train.steps=2", "algorithm.lr=1e9",
                                f"logging.runs_dir={tmp_path}", "logging.run_name=run"))
    assert re.match(r"error: step 1: .*not finite; the learning rate \(algorithm\.lr=1e\+09\) is the likely "
                    r"cause; the weights of step 1 diverged and were neither checkpointed nor exported; last good "
                    r"checkpoint: none \(resuming starts over\)", line), line
    assert _checkpoints(run_dir) == [] and not (run_dir / "model").exists()
    assert _cli("resume", str(run_dir), "algorithm.lr=1e-3").returncode == 0
    assert _checkpoints(run_dir)[-1] == "step_000002"


def _tiny_policy() -> HFPolicy:
    return HFPolicy(ModelConfig(path="random:qwen2-tiny", lora=False, threads=1), lr=1e-3)


def _backward(policy: HFPolicy, scale: float) -> None:
    """A real loss on the tiny model: the negative log-likelihood of a fixed completion, times ``scale``."""
    prompt, completion = policy.tokenize("2 + 3 ="), policy.tokenize(" 5, and that is all")
    logprobs, mask = policy.completion_logprobs([prompt], [completion], 1)
    (-(logprobs * mask).sum() * scale).backward()


def test_a_gradient_norm_far_above_its_running_range_is_refused_before_the_weights_change():
    torch.manual_seed(0)
    policy = _tiny_policy()
    norms = GradNormRange()
    for _ in range(WARM_UP + 3):  # healthy updates: none reaches the ceiling their predecessors set
        assert norms.ceiling() == math.inf or norms.recent
        policy.grad_norm_ceiling = norms.ceiling()
        _backward(policy, 1.0)
        norms.observe(policy.optimizer_step()["grad_norm"])
    assert math.isfinite(norms.ceiling())

    before = {name: value.clone() for name, value in policy.trainable_state().items()}
    version = policy.version
    policy.grad_norm_ceiling = norms.ceiling()
    _backward(policy, 1e4)  # the same loss ten thousand times over: a spike
    with pytest.raises(FloatingPointError, match="far above its running range"):
        policy.optimizer_step()
    assert policy.version == version
    assert all(torch.equal(before[name], value) for name, value in policy.trainable_state().items())
    assert all(p.grad is None for p in policy.trainable)  # nothing left to leak into the next step


def test_non_finite_rewards_of_a_kept_group_stop_before_the_update():
    guard = DivergenceGuard([], lr=1e-3)
    task = Task(prompt="1 + 1 =", answer="2", family="add", level=1, uid="add-1")
    group = Group(task, [1], [Sample("2", [2], [0.0], finished=True, reward=r) for r in (1.0, math.nan)])
    with pytest.raises(NonFiniteRewards, match="1 rewards of the kept groups are not finite"):
        guard.before_update([group], 0)
