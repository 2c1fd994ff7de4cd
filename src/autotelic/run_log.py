"""What a step writes about itself: the metrics of its groups (rewards by family, episodes, tools, web pages,
proposals, discussions), the Ray pools' restarts, and the JSONL logs of rollouts and prompt evolutions."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from autotelic.abilities import HoldsEnvWorkers, Pausing, ReportsWorkerMemory, Restartable
from autotelic.curricula import Curriculum
from autotelic.curricula.evolve import EvolvingPromptPool
from autotelic.rewards.web import web_metrics
from autotelic.rollout.discussion import LOGGED_INFO as DISCUSSION_INFO
from autotelic.rollout.discussion import discussion_metrics
from autotelic.rollout.generate import EpisodeSampler, RolloutWorker
from autotelic.rollout.propose import proposal_metrics
from autotelic.types import Group

# Sample facts rollouts.jsonl records when present: a self-play seat, a proposal, a discussion turn, a tree's copy.
LOGGED_INFO = ("player", "proposal", "looped", "answered", "demonstration", "forked", *DISCUSSION_INFO)


def group_metrics(groups: list[Group]) -> dict[str, float]:
    """The step's mean reward (overall and per family) over the groups that could be scored, and what its
    episodes, tool calls, proposals and discussions did (each only where the step has them)."""
    scored = [g for g in groups if g.dropped_by not in ("reward_error", "unscorable")]
    rewards = [r for g in scored for r in g.rewards]
    metrics = {"reward/mean": sum(rewards) / max(1, len(rewards))}
    by_family: dict[str, list[float]] = defaultdict(list)
    for group in scored:
        by_family[group.task.family].extend(group.rewards)
    metrics.update({f"reward/{name}": sum(v) / len(v) for name, v in by_family.items()})
    samples = [s for g in groups for s in g.samples]
    metrics["generate/looped_share"] = sum(s.info.get("looped", False) for s in samples) / max(1, len(samples))
    metrics["generate/answered_share"] = sum(s.info.get("answered", False) for s in samples) / max(1, len(samples))
    episodes = [s for g in groups for s in g.samples if "turns" in s.info]
    if episodes:
        metrics["episode/turns"] = sum(s.info["turns"] for s in episodes) / len(episodes)
        metrics["episode/invalid_actions"] = sum(s.info["invalid_actions"] for s in episodes) / len(episodes)
        if any("forked" in s.info for s in episodes):  # episode.tree_roots: the share that are copies
            metrics["episode/copies"] = sum("forked" in s.info for s in episodes) / len(episodes)
        calls = sum(s.info.get("env", {}).get("tool_calls", 0) for s in episodes)
        if calls or any("tool_calls" in s.info.get("env", {}) for s in episodes):
            successes = sum(s.info["env"].get("tool_successes", 0) for s in episodes)
            metrics["tools/calls_per_episode"] = calls / len(episodes)
            metrics["tools/success_rate"] = successes / calls if calls else 0.0
        metrics.update(web_metrics(episodes))
    return {**metrics, **proposal_metrics(groups), **discussion_metrics(groups)}


def worker_pools(generator: RolloutWorker, scorer: Any) -> dict[str, Any]:
    """The stages that may run on Ray actors, by the name of their restart metric."""
    return {"worker_restarts": generator, "reward_worker_restarts": scorer,
            "env_worker_restarts": generator.make_env if isinstance(generator, EpisodeSampler) else None}


def worker_metrics(generator: RolloutWorker, scorer: Any, env_workers: bool) -> dict[str, float]:
    """Actors replaced after dying so far, and the largest peak memory of their processes, per pool the driver
    holds; partial rollouts still paused mid-generation."""
    pools = worker_pools(generator, scorer)
    metrics = {f"dist/{name}": float(part.restarts) for name, part in pools.items() if isinstance(part, Restartable)}
    metrics.update({f"perf/{name.removesuffix('restarts')}peak_rss_mib": part.peak_rss_mib()
                    for name, part in pools.items() if isinstance(part, ReportsWorkerMemory)})
    if env_workers and isinstance(generator, HoldsEnvWorkers):  # environments held by the rollout workers
        metrics["dist/env_worker_restarts"] = float(generator.env_restarts())
        metrics["perf/env_worker_peak_rss_mib"] = generator.env_peak_rss_mib()
    if isinstance(generator, Pausing):
        metrics["generate/pending_groups"] = float(len(generator.pending))
    return metrics


def rollout_rows(groups: list[Group], step: int, limit: int) -> list[dict[str, Any]]:
    """rollouts.jsonl's rows of a step: every sample with its task, reward, filter verdict and mode facts."""
    return [
        {"step": step, "family": g.task.family, "level": g.task.level, "prompt": g.task.prompt,
         "answer": g.task.answer, **({"response_prefix": g.task.response_prefix} if g.task.response_prefix else {}),
         "completion": s.text, "finished": s.finished,
         "reward": s.reward if s.reward is not None and math.isfinite(s.reward) else None,
         "kept": g.kept, "filter": g.dropped_by or "kept", "policy_version": s.policy_version,
         **({"parent": s.parent, "branch_at": s.branch_at} if s.parent is not None else {}),
         **({"turns": s.info["turns"], "observations": s.info["observations"]} if "turns" in s.info else {}),
         **{key: s.info[key] for key in LOGGED_INFO if key in s.info}}
        for g in groups for s in g.samples
    ][:limit]


def write_step_logs(run_dir: Path, groups: list[Group], step: int, limit: int, curriculum: Curriculum) -> None:
    """rollouts.jsonl (at most ``limit`` samples), and eva's prompt evolutions of the step (population.jsonl:
    the seeds, their informativeness, the new prompts)."""
    write_jsonl(run_dir / "rollouts.jsonl", rollout_rows(groups, step, limit), append=True)
    if isinstance(curriculum, EvolvingPromptPool):
        write_jsonl(run_dir / "population.jsonl", [{"step": step, **event} for event in curriculum.take_events()],
                    append=True)


def write_jsonl(path: Path, rows: list[dict[str, Any]], append: bool = False) -> None:
    with path.open("a" if append else "w") as file:
        for row in rows:
            file.write(json.dumps(row) + "\n")
