"""TRL's GRPOTrainer as the peer the benchmarks compare autotelic with: the process settings every arm runs
under, and a GRPOTrainer on a model directory for a list of autotelic tasks, with their families' verifiers
as its reward function (bench/grpo_vs_trl.py, bench/time_to_accuracy.py).

The prompts are the chat messages autotelic's policy renders (``autotelic.backends.hf.chat_messages``), so TRL
applies the tokenizer's chat template with the generation prompt to the same messages, and each completion is
scored by the same ``verifier_reward`` autotelic's verifier reward uses.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from autotelic.backends.hf import chat_messages, keep_freed_memory_in_process
from autotelic.rollout.filter import verifier_reward
from autotelic.types import Task

TRLReward = Callable[..., list[float]]  # TRL calls it with the completions and the dataset's other columns


def apply_process_settings() -> None:
    """What HFPolicy applies, once and before any arm: threads started later inherit the denormal flush."""
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    keep_freed_memory_in_process()
    torch.set_flush_denormal(True)


def verifier_reward_function(tasks: list[Task]) -> TRLReward:
    """A TRL reward function scoring each completion by its task's family verifier (tasks found by uid)."""
    by_uid = {task.uid: task for task in tasks}

    def verifier(completions: list[list[dict[str, str]]], uid: list[str], **_: Any) -> list[float]:
        return [verifier_reward(by_uid[u], completion[0]["content"]) for completion, u in zip(completions, uid)]

    return verifier


def chat_rows(tasks: list[Task], system_prompt: str | None = None) -> list[dict[str, Any]]:
    """TRL's conversational dataset rows: the messages our policy is prompted with, and the task's uid."""
    if any(task.response_prefix for task in tasks):
        raise ValueError("TRL cannot continue a response prefix: the tasks must have none")
    return [{"prompt": chat_messages(task.chat, system_prompt), "uid": task.uid} for task in tasks]


@dataclass(frozen=True)
class PeerSettings:
    """What a GRPO step is: ``prompts`` x ``group`` completions of at most ``new_tokens`` tokens."""

    prompts: int
    group: int
    new_tokens: int
    lr: float
    temperature: float
    steps: int
    top_p: float = 1.0
    seed: int = 0
    beta: float = 0.0
    checkpointing: bool | None = None  # None: TRL's default
    lr_schedule: str = "linear"  # TRL's default: to zero at ``steps``


def grpo_trainer(model_dir: str, tasks: list[Task], settings: PeerSettings, output_dir: str,
                 callbacks: list[Any], system_prompt: str | None = None) -> Any:
    """TRL's GRPOTrainer (fp32 on the CPU, full fine-tuning) on ``tasks``; every setting not in ``settings``
    is TRL's default."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    chosen = {} if settings.checkpointing is None else {"gradient_checkpointing": settings.checkpointing}
    args = GRPOConfig(
        output_dir=output_dir, per_device_train_batch_size=settings.prompts * settings.group,
        num_generations=settings.group, max_completion_length=settings.new_tokens, learning_rate=settings.lr,
        beta=settings.beta, temperature=settings.temperature, top_p=settings.top_p, max_steps=settings.steps,
        lr_scheduler_type=settings.lr_schedule, logging_steps=1,
        report_to=[], save_strategy="no", use_cpu=True, bf16=False, seed=settings.seed, **chosen,
    )
    return GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
                       reward_funcs=verifier_reward_function(tasks), args=args,
                       train_dataset=Dataset.from_list(chat_rows(tasks, system_prompt)),
                       processing_class=AutoTokenizer.from_pretrained(model_dir), callbacks=callbacks)
