"""Seconds per GRPO step: TRL's GRPOTrainer vs autotelic, same config, same process, same machine.

Config (the core issue's reference): the embedded SmolLM2-135M-Instruct, 8 prompts x 4 samples,
24 new tokens, temperature 1, lr 1e-5, no KL, single-digit addition with the strict first-integer
reward, full fine-tuning on both sides (autotelic's default, which skips the forward/backward of
groups whose rewards do not vary). Also printed: autotelic training on every group as TRL does, and
autotelic with LoRA (recipes/lora.yaml). The first step of each is a warm-up and not timed.

    python bench/grpo_vs_trl.py [--steps 4]

Last line: speedup_vs_trl=X (TRL seconds per step / autotelic seconds per step, full fine-tuning).
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch

from autotelic.backends.embedded import embedded_model_dir
from autotelic.config import load_config
from autotelic.rewards.verifiers import first_integer_matches
from autotelic.train import Trainer

PROMPTS, GROUP, NEW_TOKENS, LR = 8, 4, 24, 1e-5


def addition_prompts(count: int, seed: int = 0) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    pairs = [(rng.randint(0, 9), rng.randint(0, 9)) for _ in range(count)]
    return [(f"What is {a} + {b}? Reply with only the number.", str(a + b)) for a, b in pairs]


def trl_seconds_per_step(steps: int) -> float:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    model_dir = embedded_model_dir()
    rows = addition_prompts(PROMPTS * (steps + 1))
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": q}], "answer": a} for q, a in rows])

    def reward(completions, answer, **_):
        return [first_integer_matches(c[0]["content"], a) for c, a in zip(completions, answer)]

    stamps: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, *args, **kwargs):
            stamps.append(time.perf_counter())

    with tempfile.TemporaryDirectory() as out:
        args = GRPOConfig(
            output_dir=out, per_device_train_batch_size=PROMPTS * GROUP, num_generations=GROUP,
            max_completion_length=NEW_TOKENS, learning_rate=LR, beta=0.0, temperature=1.0, max_steps=steps + 1,
            logging_steps=1, report_to=[], save_strategy="no", use_cpu=True, bf16=False, seed=0,
        )
        trainer = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
                              reward_funcs=reward, args=args, train_dataset=dataset,
                              processing_class=AutoTokenizer.from_pretrained(model_dir), callbacks=[Clock()])
        trainer.train()
    return statistics.mean(b - a for a, b in zip(stamps, stamps[1:]))


def autotelic_seconds_per_step(steps: int, overrides: list[str]) -> float:
    with tempfile.TemporaryDirectory() as out:
        config = load_config(None, [
            "curriculum.families=[add]", "curriculum.levels=[1]", "eval.levels=[1]", "eval.per_level=1",
            f"control.tasks_per_step={PROMPTS}", f"generate.group_size={GROUP}",
            f"control.max_new_tokens={NEW_TOKENS}", "generate.temperature=1.0", f"logging.runs_dir={out}",
            *overrides,
        ])
        trainer = Trainer(config, Path(out))
        times = []
        for _ in range(steps + 1):
            started = time.perf_counter()
            trainer.step()
            times.append(time.perf_counter() - started)
    return statistics.mean(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4, help="timed steps per trainer (after one warm-up)")
    steps = parser.parse_args().steps
    trl = trl_seconds_per_step(steps)
    print(f"trl_grpo_full_ft   {trl:6.2f} s/step")
    full = autotelic_seconds_per_step(steps, ["model.lora=false", f"algorithm.lr={LR}"])
    print(f"autotelic_full_ft  {full:6.2f} s/step  ({trl / full:.2f}x)")
    every_group = autotelic_seconds_per_step(steps, ["model.lora=false", f"algorithm.lr={LR}",
                                                     "filter.drop_zero_variance=false"])
    print(f"autotelic_full_ft_all_groups {every_group:6.2f} s/step  ({trl / every_group:.2f}x)"
          "  [zero-variance groups trained on too, as TRL does: same compute per step]")
    lora = autotelic_seconds_per_step(steps, ["model.lora=true", "algorithm.lr=4e-4"])
    print(f"autotelic_lora     {lora:6.2f} s/step  ({trl / lora:.2f}x)")
    print(f"speedup_vs_trl={trl / full:.2f}")


if __name__ == "__main__":
    main()
