"""A trained model to use after training: a run directory (its config and exported model) or a model directory.

``evaluate_target`` is what ``autotelic eval`` prints and what ``autotelic.evaluate(...)`` returns.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotelic.config import ConfigError, ModelConfig, RunConfig
from autotelic.loading import load_config

if TYPE_CHECKING:
    from autotelic.backends.hf import HFPolicy


def target_config(target: str | Path, overrides: list[str] | tuple[str, ...] = (),
                  recipe: str | Path | None = None) -> tuple[RunConfig, Path]:
    """(config, model directory) of a run directory (its config and exported model) or a plain model directory
    (``recipe``'s config, by default the defaults: the tasks and settings it is used with)."""
    from autotelic.backends.model_dir import model_dir_problem
    from autotelic.checks import TrainingError

    path = Path(target)
    run_config = path / "config.yaml"
    if not run_config.is_file() and model_dir_problem("target", str(target)) is not None:
        raise TrainingError(f"{path} is neither a run directory (no config.yaml) nor a Hugging Face model directory "
                            "(config.json, weights and tokenizer): give one of those")
    if run_config.is_file() and recipe is not None:
        raise ConfigError(f"{path} is a run directory, which brings its own config: drop the recipe ({recipe}) and "
                          "change what differs with overrides")
    config = load_config(run_config if run_config.is_file() else recipe, list(overrides))
    model_dir = path / "model" if run_config.is_file() else path
    if run_config.is_file() and not (model_dir / "config.json").is_file():
        raise TrainingError(f"{path} has no exported model yet: run `autotelic export {path}` first")
    return config, model_dir


def target_policy(config: RunConfig, model_dir: Path) -> HFPolicy:
    """The target's model as a policy (merged: no LoRA of its own), with the run's threads and system prompt."""
    from autotelic.backends.hf import HFPolicy

    return HFPolicy(ModelConfig(path=str(model_dir), lora=False, threads=config.model.threads,
                                system_prompt=config.model.system_prompt, chat_template=config.model.chat_template,
                                dtype=config.model.dtype), seed=config.train.seed)


def evaluate_target(target: str | Path, overrides: list[str] | tuple[str, ...] = (),
                    recipe: str | Path | None = None) -> dict[str, Any]:
    """Held-out accuracy of a run's final model or of any local model directory (by family and level, the
    decoding, tokens per task and which held-out set); ``eval.decoding`` picks greedy, best_of_n or vm_mcts
    (the last two with eval.token_budget and eval.value_model, by default the run's own value model)."""
    from autotelic.heldout import build_heldout
    from autotelic.checks import sandbox_isolation
    from autotelic.run_evaluation import evaluate_heldout
    from autotelic.value_model import ValueModel
    from autotelic.vm_mcts import decoding_for

    config, model_dir = target_config(target, overrides, recipe)
    ev = config.eval
    run_value_model = Path(target) / "value_model"  # what a run with value.enabled trained
    value_path = ev.value_model or (run_value_model if (run_value_model / "value_model.json").is_file() else None)
    value_model = ValueModel.load(value_path) if value_path else None
    decoding = decoding_for(config, ev.decoding, value_model)
    try:
        decoding.check()  # before the policy loads
    except ValueError as error:
        raise ConfigError(str(error)) from None
    sandbox_isolation(config)  # code families: the sandbox must work (sandbox.isolation) before the policy loads
    heldout = build_heldout(config)
    result = evaluate_heldout(config, target_policy(config, model_dir), list(heldout.tasks), decoding)
    return {**result.summary(), **heldout.summary()}
