"""Multi-turn episodes with and without the KV cache kept between turns (``PrefixCache``): seconds and tokens.

The web recipe's episodes on the embedded SmolLM2-135M-Instruct, on its live local sites (plain HTTP): every
turn the agent reads an intro and the page (about a thousand tokens in all by the last turn) and writes one
action. Without reuse each turn's prompt is the whole episode so far, computed again; with it only the tokens
since the last turn are (``backends/sampling.py``). Two workloads, each arm alternately, ``--repeats`` times:
``eval`` (one greedy episode per held-out task, as the held-out evaluation plays them) and ``train`` (the
recipe's groups of sampled episodes, ``control.tasks_per_step`` tasks x ``generate.group_size``, from a fixed
seed), after an untimed warm-up of each arm. Prompt tokens computed are counted at the policy's calls. Greedy
episodes must match token for token; sampled ones may part where a 1e-5 difference in the logits moves a draw
across a boundary, which the artifact counts.

    python bench/episode_prefill.py                     # 16 held-out tasks, 2 repeats
    python bench/episode_prefill.py --tasks 60 --repeats 3
    python bench/episode_prefill.py model.device=cuda

Writes bench/results/episode_prefill-<UTC time>.json; the last lines, per workload: <workload>_seconds_ratio=X
(median seconds with reuse over without), <workload>_prefill_share=Y (prompt tokens computed with reuse, over
without) and how many episodes the two arms played alike.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import artifacts  # bench/artifacts.py: this script's directory is on sys.path

from autotelic.backends import PrefixCache
from autotelic.backends.hf import HFPolicy
from autotelic.heldout import build_heldout
from autotelic.loading import load_config
from autotelic.modes.environments import run_env_factory
from autotelic.rollout.generate import EpisodeSampler
from autotelic.types import Group

RECIPE = Path(__file__).resolve().parent.parent / "recipes" / "opagent-web.yaml"


def play(policy: CountingPolicy, sampler: EpisodeSampler, tasks: list, sizes: int, max_new_tokens: int,
         seed: int) -> tuple[float, list[Group]]:
    policy.generator.manual_seed(seed)
    policy.computed = 0
    start = time.perf_counter()
    groups = sampler.generate(tasks, sizes, max_new_tokens)
    return time.perf_counter() - start, groups


@dataclass
class CountingPolicy:
    """The policy, counting the prompt tokens its calls computed: those it was given, less those the kept cache
    supplied (``PrefixCache.reused_tokens``, counted where the backend reads it)."""

    policy: HFPolicy
    computed: int = 0

    def generate(self, prompts: list[list[int]], n, *args, prefixes: PrefixCache | None = None, **kwargs):
        reused_before = prefixes.reused_tokens if prefixes is not None else 0
        out = self.policy.generate(prompts, n, *args, prefixes=prefixes, **kwargs)
        reused = (prefixes.reused_tokens if prefixes is not None else 0) - reused_before
        self.computed += sum(map(len, prompts)) - reused
        return out

    def __getattr__(self, name: str):  # everything else is the policy's own
        return getattr(self.policy, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=16, help="held-out tasks for the eval workload")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--results-dir", type=Path, default=artifacts.RESULTS, help="where the artifact goes")
    parser.add_argument("overrides", nargs="*", help="config overrides on recipes/opagent-web.yaml")
    args = parser.parse_args()
    config = load_config(RECIPE, ["curriculum.families=[web_shop,web_forum,web_wiki]", "curriculum.levels=[1]",
                                  "eval.levels=[1]", "eval.per_level=20",
                                  *args.overrides])
    tasks = list(build_heldout(config))[:args.tasks]
    policy = CountingPolicy(HFPolicy(config.model, seed=0))
    episode, gen = config.episode, config.generate
    workloads = {  # name: (tasks, samples per task, temperature, greedy)
        "eval": (tasks, 1, 1.0, True),
        "train": (tasks[:config.control.tasks_per_step], gen.group_size, gen.temperature, False),
    }

    def sampler(reuse: bool, temperature: float, greedy: bool) -> EpisodeSampler:
        return EpisodeSampler(policy, run_env_factory(config), temperature, max_turns=episode.max_turns,
                              greedy=greedy, turn_tokens=episode.turn_tokens, max_invalid=episode.max_invalid,
                              reuse_prefixes=reuse)

    for reuse in (True, False):  # untimed: first calls pay one-off costs (a GPU's kernel loads and allocator)
        play(policy, sampler(reuse, 1.0, True), tasks[:2], 1, config.control.max_new_tokens, seed=0)
    rows, lines, ratios = [], [], {}
    for name, (batch, sizes, temperature, greedy) in workloads.items():
        seconds: dict[bool, list[float]] = {True: [], False: []}
        outcomes: dict[bool, list[Group]] = {}
        computed: dict[bool, int] = {}
        for repeat in range(args.repeats):
            for reuse in ((True, False) if repeat % 2 == 0 else (False, True)):
                took, groups = play(policy, sampler(reuse, temperature, greedy), batch, sizes,
                                    config.control.max_new_tokens, seed=repeat)
                seconds[reuse].append(took)
                outcomes[reuse], computed[reuse] = groups, policy.computed
        samples = [(a, b) for ga, gb in zip(outcomes[True], outcomes[False]) for a, b in zip(ga.samples, gb.samples)]
        same = sum(a.token_ids == b.token_ids for a, b in samples)
        full, reduced = computed[False], computed[True]
        ratio = statistics.median(seconds[True]) / statistics.median(seconds[False])
        rows += [{"arm": f"{name}, {'reuse' if reuse else 'recompute'}", "seed": 0, "workload": name,
                  "episodes": len(samples), "seconds": seconds[reuse],
                  "prompt_tokens_computed": computed[reuse], "identical_episodes": same}
                 for reuse in (True, False)]
        ratios.update({f"{name}_seconds_ratio": ratio, f"{name}_prefill_share": reduced / full})
        lines.append(f"{name}_seconds_ratio={ratio:.3f} {name}_prefill_share={reduced / full:.3f} "
                     f"identical_episodes={same}/{len(samples)}")
    path = artifacts.write("episode_prefill", rows, [], {"ratios": ratios}, args.results_dir)
    print(f"wrote {path}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
