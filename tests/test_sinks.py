import importlib.util
import json

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


@pytest.mark.skipif(importlib.util.find_spec("wandb") is not None, reason="wandb is installed here")
def test_asking_for_a_missing_sink_fails_at_start_with_the_fix(tmp_path):
    with pytest.raises(ConfigError, match="logging.wandb=true needs the 'wandb' package: pip install wandb"):
        MultiSink(tmp_path, tensorboard=False, wandb=True, mlflow=False, config={})
