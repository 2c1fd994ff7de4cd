"""The CLI's one-line error messages for bad input, on the real entry points."""

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotelic.cli import app

runner = CliRunner()
RECIPES = Path(__file__).resolve().parent.parent / "recipes"


def _error(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.output
    return lines[0]


def test_unknown_config_key_lists_valid_keys(tmp_path):
    message = _error(["run", "train.stepz=3", f"logging.runs_dir={tmp_path}"])
    assert "unknown config key 'train.stepz'; valid keys here: steps, seed, max_minutes" in message


def test_missing_config_file():
    assert "config file not found: nowhere.yaml" in _error(["run", "--config", "nowhere.yaml"])


def test_empty_task_family_list(tmp_path):
    assert "curriculum.families is empty" in _error(["run", "curriculum.families=[]", f"logging.runs_dir={tmp_path}"])


def test_unknown_task_family(tmp_path):
    message = _error(["run", "curriculum.families=[add, algebra]", f"logging.runs_dir={tmp_path}"])
    assert "unknown task family 'algebra'" in message


def test_model_path_that_is_not_a_model(tmp_path):
    message = _error(["run", "--model", str(tmp_path), f"logging.runs_dir={tmp_path}"])
    assert f"model.path={tmp_path}: not a Hugging Face model directory" in message


@pytest.mark.slow
def test_corrupt_model_file(tmp_path, embedded_dir):
    broken = tmp_path / "broken"
    shutil.copytree(embedded_dir, broken)
    (broken / "model.safetensors").write_bytes(b"\x00" * 1000)
    message = _error(["run", "--model", str(broken), f"logging.runs_dir={tmp_path}/runs"])
    assert f"cannot load model from {broken}" in message


def test_resume_and_eval_of_non_runs(tmp_path):
    assert "is not a run directory (no config.yaml)" in _error(["resume", str(tmp_path)])
    (tmp_path / "config.yaml").write_text(json.dumps({}))
    assert "has no exported model yet" in _error(["eval", str(tmp_path)])
    assert "has no checkpoint to export" in _error(["export", str(tmp_path)])


def test_bad_pipeline_settings_are_named(tmp_path):
    runs = f"logging.runs_dir={tmp_path}"
    assert "unknown reward 'vibes' in filter.rewards; valid:" in _error(["run", "filter.rewards=[{name: vibes}]", runs])
    assert "config key 'control.overlong' must be one of none, shaping, mask" in _error(
        ["run", "control.overlong=cut", runs])
    assert "unknown environment 'chess'" in _error(
        ["run", "generate.mode=episode", "generate.env=chess", "curriculum.families=[guess_number]", runs])


def test_bad_preference_datasets_name_file_and_line(tmp_path):
    runs = f"logging.runs_dir={tmp_path}"
    assert "preference dataset not found" in _error(
        ["run", "algorithm.name=offline_dpo", f"algorithm.dataset={tmp_path / 'none.jsonl'}", runs])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "p", "chosen": "a", "rejected": "b"}\n{"prompt": "p", "chosen": "a"}\n')
    assert f"{bad}:2: needs string fields prompt, chosen, rejected; missing or not text: rejected" in _error(
        ["run", "algorithm.name=offline_dpo", f"algorithm.dataset={bad}", runs])
    bad.write_text("{not json\n")
    assert f"{bad}:1: not valid JSON" in _error(["run", "algorithm.name=offline_dpo", f"algorithm.dataset={bad}", runs])


def test_pairs_from_a_runs_rollouts(tmp_path):
    rows = [
        {"step": 1, "prompt": "q1", "completion": "right", "reward": 1.0},
        {"step": 1, "prompt": "q1", "completion": "wrong", "reward": 0.0},
        {"step": 1, "prompt": "q1", "completion": "also right", "reward": 1.0},
        {"step": 1, "prompt": "q2", "completion": "same", "reward": 0.0},
        {"step": 1, "prompt": "q2", "completion": "same again", "reward": 0.0},
        {"step": 2, "prompt": "q1", "completion": "meh", "reward": 0.5},
        {"step": 2, "prompt": "q1", "completion": "bad", "reward": -1.0},
    ]
    (tmp_path / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = runner.invoke(app, ["pairs", str(tmp_path), "--out", str(tmp_path / "pairs.jsonl")])
    assert result.exit_code == 0 and "2 pairs from 7 rollouts" in result.output, result.output
    written = [json.loads(line) for line in (tmp_path / "pairs.jsonl").read_text().splitlines()]
    assert written == [{"prompt": "q1", "chosen": "right", "rejected": "wrong"},
                       {"prompt": "q1", "chosen": "meh", "rejected": "bad"}]
    assert "has no rollouts.jsonl" in _error(["pairs", str(tmp_path / "nothing"), "--out", str(tmp_path / "x")])


# ---- autotelic config and autotelic recipes ---------------------------------------------------------------
def test_config_prints_the_resolved_config_with_each_keys_documentation(tmp_path):
    import yaml

    from autotelic.config import TreeConfig, to_dict
    from autotelic.loading import load_config
    from autotelic.config.docs import field_docs

    recipe, overrides = RECIPES / "guess-number.yaml", ["train.steps=3", "generate.temperature=0.5"]
    result = runner.invoke(app, ["config", "--config", str(recipe), *overrides])
    assert result.exit_code == 0, result.output
    expected = load_config(recipe, overrides)
    assert yaml.safe_load(result.output) == to_dict(expected)  # the output is the resolved config, as YAML
    saved = tmp_path / "resolved.yaml"
    saved.write_text(result.output)
    assert load_config(saved) == expected  # and a recipe that runs exactly that
    assert '  env: "guess_number"  # Episode and selfplay modes: the environment or two-player game' in result.output
    # each documented key shows the first sentence of the docstring under its field
    assert field_docs(TreeConfig)["branches"] == ("Samples of each group that are branched (at their highest-entropy "
                                                  "token).")
    assert "tree:\n  branches: 2  # Samples of each group that are branched" in result.output
    assert "  steps: 3" in result.output and "  temperature: 0.5" in result.output
    assert "bogus" in _error(["config", "bogus.key=1"])



def test_every_key_is_documented_and_the_reference_and_default_recipe_are_generated_from_it():
    """docs/config.md and recipes/default.yaml are what ``autotelic config`` prints from the dataclasses, so they
    cannot drift from the code; every key has its line of documentation."""
    from autotelic.config import RunConfig
    from autotelic.config.docs import describe_run_config, markdown_reference

    reference = markdown_reference(RunConfig())
    assert (RECIPES.parent / "docs" / "config.md").read_text() == reference, "run: autotelic config --markdown"
    rows = [line for line in reference.splitlines() if line.startswith("| `")]
    assert len(rows) > 150 and not [row for row in rows if row.endswith("|  |")]  # no key without its doc
    assert "| `branches` | `2` | Samples of each group that are branched" in reference
    default = (RECIPES / "default.yaml").read_text()
    assert default.split("\n", 3)[3] == describe_run_config(RunConfig())  # below its three lines of comment
    result = runner.invoke(app, ["config", "--markdown", "tree.branches=4"])
    assert result.exit_code == 0 and "| `branches` | `4` |" in result.output

def test_recipes_lists_each_shipped_recipe_in_one_line():
    result = runner.invoke(app, ["recipes"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    recipes = sorted(RECIPES.glob("*.yaml"))
    assert len(lines) == len(recipes) > 10
    by_name = {Path(line.split()[0]).name: line.split(None, 1)[1] for line in lines}
    assert by_name["guess-number.yaml"] == ("Multi-turn episodes: the policy guesses a number, the environment says "
                                            "higher/lower/correct.")
    assert all(summary.strip() for summary in by_name.values())
