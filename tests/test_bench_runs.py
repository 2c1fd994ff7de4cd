"""bench/runs.py end to end: a real bench (bench/ablate_pipeline.py) at a tiny size, its two arms side by side,
with a time cap so small that it binds after the first of two steps; the same runs refused a second time; then a
second seed, reusing the first."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

BENCH = Path(__file__).resolve().parent.parent / "bench"
# the bench's bookkeeping does not depend on the weights: Qwen2's architecture at two layers, random weights
TINY = ["model.path=random:qwen2-tiny", "control.tasks_per_step=2", "generate.group_size=2", "control.max_new_tokens=8",
        "eval.max_new_tokens=8", "curriculum.families=[add]", "eval.levels=[1]"]


def ablate(tmp_path: Path, *extra: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, str(BENCH / "ablate_pipeline.py"), "--steps", "2", "--max-minutes", "0.0001",
                           "--heldout", "4", "--parallel", "--budget", "samples", "--runs-dir", str(tmp_path / "runs"),
                           "--results-dir", str(tmp_path / "results"), *extra, *TINY],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 or not check, done.stdout + done.stderr
    return done


@pytest.mark.slow
def test_a_bench_writes_comparisons_with_intervals_and_flags_a_time_cap_that_binds(tmp_path):
    done = ablate(tmp_path, "--seeds", "1")
    (path,) = (tmp_path / "results").glob("ablate_pipeline-*.json")
    record = json.loads(path.read_text())
    (comparison,) = record["comparisons"]
    assert comparison["name"] == "pipeline_vs_plain" and comparison["seeds"] == 1 and comparison["heldout_n"] == 4
    lo, hi = comparison["ci95"]
    assert lo <= comparison["gain_points"] <= hi
    rows = record["rows"]
    assert sorted((row["arm"], row["seed"]) for row in rows) == [("pipeline", 0), ("plain", 0)]
    assert all(row["time_cap_bound"] and row["steps"] == 1 and row["steps_wanted"] == 2 for row in rows)
    assert len(record["summary"]["time_cap_bound"]) == 2 and record["summary"]["execution"].startswith("parallel")
    # --budget samples: both arms capped at tasks_per_step x group_size = 4 samples (and 32 tokens) a step
    assert {k: record["summary"][k] for k in ("budget", "max_samples_per_step", "max_tokens_per_step")} == \
        {"budget": "samples", "max_samples_per_step": 4, "max_tokens_per_step": 32}
    assert all(row["samples_per_step"] <= 4 for row in rows)
    assert {row["samples_per_step"] for row in rows if row["arm"] == "plain"} == {4}
    assert "FLAG plain seed 0: the time cap bound" in done.stdout
    assert done.stdout.strip().splitlines()[-1].startswith("pipeline_vs_plain: gain_points=")
    # the weights go once the artifact is written (2 GB a run filled the disk); the per-task records stay
    for row in rows:
        run_dir = Path(row["run_dir"])
        assert (run_dir / "eval_after.jsonl").is_file() and (run_dir / "metrics.jsonl").is_file()
        assert not (run_dir / "model").exists() and not (run_dir / "checkpoints").exists()
    first = {Path(row["run_dir"]).name: (Path(row["run_dir"]) / "summary.json").read_text() for row in rows}
    # --first-seed: a new sample of seeds beside those, in the same runs dir
    ablate(tmp_path, "--seeds", "1", "--first-seed", "5")
    (later,) = set((tmp_path / "results").glob("ablate_pipeline-*.json")) - {path}
    record = json.loads(later.read_text())
    assert sorted((row["arm"], row["seed"]) for row in record["rows"]) == [("pipeline", 5), ("plain", 5)]
    assert record["summary"]["first_seed"] == 5
    assert yaml.safe_load((tmp_path / "runs/plain-s5/config.yaml").read_text())["train"]["seed"] == 5
    # the same runs dir without --reuse: refused in one line before any arm starts; the earlier runs stay whole
    refused = ablate(tmp_path, "--seeds", "1", check=False)
    assert refused.returncode != 0 and ": running in" not in refused.stdout
    assert "already hold runs" in refused.stderr and "--runs-dir" in refused.stderr
    assert "Traceback" not in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    assert all((Path(row["run_dir"]) / "summary.json").read_text() == first[Path(row["run_dir"]).name] for row in rows)
    # --reuse: a second seed later (a bench finished over sessions) runs only what is missing, on unchanged code
    code_changed = subprocess.run(["git", "status", "--porcelain", "--", "src", "recipes"], cwd=BENCH.parent,
                                  capture_output=True, text=True, check=True).stdout.strip()
    again = ablate(tmp_path, "--seeds", "2", "--reuse", check=not code_changed)
    if code_changed:  # uncommitted code: nothing can say what the earlier runs ran, so none is kept and none is lost
        assert again.returncode != 0 and "already hold runs" in again.stderr
        return
    (newer,) = set((tmp_path / "results").glob("ablate_pipeline-*.json")) - {path, later}
    rows = json.loads(newer.read_text())["rows"]
    assert sorted((row["arm"], row["seed"]) for row in rows if row["reused"]) == sorted(
        (row["arm"], row["seed"]) for row in rows if row["seed"] < 1)
    assert again.stdout.count("reusing the finished run") == 2 and again.stdout.count(": running in") == 2
    assert all((Path(row["run_dir"]) / "summary.json").read_text() == first[Path(row["run_dir"]).name]
               for row in rows if row["reused"])
    assert len(rows) == 4 and all(row["time_cap_bound"] for row in rows)
    (comparison,) = json.loads(newer.read_text())["comparisons"]  # seeds pooled: the interval widens by their spread
    lo, hi = comparison["ci95"]
    assert comparison["seeds"] == 2 and lo <= comparison["gain_points"] <= hi


@pytest.mark.slow
def test_equal_minutes_makes_the_time_cap_the_budget_and_flags_a_step_ceiling_that_binds(tmp_path):
    """--equal-minutes, for strategies that save compute: a time cap every arm stops on is the budget (no flag);
    an arm that runs out of steps first did not spend it, and is flagged."""
    spent = ablate(tmp_path, "--equal-minutes", "--seeds", "1", "--runs-dir", str(tmp_path / "spent"))
    (path,) = (tmp_path / "results").glob("ablate_pipeline-*.json")
    record = json.loads(path.read_text())
    assert all(row["time_cap_bound"] and row["steps"] == 1 for row in record["rows"])
    assert record["summary"]["equal_minutes"] is True and record["summary"]["step_ceiling_bound"] == []
    assert "time_cap_bound" not in record["summary"] and "FLAG" not in spent.stdout

    ceiling = ablate(tmp_path, "--equal-minutes", "--seeds", "1", "--max-minutes", "60", "--steps", "1",
                     "--runs-dir", str(tmp_path / "ceiling"))
    (later,) = set((tmp_path / "results").glob("ablate_pipeline-*.json")) - {path}
    flags = json.loads(later.read_text())["summary"]["step_ceiling_bound"]
    assert sorted(flags) == ["pipeline seed 0: the step ceiling bound after 1 steps, before the time cap",
                             "plain seed 0: the step ceiling bound after 1 steps, before the time cap"]
    assert ceiling.stdout.count("FLAG") == 2 and "not at equal budgets" in ceiling.stdout


def test_a_runs_provenance_names_the_checkouts_files_from_its_root(monkeypatch):
    """--reuse compares provenances: a recipe read from a worktree elsewhere is the same command."""
    monkeypatch.syspath_prepend(str(BENCH))
    import runs

    def command(checkout: Path) -> list[str]:
        return [sys.executable, "-m", "autotelic.cli", "run", "--config", str(checkout / "recipes" / "opagent-web.yaml"),
                "train.seed=0", "logging.runs_dir=/elsewhere/runs"]

    here = runs.provenance(command(runs.artifacts.REPO))["command"]
    assert here == ["-m", "autotelic.cli", "run", "--config", "recipes/opagent-web.yaml", "train.seed=0",
                    "logging.runs_dir=/elsewhere/runs"]
    script = [sys.executable, str(BENCH / "decoding.py"), "--seed-worker", "0"]  # a worker's steps are its file's
    (hashed,) = runs.provenance(script)["files"].values()
    assert runs.provenance(script)["files"] == {"bench/decoding.py": hashed} and len(hashed) == 64
    monkeypatch.setattr(runs.artifacts, "REPO", Path("/tmp/a-worktree"))
    monkeypatch.setattr(runs.artifacts, "code_trees", lambda: None)  # git reads the real checkout only
    assert runs.provenance(command(Path("/tmp/a-worktree")))["command"] == here


def test_runs_above_the_cores_start_at_once_unpinned_and_each_leaves_its_provenance(monkeypatch, tmp_path):
    """at_once=3 on fewer cores: all three commands run together (each sees every core), none waits for a core."""
    monkeypatch.syspath_prepend(str(BENCH))
    import runs

    cores = len(__import__("os").sched_getaffinity(0))
    script = ("import os, sys, time; open(sys.argv[1], 'w').write(f'{time.time()} {len(os.sched_getaffinity(0))}');"
              "time.sleep(2)")
    jobs = [(runs.ArmRun(runs.Arm("probe"), seed, tmp_path / f"probe-s{seed}", 0),
             [sys.executable, "-c", script, str(tmp_path / f"started-{seed}")]) for seed in range(cores + 1)]
    runs.run_commands(jobs, parallel=True, at_once=cores + 1)
    started = [(tmp_path / f"started-{seed}").read_text().split() for seed in range(cores + 1)]
    times = [float(t) for t, _ in started]
    assert max(times) - min(times) < 1.5  # all before the first one ended
    assert all(int(seen) == cores for _, seen in started)  # not pinned: the system shares the cores
    assert all((tmp_path / f"probe-s{seed}.json").is_file() for seed in range(cores + 1))
    runs.run_commands(jobs[:1], parallel=True)  # alone: pinned to every core (an equal share of one run's)
    assert (tmp_path / "started-0").read_text().split()[1] == str(cores)
    runs.run_commands(jobs, parallel=True)  # more runs than cores: one core each, the last waits for a core
    assert all((tmp_path / f"started-{seed}").read_text().split()[1] == "1" for seed in range(cores + 1))


def test_core_sets_give_each_run_an_equal_disjoint_share(monkeypatch):
    """16 cores and six runs (a GPU machine's bench): two cores each, four idle; two cores and eight runs: one each."""
    monkeypatch.syspath_prepend(str(BENCH))
    import runs

    monkeypatch.setattr(runs.os, "sched_getaffinity", lambda pid: set(range(16)))
    six = runs.core_sets(6)
    assert [len(cores) for cores in six] == [2] * 8 and len(frozenset().union(*six)) == 16
    assert runs.core_sets(3) == [frozenset(range(i, i + 5)) for i in (0, 5, 10)]
    monkeypatch.setattr(runs.os, "sched_getaffinity", lambda pid: {4, 7})
    assert runs.core_sets(8) == [frozenset({4}), frozenset({7})]
    assert runs.execution(runs.Budget(1, 1.0, 3, 10, parallel=True), 2).startswith("parallel: arms side by side, "
                                                                                   "each pinned to one of 2 cores")


def test_a_failed_run_lets_the_running_ones_finish_and_keep_their_provenance(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(BENCH))
    import runs

    fails = runs.ArmRun(runs.Arm("probe"), 0, tmp_path / "probe-s0", 0)
    finishes = runs.ArmRun(runs.Arm("probe"), 1, tmp_path / "probe-s1", 0)
    never = runs.ArmRun(runs.Arm("probe"), 2, tmp_path / "probe-s2", 0)
    jobs = [(fails, [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]),
            (finishes, [sys.executable, "-c", "import time; time.sleep(2)"]),
            (never, [sys.executable, "-c", "pass"])]
    for job, _ in jobs:
        (job.run_dir / "checkpoints" / "step_000001").mkdir(parents=True)
    with pytest.raises(SystemExit, match=r"probe seed 0 failed \(killed by SIGKILL, most likely out of memory"):
        runs.run_commands(jobs, parallel=True, at_once=2)
    # a finished run's checkpoints go as it ends; a failed run keeps them to resume from
    assert not (finishes.run_dir / "checkpoints").exists() and (fails.run_dir / "checkpoints").is_dir()
    assert "killed by SIGKILL" in (tmp_path / "probe-s0.log").read_text()  # a killed run's log says how it ended
    assert runs.how_it_ended(3) == "exit status 3"
    assert (tmp_path / "probe-s1.json").is_file()  # the run beside it was not stopped: its work is kept
    assert not (tmp_path / "probe-s0.json").exists() and not (tmp_path / "probe-s2.log").exists()  # none started after
    runs.run_commands([(never, jobs[2][1])], parallel=False, keep_checkpoints=True)  # --keep-weights
    assert (never.run_dir / "checkpoints" / "step_000001").is_dir() and (tmp_path / "probe-s2.json").is_file()


def test_finished_runs_pack_without_weights_and_unpack_where_reuse_keeps_them(monkeypatch, tmp_path):
    """A bench finished over sessions on machines that keep nothing: the finished runs' records go into one archive
    (weights, samples, plots and unfinished runs left out) and come back into the same runs dir, where --reuse's
    check holds."""
    monkeypatch.syspath_prepend(str(BENCH))
    import runs

    runs_dir = tmp_path / "runs"
    finished = runs_dir / "grpo-s0"
    command = [sys.executable, "-m", "autotelic.cli", "run", "train.seed=0", f"logging.runs_dir={runs_dir}"]
    for relative, text in {"config.yaml": "train: {}", "eval_after.jsonl": '{"correct": 1}\n',
                           "model/model.safetensors": "weights", "rollouts.jsonl": '{"text": "a sample"}\n',
                           "report.html": "<img>", "checkpoints/step-1/state.pt": "state"}.items():
        (finished / relative).parent.mkdir(parents=True, exist_ok=True)
        (finished / relative).write_text(text)
    finished.with_suffix(".log").write_text("step 1\n")
    finished.with_suffix(".json").write_text(json.dumps(runs.provenance(command)))
    (runs_dir / "rest-s0").mkdir()  # started, never finished: no provenance
    (runs_dir / "rest-s0" / "config.yaml").write_text("train: {}")

    archive = tmp_path / "results" / "archives" / "bench.tar.xz"
    assert runs.pack(runs_dir, archive) == ["grpo-s0"]
    runs_dir.rename(tmp_path / "the-session-before")  # gone with its machine
    assert runs.unpack(archive, runs_dir) == ["grpo-s0"]
    assert sorted(str(p.relative_to(runs_dir)) for p in runs_dir.rglob("*") if p.is_file()) == [
        "grpo-s0.json", "grpo-s0.log", "grpo-s0/config.yaml", "grpo-s0/eval_after.jsonl"]
    assert (finished / "eval_after.jsonl").read_text() == '{"correct": 1}\n'
    # the same command on the same code counts as finished (uncommitted src/ or recipes/: nothing ever does)
    assert runs.finished_earlier(finished, command) == (runs.artifacts.code_trees() is not None)
    with pytest.raises(SystemExit, match="already holds grpo-s0"):  # nothing is written over a run
        runs.unpack(archive, runs_dir)

    # a bench that reused grpo from this archive keeps only its own arm in its archive, unpacked beside it
    rest = runs_dir / "rest-s0"
    shutil.copytree(finished, rest)
    rest.with_suffix(".json").write_text(json.dumps(runs.provenance([*command, "logging.run_name=rest-s0"])))
    assert runs.pack(runs_dir, tmp_path / "rest.tar.xz", arms=("rest",)) == ["rest-s0"]
    with pytest.raises(SystemExit, match="no finished run of memory"):
        runs.pack(runs_dir, tmp_path / "memory.tar.xz", arms=("memory",))
    shutil.copytree(finished, runs_dir / "notes")  # not a bench's run: picking arms by name is refused
    (runs_dir / "notes.json").write_text("{}")
    with pytest.raises(SystemExit, match="'notes' is not a bench run's name"):
        runs.pack(runs_dir, tmp_path / "notes.tar.xz", arms=("rest",))
    assert not (tmp_path / "notes.tar.xz").exists()
    shutil.rmtree(runs_dir)
    assert runs.unpack(archive, runs_dir) == ["grpo-s0"] and runs.unpack(tmp_path / "rest.tar.xz", runs_dir) == [
        "rest-s0"]
    assert (runs_dir / "rest-s0.json").is_file() and (runs_dir / "grpo-s0.json").is_file()
    with pytest.raises(SystemExit, match="no finished run"):
        runs.pack(tmp_path / "results", tmp_path / "empty.tar.xz")
