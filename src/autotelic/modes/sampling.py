"""The single-turn modes: ``sample`` (a group of independent samples per task), ``tree`` (samples branched at
their highest-entropy tokens, TreeRL-style, credited by segment) and ``partial`` (long samples generated a
segment per step, paused in between)."""

from __future__ import annotations

from autotelic.algorithms import AlgorithmSpec
from autotelic.config import RunConfig
from autotelic.modes.registry import Built, Mode, refuse_early_exit, refuse_remote, register_mode
from autotelic.rollout.generate import PartialRolloutSampler, PolicySampler, TreeSampler


def samples(built: Built) -> PolicySampler:
    gen = built.config.generate
    return PolicySampler(built.policy, gen.temperature, gen.top_p)


def trees(built: Built) -> TreeSampler:
    gen, tree = built.config.generate, built.config.tree
    return TreeSampler(built.policy, gen.temperature, gen.top_p, tree.branches, tree.branch_samples, tree.depth)


def tree_problems(config: RunConfig, spec: AlgorithmSpec) -> list[str]:
    problems = refuse_early_exit(config)
    if config.vllm.enabled:
        problems.append("vllm.enabled=true cannot serve generate.mode=tree: tree rollouts branch at high-entropy "
                        "tokens and vLLM returns no entropies; use another generate.mode or vllm.enabled=false")
    if spec.advantage not in ("grpo", "dr_grpo"):
        problems.append(f"generate.mode=tree credits tree segments with group baselines: use a GRPO-family "
                        f"algorithm (grpo, dr_grpo, dapo, gspo), not {spec.name}")
    return problems


def partials(built: Built) -> PartialRolloutSampler:
    gen = built.config.generate
    return PartialRolloutSampler(built.policy, gen.temperature, gen.top_p, built.config.partial.segment_tokens)


def partial_problems(config: RunConfig, spec: AlgorithmSpec) -> list[str]:
    return refuse_early_exit(config) + refuse_remote(config)


register_mode(Mode("sample", samples))
register_mode(Mode("tree", trees, tree_problems, branches=True))
register_mode(Mode("partial", partials, partial_problems))
