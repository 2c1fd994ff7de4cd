"""Ctrl-C, with the real CLI on ``random:qwen2-tiny``: SIGINT during training finishes the step, writes its
checkpoint, says how to continue in one line and exits 130, exporting nothing; a second SIGINT abandons the
step and keeps the checkpoints written before. ``autotelic resume`` then finishes the run."""

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotelic.checkpoint import damage

pytestmark = pytest.mark.slow

TINY = [
    "model.path=random:qwen2-tiny", "model.lora=false", "model.threads=1", "train.steps=200",
    "train.checkpoint_every=3", "train.max_minutes=null", "control.tasks_per_step=2", "generate.group_size=4",
    "control.max_new_tokens=6", "curriculum.families=[add]", "curriculum.levels=[1]", "eval.levels=[1]",
    "eval.per_level=2", "eval.max_new_tokens=4", "eval.every=0", "logging.progress=false", "logging.report=false",
    "algorithm.lr=1e-3",
]


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "autotelic.cli", *args]


def _interrupted(tmp_path: Path, presses: int) -> tuple[Path, str]:
    """A run sent ``presses`` SIGINTs once it is training (a metrics row is written): (run dir, its one line)."""
    run_dir = tmp_path / "run"
    process = subprocess.Popen(_cli("run", *TINY, f"logging.runs_dir={tmp_path}", "logging.run_name=run"),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while not (run_dir / "metrics.jsonl").is_file() or not (run_dir / "metrics.jsonl").stat().st_size:
        assert process.poll() is None and time.monotonic() < deadline, "the run never started training"
        time.sleep(0.2)
    for _ in range(presses):
        process.send_signal(signal.SIGINT)
        time.sleep(0.02)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 130, out + err
    assert "Traceback" not in out + err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[0].startswith("Ctrl-C: stopping after this step"), err
    assert len(lines) == 2, err  # the notice, then the one line
    assert not (run_dir / "model").exists()
    return run_dir, lines[-1]


def _resume_finishes(run_dir: Path, steps: int) -> None:
    done = subprocess.run(_cli("resume", str(run_dir), f"train.steps={steps}"), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert (run_dir / "model" / "model.safetensors").is_file()


def test_ctrl_c_finishes_the_step_checkpoints_it_and_exits_130_resumable(tmp_path):
    run_dir, line = _interrupted(tmp_path, presses=1)
    found = re.fullmatch(r"interrupted at step (\d+); checkpoint: (\S+); continue with: autotelic resume (\S+)", line)
    assert found, line
    step, checkpoint = int(found[1]), Path(found[2])
    assert checkpoint == run_dir / "checkpoints" / f"step_{step:06d}" and damage(checkpoint) is None
    assert Path(found[3]) == run_dir
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == step  # every finished step, logged
    _resume_finishes(run_dir, step + 2)


def test_a_second_ctrl_c_abandons_the_step_and_keeps_the_checkpoints_written_before(tmp_path):
    run_dir, line = _interrupted(tmp_path, presses=2)
    # the second press lands mid-step (abandoned), or, rarely, after the step the first one let finish
    found = re.fullmatch(r"interrupted (?:after|at) step (\d+)(?: \(the work in progress was abandoned\))?; "
                         r"(?:last )?checkpoint: (.+); continue with: autotelic resume (\S+)", line)
    assert found, line
    checkpoints = sorted((run_dir / "checkpoints").glob("step_*"))
    assert found[2] == (str(checkpoints[-1]) if checkpoints else "none (resuming starts over)"), line
    assert all(damage(path) is None for path in checkpoints) and not any(p.suffix == ".partial" for p in checkpoints)
    _resume_finishes(run_dir, int(found[1]) + 2)
