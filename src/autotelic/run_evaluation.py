"""The evaluations a run makes on its held-out set, each writing its per-task records into the run directory:
held-out accuracy (greedy answers, or whole greedy episodes), CoMAS's agents alone and in discussion, and
VM-MCTS's value stage after training."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from autotelic.backends import PolicyBackend
from autotelic.backends.hf import role_backend
from autotelic.config import RunConfig
from autotelic.curricula.base import Curriculum, find_layer
from autotelic.curricula.memory import MemoryCurriculum
from autotelic.evaluation import (Decoding, EvalResult, episode_reward, evaluate, evaluate_episodes,
                                  evaluate_pass_at_k)
from autotelic.heldout import HeldOut
from autotelic.modes import get_mode
from autotelic.rollout.filter import Scorer, response_scorer, verifier_reward
from autotelic.rollout.generate import PolicySampler
from autotelic.run_log import write_jsonl
from autotelic.run_state import TrainState
from autotelic.types import Sample, Task
from autotelic.vm_mcts import evaluate_decodings, train_value_model
from autotelic.win_rate import read_prompts, win_rate


def evaluate_heldout(config: RunConfig, policy: PolicyBackend, tasks: Sequence[Task],
                     decoding: Decoding | None = None) -> EvalResult:
    """Held-out accuracy: whole greedy episodes in episode mode (scored by the environment's success check
    where it has one), else one greedy answer per task (or ``decoding``) scored by the verifier."""
    agent = get_mode(config.generate.mode).heldout_agent
    if agent is not None:
        return evaluate_episodes(agent(config, policy, None), tasks, config.control.max_new_tokens,
                                 config.eval.batch_size)
    return evaluate(policy, tasks, config.eval.max_new_tokens, config.eval.batch_size, decoding)


def _episode(task: Task, sample: Sample) -> float:
    return episode_reward(sample)


def _answer(task: Task, sample: Sample) -> float:
    return verifier_reward(task, sample.text)


def heldout_pass_at_k(config: RunConfig, policy: PolicyBackend, tasks: Sequence[Task],
                      ) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """pass@k of ``eval.pass_k`` on the held-out tasks: sampled whole episodes in episode mode (scored by the
    environment's success check where it has one), else sampled answers scored by the verifier."""
    cfg, agent = config.eval, get_mode(config.generate.mode).heldout_agent
    if agent is not None:
        worker, tokens, score = agent(config, policy, cfg.pass_temperature), config.control.max_new_tokens, _episode
    else:
        worker, tokens, score = PolicySampler(policy, cfg.pass_temperature), cfg.max_new_tokens, _answer
    summary, records = evaluate_pass_at_k(worker, tasks, cfg.pass_samples, cfg.pass_k, tokens, score, cfg.batch_size)
    return {**summary, "samples": cfg.pass_samples, "temperature": cfg.pass_temperature}, records


@dataclass
class RunEvaluation:
    config: RunConfig
    heldout: HeldOut
    run_dir: Path
    curriculum: Curriculum
    """The run's, whose memory (``curriculum.memory.at_eval``) serves held-out tasks the problems it banked."""

    @property
    def discussing(self) -> bool:  # CoMAS: the agents' discussion is evaluated too
        return get_mode(self.config.generate.mode).evaluate_together is not None

    def before(self, state: TrainState, agents: list[PolicyBackend]) -> list[str]:
        """Evaluates the untrained agents into ``state`` (unless a resumed run did) and says what it found."""
        if state.eval_before is None:
            before = self.accuracy("before", agents[0])
            state.eval_before = before.summary()
            state.evals.append({"step": 0, "accuracy": before.accuracy})
            if self.discussing:
                state.discussion_before = self.discussion("before", agents, before)
        comas = [f"CoMAS before training: {show_discussion(state.discussion_before)}"] if self.discussing else []
        return [*comas, f"{self.heldout.label} accuracy before training: {state.eval_before['accuracy']:.1%} "
                        f"({len(self.heldout)} tasks, greedy)"]

    def after(self, state: TrainState, agents: list[PolicyBackend]) -> tuple[EvalResult, dict[str, Any]]:
        """The trained agents' held-out accuracy, and what the summary adds for the mode (CoMAS's discussion)."""
        after, extra = self.accuracy("after", agents[0]), {}
        if self.discussing:
            extra["comas"] = {"before": state.discussion_before, "after": self.discussion("after", agents, after)}
        if self.config.eval.win_rate.enabled:
            extra["win_rate"] = self.win_rate(agents[0])
        if self.config.eval.pass_k:
            extra["pass_at_k"], records = heldout_pass_at_k(self.config, agents[0], self.heldout)
            write_jsonl(self.run_dir / "eval_after_pass_at_k.jsonl", records)
        memory = find_layer(self.curriculum, MemoryCurriculum) if self.config.curriculum.memory.at_eval else None
        if memory is not None:
            extra["memory_eval"] = self.with_memory(agents[0], memory)
        return after, extra

    def with_memory(self, policy: PolicyBackend, memory: MemoryCurriculum) -> dict[str, Any]:
        """Held-out accuracy with each task served its memory's examples (records in eval_after_memory.jsonl, keyed
        by the held-out prompt as eval_after.jsonl is, the prompt served beside it)."""
        served = memory.recall(list(self.heldout))
        result = evaluate_heldout(self.config, policy, served)
        for record, task in zip(result.records, self.heldout):
            record["served_prompt"], record["prompt"] = record["prompt"], task.prompt
        write_jsonl(self.run_dir / "eval_after_memory.jsonl", result.records)
        return {**result.summary(), "served": sum(task.meta.get("memory", False) for task in served)}

    def win_rate(self, policy: PolicyBackend) -> dict[str, Any]:
        """The policy's pairwise win rate on open-ended instructions (records in eval_after_win_rate.jsonl)."""
        settings, shared = self.config.eval.win_rate, {}
        reference, judge = (role_backend(name, policy, self.config.model, self.config.eval.seed, shared)
                            for name in (settings.reference, settings.judge))
        result = win_rate(policy, reference, judge, read_prompts(settings.prompts), settings.max_new_tokens)
        write_jsonl(self.run_dir / "eval_after_win_rate.jsonl", result.records)
        return {**result.summary(), "reference": settings.reference, "judge": settings.judge}

    def accuracy(self, tag: str, policy: PolicyBackend) -> EvalResult:
        """Held-out accuracy, its records in eval_<tag>.jsonl."""
        result = evaluate_heldout(self.config, policy, self.heldout)
        write_jsonl(self.run_dir / f"eval_{tag}.jsonl", result.records)
        return result

    def summary(self, state: TrainState, after: EvalResult, extra: dict[str, Any]) -> dict[str, Any]:
        """summary.json: what the run measured before and after, at what cost, and what ``extra`` adds (the
        sandbox, the value stage, the mode's own evaluations)."""
        summary = {
            "eval_before": state.eval_before, "eval_after": after.summary(), "steps": state.step,
            "wall_seconds": round(state.wall_seconds, 1), "train_seconds": round(state.train_seconds, 1),
            "completion_tokens": state.completion_tokens, **self.heldout.summary(),
            "run_dir": str(self.run_dir),
            "model_dir": str(self.run_dir / "model") if self.config.train.export_model else None,
            "evals": [*state.evals, {"step": state.step, "accuracy": after.accuracy}], **extra,
        }
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
        return summary

    def closing(self, state: TrainState, summary: dict[str, Any]) -> list[str]:
        comas = [f"CoMAS after training: {show_discussion(summary['comas']['after'])}"] if self.discussing else []
        alarms = ["guardrail alarms: " + "; ".join(f"{a['signal']} {a['value']:.2f} < {a['threshold']} at step "
                                                    f"{a['step']}" for a in summary["guardrail_alarms"])
                  ] if summary.get("guardrail_alarms") else []
        wins = summary.get("win_rate")
        won = [f"win rate against {wins['reference']} (judge {wins['judge']}, both orders): {wins['win_rate']:.1%} "
               f"over {wins['pairs']:.0f} instructions, {wins['parse_rate']:.0%} of verdicts readable"] if wins else []
        memory = summary.get("memory_eval")
        recalled = [f"{self.heldout.label} accuracy with the memory's examples: {memory['accuracy']:.1%} "
                    f"({memory['served']} of {len(self.heldout)} tasks served)"] if memory else []
        passes = summary.get("pass_at_k")
        sampled = [", ".join(f"{key} {value:.1%}" for key, value in passes.items() if key.startswith("pass@")) +
                   f" ({passes['samples']} samples per task at temperature {passes['temperature']})"] if passes else []
        return [*comas, *alarms, *won, *sampled, *recalled,
                f"{self.heldout.label} accuracy: before {state.eval_before['accuracy']:.1%} -> after "
                f"{summary['eval_after']['accuracy']:.1%} after {state.step} steps in "
                f"{state.wall_seconds / 60:.1f} min; run directory {self.run_dir}"]

    def discussion(self, tag: str, agents: list[PolicyBackend], first: EvalResult) -> dict[str, Any]:
        """CoMAS: each agent's held-out accuracy alone (greedy; agent 0's is ``first``), then the agents'
        greedy discussion of every held-out task (records in eval_<tag>_discussion.jsonl)."""
        alone = [first.accuracy] + [self.accuracy(f"{tag}_agent{i}", agent).accuracy
                                    for i, agent in enumerate(agents[1:], 1)]
        summary, records = get_mode(self.config.generate.mode).evaluate_together(self.config, agents, self.heldout)
        write_jsonl(self.run_dir / f"eval_{tag}_discussion.jsonl", records)
        return {"agents": alone, "discussion": summary}

    def value_stage(self, policy: PolicyBackend, scorer: Scorer, say: Callable[[str], Any]) -> dict[str, Any]:
        """VM-MCTS after training: value targets by search, the value model, held-out decodings."""
        say(f"VM-MCTS: searching {self.config.value.tasks} training tasks for value targets")
        model, metrics = train_value_model(policy, self.config, response_scorer(scorer), self.heldout,
                                           self.run_dir / "model", self.run_dir / "value_model")
        decodings = evaluate_decodings(policy, self.heldout, self.config, model, self.run_dir)
        for strategy, result in decodings.items():
            say(f"held-out accuracy with {strategy}: {result['accuracy']:.1%} "
                f"({result['tokens_per_task']:.0f} tokens per task)")
        return {"metrics": metrics, "decodings": decodings}


def show_discussion(result: dict[str, Any]) -> str:
    alone = ", ".join(f"{accuracy:.1%}" for accuracy in result["agents"])
    return f"agents alone {alone}; discussion {result['discussion']['accuracy']:.1%} (vote of the last round's answers)"
