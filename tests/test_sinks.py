import importlib.util
import json
import struct
import time
from pathlib import Path

import pytest

from autotelic.config import ConfigError
from autotelic.report.sinks import MultiSink


def test_jsonl_always_and_tensorboard_when_asked(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sink = MultiSink(tmp_path, tensorboard=True, wandb=False, mlflow=False, config={"train": {"steps": 2}})
    sink.log(1, {"reward/mean": 0.25})
    sink.log(2, {"reward/mean": 0.5})
    sink.close()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows == [{"step": 1, "reward/mean": 0.25}, {"step": 2, "reward/mean": 0.5}]
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("reward/mean")] == [(1, 0.25), (2, 0.5)]


def test_asking_for_a_missing_sink_fails_at_start_with_the_fix(tmp_path, monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",  # the test extra installs wandb: hide it
                        lambda name, *args: None if name == "wandb" else find_spec(name, *args))
    with pytest.raises(ConfigError, match="logging.wandb=true needs the 'wandb' package: pip install wandb"):
        MultiSink(tmp_path, tensorboard=False, wandb=True, mlflow=False, config={})


def _wandb_records(path: Path) -> list:
    """The records of an offline W&B run file: W&B's 7-byte header, then LevelDB's log format (32 KiB blocks of
    chunks, each with a 7-byte header: checksum, length, type 1 full / 2 first / 3 middle / 4 last)."""
    from wandb.proto import wandb_internal_pb2

    data, block, position, records, pending = path.read_bytes(), 32768, 7, [], b""
    assert data[:4] == b":W&B"
    while position + 7 <= len(data):
        if block - position % block < 7:  # a block's tail too short for a header is padding
            position += block - position % block
            continue
        _, length, kind = struct.unpack("<IHB", data[position:position + 7])
        if position + 7 + length > len(data):  # a chunk still being written
            break
        pending += data[position + 7:position + 7 + length]
        position += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def _finished_wandb_records(path: Path, wait_s: float = 30.0) -> list:
    """The run file's records once W&B wrote its exit record: ``finish()`` returns before wandb-core (a separate
    process) has flushed the file, which then holds only its header for a moment."""
    deadline = time.monotonic() + wait_s
    while True:
        records = _wandb_records(path)
        if any(r.WhichOneof("record_type") == "exit" for r in records):
            return records
        assert time.monotonic() < deadline, f"{path} has no exit record after {wait_s:.0f} s"
        time.sleep(0.1)


def _key(item) -> str:
    """An item's key: W&B writes it as ``key`` or as the parts of ``nested_key``."""
    return item.key or "/".join(item.nested_key)


def test_wandb_writes_a_real_offline_run(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")  # what a machine without an account (or network) uses
    monkeypatch.setenv("WANDB_SILENT", "true")
    sink = MultiSink(tmp_path, tensorboard=False, wandb=True, mlflow=False, config={"train": {"steps": 2}})
    sink.log(1, {"reward/mean": 0.25})
    sink.log(2, {"reward/mean": 0.5})
    sink.close()
    (run_file,) = tmp_path.glob("wandb/offline-run-*/run-*.wandb")
    records = _finished_wandb_records(run_file)
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert run.display_name == tmp_path.name
    assert {_key(item): json.loads(item.value_json) for item in run.config.update}["train"] == {"steps": 2}
    history = [{_key(item): json.loads(item.value_json) for item in r.history.item}
               for r in records if r.WhichOneof("record_type") == "history"]
    assert [(row["_step"], row["reward/mean"]) for row in history] == [(1, 0.25), (2, 0.5)]


def test_mlflow_writes_a_real_run_in_the_run_directory(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    from autotelic.report.sinks import mlflow_store

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)  # nothing may be written where the run was started from
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    sink = MultiSink(run_dir, tensorboard=False, wandb=False, mlflow=True, config={"train": {"steps": 2}})
    sink.log(1, {"reward/mean": 0.25})
    sink.log(2, {"reward/mean": 0.5})
    sink.close()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["run"]
    client = MlflowClient(mlflow_store(run_dir))
    (run,) = client.search_runs([client.get_experiment_by_name("autotelic").experiment_id])
    assert run.info.run_name == "run" and run.info.status == "FINISHED"
    assert run.data.params == {"train.steps": "2"}
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "reward.mean")] == [(1, 0.25),
                                                                                                      (2, 0.5)]
