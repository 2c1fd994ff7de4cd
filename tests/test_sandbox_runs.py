"""Runs and the sandbox: a run that runs model-written code records the isolation it ran under (summary,
metrics.jsonl, report), and one whose isolation does not work stops before the model loads, in one line."""

import json
import subprocess
import sys
import time

import pytest

from autotelic.loading import load_config
from autotelic.sandbox import check
from autotelic.checks import runs_model_code
from autotelic.trainer import train

# pyfunc tasks scored by the unit_tests reward: every completion runs in the sandbox
TINY = ["model.path=random:qwen2-tiny", "model.lora=false", "model.threads=1", "train.steps=2",
        "train.max_minutes=null", "control.tasks_per_step=1", "generate.group_size=2", "control.max_new_tokens=8",
        "curriculum.families=[pyfunc]", "curriculum.levels=[1]", "eval.levels=[1]", "eval.per_level=1",
        "eval.max_new_tokens=8", "logging.progress=false", "filter.rewards=[{name: unit_tests}]"]


@pytest.mark.slow
def test_a_code_run_records_the_isolation_it_ran_under(tmp_path):
    config = load_config(None, TINY + [f"logging.runs_dir={tmp_path}", "logging.run_name=code"])
    isolation = check()
    summary = train(config)
    run_dir = tmp_path / "code"
    assert summary["sandbox"] == isolation == json.loads((run_dir / "summary.json").read_text())["sandbox"]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and {row["sandbox"] for row in rows} == {isolation}  # two steps and the last eval
    assert f"ran in the sandbox under <b>{isolation}</b>" in (run_dir / "report.html").read_text()


def test_which_runs_run_model_code(tmp_path):
    tested, answered = tmp_path / "tested.jsonl", tmp_path / "answered.jsonl"
    tested.write_text(json.dumps({"question": "Write f returning 1.", "checks": "assert f() == 1"}) + "\n")
    answered.write_text(json.dumps({"question": "What is 1 + 1?", "answer": "2"}) + "\n")
    columns = "curriculum.columns={prompt: question, tests: checks}"
    code_runs = [["curriculum.families=[add, humaneval]"], ["filter.rewards=[{name: unit_tests}]"],
                 [f"curriculum.families=[file:{tested}]", columns],
                 ["generate.mode=episode", "generate.env=python"],
                 ["generate.mode=propose", "propose.kind=code"],
                 ["generate.mode=propose", "propose.executor_tools=python"]]
    assert all(runs_model_code(load_config(None, overrides)) for overrides in code_runs)
    assert not runs_model_code(load_config(None, []))
    assert not runs_model_code(load_config(None, ["generate.mode=episode", "generate.env=calculator"]))
    assert not runs_model_code(load_config(None, [f"curriculum.families=[file:{answered}]", columns]))


@pytest.mark.slow
def test_a_run_without_working_isolation_stops_before_the_model_loads(tmp_path, embedded_dir):
    """unshare forced on a PATH without it: the CLI prints the sandbox's one line, exits 2, leaves no run. The
    model's weights are damaged, which only loading them shows: the sandbox's message proves it came first."""
    model = tmp_path / "model"
    model.mkdir()
    for file in embedded_dir.iterdir():
        (model / file.name).symlink_to(file)
    (model / "model.safetensors").unlink()
    (model / "model.safetensors").write_bytes(b"\x00" * 1000)
    runs = tmp_path / "runs"
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "autotelic.cli", "run", *TINY, f"model.path={model}",
                           "sandbox.isolation=unshare", f"logging.runs_dir={runs}"],
                          capture_output=True, text=True, check=False,
                          env={"PATH": str(tmp_path), "HOME": str(tmp_path)}, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "error: sandbox: sandbox.isolation=unshare does not work here "
        "(unshare: unshare is not on PATH (apt install util-linux))"]
    assert not runs.exists() or not any(runs.iterdir())
    assert time.monotonic() - started < 60
