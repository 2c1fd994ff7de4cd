"""Faults, with real processes: a run killed at several points (generation, update, checkpoint write, export, a
random moment) and resumed each time ends exactly like an uninterrupted run; a damaged newest checkpoint is
skipped with a warning; a checkpoint that does not fit the config is refused in one line; a disk that fills while a
checkpoint is written stops the run in one line, and resuming it ends it like an uninterrupted run.

Each kill is a SIGABRT to a run started with faulthandler on: the process dies as abruptly as by SIGKILL (no
Python code runs, no file is flushed or closed), but first writes every thread's stack. A kill is aimed from what
the run writes (its progress lines, its checkpoint and export directories, the step times in metrics.jsonl), and
the stacks say where it landed: the test fails unless one thread was inside the phase aimed at (the checkpoint
writer in save_checkpoint, the main thread in generate or _update or export), and fails as well when the run had
already ended or a wait never came true (``test_a_kill_that_misses_its_phase_fails_the_test``).

The model is ``random:qwen2-tiny`` (two layers, random weights, the embedded tokenizer): a step takes well under a
second, so the cost is mostly the processes starting. The length reward varies with what was sampled, so every
step updates the weights and any divergence after a resume shows in the rewards.
"""
import json
import os
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotelic.cli import app

pytestmark = pytest.mark.slow

STEPS = 6
TINY = [
    "model.path=random:qwen2-tiny", "model.lora=false", "model.threads=1", f"train.steps={STEPS}",
    "train.checkpoint_every=1", "train.keep_checkpoints=2", "train.max_minutes=null", "control.tasks_per_step=2",
    "generate.group_size=4", "control.max_new_tokens=6", "curriculum.families=[add]", "curriculum.levels=[1]",
    "eval.levels=[1]", "eval.per_level=2", "eval.max_new_tokens=4", "eval.every=2", "algorithm.lr=1e-3",
    "filter.rewards=[{name: verifier}, {name: length, options: {max_chars: 20}}]",
]
TIMING = ("time/", "perf/")  # differ between any two runs
PLAIN_LINE = re.compile(r"^step (\d+)/%d  reward -?\d+\.\d\d(  eval \d+\.\d%%)?  \d+\.\d s/step  ETA \w+$" % STEPS,
                        re.MULTILINE)


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "autotelic.cli", *args]


def _rows(path: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if not k.startswith(TIMING)}
            for line in path.read_text().splitlines()]


def _outcome(run_dir: Path) -> dict:
    summary = json.loads((run_dir / "summary.json").read_text())
    return {"metrics": _rows(run_dir / "metrics.jsonl"), "rollouts": _rows(run_dir / "rollouts.jsonl"),
            "steps": summary["steps"], "evals": summary["evals"],
            "before": summary["eval_before"]["accuracy"], "after": summary["eval_after"]["accuracy"]}


@dataclass(frozen=True)
class WholeRun:
    run_dir: Path
    log: str
    seconds: float  # from start to exit


@pytest.fixture(scope="module")
def whole_run(tmp_path_factory) -> WholeRun:
    """An uninterrupted run, its output sent to a file as `autotelic run > log 2>&1` would."""
    runs = tmp_path_factory.mktemp("runs")
    log = runs / "log"
    started = time.monotonic()
    with log.open("w") as out:
        subprocess.run(_cli("run", *TINY, f"logging.runs_dir={runs}", "logging.run_name=whole"), stdout=out,
                       stderr=subprocess.STDOUT, check=True, timeout=300)
    return WholeRun(runs / "whole", log.read_text(), time.monotonic() - started)


def test_log_to_a_file_has_a_plain_line_per_step_and_no_library_warnings(whole_run):
    log = whole_run.log
    assert [int(step) for step, _ in PLAIN_LINE.findall(log)] == list(range(1, STEPS + 1)), log
    evaluated = [int(step) for step, evaluation in PLAIN_LINE.findall(log) if evaluation]
    assert evaluated == [2, 4]  # eval.every=2; the last step's evaluation is the final one, reported after
    assert "Warning" not in log and "past_key_values" not in log and "\x1b[" not in log, log


# ---- the kill, and where it landed ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Phase:
    """A part of a run a kill aims at, known by the functions (source file, name) one thread of the run is in
    while it lasts, as faulthandler writes them; a phase of no functions is any moment of the run."""
    name: str
    functions: tuple[tuple[str, str], ...]

    def holds(self, stack: str) -> bool:
        return all(re.search(rf'{re.escape(path)}", line \d+ in {name}\n', stack)
                   for path, name in self.functions)


GENERATION = Phase("generation", (("autotelic/backends/hf.py", "generate"),
                                  ("autotelic/rollout/pipeline.py", "collect")))
UPDATE = Phase("update", (("autotelic/trainer.py", "_update"),))
CHECKPOINT_WRITE = Phase("checkpoint write", (("autotelic/checkpoint.py", "save_checkpoint"),))
EXPORT = Phase("export", (("autotelic/backends/hf.py", "export"),))
ANY_MOMENT = Phase("random moment", ())
KillPoint = Callable[[subprocess.Popen, Path, random.Random], Phase]
FRAME = re.compile(r'autotelic/([\w/]+\.py)", line \d+ in (\w+)')  # a frame of the run's own code


def _start(command: list[str]) -> subprocess.Popen:
    """A run with faulthandler on, so that a SIGABRT makes it write every thread's stack as it dies."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               start_new_session=True, env={**os.environ, "PYTHONFAULTHANDLER": "1"})
    resource.prlimit(process.pid, resource.RLIMIT_CORE, (0, 0))  # SIGABRT leaves no core file
    return process


def _kill_in(process: subprocess.Popen, phase: Phase) -> None:
    """Kills the run with SIGABRT, as abruptly as SIGKILL (no Python code runs, no file is flushed or
    closed), but faulthandler first writes each thread's stack: the test fails unless one is in ``phase``."""
    aimed = f"the kill aimed at the {phase.name}"
    if process.poll() is not None:
        pytest.fail(f"{aimed} found the run ended (exit status {process.returncode})")
    process.send_signal(signal.SIGABRT)
    process.wait(timeout=60)
    _, found, dump = process.stderr.read().partition("Fatal Python error: Aborted\n\n")
    if process.returncode != -signal.SIGABRT or not found:  # it ended on its own just before the signal came
        pytest.fail(f"{aimed} found the run ending (exit status {process.returncode})")
    stacks = [block for block in dump.split("\n\n") if block.startswith(("Thread 0x", "Current thread 0x"))]
    if not any(phase.holds(stack) for stack in stacks):
        where = "\n".join("  " + (" < ".join(f"{path} {name}" for path, name in FRAME.findall(stack)[:4])
                                  or "no frame of autotelic's code") for stack in stacks)
        pytest.fail(f"{aimed} landed outside it, with the run's threads in\n{where}")


# ---- where to kill: each waits, from a run's output lines and files, for one moment of the run ----------------
def _until(condition: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    """Waits until ``condition`` holds; the test fails, naming ``what`` it waited for, if it never does."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"waited {timeout:g} s for {what}")
        time.sleep(0.002)


def _after_step(process: subprocess.Popen, step: int) -> None:
    """Read the run's plain progress lines until step ``step`` has finished; the test fails if the run ends
    first."""
    for line in process.stderr:
        match = PLAIN_LINE.match(line.rstrip("\n"))
        if match and int(match.group(1)) >= step:
            return
    pytest.fail(f"the run ended before step {step} finished")


def _generate_seconds(run_dir: Path, step: int) -> float:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return next(r["time/generate"] for r in rows if r["step"] == step and "time/generate" in r)


def _checkpoint_begun(run_dir: Path, step: int) -> bool:
    name = f"checkpoints/step_{step:06d}"
    return (run_dir / f"{name}.partial").exists() or (run_dir / name).exists()


def during_checkpoint_write(process: subprocess.Popen, run_dir: Path, rng: random.Random) -> Phase:
    _after_step(process, 1)  # step 1's checkpoint is written from here on, beside step 2's generation
    _until(lambda: any(run_dir.glob("checkpoints/*.partial/state.pt")), "step 1's checkpoint to be written")
    return CHECKPOINT_WRITE


def during_generation(process: subprocess.Popen, run_dir: Path, rng: random.Random) -> Phase:
    _after_step(process, 2)  # step 3 generates once step 2's checkpoint has started, about as long as step 2
    _until(lambda: _checkpoint_begun(run_dir, 2), "step 2's checkpoint to start")
    time.sleep(rng.uniform(0.1, 0.35) * _generate_seconds(run_dir, 2))
    return GENERATION


def during_update(process: subprocess.Popen, run_dir: Path, rng: random.Random) -> Phase:
    """Step 4 updates once it has generated (about as long as step 3 did) and step 3's checkpoint is written,
    for longer than it generated."""
    _after_step(process, 3)
    _until(lambda: _checkpoint_begun(run_dir, 3), "step 3's checkpoint to start")
    generate = _generate_seconds(run_dir, 3)
    generated = time.monotonic() + 1.5 * generate
    _until(lambda: (run_dir / "checkpoints" / "step_000003").exists(), "step 3's checkpoint to be written")
    time.sleep(max(0.0, generated - time.monotonic()) + rng.uniform(0.1, 0.4) * generate)
    return UPDATE


def at_random(run_seconds: float) -> KillPoint:
    """A random moment early in a run that takes ``run_seconds`` uninterrupted (model load, evaluation, a step
    or a checkpoint), well before its export: a model.partial it left would look like the next run's export."""
    def kill_point(process: subprocess.Popen, run_dir: Path, rng: random.Random) -> Phase:
        time.sleep(rng.uniform(0.05, 0.3) * run_seconds)
        return ANY_MOMENT
    return kill_point


def during_export(process: subprocess.Popen, run_dir: Path, rng: random.Random) -> Phase:
    _until(lambda: (run_dir / "model.partial").exists() or process.poll() is not None, "the export to begin",
           timeout=300)
    return EXPORT


def test_killed_and_resumed_run_ends_like_an_uninterrupted_one(tmp_path, whole_run):
    run_dir, rng = tmp_path / "killed", random.Random(20)
    command = _cli("run", *TINY, f"logging.runs_dir={tmp_path}", "logging.run_name=killed")
    config = None
    kill_points = (during_checkpoint_write, during_generation, during_update, at_random(whole_run.seconds),
                   during_export)
    for kill_point in kill_points:
        process = _start(command)
        phase = kill_point(process, run_dir, rng)
        _kill_in(process, phase)
        config = config or (run_dir / "config.yaml").read_text()
        model = run_dir / "model"
        complete = all((model / name).is_file() for name in ("config.json", "model.safetensors", "tokenizer.json"))
        assert complete or not model.exists(), f"killed in the {phase.name}: a model directory with files missing"
        command = _cli("resume", str(run_dir))
    finished = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr[-3000:]

    assert _outcome(run_dir) == _outcome(whole_run.run_dir)  # each step once, none lost, none repeated
    assert (run_dir / "config.yaml").read_text() == config  # resuming keeps the run's config as written
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step_000005", "step_000006"]
    assert not (run_dir / "model.partial").exists()


def test_a_kill_that_misses_its_phase_fails_the_test(tmp_path):
    """The checks above, aimed wrong at a real run: a kill aimed at the export of a run in its first steps, a
    kill aimed at a run that has ended, a wait for a step it never reaches and a wait that times out."""
    process = _start(_cli("run", *TINY, f"logging.runs_dir={tmp_path}", "logging.run_name=missed"))
    _after_step(process, 1)
    with pytest.raises(pytest.fail.Exception, match=r"(?s)the kill aimed at the export landed outside it, "
                                                    r"with the run's threads in\n.*(trainer|checkpoint)\.py"):
        _kill_in(process, EXPORT)
    ended = rf"the kill aimed at the update found the run ended \(exit status {-signal.SIGABRT}\)"
    with pytest.raises(pytest.fail.Exception, match=ended):
        _kill_in(process, UPDATE)
    with pytest.raises(pytest.fail.Exception, match="the run ended before step 2 finished"):
        _after_step(process, 2)
    with pytest.raises(pytest.fail.Exception, match="waited 0.1 s for the export to begin"):
        _until(lambda: (tmp_path / "missed" / "model.partial").exists(), "the export to begin", timeout=0.1)


def test_damaged_newest_checkpoint_is_skipped_and_a_foreign_one_refused(tmp_path, whole_run):
    run_dir = tmp_path / "copy"
    shutil.copytree(whole_run.run_dir, run_dir)
    newest = run_dir / "checkpoints" / "step_000006" / "state.pt"
    newest.write_bytes(newest.read_bytes()[:1000])  # cut short, as by a full disk
    with (run_dir / "metrics.jsonl").open("a") as metrics:
        metrics.write('{"step": 7, "reward/me')  # a line the kill cut off
    (run_dir / "summary.json").unlink()
    config = (run_dir / "config.yaml").read_text()

    resumed = subprocess.run(_cli("resume", str(run_dir)), capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (f"checkpoint {newest.parent} is damaged (state.pt holds 1000 bytes, its manifest says"
            in resumed.stderr), resumed.stderr
    assert _outcome(run_dir) == _outcome(whole_run.run_dir)  # step 6 again, from step 5: the same numbers

    runner = CliRunner()
    foreign = runner.invoke(app, ["resume", str(run_dir), "model.lora=true"])
    assert foreign.exit_code == 2, foreign.output
    [message] = foreign.stderr.strip().splitlines()
    assert re.fullmatch(r"error: checkpoint \S+step_000006 does not fit this run's config: saved weights do not fit "
                        r"this model \(\d+ tensors missing, e\.g\. .*lora.*\): .*", message), message
    assert (run_dir / "config.yaml").read_text() == config  # the refused override is not saved

    for checkpoint in (run_dir / "checkpoints").iterdir():
        (checkpoint / "state.pt").write_bytes(b"garbage")
    damaged = runner.invoke(app, ["resume", str(run_dir)])
    assert damaged.exit_code == 2, damaged.output
    assert re.fullmatch(
        rf"error: no intact checkpoint in {re.escape(str(run_dir / 'checkpoints'))} \(step_000006: state.pt holds 7 "
        r"bytes, its manifest says \d+; step_000005: state.pt holds 7 bytes, its manifest says \d+\): delete that "
        rf"directory to train {re.escape(str(run_dir))} again from step 0, or start a new run",
        damaged.stderr.strip().splitlines()[-1]), damaged.stderr


def test_a_full_disk_stops_the_run_in_one_line_and_resume_ends_it_like_an_uninterrupted_one(tmp_path, whole_run):
    """The disk fills while step 3's checkpoint is written (a tmpfs in a private mount namespace, room for the
    run's records and two checkpoints but not the third that keep_checkpoints=2 writes before dropping the first):
    the run stops with one line that names the cause and the way on, leaves no half checkpoint, and resuming the
    run elsewhere ends it exactly as the uninterrupted run."""
    checkpoint_bytes = (whole_run.run_dir / "checkpoints" / "step_000006" / "state.pt").stat().st_size
    disk, copied = tmp_path / "disk", tmp_path / "copied"
    disk.mkdir()
    # the run's exit status, then its directory copied out of the tmpfs, which goes with the namespace
    script = ('mount -t tmpfs -o size="$1" tmpfs "$2" && "$4" -m autotelic.cli run "${@:5}" logging.runs_dir="$2" '
              'logging.run_name=full; status=$?; cp -a "$2/full" "$3"; exit $status')
    room = 2 * checkpoint_bytes + checkpoint_bytes // 2
    full = subprocess.run(["unshare", "-Urm", "bash", "-c", script, "bash", str(room), str(disk), str(copied),
                           sys.executable, *TINY], capture_output=True, text=True, timeout=300)
    assert full.returncode == 2, full.stderr[-3000:]
    assert re.fullmatch(
        rf"error: writing the checkpoint of step 3 in {re.escape(str(disk / 'full' / 'checkpoints'))} failed: the "
        rf"disk is full \(\d+ MiB free, a checkpoint takes \d+ MiB\); free space, then `autotelic resume "
        rf"{re.escape(str(disk / 'full'))}` continues from step_000002", full.stderr.strip().splitlines()[-1]), \
        full.stderr[-3000:]
    assert sorted(p.name for p in (copied / "checkpoints").iterdir()) == ["step_000001", "step_000002"]

    resumed = subprocess.run(_cli("resume", str(copied)), capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _outcome(copied) == _outcome(whole_run.run_dir)
