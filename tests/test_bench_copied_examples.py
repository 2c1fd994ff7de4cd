"""bench/copied_examples.py: which held-out answers return the prompt's example output as a constant, on real
pyfunc prompts, counted from an archive as bench/runs.py packs it, and the command's output."""

from __future__ import annotations

import io
import json
import random
import subprocess
import sys
import tarfile
from pathlib import Path

from autotelic.tasks.code import PyFuncFamily

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

from copied_examples import copies_example, count_archive  # noqa: E402


def _task(seed: int):
    return PyFuncFamily().generate(random.Random(seed), 1)


def _example_output(task) -> str:
    return task.meta["prompt"].split(">>> ")[1].splitlines()[1].strip()


def _answer(task, body: str) -> str:
    signature = task.meta["prompt"].split('"""')[0]
    return f"```python\n{signature}    {body}\n```\n\nThis function returns the value."


def test_an_answer_returning_the_example_output_copies_it_and_the_reference_does_not():
    task = _task(3)
    assert copies_example(task.prompt, _answer(task, f"return {_example_output(task)}"))
    assert not copies_example(task.prompt, _answer(task, task.answer.strip()))  # the reference reads its input
    assert not copies_example(task.prompt, _answer(task, "return 123456789"))  # a constant, not the example's
    assert not copies_example(task.prompt, "no code at all")


def _archive(tmp_path: Path, runs: dict[str, list[dict]]) -> Path:
    path = tmp_path / "runs.tar.xz"
    with tarfile.open(path, "w:xz") as tar:
        for run, rows in runs.items():
            data = "".join(json.dumps(row) + "\n" for row in rows).encode()
            info = tarfile.TarInfo(f"{run}/eval_after.jsonl")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_each_run_of_an_archive_is_counted_and_the_command_splits_the_copying_runs(tmp_path):
    tasks = [_task(seed) for seed in range(4)]
    copying = [{"prompt": t.prompt, "completion": _answer(t, f"return {_example_output(t)}"), "correct": "0.0"}
               for t in tasks]
    solving = [{"prompt": t.prompt, "completion": _answer(t, t.answer.strip()), "correct": "1.0"} for t in tasks]
    archive = _archive(tmp_path, {"grpo-s0": copying[:3] + solving[3:], "grpo-s1": solving})
    counts = {count.run: count for count in count_archive(archive)}
    assert (counts["grpo-s0"].copied, counts["grpo-s0"].answers, counts["grpo-s0"].accuracy) == (3, 4, 0.25)
    assert (counts["grpo-s1"].copied, counts["grpo-s1"].accuracy) == (0, 1.0)

    done = subprocess.run([sys.executable, str(BENCH / "copied_examples.py"), str(archive), "--at-least", "2",
                           "--results-dir", str(tmp_path / "results")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "copying: 1 runs, accuracy 25.0% to 25.0%: grpo-s0" in done.stdout
    assert "others: 1 runs, accuracy 100.0% to 100.0%: grpo-s1" in done.stdout
    [artifact] = (tmp_path / "results").glob("copied_examples-*.json")
    record = json.loads(artifact.read_text())
    counted = sorted((row["arm"], row["seed"], row["copied"]) for row in record["rows"])
    assert counted == [("grpo", 0, 3), ("grpo", 1, 0)]
    assert record["summary"]["copying"] == {"runs": 1, "accuracy_min": 0.25, "accuracy_max": 0.25}

    missing = subprocess.run([sys.executable, str(BENCH / "copied_examples.py"), str(archive),
                              str(tmp_path / "none.tar.xz"), "--results-dir", str(tmp_path / "refused")],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "none.tar.xz: no such archive" in missing.stderr
    assert "Traceback" not in missing.stderr and not (tmp_path / "refused").exists()
