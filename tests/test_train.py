"""Real training runs on the embedded model: bookkeeping, weight updates, a run that goes non-finite, eval and
export (resume after a kill: tests/test_chaos.py)."""

import json
from pathlib import Path

import pytest
import torch
from rows import verified

import autotelic

from autotelic.config import to_dict
from autotelic.loading import load_config
from autotelic.text import first_integer_matches
from autotelic.divergence import DivergenceError
from autotelic.run_state import new_run_dir
from autotelic.trainer import Trainer

pytestmark = pytest.mark.slow

SMALL = [
    "train.steps=2", "control.tasks_per_step=4", "generate.group_size=4", "control.max_new_tokens=8",
    "curriculum.families=[compare, add]", "curriculum.levels=[1]", "eval.levels=[1]", "eval.per_level=3",
    "eval.max_new_tokens=8", "algorithm.lr=1e-3", "model.lora=true", "model.lora_rank=8",
    "logging.progress=false", "train.max_minutes=null", "train.checkpoint_every=1",
]


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_short_run_records_true_numbers_and_updates_weights(tmp_path, embedded_dir):
    from transformers import AutoModelForCausalLM

    config = load_config(None, SMALL + [f"logging.runs_dir={tmp_path}", "logging.run_name=short"])
    run_dir = new_run_dir(config)
    summary = Trainer(config, run_dir).run()

    assert summary["steps"] == 2 and summary["wall_seconds"] > 0
    for tag in ("before", "after"):
        records = _rows(run_dir / f"eval_{tag}.jsonl")
        assert len(records) == summary["heldout_tasks"] == 6
        assert all(r["reward"] == verified(r) for r in records)
        assert summary[f"eval_{tag}"]["accuracy"] == pytest.approx(sum(r["reward"] for r in records) / 6)

    metrics, rollouts = _rows(run_dir / "metrics.jsonl"), _rows(run_dir / "rollouts.jsonl")
    train_rows = [m for m in metrics if "reward/mean" in m]
    assert [m["step"] for m in train_rows] == [1, 2]
    for m in train_rows:
        step_rollouts = [r for r in rollouts if r["step"] == m["step"]]
        assert len(step_rollouts) == 16
        assert all(r["reward"] == first_integer_matches(r["completion"], r["answer"]) for r in step_rollouts)
        assert m["reward/mean"] == pytest.approx(sum(r["reward"] for r in step_rollouts) / 16)
        kept_groups = len({r["prompt"] for r in step_rollouts if r["kept"]})
        assert m["filter/kept_groups"] == kept_groups
        assert all(r["filter"] == ("kept" if r["kept"] else "zero_variance") for r in step_rollouts)
        assert all(len({x["reward"] for x in step_rollouts if x["prompt"] == r["prompt"]}) > 1
                   for r in step_rollouts if r["kept"])
    assert sum(m["filter/kept_groups"] for m in train_rows) > 0, "this seed must give GRPO some signal"

    base = AutoModelForCausalLM.from_pretrained(embedded_dir)
    trained = AutoModelForCausalLM.from_pretrained(run_dir / "model")
    changed = [n for n, p in trained.named_parameters() if not torch.equal(p, base.get_parameter(n))]
    assert changed and all("proj" in n for n in changed)  # LoRA touched the projections only

    report = (run_dir / "report.html").read_text()
    assert report.count("data:image/png;base64,") == 5  # reward, accuracy, curriculum, stages, guardrails
    assert to_dict(load_config(run_dir / "config.yaml")) == to_dict(config)


def test_weights_that_turn_non_finite_stop_the_run_in_one_line_and_their_checkpoint_goes(tmp_path):
    config = load_config(None, SMALL + [f"logging.runs_dir={tmp_path}", "logging.run_name=nan"])
    run_dir = new_run_dir(config)
    Trainer(config, run_dir).run()
    checkpoints = run_dir / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step_000001", "step_000002"]

    config = load_config(run_dir / "config.yaml", ["train.steps=3"])
    trainer = Trainer(config, run_dir, resume=True)
    with torch.no_grad():  # the weights of step 2 as a diverged update would leave them
        trainer.policy.trainable[0].fill_(float("nan"))
    with pytest.raises(DivergenceError, match=r"^step 3: the model produced non-finite logits during generation; the "
                       r"learning rate \(algorithm.lr=0.001\) is the likely cause; the weights of step 2 diverged .*"
                       f"last good checkpoint: {checkpoints / 'step_000001'}; resume with: autotelic resume {run_dir} "
                       r"algorithm.lr=2e-05$"):
        trainer.run()
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step_000001"]  # resuming cannot load step 2's


def test_a_run_without_export_or_report_is_evaluated_after_the_cli_exports_its_checkpoint(tmp_path):
    from transformers import AutoModelForCausalLM
    from typer.testing import CliRunner

    from autotelic.cli import app

    config = load_config(None, SMALL + ["train.steps=1", "train.export_model=false", "logging.report=false",
                                        f"logging.runs_dir={tmp_path}", "logging.run_name=done"])
    run_dir = new_run_dir(config)
    trainer = Trainer(config, run_dir)
    summary = trainer.run()
    assert summary["model_dir"] is None and not (run_dir / "model").exists()
    assert not (run_dir / "report.html").exists() and (run_dir / "summary.json").is_file()

    result = CliRunner().invoke(app, ["eval", str(run_dir)])
    assert result.exit_code != 0 and f"run `autotelic export {run_dir}` first" in result.output, result.output

    result = CliRunner().invoke(app, ["export", str(run_dir)])
    assert result.exit_code == 0 and "exported step_000001" in result.output, result.output
    result = CliRunner().invoke(app, ["eval", str(run_dir)])
    assert result.exit_code == 0, result.output
    evaluated = json.loads(result.output[result.output.index("{"):])
    assert evaluated["accuracy"] == pytest.approx(summary["eval_after"]["accuracy"])  # greedy: same numbers
    assert autotelic.evaluate(run_dir) == evaluated  # the Python API is the same path

    trainer.policy.export(tmp_path / "final")  # what the run would have exported at its end
    exported = AutoModelForCausalLM.from_pretrained(run_dir / "model")
    final = AutoModelForCausalLM.from_pretrained(tmp_path / "final")
    assert all(torch.equal(p, final.get_parameter(n)) for n, p in exported.named_parameters())

