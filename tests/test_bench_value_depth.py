"""bench/value_depth.py: its per-problem measures on scores whose ranking is known, then the bench end to end on a
small value-data file in a decoding runs directory, with a two-layer random body."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))  # bench/ is a directory of scripts, not a package

import artifacts  # noqa: E402
from value_depth import problem_key, problem_measures  # noqa: E402

from autotelic.value_model import ValueExample  # noqa: E402

DONE = "```python\ndef f(x):\n    return x{}\n```"


def value_rows(problems: range) -> list[dict]:
    """Per problem: a right and a wrong finished answer, a promising partial one (measured twice) and a refusal."""
    rows = []
    for k in problems:
        prompt = f"Write f that adds {k}."
        rows += [{"prompt": prompt, "response": DONE.format(f" + {k}"), "target": 1.0, "weight": 1.0},
                 {"prompt": prompt, "response": DONE.format(f" * {k}"), "target": 0.0, "weight": 1.0},
                 {"prompt": prompt, "response": "```python\ndef f(x):\n", "target": 0.5, "weight": 2.0},
                 {"prompt": prompt, "response": "I can't", "target": 0.0, "weight": 1.0}]
    return rows


def test_measures_read_the_pick_and_both_rankings_per_problem():
    examples = [ValueExample("p", DONE.format(" + 1"), 1.0), ValueExample("p", DONE.format(""), 0.0),
                ValueExample("p", DONE.format(" - 1"), 0.5), ValueExample("p", "```python\ndef f(x):\n", 0.8),
                ValueExample("p", "```python\ndef g(", 0.0), ValueExample("q", DONE.format(""), 1.0)]
    measures = problem_measures(examples, [e.prompt for e in examples], [0.2, 0.9, 0.1, 0.7, 0.3, 0.5])
    p = measures["p"]
    assert p["pick"] == 0.0 and p["random"] == pytest.approx(0.5) and p["best"] == 1.0  # the wrong one scored top
    assert p["finished_auc"] == pytest.approx(0.5)  # the right answer above one of its two wrong ones
    assert p["partial_auc"] == 1.0  # the promising prefix above the hopeless one
    assert measures["q"] == {}  # one finished answer: nothing to choose or rank


def test_a_problem_is_its_prompt_without_the_name_of_its_function():
    stub = "Complete it.\n```python\ndef {0}(x: int) -> int:\n    \"\"\"Add 3.\n\n    >>> {0}(1)\n    4\n    \"\"\"\n```"
    assert problem_key(stub.format("solve")) == problem_key(stub.format("compute")) == stub.format("_")
    assert problem_key(stub.format("solve")) != problem_key(stub.format("solve").replace("Add 3", "Add 4"))
    assert problem_key("What is 2 + 3?") == "What is 2 + 3?"  # no function: the prompt itself


def test_the_bench_cross_validates_each_depth_and_share_and_writes_their_comparisons(tmp_path):
    data = tmp_path / "runs" / "decoding-s0" / "value_model"
    data.mkdir(parents=True)
    (data / "value_data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in value_rows(range(8))))
    done = subprocess.run([sys.executable, str(BENCH / "value_depth.py"), "--runs-dir", str(tmp_path / "runs"),
                           "--depths", "0.5", "1.0", "--shares", "0.5", "1.0", "--folds", "2",
                           "--model", "random:qwen2-tiny",
                           "--results-dir", str(tmp_path / "results")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    artifact = json.loads(next((tmp_path / "results").glob("value_depth-*.json")).read_text())
    assert [(r["depth"], r["layers"], r["share"], r["pick_problems"]) for r in artifact["rows"]] == [
        (0.5, 1, 0.5, 8), (0.5, 1, 1.0, 8), (1.0, 2, 0.5, 8), (1.0, 2, 1.0, 8)]
    for row in artifact["rows"]:
        assert row["random"] == pytest.approx(0.5) and row["best"] == 1.0 and 0.0 <= row["pick"] <= 1.0
    names = {c["name"]: c["heldout_n"] for c in artifact["comparisons"]}
    assert names == {"depth_0.5_vs_depth_1.0": 8, **{f"depth_{d}_share_1.0_vs_share_0.5{m}": n for d in (0.5, 1.0)
                                                      for m, n in (("", 8), ("_finished_auc", 8), ("_partial_auc", 8))}}
    # two folds of 4 problems: each head fits on the other fold's 4, or on 2 of them at share 0.5
    assert [r["fit_problems"] for r in artifact["rows"]] == [2.0, 4.0, 2.0, 4.0]
    assert list(artifact["summary"]["data"]) == [str(data / "value_data.jsonl")]
    assert artifact["command"].startswith("python bench/value_depth.py --runs-dir")  # named from the checkout's root
    assert "depth_0.5_vs_depth_1.0: gain_points=" in done.stdout


def test_the_bench_compares_a_lora_body_with_the_frozen_one_on_value_files(tmp_path):
    files = [tmp_path / f"v{k}" / "value_data.jsonl" for k in range(2)]  # as `autotelic value --out v0` writes
    for k, file in enumerate(files):
        file.parent.mkdir()
        file.write_text("".join(json.dumps(r) + "\n" for r in value_rows(range(3 * k, 3 * k + 3))))
    command = [sys.executable, str(BENCH / "value_depth.py"), "--data", *map(str, files), "--depths", "1.0",
               "--bodies", "frozen", "lora", "--folds", "2", "--model", "random:qwen2-tiny",
               "--results-dir", str(tmp_path / "results"), "--set", "value.body_epochs=1", "--set",
               "value.body_lr=1e-3"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    artifact = json.loads(next((tmp_path / "results").glob("value_depth-*.json")).read_text())
    assert artifact["summary"]["frozen_fit"]["epochs"] == artifact["summary"]["fit"]["epochs"] + 1  # heads as long
    assert [(r["arm"], r["body"], r["pick_problems"]) for r in artifact["rows"]] == [
        ("frozen body, depth 1.0", "frozen", 6), ("lora body, depth 1.0", "lora", 6)]
    assert {c["name"]: c["heldout_n"] for c in artifact["comparisons"]} == {
        "lora_vs_frozen_depth_1.0": 6, "lora_vs_frozen_depth_1.0_finished_auc": 6,
        "lora_vs_frozen_depth_1.0_partial_auc": 6}
    assert artifact["summary"]["fit"]["body_epochs"] == 1 and artifact["summary"]["fit"]["body_lr"] == 1e-3
    assert list(artifact["summary"]["data"]) == [str(f) for f in files]
    # with no body passes the LoRA body is the frozen one (adapters start at zero): every measure equal
    untrained = subprocess.run([*command[:-4], "--set", "value.body_epochs=0", "--results-dir", str(tmp_path / "u")],
                               capture_output=True, text=True, timeout=300)
    assert untrained.returncode == 0, untrained.stdout + untrained.stderr
    frozen, lora = json.loads(next((tmp_path / "u").glob("value_depth-*.json")).read_text())["rows"]
    for measure in ("pick", "finished_auc", "partial_auc"):
        assert lora[measure] == pytest.approx(frozen[measure], abs=1e-6)
    missing = subprocess.run([*command[:3], str(tmp_path / "none.jsonl"), *command[4:]], capture_output=True,
                             text=True, timeout=120)
    assert missing.returncode != 0 and "none.jsonl: no such file" in missing.stderr
    assert "Traceback" not in missing.stderr
    for wrong in ("value.depth=0.5", "model.lora=true"):
        refused = subprocess.run([*command, "--set", wrong], capture_output=True, text=True, timeout=120)
        assert refused.returncode == 2 and f"--set {wrong}: only value.* fit settings" in refused.stderr


def test_kept_folds_are_reused_only_under_the_settings_they_were_fit_with(tmp_path):
    data = tmp_path / "value_data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in value_rows(range(6))))
    command = [sys.executable, str(BENCH / "value_depth.py"), "--data", str(data), "--depths", "1.0", "--bodies",
               "frozen", "lora", "--folds", "2", "--model", "random:qwen2-tiny", "--folds-dir", str(tmp_path / "kept"),
               "--set", "value.body_epochs=1"]

    def bench(results: str, *overrides: str) -> tuple[str, list[dict]]:
        done = subprocess.run([*command, *overrides, "--results-dir", str(tmp_path / results)], capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout, json.loads(next((tmp_path / results).glob("value_depth-*.json")).read_text())["rows"]

    # as --reuse: a kept fold names the committed code it ran, so a checkout with uncommitted src/ keeps none
    clean = artifacts.code_trees() is not None
    first_out, first = bench("a")
    assert [r["reused_folds"] for r in first] == [0, 0]
    assert ("uncommitted changes" in first_out) != clean
    assert sorted(p.name for p in (tmp_path / "kept").glob("*.json")) == ([
        f"{body}-depth1.0-share1.0-fold{k}.json" for body in ("frozen", "lora") for k in (0, 1)] if clean else [])
    out, again = bench("b")
    assert [r["reused_folds"] for r in again] == ([2, 2] if clean else [0, 0])
    assert out.count("reusing its kept scores") == (4 if clean else 0)
    for before, after in zip(first, again):  # the same scores, so the same measures and fit seconds
        for measure in ("pick", "finished_auc", "partial_auc", *(["fit_seconds"] if clean else [])):
            assert after[measure] == before[measure]
    # another body learning rate: the frozen head's folds stand (its fit has no body), the LoRA body's are fit anew
    _, changed = bench("c", "--set", "value.body_lr=1e-2")
    assert [r["reused_folds"] for r in changed] == ([2, 0] if clean else [0, 0])
