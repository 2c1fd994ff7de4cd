"""The Python API for those who come from TRL: Python objects in (reward functions, datasets, a model path), a run
object with callbacks out.

    autotelic.train(model="hf:Qwen/Qwen2.5-0.5B-Instruct", reward_funcs=[reward_len], train_dataset=dataset,
                    train={"steps": 30})

``Run`` is the same with control: ``run = autotelic.Run(...)``, ``run.train()``; ``callbacks`` see each step's
metrics (``callback(step, metrics)``) and stop the run by returning True (or by ``run.stop()``): it then ends as
a run that reached its last step does, evaluated, exported and summarised. ``run.summary``, ``run.run_dir`` and
``run.model_dir`` afterwards.

What config.yaml cannot hold is recorded by reference. A function by ``module:qualified_name``: this process
resolves it from the functions passed (``rewards.custom.pass_function``); ``autotelic resume`` in another process
imports it, so a function defined in a script run as ``__main__`` is passed again, ``autotelic.resume(run_dir,
reward_funcs=[fn])``. An in-memory dataset (a ``datasets.Dataset`` or a list of dicts) by a JSONL file named by its
fingerprint under the cache (``AUTOTELIC_CACHE``), which the run reads as ``file:PATH``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotelic.backends.embedded import cache_root
from autotelic.config import ConfigError, RunConfig, section_overrides
from autotelic.loading import apply_overrides, load_config
from autotelic.rewards.custom import pass_function
from autotelic.tasks.files import FILE_PREFIX, HF_PREFIX

StepCallback = Callable[[int, dict[str, float]], "bool | None"]
RewardFuncs = Callable[..., Any] | str | Mapping[str, Any] | Iterable[Callable[..., Any] | str | Mapping[str, Any]]


def reward_entries(reward_funcs: RewardFuncs) -> list[dict[str, Any]]:
    """``filter.rewards`` entries: a function (by reference), a reward's name or ``module:fn``, or an entry as
    written in a recipe (``{"name": ..., "weight": ..., "options": ...}``); one or a list of them, as TRL takes."""
    single = callable(reward_funcs) or isinstance(reward_funcs, (str, Mapping))
    entries = []
    for given in [reward_funcs] if single else list(reward_funcs):
        if callable(given):
            entries.append({"name": pass_function(given)})
        elif isinstance(given, str):
            entries.append({"name": given})
        elif isinstance(given, Mapping):
            entries.append(dict(given))
        else:
            raise ConfigError(f"reward_funcs takes functions, reward names ('verifier', 'my_pkg.rewards:fn') or "
                              f"recipe entries ({{'name': ...}}), got a {type(given).__name__}")
    return entries


def dataset_family(data: Any, argument: str) -> str:
    """A data set as the task family that reads it: an in-memory one written once to a JSONL file named by its
    fingerprint, a file as ``file:PATH``, a ``save_to_disk`` directory as ``hf:PATH``; a family name as it is."""
    if isinstance(data, (str, Path)):
        text = str(data)
        if text.startswith((FILE_PREFIX, HF_PREFIX)) or not (Path(text).exists() or "/" in text or "." in text):
            return text  # already a family: file:..., hf:..., or a built-in name such as "add"
        return f"{HF_PREFIX if Path(text).is_dir() else FILE_PREFIX}{text}"
    rows = _rows(data, argument)
    text = "".join(json.dumps(row, sort_keys=True, default=str) + "\n" for row in rows)
    path = cache_root() / "datasets" / f"{hashlib.sha256(text.encode()).hexdigest()[:16]}.jsonl"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.with_suffix(".tmp").write_text(text)
        path.with_suffix(".tmp").replace(path)
    return f"{FILE_PREFIX}{path}"


def _rows(data: Any, argument: str) -> list[dict[str, Any]]:
    import datasets  # an in-memory data set is the only reason to import it

    if isinstance(data, datasets.Dataset):
        return data.to_list()
    if isinstance(data, list) and all(isinstance(row, Mapping) for row in data):
        return [dict(row) for row in data]
    raise ConfigError(f"{argument} takes a datasets.Dataset, a list of dicts, a data file or a save_to_disk "
                      f"directory, got a {type(data).__name__}")


def model_override(model: Any) -> list[str]:
    if model is None:
        return []
    if isinstance(model, (str, Path)):
        return [f"model.path={model}"]
    raise ConfigError(f"model takes a local model directory, hf:NAME or random:SHAPE, got a {type(model).__name__}; "
                      "save a model object with save_pretrained(DIR) and pass DIR")


def build_config(config: str | Path | RunConfig | None = None, overrides: Iterable[str] = (), *, model: Any = None,
                 reward_funcs: RewardFuncs | None = None, train_dataset: Any = None, eval_dataset: Any = None,
                 sections: Mapping[str, Mapping[str, Any]] | None = None) -> RunConfig:
    """The run's config from a recipe (a name or path, or a RunConfig), overrides, Python objects and sections."""
    extra = list(model_override(model))
    if reward_funcs is not None:
        extra.append(f"filter.rewards={json.dumps(reward_entries(reward_funcs))}")
    if train_dataset is not None:
        extra.append(f"curriculum.families={json.dumps([dataset_family(train_dataset, 'train_dataset')])}")
    if eval_dataset is not None:
        extra.append(f"eval.families={json.dumps([dataset_family(eval_dataset, 'eval_dataset')])}")
    try:
        texts = [*overrides, *extra, *section_overrides(dict(sections or {}))]
    except TypeError as error:  # json cannot write it: a Python object where a setting takes a value
        raise ConfigError(f"a section setting holds a Python object ({error}); pass functions as reward_funcs= and "
                          "data sets as train_dataset=/eval_dataset=") from None
    return apply_overrides(config, texts) if isinstance(config, RunConfig) else load_config(config, texts)


@dataclass
class Callbacks:
    """The callbacks a run calls after each step; the run ends there once one returns True or ``stop`` was asked."""

    callbacks: list[StepCallback] = field(default_factory=list)
    stop_requested: bool = False

    def __call__(self, step: int, metrics: dict[str, float]) -> bool:
        wants = [callback(step, metrics) for callback in self.callbacks]  # every callback sees every step
        return self.stop_requested or any(wants)


class Run:
    """One training run from Python; ``train()`` runs it to the end (or until a callback stops it)."""

    def __init__(self, config: str | Path | RunConfig | None = None, overrides: Iterable[str] = (), *,
                 model: Any = None, reward_funcs: RewardFuncs | None = None, train_dataset: Any = None,
                 eval_dataset: Any = None, callbacks: Iterable[StepCallback] = (), **sections: dict[str, Any]):
        self.config = build_config(config, overrides, model=model, reward_funcs=reward_funcs,
                                   train_dataset=train_dataset, eval_dataset=eval_dataset, sections=sections)
        self.after_step = Callbacks(list(callbacks))
        self.summary: dict[str, Any] | None = None

    def stop(self) -> None:
        """End the run after the step in progress (as a callback returning True does)."""
        self.after_step.stop_requested = True

    def train(self) -> dict[str, Any]:
        from autotelic.trainer import train

        self.summary = train(self.config, self.after_step)
        return self.summary

    @property
    def run_dir(self) -> Path | None:
        return Path(self.summary["run_dir"]) if self.summary else None

    @property
    def model_dir(self) -> Path | None:
        """The exported model (None before training, or with train.export_model=false)."""
        found = (self.summary or {}).get("model_dir")
        return Path(found) if found else None


def train(config: str | Path | RunConfig | None = None, overrides: Iterable[str] = (), *, model: Any = None,
          reward_funcs: RewardFuncs | None = None, train_dataset: Any = None, eval_dataset: Any = None,
          callbacks: Iterable[StepCallback] = (), **sections: dict[str, Any]) -> dict[str, Any]:
    """Train as ``autotelic run`` does and return the run summary (also written to the run's summary.json).

    ``config``: a recipe (a shipped recipe's name, a YAML path) or a ``RunConfig``; None for the defaults.
    ``overrides``: dotted ``key=value`` strings, as on the command line. ``model``: a model directory, ``hf:NAME``
    or ``random:SHAPE``. ``reward_funcs``: TRL-style functions (or reward names, ``module:fn`` references).
    ``train_dataset``/``eval_dataset``: a ``datasets.Dataset``, a list of dicts, a data file or a ``save_to_disk``
    directory (a ``prompt`` column; ``answer``, ``tests`` and any other column reach the rewards). ``sections``:
    settings by section, applied last, e.g. ``train={"steps": 2}``. A bad setting raises ConfigError (or
    TrainingError) before any model loads."""
    return Run(config, overrides, model=model, reward_funcs=reward_funcs, train_dataset=train_dataset,
               eval_dataset=eval_dataset, callbacks=callbacks, **sections).train()


def resume(run_dir: str | Path, overrides: Iterable[str] = (), *, reward_funcs: RewardFuncs | None = None,
           callbacks: Iterable[StepCallback] = ()) -> dict[str, Any]:
    """Continue a stopped run from its last checkpoint, as ``autotelic resume``; ``reward_funcs``: the functions
    the run was started with from Python, where another process cannot import them (a script's own)."""
    from autotelic.trainer import resume as resume_run

    if reward_funcs is not None:
        reward_entries(reward_funcs)  # known to this process again by the names the run recorded
    return resume_run(Path(run_dir), list(overrides), Callbacks(list(callbacks)))
