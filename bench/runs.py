"""What every arm-comparison bench shares: running arms for the same steps over several seeds, reading their
per-task held-out records, comparing arms with bench/stats.py and writing the artifact (bench/artifacts.py).

How budgets bind: every arm of a bench runs ``train.steps=--steps`` with the same samples per step (each
bench sets its arms' overrides so), and ``train.max_minutes=--max-minutes`` only as a safety net: an arm
that stops on it ran fewer steps than the others, which its row records (``time_cap_bound``) and the bench
prints as a flag. With ``--equal-minutes`` the time cap is the budget instead, for a strategy that saves compute:
every arm trains ``--max-minutes`` (each finishes the step in progress as the cap passes), ``--steps`` is a ceiling
that must not bind, and an arm that reaches it first is flagged; paired arms should run at the same time on the
same machine (``--parallel``, the arms of a seed side by side), since minutes depend on it. Seeds: ``train.seed``
0 .. --seeds-1 (from --first-seed instead of 0: a new sample beside an earlier bench's seeds), the held-out set
the same for every arm and seed (``eval.seed`` is never changed; ``eval.per_level`` is set so the set has at least
``--heldout`` tasks).
Arms run one after the other with every core each (the order alternating over seeds), or with
``--parallel`` side by side, each pinned to an equal share of the cores (one where runs outnumber them) with one
torch thread; the artifact says which.
A bench longer than a session can be finished in pieces: every run leaves ``<run_dir>.json`` (its command and the
code it ran, ``artifacts.code_trees``), and ``--reuse`` keeps a finished run of the same command on the same code
instead of running it again (its row says ``reused``). Where the runs dir does not outlive the session (a fresh
machine each time), ``python bench/runs.py pack RUNS_DIR ARCHIVE`` keeps the finished runs' records (no weights,
training samples or plots, about 10 KB a run) as one archive to commit under bench/results/archives/ (``--arms``:
only those arms', where the others are in an earlier bench's archive), and ``unpack ARCHIVE RUNS_DIR`` puts them back
next time: into the same RUNS_DIR (each run's command names it), run from a checkout of the same src/ and recipes/.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import artifacts  # bench/artifacts.py: the importing script's directory is on sys.path
import stats

from autotelic.backends.hf import HFPolicy
from autotelic.config import RunConfig
from autotelic.heldout import LABELS, build_heldout
from autotelic.loading import load_config
from autotelic.run_state import holds_run
from autotelic.types import Task

TEST_TIME = LABELS["test_time"]


@dataclass(frozen=True)
class Arm:
    name: str
    overrides: tuple[str, ...] = ()
    recipe: Path | None = None
    label: str = ""  # printed beside the arm and kept in its rows, e.g. TEST_TIME


@dataclass(frozen=True)
class Budget:
    steps: int
    max_minutes: float  # a safety net that must not bind (with equal_minutes: the budget)
    seeds: int
    heldout: int  # at least this many held-out tasks
    parallel: bool
    overrides: tuple[str, ...] = ()  # for every arm, before its own (which define the arms and win)
    keep_weights: bool = False  # each run's checkpoints/ as it ends and model/ after the artifact (2 GB in all)
    reuse: bool = False  # keep finished runs of the same command on the same code (``--reuse``)
    first_seed: int = 0  # train.seed first_seed .. first_seed+seeds-1: a new sample beside an earlier bench's seeds
    equal_minutes: bool = False  # the arms train max_minutes each, steps a ceiling (``--equal-minutes``)


@dataclass(frozen=True)
class ArmRun:
    arm: Arm
    seed: int
    run_dir: Path
    steps_wanted: int
    reused: bool = False  # finished by an earlier invocation of the bench (``--reuse``)

    def summary(self) -> dict[str, Any]:
        return json.loads((self.run_dir / "summary.json").read_text())

    def time_cap_bound(self) -> bool:
        return self.summary()["steps"] < self.steps_wanted

    def row(self) -> dict[str, Any]:
        summary = self.summary()
        metrics = [json.loads(line) for line in (self.run_dir / "metrics.jsonl").read_text().splitlines()]
        samples = sum(m.get("generate/samples", 0) for m in metrics)
        label = self.arm.label or summary.get("heldout_label", "")
        return {"arm": self.arm.name, "seed": self.seed, "label": label,
                "split": summary.get("heldout_split", "test"),  # runs before the validation split: test
                "steps": summary["steps"],
                "steps_wanted": self.steps_wanted, "time_cap_bound": self.time_cap_bound(),
                "train_minutes": round(summary["train_seconds"] / 60, 2), "samples": samples,
                "samples_per_step": round(samples / max(1, summary["steps"]), 1),
                "completion_tokens": summary["completion_tokens"], "heldout_n": summary["heldout_tasks"],
                "accuracy_before": summary["eval_before"]["accuracy"],
                "accuracy_after": summary["eval_after"]["accuracy"], "run_dir": str(self.run_dir),
                "reused": self.reused,
                # what the run measured besides accuracy (eval.win_rate, eval.pass_k, memory.at_eval, CoMAS's
                # discussion and agents), kept beside it
                **{key: summary[key] for key in ("win_rate", "pass_at_k", "memory_eval", "comas") if key in summary}}


def runs_of(runs: list[ArmRun], arm: Arm) -> list[ArmRun]:
    """The runs of one arm, in seed order as run_arms returned them."""
    return [run for run in runs if run.arm == arm]


def add_budget_arguments(parser: argparse.ArgumentParser, steps: int, max_minutes: float, heldout: int) -> None:
    parser.add_argument("--steps", type=int, default=steps, help="training steps per arm and seed")
    parser.add_argument("--max-minutes", type=float, default=max_minutes,
                        help="safety cap on each arm's training minutes; an arm it stops is flagged")
    parser.add_argument("--equal-minutes", action="store_true",
                        help="compare at equal training minutes: --max-minutes is every arm's budget and --steps a "
                             "ceiling, flagged where an arm reaches it first (for strategies that save compute)")
    parser.add_argument("--seeds", type=int, default=3, help="training seeds per arm (train.seed 0, 1, ...)")
    parser.add_argument("--first-seed", type=int, default=0,
                        help="the first train.seed (a new sample of seeds, apart from an earlier bench's 0, 1, ...)")
    parser.add_argument("--heldout", type=int, default=heldout, help="held-out tasks, at least")
    parser.add_argument("--parallel", action="store_true", help="arms side by side, an equal share of the cores each")
    parser.add_argument("--runs-dir", type=Path, default=None, help="keep the runs here (default: a temp dir)")
    parser.add_argument("--keep-weights", action="store_true",
                        help="keep each run's checkpoints/ (deleted as the run ends) and model/ (once the artifact is "
                             "written)")
    parser.add_argument("--results-dir", type=Path, default=artifacts.RESULTS, help="where the artifact goes")
    parser.add_argument("--reuse", action="store_true",
                        help="keep the runs in --runs-dir that finished with the same command on the same code "
                             "(src/ and recipes/) instead of running them again: a bench finished over sessions")
    parser.add_argument("overrides", nargs="*", help="extra config overrides for every arm")


def budget_from(args: argparse.Namespace) -> Budget:
    return Budget(args.steps, args.max_minutes, args.seeds, args.heldout, args.parallel, tuple(args.overrides),
                  args.keep_weights, args.reuse, args.first_seed, args.equal_minutes)


def runs_dir_from(args: argparse.Namespace, prefix: str) -> Path:
    runs_dir = args.runs_dir or Path(tempfile.mkdtemp(prefix=f"{prefix}-"))
    runs_dir.mkdir(parents=True, exist_ok=True)
    return runs_dir


def heldout_overrides(arm: Arm, budget: Budget) -> list[str]:
    """eval.per_level for at least ``budget.heldout`` tasks over the arm's families and evaluation levels."""
    config = load_config(arm.recipe, [*budget.overrides, *arm.overrides])
    cells = sum(1 for _ in config.curriculum.families for _ in config.eval.levels)
    return [f"eval.per_level={math.ceil(budget.heldout / cells)}"]


def arm_config(arm: Arm, budget: Budget) -> RunConfig:
    """The configuration an arm's runs train with (any seed: the held-out set does not depend on it)."""
    return load_config(arm.recipe, [*budget.overrides, *arm.overrides, *heldout_overrides(arm, budget)])


def heldout_of(arm: Arm, budget: Budget) -> list[Task]:
    """The held-out tasks the arm's runs evaluate on (the same for every seed)."""
    return list(build_heldout(arm_config(arm, budget)))


def trained_policy(run: ArmRun, config: RunConfig) -> HFPolicy:
    """The model a run exported, to evaluate in the bench's own process."""
    return HFPolicy(dataclasses.replace(config.model, path=str(run.run_dir / "model")), seed=config.eval.seed)


def command(name: str, overrides: list[str], runs_dir: Path, steps: int, minutes: float, threads: int | None,
            recipe: Path | None = None) -> list[str]:
    """``autotelic run`` of ``<runs_dir>/<name>`` for ``steps`` steps, ``minutes`` of training at most."""
    return [sys.executable, "-m", "autotelic.cli", "run", *(["--config", str(recipe)] if recipe else []), *overrides,
            f"train.steps={steps}", f"train.max_minutes={minutes}", "eval.every=0", "train.checkpoint_every=100000",
            f"model.threads={threads or 'null'}", "logging.progress=false", f"logging.runs_dir={runs_dir}",
            f"logging.run_name={name}"]


def launch(name: str, overrides: list[str], runs_dir: Path, minutes: float, threads: int | None,
           steps: int) -> subprocess.Popen:
    """One run, its log beside it (bench/gpu_throughput.py's timed runs)."""
    return _start(command(name, overrides, runs_dir, steps, minutes, threads), runs_dir / f"{name}.log", None)


def _arm_command(arm: Arm, seed: int, budget: Budget, run_dir: Path) -> list[str]:
    overrides = [*budget.overrides, *arm.overrides, *heldout_overrides(arm, budget), f"train.seed={seed}"]
    return command(run_dir.name, overrides, run_dir.parent, budget.steps, budget.max_minutes,
                   1 if budget.parallel else None, arm.recipe)


def _start(command: list[str], log: Path, cores: frozenset[int] | None) -> subprocess.Popen:
    pin = (lambda: os.sched_setaffinity(0, cores)) if cores is not None else None
    return subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT, preexec_fn=pin)


def core_sets(runs: int) -> list[frozenset[int]]:
    """The cores each of ``runs`` side-by-side runs is pinned to: an equal share, one core at least. Where cores
    outnumber runs (a GPU machine's 16 cores, six runs) each gets several, which its sandboxed unit tests use: on
    one core they took half of a code step there. Cores left over stay idle, so every run gets the same share."""
    cores = sorted(os.sched_getaffinity(0))
    share = max(1, len(cores) // max(1, runs))
    return [frozenset(cores[start:start + share]) for start in range(0, len(cores) - share + 1, share)]


def provenance(command: list[str]) -> dict[str, Any]:
    """What a run's records depend on: its command (less the interpreter's path, and with the checkout's own
    files, such as the recipe, named from the checkout's root: a worktree elsewhere runs the same command), the
    code it ran, and the content of the checkout's files the command names (a bench script run as a seed's worker
    holds that seed's steps, outside src/)."""
    inside = f"{artifacts.REPO}{os.sep}"
    named = [arg for arg in command[1:] if arg.startswith(inside) and Path(arg).is_file()]
    return {"command": [arg.removeprefix(inside) for arg in command[1:]], "code": artifacts.code_trees(),
            "files": {arg.removeprefix(inside): hashlib.sha256(Path(arg).read_bytes()).hexdigest() for arg in named}}


def finished_earlier(run_dir: Path, command: list[str]) -> bool:
    """``run_dir`` holds a run of ``command`` that finished on the code checked out now."""
    record, wanted = run_dir.with_suffix(".json"), provenance(command)
    return wanted["code"] is not None and record.exists() and json.loads(record.read_text()) == wanted


def run_arms(arms: list[Arm], budget: Budget, runs_dir: Path) -> list[ArmRun]:
    """Every arm for every seed: ``<runs_dir>/<arm>-s<seed>``; the bench stops if any run fails. A run that
    finishes leaves ``<run_dir>.json`` (its provenance, taken when it started), which ``--reuse`` reads."""
    planned = [(arm, seed, runs_dir / artifacts.run_name(arm.name, seed))
               for seed in range(budget.first_seed, budget.first_seed + budget.seeds)
               for arm in (arms if seed % 2 == 0 else arms[::-1])]
    commands = [_arm_command(arm, seed, budget, run_dir) for arm, seed, run_dir in planned]
    jobs = [ArmRun(arm, seed, run_dir, budget.steps, budget.reuse and finished_earlier(run_dir, command))
            for (arm, seed, run_dir), command in zip(planned, commands)]
    # checked before anything starts: `autotelic run` refuses a directory that holds a run, and a bench stopped
    # there would have started (and then stopped) the arms beside it
    occupied = [str(job.run_dir) for job in jobs if not job.reused and holds_run(job.run_dir)]
    if occupied:
        sys.exit(f"{', '.join(occupied)}: already hold runs that this bench would run again; delete them or pass "
                 "a fresh --runs-dir (--reuse keeps only runs finished with the same command on the code checked out "
                 "now)")
    run_commands(list(zip(jobs, commands)), budget.parallel, keep_checkpoints=budget.keep_weights)
    return jobs


def shares_cores(at_once: int | None) -> bool:
    """``at_once`` parallel runs outnumber the cores: they run unpinned, the system sharing the cores."""
    return at_once is not None and at_once > len(os.sched_getaffinity(0))


def run_commands(jobs: list[tuple[ArmRun, list[str]]], parallel: bool, at_once: int | None = None,
                 keep_checkpoints: bool = False) -> None:
    """Each job's command, its log at ``<run_dir>.log``, one after another or side by side, each pinned to an equal
    share of the cores (``core_sets``); with ``at_once`` above the cores, that many at once unpinned, the system
    sharing the cores among them (only where accuracy, not time, is compared). A job marked reused is skipped; one
    that finishes leaves ``<run_dir>.json``, its provenance, and, unless ``keep_checkpoints``, loses its checkpoints
    as it ends: they serve only to resume an unfinished run, and at 1.6 GB a run of the embedded model they filled
    the disk during a 32-run bench. When one fails no other starts, those running finish
    (``--reuse`` keeps them), and then the bench stops."""
    for job, _ in jobs:
        if job.reused:
            print(f"{job.arm.name} seed {job.seed}: reusing the finished run in {job.run_dir}", flush=True)
    waiting = [(job, command) for job, command in jobs if not job.reused]
    pins = [None] * at_once if parallel and shares_cores(at_once) else core_sets(len(waiting)) if parallel else [None]
    slots = dict(enumerate(pins))  # slot -> the cores its runs are pinned to
    running: dict[int, tuple[ArmRun, dict[str, Any], subprocess.Popen]] = {}
    failed: list[str] = []
    while waiting or running:
        for slot in [s for s in slots if s not in running][:len(waiting)]:
            job, command = waiting.pop(0)
            print(f"{job.arm.name} seed {job.seed}: running in {job.run_dir}", flush=True)
            job.run_dir.with_suffix(".json").unlink(missing_ok=True)  # finished only once it says so again
            running[slot] = (job, provenance(command), _start(command, job.run_dir.with_suffix(".log"), slots[slot]))
        job, started_as, process = running.pop(_wait_any(running))
        if process.returncode == 0:
            job.run_dir.with_suffix(".json").write_text(json.dumps(started_as))
            if not keep_checkpoints:
                shutil.rmtree(job.run_dir / CHECKPOINTS, ignore_errors=True)
            continue
        log, ended = job.run_dir.with_suffix(".log"), how_it_ended(process.returncode)
        with log.open("a") as tail:  # a killed run writes nothing of its own end: its log says it
            tail.write(f"\n{ended}\n")
        failed.append(f"{job.arm.name} seed {job.seed} failed ({ended}): see {log}")
        print(failed[-1] + (f"; the {len(running)} running finish first" if running else ""), flush=True)
        waiting.clear()
    if failed:
        sys.exit("; ".join(failed))


def how_it_ended(returncode: int) -> str:
    """A failed run's exit in words; a SIGKILL nobody sent by hand is most often the kernel's out-of-memory killer,
    which leaves no trace in the run's own output."""
    if returncode >= 0:
        return f"exit status {returncode}"
    name = signal.Signals(-returncode).name
    if name == "SIGKILL":
        return ("killed by SIGKILL, most likely out of memory (`dmesg | grep -i oom` says); run fewer at once, "
                "or set model.gradient_checkpointing=true or a lower algorithm.micro_batch_tokens")
    return f"killed by {name}"


def _wait_any(running: dict[int, tuple[ArmRun, dict[str, Any], subprocess.Popen]]) -> int:
    """The slot of a run that has ended, once one has."""
    while True:
        for slot, (_, _, process) in running.items():
            if process.poll() is not None:
                return slot
        time.sleep(0.5)


@dataclass(frozen=True)
class Measure:
    """One arm's per-task held-out scores: ``<run_dir>/<records>.jsonl``, field ``field``, for each seed."""

    runs: list[ArmRun]
    records: str = "eval_after"
    field: str = "correct"  # the records' strict 0/1; a graded field (a discussion's "final") counts when full

    def matrix(self) -> tuple[list[tuple], list[list[float]]]:
        """(task keys, seeds x tasks scores); the tasks must be the same, in the same order, for every seed."""
        keys, rows = None, []
        for run in sorted(self.runs, key=lambda r: r.seed):
            lines = (run.run_dir / f"{self.records}.jsonl").read_text().splitlines()
            records = [json.loads(line) for line in lines]
            these = [(r["family"], r["level"], r["prompt"], r.get("unit", "")) for r in records]
            if keys is not None and these != keys:
                raise ValueError(f"{run.run_dir / self.records}: other held-out tasks than the other seeds'")
            keys = these
            rows.append([float(r[self.field] >= 1.0) for r in records])  # strict: full marks or nothing
        return keys or [], rows


def compare(name: str, baseline: Measure, arm: Measure) -> stats.Comparison:
    """``arm`` minus ``baseline`` on the same held-out tasks, paired by seed and task."""
    base_keys, base = baseline.matrix()
    arm_keys, treated = arm.matrix()
    if base_keys != arm_keys:
        raise ValueError(f"{name}: the arms were evaluated on different held-out tasks")
    return stats.compare(name, base, treated)


def comparison_line(comparison: stats.Comparison) -> str:
    lo, hi = comparison["ci95"]
    return (f"{comparison['name']}: gain_points={comparison['gain_points']:+.1f} ci95=[{lo:+.1f}, {hi:+.1f}] "
            f"seeds={comparison['seeds']} heldout_n={comparison['heldout_n']}")


CHECKPOINTS = "checkpoints"  # what a run resumes from, nothing else: 1.6 GB a run for the embedded model
WEIGHTS = ("model", CHECKPOINTS)  # a run's exported model and checkpoints: 2 GB a run for the embedded model
# what no bench reads and the archive would mostly be: every training sample's text (0.6 MB a run) and the plots of
# the metrics (report.html, 0.2 MB of PNGs)
BULK = ("rollouts.jsonl", "report.html")


def drop_weights(run_dir: Path) -> None:
    """The run's exported model and checkpoints (``WEIGHTS``): what its records were read from, which filled the
    disk after a few benches; its logs, metrics and per-task records stay."""
    for heavy in WEIGHTS:
        shutil.rmtree(run_dir / heavy, ignore_errors=True)


def pack(runs_dir: Path, archive: Path, arms: tuple[str, ...] = ()) -> list[str]:
    """The finished runs of ``runs_dir`` (those with a provenance ``<run>.json``), with their logs, without their
    weights, training samples and plots, as one xz tarball; returns their names. Unfinished runs stay out: ``--reuse``
    would run them again anyway. ``arms``: only those arms' runs, where a bench reuses another's arm from its own
    archive (each archive is then unpacked into the same runs dir)."""
    finished = sorted(record.stem for record in runs_dir.glob("*.json") if (runs_dir / record.stem).is_dir())
    if arms:
        try:
            finished = [name for name in finished if artifacts.arm_and_seed(name)[0] in arms]
        except ValueError as bad:
            sys.exit(f"{runs_dir}: {bad}; pack --arms picks runs by their names, so point it at a bench's --runs-dir")
    if not finished:
        of_arms = f" of {', '.join(arms)}" if arms else ""
        sys.exit(f"{runs_dir}: no finished run{of_arms} (a <run>.json beside its directory) to pack; "
                 "is this a bench's --runs-dir?")

    def records_only(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
        parts = Path(member.name).parts
        return None if len(parts) > 1 and parts[1] in (*WEIGHTS, *BULK) else member

    archive.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "w:xz") as tar:
        for name in finished:
            for path in (runs_dir / name, runs_dir / f"{name}.json", runs_dir / f"{name}.log"):
                if path.exists():
                    tar.add(path, arcname=path.relative_to(runs_dir), filter=records_only)
    return finished


def unpack(archive: Path, runs_dir: Path) -> list[str]:
    """``pack``'s runs back into ``runs_dir``, refused (before anything is written) where a run already is; returns
    their names."""
    with tarfile.open(archive, "r:xz") as tar:
        names = sorted({Path(member.name).parts[0] for member in tar.getmembers() if member.isdir()})
        taken = [name for name in names if (runs_dir / name).exists() or (runs_dir / f"{name}.json").exists()]
        if taken:
            sys.exit(f"{runs_dir}: already holds {', '.join(taken)}; unpack {archive} into a runs dir without them")
        runs_dir.mkdir(parents=True, exist_ok=True)
        tar.extractall(runs_dir, filter="data")  # a member that would land outside runs_dir is refused
    return names


def execution(budget: Budget, runs: int) -> str:
    """How ``runs`` runs (those not reused) were placed on the cores."""
    if budget.parallel:
        share = len(core_sets(runs)[0])
        return (f"parallel: arms side by side, each pinned to {'one' if share == 1 else share} of "
                f"{len(os.sched_getaffinity(0))} cores, 1 torch thread")
    return f"sequential: one arm at a time with all {len(os.sched_getaffinity(0))} cores"


def report(bench: str, runs: list[ArmRun], comparisons: list[stats.Comparison], budget: Budget,
           results_dir: Path, extra_rows: dict[tuple[str, int], dict[str, Any]] | None = None,
           summary: dict[str, Any] | None = None) -> Path:
    """Print every run's row, write the artifact, then the flags and, last, the comparison lines."""
    first_seed = min(run.seed for run in runs)
    order = [run.arm.name for run in runs if run.seed == first_seed]
    runs = sorted(runs, key=lambda run: (order.index(run.arm.name), run.seed))
    rows = [{**run.row(), **(extra_rows or {}).get((run.arm.name, run.seed), {})} for run in runs]
    print(f"\n{'arm':24s} {'seed':>4s} {'steps':>7s} {'samples/step':>12s} {'before':>7s} {'after':>7s}  label")
    for row in rows:
        print(f"{row['arm']:24s} {row['seed']:4d} {row['steps']:3d}/{row['steps_wanted']:<3d} "
              f"{row['samples_per_step']:12.1f} {row['accuracy_before']:7.1%} {row['accuracy_after']:7.1%}  "
              f"{row['label']}")
    if budget.equal_minutes:  # the time cap is the budget: every arm should stop on it
        flagged = {artifacts.STEP_CEILING_BOUND: [
            f"{row['arm']} seed {row['seed']}: the step ceiling bound after {row['steps']} steps, before the time cap"
            for row in rows if not row["time_cap_bound"]]}
    else:
        flagged = {artifacts.TIME_CAP_BOUND: [
            f"{row['arm']} seed {row['seed']}: the time cap bound after {row['steps']} of {row['steps_wanted']} steps"
            for row in rows if row["time_cap_bound"]]}
    path = artifacts.write(bench, rows, comparisons, {
        "steps": budget.steps, "max_minutes": budget.max_minutes, "seeds": budget.seeds,
        "first_seed": budget.first_seed, "equal_minutes": budget.equal_minutes, "heldout_wanted": budget.heldout,
        "overrides": list(budget.overrides), "execution": execution(budget, sum(not run.reused for run in runs)),
        **flagged, **(summary or {})}, directory=results_dir)
    print(f"artifact: {path}")
    if not budget.keep_weights:
        for run in runs:
            drop_weights(run.run_dir)
    for run in [flag for flags in flagged.values() for flag in flags]:
        print(f"FLAG {run}: its comparisons are not at equal budgets")
    for comparison in comparisons:
        print(comparison_line(comparison))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description="a bench's finished runs as one archive to commit, and back")
    commands = parser.add_subparsers(dest="command", required=True)
    packing = commands.add_parser("pack", help="RUNS_DIR's finished runs, without weights, into ARCHIVE (.tar.xz)")
    packing.add_argument("runs_dir", type=Path)
    packing.add_argument("archive", type=Path)
    packing.add_argument("--arms", nargs="+", default=(), help="only these arms' runs (another archive holds the rest)")
    unpacking = commands.add_parser("unpack", help="ARCHIVE's runs into RUNS_DIR (the one they ran in, for --reuse)")
    unpacking.add_argument("archive", type=Path)
    unpacking.add_argument("runs_dir", type=Path)
    args = parser.parse_args()
    if args.command == "pack":
        names = pack(args.runs_dir, args.archive, tuple(args.arms))
        print(f"{args.archive}: {len(names)} finished runs ({', '.join(names)}), {args.archive.stat().st_size} bytes")
    else:
        names = unpack(args.archive, args.runs_dir)
        print(f"{args.runs_dir}: {len(names)} runs back ({', '.join(names)}); run the bench with --reuse")


if __name__ == "__main__":
    main()
