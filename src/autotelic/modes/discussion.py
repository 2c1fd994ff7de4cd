"""``discussion`` (CoMAS): several agents, each its own model, discuss every task for some rounds, solving and
grading each other; every turn is paid from the grades, and each agent trains on its own turns. Held out, the
agents are evaluated alone and in a greedy discussion."""

from __future__ import annotations

from typing import Any

from autotelic.algorithms import AlgorithmSpec
from autotelic.backends import PolicyBackend
from autotelic.config import RunConfig
from autotelic.heldout import HeldOut
from autotelic.modes.registry import Built, Mode, refuse_remote, register_mode
from autotelic.rewards import LABEL_FREE, SHAPING
from autotelic.rollout.discussion import DiscussionSampler, evaluate_discussion


def discussion(config: RunConfig, agents: list[PolicyBackend], greedy: bool = False) -> DiscussionSampler:
    cfg, gen = config.discussion, config.generate
    return DiscussionSampler(agents, cfg.rounds, cfg.solutions, cfg.references, cfg.grade_low, cfg.grade_high,
                             cfg.unparsed_penalty, cfg.consensus, cfg.grade_tokens,
                             None if cfg.roles is None else tuple(cfg.roles), gen.temperature, gen.top_p, greedy)


def discussions(built: Built) -> DiscussionSampler:
    return discussion(built.config, built.agents)


def evaluate_together(config: RunConfig, agents: list[PolicyBackend], heldout: HeldOut,
                      ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    return evaluate_discussion(discussion(config, agents, greedy=True), heldout, config.eval.max_new_tokens,
                               config.eval.batch_size)


def problems(config: RunConfig, spec: AlgorithmSpec) -> list[str]:
    """Settings its grade-paid, per-agent training cannot honour."""
    problems = refuse_remote(config)
    if config.vllm.enabled:
        problems.append("vllm.enabled=true cannot serve generate.mode=discussion: each CoMAS agent is its own model; "
                        "set vllm.enabled=false")
    if config.dist.train_workers:
        problems.append("dist.train_workers trains one policy; generate.mode=discussion trains one per agent: "
                        "set dist.train_workers=0")
    names = [r.name for r in config.filter.rewards]
    if "env" not in names or not set(names) - {"env"} <= LABEL_FREE | SHAPING:
        problems.append("generate.mode=discussion pays every turn from the agents' grades (in the env return), "
                        "never from the answer key: use filter.rewards=[{name: env}], with at most rewards that "
                        f"never read the key beside it ({', '.join(sorted(LABEL_FREE | SHAPING))})")
    if spec.advantage == "rae" or spec.name == "offline_dpo":
        problems.append(f"generate.mode=discussion trains each agent on its turns of this step's discussions: use "
                        f"another algorithm than {spec.name}")
    prefixes = config.curriculum.prefixes
    if (config.replay.name != "on_policy" or config.control.early_exit_probe or prefixes.fraction
            or prefixes.iteration_steps):
        problems.append("generate.mode=discussion trains on whole fresh discussions: use replay.name=on_policy, "
                        "no control.early_exit_probe and no curriculum.prefixes (fraction, iteration_steps)")
    if config.curriculum.name in ("learnability", "regret"):
        problems.append(f"curriculum.name={config.curriculum.name} reads rewards as pass rates, which grades are "
                        "not: use uniform or sec with generate.mode=discussion")
    return problems


def agent_model(config: RunConfig, index: int) -> str | None:
    return config.discussion.models[index] if config.discussion.models else None


def agent_lr(config: RunConfig, index: int) -> float | None:
    return config.discussion.lrs[index] if config.discussion.lrs else None


register_mode(Mode("discussion", discussions, problems, agents=lambda config: config.discussion.agents,
                   agent_model=agent_model, agent_lr=agent_lr, evaluate_together=evaluate_together))
