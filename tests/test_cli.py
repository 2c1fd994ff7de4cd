"""The CLI's one-line error messages for bad input, on the real entry points."""

import json
import os
import shutil
import subprocess
import sys
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

def _recipe_groups(output: str) -> dict[str, list[str]]:
    """``autotelic recipes``' output: each heading with the recipe names under it."""
    groups: dict[str, list[str]] = {}
    for line in output.splitlines():
        if line.startswith("  "):
            groups[heading].append(line.split()[0])
        elif line:
            heading = line
            groups[heading] = []
    return groups


def test_recipes_lists_each_shipped_recipe_in_one_short_line_grouped_by_generation_mode():
    result = runner.invoke(app, ["recipes"])
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.output.splitlines()) <= 100
    groups = _recipe_groups(result.output)
    listed = [name for names in groups.values() for name in names]
    assert sorted(listed) == sorted(path.stem for path in RECIPES.glob("*.yaml")) and len(listed) > 10
    assert list(groups)[0] == "generate.mode=sample (independent samples)"  # the default mode first
    assert groups["generate.mode=discussion (CoMAS)"] == ["comas"]
    episodes = groups["generate.mode=episode (multi-turn episodes against env)"]
    assert episodes == ["guess-number", "opagent-web", "tool-use"]
    assert ("  guess-number    Multi-turn episodes: the policy guesses a number, the environment says ..."
            in result.output.splitlines())  # the first sentence of its comment, cut at a word to fit


def test_a_shipped_recipe_is_named_from_any_folder(tmp_path, monkeypatch):
    import yaml

    from autotelic.loading import load_config

    monkeypatch.chdir(tmp_path)  # no recipes/ here: the names resolve inside the installed package
    shipped = load_config(RECIPES / "comas.yaml")
    assert load_config("comas") == load_config("comas.yaml") == shipped
    result = runner.invoke(app, ["config", "-c", "comas", "generate.mode"])
    assert result.exit_code == 0 and yaml.safe_load(result.output) == {"generate": {"mode": "discussion"}}
    # a recipe's data file named relative to it is found beside it there
    pairs = (RECIPES / "data" / "number-pairs.jsonl").resolve()
    assert Path(load_config("offline-dpo").algorithm.dataset) == pairs
    message = _error(["run", "-c", "comass"])
    assert message.startswith("error: config file not found: comass; give a YAML file or a shipped recipe: ")
    assert ", comas, " in message
    (tmp_path / "comas").write_text("train:\n  steps: 7\n")  # a file of that name comes first
    assert load_config("comas").train.steps == 7


def test_config_shows_the_sections_and_keys_asked_for(tmp_path):
    import yaml

    from autotelic.config import to_dict
    from autotelic.loading import load_config

    asked = ["algorithm", "generate.mode", "algorithm.lr=1.0e-4", "train.steps=3"]
    result = runner.invoke(app, ["config", *asked])
    assert result.exit_code == 0, result.output
    shown = yaml.safe_load(result.output)
    expected = to_dict(load_config(None, ["algorithm.lr=1.0e-4"]))["algorithm"]
    assert shown == {"generate": {"mode": "sample"}, "algorithm": expected} and expected["lr"] == 1.0e-4
    assert "  lr: 0.0001  # AdamW learning rate." in result.output.splitlines()
    nested = yaml.safe_load(runner.invoke(app, ["config", "curriculum.memory"]).output)
    assert list(nested) == ["curriculum"] and list(nested["curriculum"]) == ["memory"]
    assert _error(["config", "algorithmm"]) == (
        "error: unknown config section or key 'algorithmm'; valid at top level: model, generate, filter, "
        "control, replay, curriculum, algorithm, train, eval, value, tree, partial, episode, selfplay, "
        "propose, discussion, operator, vllm, dist, logging, guardrails, sandbox")
    assert "valid in train: steps, seed," in _error(["config", "train.stepz"])


def test_config_diff_shows_only_what_differs_from_the_defaults_and_runs_the_same(tmp_path):
    import yaml

    from autotelic.loading import load_config

    result = runner.invoke(app, ["config", "--diff", "train.steps=3", "generate.temperature=0.5"])
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(result.output) == {"generate": {"temperature": 0.5}, "train": {"steps": 3}}
    comas = runner.invoke(app, ["config", "-c", "comas", "--diff"])
    assert comas.exit_code == 0 and len(comas.output.splitlines()) < 40, comas.output
    saved = tmp_path / "comas-diff.yaml"
    saved.write_text(comas.output)
    assert load_config(saved) == load_config(RECIPES / "comas.yaml")  # the difference is the whole recipe
    assert runner.invoke(app, ["config", "--diff", "train"]).output == ""  # nothing of it differs


def test_config_check_stops_where_run_would_before_loading_a_model():
    result = runner.invoke(app, ["config", "--check", "algorithm.name=ppo"])
    assert result.exit_code == 2
    assert result.output.splitlines() == [
        "error: unknown algorithm.name 'ppo'; available: grpo, dr_grpo, dapo, gspo, rloo, reinforce_pp, "
        "reinforce_pp_baseline, spiral, online_dpo, offline_dpo"]
    # a held-out set that leaves nothing to train on: found by building it as run does, not by check_run alone
    cramped = ["curriculum.families=[guess_number]", "curriculum.levels=[1]", "eval.levels=[1]",
               "eval.per_level=16"]
    assert "holds out every task of family 'guess_number' level 1" in _error(["config", "--check", *cramped])
    result = runner.invoke(app, ["config", "-c", "comas", "--check"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "ok: algorithm reinforce_pp, generate.mode discussion, 24 held-out tasks, 40 steps; nothing wrong "
        "before the model loads"]


def test_version_short_help_and_bare_command():
    from importlib.metadata import version

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output == f"autotelic {version('autotelic')}\n"
    for args in (["-h"], ["config", "-h"], []):  # bare `autotelic` shows the help too, and is no error
        result = runner.invoke(app, args)
        assert result.exit_code == 0 and "Usage:" in result.output, (args, result.output)
    assert "recipes" in result.output and "--version" in result.output


def test_every_commands_summary_is_one_whole_sentence():
    """The command list shows each command's first paragraph: it must read whole, not stop mid-sentence."""
    import typer.main

    for name, command in typer.main.get_command(app).commands.items():
        summary = command.help.split("\n\n")[0].strip()
        assert "\n" not in summary and summary.endswith("."), (name, summary)


@pytest.mark.slow
def test_a_pip_installed_autotelic_carries_its_recipes(tmp_path):
    """Not an editable install: the package as pip builds and installs it, run where no recipes/ is."""
    venv, elsewhere = tmp_path / "venv", tmp_path / "elsewhere"
    elsewhere.mkdir()
    python = str(venv / "bin" / "python")
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
                   check=True)  # torch and the other dependencies: the base environment's
    subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps",
                    "--no-build-isolation", str(RECIPES.parent)], check=True)
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}

    def run_in_elsewhere(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(list(args), cwd=elsewhere, env=env, capture_output=True, text=True)

    found = run_in_elsewhere(python, "-c", "import autotelic.recipes as recipes; print(recipes.__file__)")
    shipped = Path(found.stdout.strip()).parent
    assert shipped.is_relative_to(venv)  # the venv's own copy, not the editable one it could fall back on
    yamls = sorted(path.name for path in shipped.glob("*.yaml"))
    assert yamls == sorted(path.name for path in RECIPES.glob("*.yaml"))
    assert not [path for path in shipped.rglob("*") if path.is_symlink()]  # files, not links into a checkout
    assert (shipped / "data" / "number-pairs.jsonl").is_file()
    autotelic = str(venv / "bin" / "autotelic")
    listing = run_in_elsewhere(autotelic, "recipes")
    assert listing.returncode == 0 and "  comas  " in listing.stdout, listing.stderr
    checked = run_in_elsewhere(autotelic, "config", "-c", "comas", "--check")
    assert checked.returncode == 0 and checked.stdout.startswith("ok: algorithm reinforce_pp"), checked.stderr
    refused = run_in_elsewhere(autotelic, "config", "--check", "algorithm.name=ppo")
    assert refused.returncode == 2 and refused.stderr.startswith("error: unknown algorithm.name 'ppo'")
    assert len(refused.stderr.splitlines()) == 1 and not refused.stdout
