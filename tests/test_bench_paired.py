"""bench/paired.py on committed artifacts: the per-seed figures a results section quotes, read back from the
sixteen-seed early-stop bench as docs/results.md reports them, and bad input refused in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AS16 = ROOT / "bench" / "results" / "rest_rl-20261206T162014Z.json"


def paired(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "bench" / "paired.py"), *args], capture_output=True, text=True,
                          timeout=60)


def fields(stdout: str) -> dict[str, str]:
    """paired.py's ``key: value`` lines after its per-seed table."""
    return dict(line.split(": ", 1) for line in stdout.splitlines() if ": " in line)


def test_an_arm_and_its_baseline_seed_by_seed_as_the_results_section_reports_them():
    done = paired(str(AS16), "--arm", "answer_stop")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1].split()[:4] == ["56", "56.7", "67.7", "+10.9"]  # a gain is the arm's points minus grpo's
    read = fields(done.stdout)
    assert (read["leads"], read["trails"], read["before_equal"], read["heldout_n"]) == ("9", "7", "true", "[201]")
    grpo, stop = json.loads(read["grpo"]), json.loads(read["answer_stop"])
    assert (grpo["train_minutes"], stop["train_minutes"]) == (439.3, 342.5)  # 22% fewer, as the section says
    assert grpo["completion_tokens"] > stop["completion_tokens"] and grpo["samples_per_step"] == [48.0]
    assert json.loads(read["comparisons"])[0]["ci95"] == [-3.31, 4.88] and read["flags"] == "{}"


def test_an_arm_the_artifact_lacks_a_missing_file_or_another_json_is_refused_in_one_line(tmp_path):
    other = tmp_path / "config.json"
    other.write_text('{"train": {}}')
    for args, names in (([str(AS16), "--arm", "tree"], "no rows of arm tree (arms here: answer_stop, grpo)"),
                        ([str(AS16.with_name("none.json")), "--arm", "tree"], "No such file"),
                        ([str(other), "--arm", "tree"], "no 'rows' field; pass a bench artifact")):
        done = paired(*args)
        assert done.returncode != 0 and names in done.stderr
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_budget_flag_the_bench_raised_is_reported_beside_the_seeds(tmp_path):
    record = json.loads(AS16.read_text())
    flag = "grpo seed 56: the step ceiling bound after 60 steps, before the time cap"
    record["summary"].update(equal_minutes=True, step_ceiling_bound=[flag])  # as bench/runs.report writes it
    flagged = tmp_path / "rest_rl-flagged.json"
    flagged.write_text(json.dumps(record))
    done = paired(str(flagged), "--arm", "answer_stop")
    assert done.returncode == 0, done.stderr
    assert json.loads(fields(done.stdout)["flags"]) == {"step_ceiling_bound": [flag]}
