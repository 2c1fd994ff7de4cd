"""Metric sinks: metrics.jsonl always; TensorBoard, W&B and MLflow when asked for.

Asking for a sink whose package is missing stops the run at start with the pip command to run,
rather than training for minutes and losing the metrics.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Protocol

from autotelic.config import ConfigError, missing_package


class MetricSink(Protocol):
    def log(self, step: int, metrics: dict[str, float]) -> None: ...

    def close(self) -> None: ...


class JsonlSink:
    def __init__(self, path: Path, fields: dict[str, str] | None = None):
        self.file = path.open("a")
        self.fields = fields or {}  # written into every row, e.g. the sandbox's isolation

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.file.write(json.dumps({"step": step, **self.fields, **metrics}) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


class TensorBoardSink:
    def __init__(self, log_dir: Path):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(log_dir))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbSink:
    def __init__(self, run_dir: Path, config: dict[str, Any]):
        import wandb

        self.run = wandb.init(project="autotelic", name=run_dir.name, dir=str(run_dir), config=config)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(metrics, step=step)

    def close(self) -> None:
        self.run.finish()


class MLflowSink:
    def __init__(self, run_dir: Path, config: dict[str, Any]):
        import mlflow

        self.mlflow = mlflow
        # a store in the run directory, unless MLFLOW_TRACKING_URI names another: MLflow's own default is a database
        # in whatever directory the run was started from, and MLflow 3 refuses its old ./mlruns file store
        mlflow.set_tracking_uri(os.environ.get("MLFLOW_TRACKING_URI") or mlflow_store(run_dir))
        mlflow.set_experiment("autotelic")
        mlflow.start_run(run_name=run_dir.name)
        mlflow.log_params({k: str(v) for k, v in _flatten(config).items()})

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.mlflow.log_metrics({k.replace("/", "."): v for k, v in metrics.items()}, step=step)

    def close(self) -> None:
        self.mlflow.end_run()


def mlflow_store(run_dir: Path) -> str:
    """The run's own MLflow store: an SQLite file beside its metrics (``mlflow ui --backend-store-uri`` reads it)."""
    return f"sqlite:///{(run_dir / 'mlflow.db').resolve()}"


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _require(package: str, flag: str) -> None:
    problem = missing_package(f"logging.{flag}=true", package, flag)  # the extra of each sink is named after it
    if problem is not None:
        raise ConfigError(problem)


class MultiSink:
    """Fans every metrics row out to all configured sinks; ``fields`` (text, not metrics) go to metrics.jsonl."""

    def __init__(self, run_dir: Path, tensorboard: bool, wandb: bool, mlflow: bool, config: dict[str, Any],
                 fields: dict[str, str] | None = None):
        for wanted, package, flag in ((tensorboard, "tensorboard", "tensorboard"), (wandb, "wandb", "wandb"),
                                      (mlflow, "mlflow", "mlflow")):
            if wanted:
                _require(package, flag)
        self.sinks: list[MetricSink] = [JsonlSink(run_dir / "metrics.jsonl", fields)]
        if tensorboard:
            self.sinks.append(TensorBoardSink(run_dir / "tensorboard"))
        if wandb:
            self.sinks.append(WandbSink(run_dir, config))
        if mlflow:
            self.sinks.append(MLflowSink(run_dir, config))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for sink in self.sinks:
            sink.log(step, metrics)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()
