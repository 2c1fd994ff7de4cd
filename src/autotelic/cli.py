"""Command line: ``autotelic run | resume | eval | value | export | pairs | config | recipes``.
The only module that knows every part."""

from __future__ import annotations

import json
import logging
import sys
import warnings
from importlib.metadata import version
from pathlib import Path
from typing import Optional

import typer

from autotelic.backends.embedded import ModelFileError
from autotelic.checkpoint import CheckpointError
from autotelic.config import ConfigError
from autotelic.curricula import EmptyFamilyError, EmptyPoolError
from autotelic.envs import UnknownEnvironmentError
from autotelic.interrupt import Interrupted
from autotelic.loading import load_config
from autotelic.rollout.episode_tree import ReplayError
from autotelic.tasks import UnknownFamilyError
from autotelic.checks import TrainingError
from autotelic.run_state import run_config_path
from autotelic.update import PairsFileError
from autotelic.user_code import user_failure

app = typer.Typer(add_completion=False, rich_markup_mode="markdown",  # markdown: help paragraphs reflow whole
                  context_settings={"help_option_names": ["-h", "--help"]})

USER_ERRORS = (ConfigError, ModelFileError, TrainingError, EmptyFamilyError, EmptyPoolError, UnknownFamilyError,
               UnknownEnvironmentError, PairsFileError, CheckpointError, ReplayError, FileNotFoundError)
OVERRIDES = typer.Argument(None, help="Config overrides as dotted key=value, e.g. train.steps=30")
RECIPE = typer.Option(None, "--config", "-c", help="A recipe: a YAML file or a shipped recipe's name, e.g. "
                      "comas (see `autotelic recipes`).")
RECIPE_FOR_MODEL = typer.Option(None, "--config", "-c", help="For a model directory: the recipe whose tasks and "
                                "settings apply, a YAML file or a shipped recipe's name (default: the "
                                "defaults); a run directory brings its own.")


def _fail(error: Exception) -> None:
    message = " ".join(str(error).splitlines())  # one line, even from a library's multi-line message
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def _fail_if_users(error: Exception) -> None:
    """An error that passed through the user's own code (a task family, an algorithm, a mode) is theirs to fix:
    one line with their frames; any other is our bug and keeps its traceback."""
    failure = user_failure(error)
    if failure is None:
        raise error
    _fail(failure)


def _show_version(wanted: bool) -> None:
    if wanted:
        typer.echo(f"autotelic {version('autotelic')}")
        raise typer.Exit()


@app.callback(invoke_without_command=True)
def commands(
    context: typer.Context,
    show_version: bool = typer.Option(False, "--version", callback=_show_version, is_eager=True,
                                      help="Print the version and exit."),
) -> None:
    """Language-model agents that improve themselves by reinforcement learning."""
    if context.invoked_subcommand is None:  # bare `autotelic`: the help, and no error
        typer.echo(context.get_help())


def _interrupted(message: str) -> None:
    """Ctrl-C: the line says where the run stopped and how to continue; 130 is the shell's code for SIGINT."""
    typer.echo(message, err=True)
    raise typer.Exit(130)


def _setup_logging() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # our progress bar is the only one: no per-file loading/saving bars or library deprecation notes
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    for noisy in ("transformers", "peft", "httpx"):  # after transformers' import, which sets its own level
        logging.getLogger(noisy).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")


@app.command()
def run(
    overrides: Optional[list[str]] = OVERRIDES,
    config: Optional[Path] = RECIPE,
    model: Optional[str] = typer.Option(None, "--model", help="Local Hugging Face model directory."),
) -> None:
    """Train a solver on a self-evolving curriculum (default: the embedded model, default recipe)."""
    _setup_logging()
    from autotelic.trainer import train

    try:
        extra = [f"model.path={model}"] if model else []
        train(load_config(config, list(overrides or []) + extra))
    except USER_ERRORS as error:
        _fail(error)
    except Interrupted as error:
        _interrupted(str(error))
    except KeyboardInterrupt:  # outside the training loop (the model loading): the run keeps what it had
        _interrupted("interrupted")
    except Exception as error:
        _fail_if_users(error)


@app.command()
def resume(run_dir: Path, overrides: Optional[list[str]] = OVERRIDES) -> None:
    """Continue a stopped run from its last checkpoint (overrides such as train.steps=80 allowed)."""
    _setup_logging()
    from autotelic.trainer import resume as resume_run

    try:
        resume_run(run_dir, list(overrides or []))
    except USER_ERRORS as error:
        _fail(error)
    except Interrupted as error:
        _interrupted(str(error))
    except KeyboardInterrupt:
        _interrupted(f"interrupted; continue with: autotelic resume {run_dir}")
    except Exception as error:
        _fail_if_users(error)


@app.command("eval")
def evaluate_command(
    target: str = typer.Argument(..., help="A run directory (its exported model) or a model directory."),
    overrides: Optional[list[str]] = OVERRIDES,
    recipe: Optional[Path] = RECIPE_FOR_MODEL,
) -> None:
    """Held-out accuracy of a run's final model or of any local model directory.

    eval.decoding picks greedy, best_of_n or vm_mcts (the last two with eval.token_budget and
    eval.value_model, by default the run's own value model)."""
    _setup_logging()
    from autotelic.targets import evaluate_target

    try:
        summary = evaluate_target(target, list(overrides or []), recipe)
    except (*USER_ERRORS, ValueError) as error:
        _fail(error)
    typer.echo(json.dumps(summary, indent=2))


@app.command()
def value(
    target: str = typer.Argument(..., help="A run directory (its exported model) or a model directory."),
    out: Path = typer.Option(..., "--out", "-o", help="Directory for the value model and its training data."),
    overrides: Optional[list[str]] = OVERRIDES,
    recipe: Optional[Path] = RECIPE_FOR_MODEL,
) -> None:
    """VM-MCTS: train a value model on partial responses labelled by tree search.

    Partial responses of training tasks are labelled by tree search with scored rollouts; then:
    autotelic eval TARGET eval.decoding=vm_mcts eval.value_model=OUT."""
    _setup_logging()
    from autotelic.heldout import build_heldout
    from autotelic.rollout.filter import response_scorer
    from autotelic.targets import target_config, target_policy
    from autotelic.build import build_scorer
    from autotelic.checks import sandbox_isolation
    from autotelic.vm_mcts import train_value_model

    try:
        config, model_dir = target_config(target, list(overrides or []), recipe)
        heldout = build_heldout(config)
        sandbox_isolation(config)  # before the policy loads
        policy = target_policy(config, model_dir)
        _, metrics = train_value_model(policy, config, response_scorer(build_scorer(config, policy)),
                                       heldout, model_dir, out)
    except (*USER_ERRORS, ValueError) as error:
        _fail(error)
    typer.echo(json.dumps(metrics, indent=2))


@app.command()
def export(run_dir: Path, out: Optional[Path] = typer.Option(None, help="Destination (default RUN_DIR/model).")) -> None:
    """Write the latest checkpoint as a Hugging Face model directory (LoRA merged)."""
    _setup_logging()
    from autotelic.backends.hf import HFPolicy
    from autotelic.checkpoint import load_latest

    try:
        config = load_config(run_config_path(run_dir))
        found = load_latest(run_dir)
        if found is None:
            raise TrainingError(f"{run_dir} has no checkpoint to export")
        checkpoint, payload = found
        policy = HFPolicy(config.model)
        policy.load_trainable_state(payload["trainable"])
        destination = out or run_dir / "model"
        policy.export(destination)
    except USER_ERRORS as error:
        _fail(error)
    typer.echo(f"exported {checkpoint.name} to {destination}")


@app.command()
def pairs(run_dir: Path, out: Path = typer.Option(..., "--out", "-o", help="JSONL file to write.")) -> None:
    """Preference pairs (best vs worst completion per prompt and step) from a run's rollouts, for offline DPO."""
    from autotelic.update import load_rollouts, pairs_from_rollouts

    path = run_dir / "rollouts.jsonl"
    try:
        if not path.is_file():
            raise TrainingError(f"{run_dir} has no rollouts.jsonl")
        rows = load_rollouts(path)
        found = pairs_from_rollouts(rows)
        out.write_text("".join(json.dumps(p) + "\n" for p in found))
    except USER_ERRORS as error:
        _fail(error)
    typer.echo(f"{len(found)} pairs from {len(rows)} rollouts written to {out}")


@app.command("config")
def config_command(
    words: Optional[list[str]] = typer.Argument(None, metavar="SECTION|KEY=VALUE", help=(
        "Sections or keys to show (e.g. algorithm, generate.mode; default: all), and config overrides as "
        "dotted key=value, e.g. train.steps=30.")),
    config: Optional[Path] = RECIPE,
    diff: bool = typer.Option(False, "--diff", help="Only the keys whose value differs from the defaults."),
    check: bool = typer.Option(False, "--check", help=(
        "Check the config as `autotelic run` does before it loads a model (held-out set, curriculum, sandbox "
        "included), and print one line: ok, or the error (exit status 2).")),
    markdown: bool = typer.Option(False, "--markdown",
                                  help="The whole reference, a Markdown table per section (docs/config.md)."),
) -> None:
    """Print the resolved config as YAML, each key with its documentation.

    The config is the defaults, then the recipe, then the overrides. Save the output and pass it as --config
    to run exactly that."""
    from autotelic.config import RunConfig
    from autotelic.config.docs import check_paths, describe, markdown_reference

    wanted = [word for word in words or [] if "=" not in word]
    try:
        resolved = load_config(config, [word for word in words or [] if "=" in word])
        check_paths(resolved, wanted)
        if check:
            _setup_logging()
            from autotelic.build import plan_run

            plan = plan_run(resolved)
    except USER_ERRORS as error:
        _fail(error)
    if check:
        typer.echo(f"ok: algorithm {plan.spec.name}, generate.mode {resolved.generate.mode}, "
                   f"{len(plan.heldout)} held-out tasks, {resolved.train.steps} steps; "
                   "nothing wrong before the model loads")
    elif markdown:
        typer.echo(markdown_reference(resolved), nl=False)
    else:
        lines = describe(resolved, defaults=RunConfig() if diff else None, within=tuple(wanted))
        typer.echo("".join(f"{line}\n" for line in lines), nl=False)


@app.command()
def recipes() -> None:
    """List the shipped recipes by generation mode, one line each (run one with `autotelic run -c NAME`)."""
    from autotelic.recipes import recipe_listing, shipped_recipes

    typer.echo("\n".join(recipe_listing(shipped_recipes())))


def main() -> None:
    sys.exit(app())


if __name__ == "__main__":
    main()
