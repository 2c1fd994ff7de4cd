"""ReST-RL's VM-MCTS stage: label partial responses by tree search, train a value model on them, and
decode the held-out set with it.

1. ``collect_value_targets`` (``search.py``) runs MCTS on training tasks; new nodes are scored by
   rollouts the policy completes and the task's reward judges (unit tests in the sandbox for code);
2. a ``ValueModel`` (body = the trained policy unless ``value.base_model`` names another) learns
   those node values;
3. the held-out set is decoded with each of ``value.decodings`` at the same token budget.

``autotelic run`` does all three after training when ``value.enabled`` is set; ``autotelic value``
does 1-2 for any run or model directory.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from autotelic.backends import PolicyBackend
from autotelic.config import RunConfig
from autotelic.curricula import BanditCurriculum
from autotelic.evaluation import Decoding, EvalResult, evaluate
from autotelic.heldout import HeldOut
from autotelic.search import ResponseScorer, collect_value_targets
from autotelic.types import Task
from autotelic.value_model import ValueModel

VALUE_SEED_OFFSET = 7_919  # task draws for value collection differ from the trainer's own stream


def value_tasks(config: RunConfig, heldout: HeldOut) -> list[Task]:
    """``value.tasks`` training tasks drawn uniformly over the curriculum's arms, held-out tasks excluded."""
    cur = config.curriculum
    arms = BanditCurriculum(cur.families, cur.levels, seed=config.train.seed + VALUE_SEED_OFFSET, heldout=heldout,
                            value="uniform")
    return arms.next_tasks(config.value.tasks)


def train_value_model(policy: PolicyBackend, config: RunConfig, scorer: ResponseScorer, heldout: HeldOut,
                      body: str | Path, out_dir: Path) -> tuple[ValueModel, dict[str, float]]:
    """Search, fit, save to ``out_dir`` (with the examples as ``value_data.jsonl``); returns the model and metrics."""
    cfg = config.value
    started = time.perf_counter()
    examples = collect_value_targets(policy, value_tasks(config, heldout), scorer, iterations=cfg.iterations,
                                     config=cfg.search, max_new_tokens=config.control.max_new_tokens)
    collected = time.perf_counter()
    out_dir.mkdir(parents=True, exist_ok=True)
    with (out_dir / "value_data.jsonl").open("w") as file:
        for example in examples:
            file.write(json.dumps(example.__dict__) + "\n")
    model = ValueModel(cfg.base_model or body, cfg.body, system_prompt=config.model.system_prompt, depth=cfg.depth)
    metrics = model.fit(examples, epochs=cfg.epochs, lr=cfg.lr, batch_size=cfg.batch_size, seed=config.train.seed,
                        body_epochs=cfg.body_epochs, body_lr=cfg.body_lr)
    model.save(out_dir)
    targets = [e.target for e in examples]
    metrics.update({"value/target_mean": sum(targets) / len(targets),
                    "value/collect_seconds": collected - started,
                    "value/fit_seconds": time.perf_counter() - collected})
    return model, metrics


def decoding_for(config: RunConfig, strategy: str, value_model: ValueModel | None) -> Decoding:
    ev = config.eval
    return Decoding(strategy, ev.token_budget, ev.select_by, value_model, ev.search)


def evaluate_decodings(policy: PolicyBackend, tasks: list[Task], config: RunConfig, value_model: ValueModel,
                       run_dir: Path) -> dict[str, Any]:
    """Held-out results for each of ``value.decodings``, written to eval_after_<strategy>.jsonl."""
    results: dict[str, Any] = {}
    for strategy in config.value.decodings:
        result: EvalResult = evaluate(policy, tasks, config.eval.max_new_tokens, config.eval.batch_size,
                                      decoding_for(config, strategy, value_model))
        with (run_dir / f"eval_after_{strategy}.jsonl").open("w") as file:
            for record in result.records:
                file.write(json.dumps(record) + "\n")
        results[strategy] = result.summary()
    return results
