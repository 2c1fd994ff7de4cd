"""Generate: turn tasks into groups of completions from a policy backend.

Four generators share one call, ``generate(tasks, sizes, max_new_tokens) -> groups``:
- ``PolicySampler``: n independent samples per task, decoded in one batch (prompts share their KV cache);
- ``TreeSampler``: the samples, then new continuations branched from their highest-entropy token (and those
  again, ``depth`` levels), so the loss can credit each segment separately (``Sample.parent``/``branch_at``);
- ``PartialRolloutSampler``: every sample advances by at most ``segment_tokens`` per step; unfinished
  groups wait and continue next step under the newer policy (log-probs and versions recorded);
- ``EpisodeSampler``: multi-turn episodes against an environment; observation tokens are masked out.

``SelfPlaySampler`` (``selfplay.py``) plays two-player games with a transcript per player, from the
multi-turn pieces here; ``DiscussionSampler`` (``discussion.py``) runs CoMAS discussions between agents.

``RolloutWorker`` is the seam for distribution: a Ray actor wraps the same call.
"""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import torch

from autotelic.backends import Completion, PolicyBackend, PrefixCache
from autotelic.envs import Environment, Step, call_all
from autotelic.rollout.episode_tree import EpisodeTree
from autotelic.types import Group, Sample, Task


class RolloutWorker(Protocol):
    def generate(self, tasks: list[Task], sizes: int | list[int], max_new_tokens: int) -> list[Group]: ...


def sizes_per_task(sizes: int | list[int], count: int) -> list[int]:
    return [sizes] * count if isinstance(sizes, int) else list(sizes)


def _sample(policy: PolicyBackend, completion: Completion, prefix: Sample | None = None, at: int = 0) -> Sample:
    """A Sample from a backend completion, optionally continuing the first ``at`` tokens of ``prefix``."""
    # cut early by control.stop_repeats, or ended once complete by control.stop_pattern
    info = {"looped": True} if completion.looped else {"answered": True} if completion.answered else {}
    if prefix is None:
        return Sample(text=policy.decode(completion.token_ids), token_ids=list(completion.token_ids),
                      logprobs=list(completion.logprobs), finished=completion.finished,
                      policy_version=policy.version, info=info)
    token_ids = prefix.token_ids[:at] + completion.token_ids
    return Sample(text=policy.decode(token_ids), token_ids=token_ids,
                  logprobs=prefix.logprobs[:at] + completion.logprobs, finished=completion.finished,
                  policy_version=min(prefix.policy_version, policy.version), info=info)


@dataclass
class PolicySampler:
    """n samples per task (or sizes[i] for task i)."""

    policy: PolicyBackend
    temperature: float = 1.0
    top_p: float = 1.0
    greedy: bool = False

    def generate(self, tasks: list[Task], sizes: int | list[int], max_new_tokens: int) -> list[Group]:
        return self.generate_with_completions(tasks, sizes, max_new_tokens)[0]

    def generate_with_completions(self, tasks: list[Task], sizes: int | list[int], max_new_tokens: int,
                                  ) -> tuple[list[Group], list[list[Completion]]]:
        """The groups, and the backend's completions behind them (with per-step entropies)."""
        if not tasks:
            return [], []
        prompts = [self.policy.encode_prompt(task.chat, task.response_prefix) for task in tasks]
        sizes = sizes_per_task(sizes, len(tasks))
        demonstrated = [bool(task.meta.get("demonstration")) and size > 1 for task, size in zip(tasks, sizes)]
        outputs = self.policy.generate(prompts, [size - shown for size, shown in zip(sizes, demonstrated)],
                                       max_new_tokens, self.temperature, self.top_p, greedy=self.greedy)
        groups = [Group(task=task, prompt_ids=prompt, samples=[_sample(self.policy, c) for c in completions])
                  for task, prompt, completions in zip(tasks, prompts, outputs)]
        guided = [group for group, shown in zip(groups, demonstrated) if shown]
        played = [(group.prompt_ids, self._demonstration(group.task, max_new_tokens)) for group in guided]
        if played:
            own_logprobs(self.policy, played, self.temperature)
        for group, (_, sample) in zip(guided, played):
            group.samples.append(sample)  # last: the completions behind the sampled ones keep their indices
        return groups, outputs

    def _demonstration(self, task: Task, max_new_tokens: int) -> Sample:
        """The group's last sample: the task's reference as the reply (guided rollouts, ``curricula/hints.py``),
        cut at the length cap as a sampled reply would be; its log-probs are the policy's, filled in by
        ``own_logprobs``."""
        whole = self.policy.encode_completion("\n".join(task.meta["demonstration"]))
        token_ids = whole[:max_new_tokens]
        return Sample(text=self.policy.decode(token_ids), token_ids=token_ids, logprobs=[0.0] * len(token_ids),
                      finished=len(token_ids) == len(whole), policy_version=self.policy.version,
                      info={"demonstration": True})


def branch_point(entropies: list[float]) -> int | None:
    """Where to branch a completion: its highest-entropy step, never the first (that would be a plain
    new sample) and only where at least one token follows it; None when the completion is too short."""
    if len(entropies) < 3:
        return None
    return max(range(1, len(entropies) - 1), key=lambda t: entropies[t])


@dataclass
class TreeSampler:
    """Roots as PolicySampler draws them, then ``branch_samples`` continuations from the highest-entropy
    token of each of the first ``branches`` roots of every group (TreeRL / TreePO style segment rollouts);
    with ``depth`` > 1 the first ``branches`` new continuations of each group branch again, each inside its own
    tokens, for ``depth`` levels of branch points in all."""

    policy: PolicyBackend
    temperature: float = 1.0
    top_p: float = 1.0
    branches: int = 2
    branch_samples: int = 2
    depth: int = 1

    def generate(self, tasks: list[Task], sizes: int | list[int], max_new_tokens: int) -> list[Group]:
        roots = PolicySampler(self.policy, self.temperature, self.top_p)
        groups, outputs = roots.generate_with_completions(tasks, sizes, max_new_tokens)
        # (group, sample, entropies of the sample's own tokens, where they start)
        frontier = [(g, r, outputs[g][r].entropies, 0) for g, group in enumerate(groups)
                    for r in range(min(self.branches, len(group.samples)))]
        for _ in range(self.depth):
            frontier = self._branch(groups, frontier, max_new_tokens)
        return groups

    def _branch(self, groups: list[Group], frontier: list[tuple[int, int, list[float], int]],
                max_new_tokens: int) -> list[tuple[int, int, list[float], int]]:
        """Branch every frontier sample at its highest-entropy own token; the next level's frontier."""
        origins = []  # (group, parent sample, branch point in the parent's tokens)
        for g, i, entropies, offset in frontier:
            at = branch_point(entropies)
            if at is not None:
                origins.append((g, i, offset + at))
        new: dict[int, list[tuple[int, int, list[float], int]]] = {}
        for budget in sorted({max_new_tokens - at for _, _, at in origins}):  # one batched call per budget
            chosen = [origin for origin in origins if max_new_tokens - origin[2] == budget]
            prompts = [groups[g].prompt_ids + groups[g].samples[i].token_ids[:at] for g, i, at in chosen]
            outputs = self.policy.generate(prompts, self.branch_samples, budget, self.temperature, self.top_p)
            for (g, i, at), completions in zip(chosen, outputs):
                for completion in completions:
                    branch = _sample(self.policy, completion, prefix=groups[g].samples[i], at=at)
                    branch.parent, branch.branch_at = i, at
                    groups[g].samples.append(branch)
                    new.setdefault(g, []).append((g, len(groups[g].samples) - 1, completion.entropies, at))
        return [entry for entries in new.values() for entry in entries[:self.branches]]


@dataclass
class _Pending:
    group: Group
    remaining: int  # tokens each unfinished sample may still generate


@dataclass
class PartialRolloutSampler:
    """Long generations in segments (Kimi k1.5's partial rollouts): each step, every unfinished sample
    advances by at most ``segment_tokens``; a group is returned once all its samples are done. Pending
    groups resume first, under the current policy; each token keeps the log-prob it was sampled with
    and ``policy_version`` records the oldest, so the loss corrects the off-policy part."""

    policy: PolicyBackend
    temperature: float = 1.0
    top_p: float = 1.0
    segment_tokens: int = 16
    pending: list[_Pending] = field(default_factory=list)

    def generate(self, tasks: list[Task], sizes: int | list[int], max_new_tokens: int) -> list[Group]:
        fresh = PolicySampler(self.policy, self.temperature, self.top_p).generate(
            tasks, sizes, min(self.segment_tokens, max_new_tokens))
        work = self.pending + [_Pending(g, max_new_tokens - self.segment_tokens) for g in fresh]
        self._continue(self.pending)
        done, self.pending = [], []
        for item in work:
            unfinished = [s for s in item.group.samples if not s.finished]
            if unfinished and item.remaining > 0:
                self.pending.append(item)
            else:
                done.append(item.group)
        return done

    def _continue(self, items: list[_Pending]) -> None:
        for item in items:
            budget = min(self.segment_tokens, item.remaining)
            item.remaining -= budget
            todo = [s for s in item.group.samples if not s.finished] if budget > 0 else []
            if not todo:
                continue
            prompts = [item.group.prompt_ids + s.token_ids for s in todo]
            outputs = self.policy.generate(prompts, 1, budget, self.temperature, self.top_p)
            for sample, (completion,) in zip(todo, outputs):
                continued = _sample(self.policy, completion, prefix=sample, at=len(sample.token_ids))
                sample.token_ids, sample.logprobs, sample.text = continued.token_ids, continued.logprobs, continued.text
                sample.finished, sample.policy_version = continued.finished, continued.policy_version
                sample.info["segments"] = sample.info.get("segments", 1) + 1

    def state_dict(self) -> dict[str, Any]:
        return {"pending": copy.deepcopy(self.pending)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pending = state["pending"]


# ---- multi-turn pieces, shared by EpisodeSampler and SelfPlaySampler (rollout/selfplay.py) -------------
def episode_sample(policy: PolicyBackend, **info: Any) -> Sample:
    """An empty multi-turn sample; turns and observations are appended as the episode goes."""
    return Sample(text="", token_ids=[], logprobs=[], finished=True, mask=[], policy_version=policy.version,
                  info={"return": 0.0, "turns": 0, "turn_starts": [], "invalid_actions": 0, "observations": [],
                        "steps": [], **info})


def next_turns(policy: PolicyBackend, contexts: list[tuple[list[int], Sample]], max_new_tokens: int,
               temperature: float, top_p: float, greedy: bool = False, turn_tokens: int | None = None,
               prefixes: PrefixCache | None = None) -> list[Completion]:
    """One batched policy call: the next turn after each (prompt, sample so far), at most ``turn_tokens`` long.
    Identical contexts (a group's first turn) are prefilled once and sampled several times; with ``prefixes``
    (one per batch of episodes and policy), each context starts from its episode's state after the last turn."""
    budget = max_new_tokens - min(len(sample.token_ids) for _, sample in contexts)
    budget = min(budget, turn_tokens) if turn_tokens else budget
    rows = [tuple(prompt + sample.token_ids) for prompt, sample in contexts]
    counts = Counter(rows)
    unique = list(counts)
    sizes = 1 if len(unique) == len(rows) else [counts[row] for row in unique]
    outputs = policy.generate([list(row) for row in unique], sizes, budget, temperature, top_p, greedy=greedy,
                              prefixes=prefixes)
    pools = {row: list(completions) for row, completions in zip(unique, outputs)}
    return [pools[row].pop(0) for row in rows]


def add_turn(sample: Sample, completion: Completion, max_new_tokens: int) -> list[int]:
    """Append the policy's turn (mask 1), cut where the sample reaches ``max_new_tokens``; returns its tokens.
    ``sample.finished`` becomes False when the cap cut the turn short."""
    room = max_new_tokens - len(sample.token_ids)
    turn_ids = completion.token_ids[:room]
    sample.info["turn_starts"].append(len(sample.token_ids))  # where the turn's tokens begin (turn credit)
    sample.token_ids += turn_ids
    sample.logprobs += completion.logprobs[:room]
    sample.mask += [1] * len(turn_ids)
    sample.finished = completion.finished and len(completion.token_ids) <= room
    sample.info["turns"] += 1
    return turn_ids


def add_observation(policy: PolicyBackend, sample: Sample, observation: str, after_eos: bool = True,
                    response_prefix: str = "", max_tokens: int | None = None) -> bool:
    """Append ``observation`` as the next user message and open the next assistant turn (starting with
    ``response_prefix``): tokens the policy did not choose, so mask 0 and log-prob 0. A turn cut short
    (``after_eos`` False) is closed first. Appends nothing, and returns False, when the sample would then
    hold ``max_tokens`` or more: no room would be left for the next turn."""
    followup = policy.encode_followup(observation, after_eos=after_eos, response_prefix=response_prefix)
    if max_tokens is not None and len(sample.token_ids) + len(followup) >= max_tokens:
        return False
    sample.token_ids += followup
    sample.logprobs += [0.0] * len(followup)
    sample.mask += [0] * len(followup)
    return True


def record_step(sample: Sample, result: Step) -> None:
    """An environment step's outcome in the episode sample's facts: the return, invalid actions, the
    latest and every step's info (per-step rewards read those, e.g. the web ones) and the observation."""
    sample.info["return"] += result.reward
    sample.info.setdefault("step_rewards", []).append(result.reward)
    sample.info["invalid_actions"] += int(result.info.get("valid") is False)
    sample.info["env"] = result.info  # the latest step's facts (e.g. running tool-call counts)
    sample.info["steps"].append(result.info)
    sample.info["observations"].append(result.observation)


def invalid_in_a_row(sample: Sample) -> int:
    """How many of the episode's last steps were invalid actions, back to the last valid one."""
    count = 0
    for step in reversed(sample.info["steps"]):
        if step.get("valid") is not False:
            break
        count += 1
    return count


def own_logprobs(policy: PolicyBackend, contexts: list[tuple[list[int], Sample]], temperature: float) -> None:
    """Give turns the policy did not sample (a demonstration's) their log-probs under the policy, as sampled turns
    carry theirs: the update's importance ratio then starts at 1 on them, as on the policy's own tokens."""
    with torch.no_grad():
        logprobs, _ = policy.completion_logprobs([p for p, _ in contexts], [s.token_ids for _, s in contexts], 1,
                                                 temperature)
    for row, (_, sample) in zip(logprobs.tolist(), contexts):
        sample.logprobs = [lp if m else 0.0 for lp, m in zip(row, sample.loss_mask())]


def set_own_text(policy: PolicyBackend, sample: Sample) -> None:
    """``sample.text``: the policy's own turns only, as rewards and logs read them."""
    sample.text = policy.decode([t for t, m in zip(sample.token_ids, sample.loss_mask()) if m])


def common_prefix(rows: list[list[int]]) -> list[int]:
    """The longest token list every row starts with."""
    shortest = min(rows, key=len)
    for i, token in enumerate(shortest):
        if any(row[i] != token for row in rows):
            return shortest[:i]
    return shortest


def under_shared_prompt(sample: Sample, prompt: list[int], shared: list[int]) -> None:
    """Make ``sample``, drawn after ``prompt``, a sample of a group whose prompt is ``shared`` (a prefix of
    ``prompt``): the rest of its own prompt starts its tokens, masked with log-prob 0."""
    head = prompt[len(shared):]
    sample.mask = [0] * len(head) + sample.loss_mask()  # before the tokens grow: a None mask covers them all
    sample.token_ids, sample.logprobs = head + sample.token_ids, [0.0] * len(head) + sample.logprobs


@dataclass
class EpisodeSampler:
    """Multi-turn episodes: the policy acts, the environment answers, until done, ``max_turns`` or the
    token cap. A sample's tokens are its turns and the observations between them; observation tokens
    have mask 0 and log-prob 0. The episode return (sum of step rewards) is ``info["return"]``. A task's
    ``response_prefix`` starts every turn (written for the policy, e.g. "Action:"), and the environment
    reads it with the turn. A task with ``meta["demonstration"]`` (guided rollouts, ``curricula/hints.py``) has
    its group's first episode play those actions, one a turn, instead of sampling (``info["demonstration"]``)."""

    policy: PolicyBackend
    make_env: Callable[[], Environment]
    temperature: float = 1.0
    top_p: float = 1.0
    max_turns: int = 4
    greedy: bool = False  # held-out evaluation
    turn_tokens: int | None = None
    """Tokens per turn at most; a turn cut there still acts (the episode goes on), unlike one cut by the
    episode's own cap."""
    max_invalid: int | None = None
    """Early exit: an episode ends after this many invalid actions in a row."""
    reuse_prefixes: bool = True
    """Each turn starts from its episode's KV cache after the last turn (``PrefixCache``); False recomputes the
    whole episode every turn (the same tokens: bench/episode_prefill.py measures the difference)."""
    tree: EpisodeTree | None = None
    """Tree rollouts: a group starts ``tree.roots`` episodes and copies them at turn boundaries (episode_tree.py)."""

    def _played(self, script: list[str]) -> Completion:
        """The demonstration's next action as a finished turn (its log-probs are filled in at the end)."""
        token_ids = self.policy.encode_completion(" " + script.pop(0) if script else "")
        return Completion(token_ids, [0.0] * len(token_ids), True)

    def generate(self, tasks: list[Task], sizes: int | list[int], max_new_tokens: int) -> list[Group]:
        sizes = sizes_per_task(sizes, len(tasks))
        starts = sizes if self.tree is None else [self.tree.starts(size, bool(task.meta.get("demonstration")))
                                                  for task, size in zip(tasks, sizes)]
        envs = [[self.make_env() for _ in range(n)] for n in starts]
        firsts = iter(call_all([(env, "reset", task) for task, group in zip(tasks, envs) for env in group]))
        groups, episodes = [], []
        scripts: dict[int, list[str]] = {}  # id(sample) -> the demonstration's actions still to play
        sent: dict[int, list[str]] = {}  # id(sample) -> the actions its environment read (a tree's copies replay them)
        for task, group_envs in zip(tasks, envs):
            observations = [next(firsts) for _ in group_envs]  # the group's prompt is its first env's
            prompt = self.policy.encode_prompt(observations[0], task.response_prefix)
            group = Group(task, prompt, [episode_sample(self.policy) for _ in group_envs])
            if task.meta.get("demonstration") and group.samples:
                group.samples[0].info["demonstration"] = True
                scripts[id(group.samples[0])] = list(task.meta["demonstration"])
            episodes += [(env, sample, prompt, task.response_prefix) for env, sample in zip(group_envs, group.samples)]
            groups.append(group)
        active, prefixes = episodes, (PrefixCache() if self.reuse_prefixes else None)
        for turn in range(self.max_turns):
            active = [e for e in active if len(e[1].token_ids) < max_new_tokens]
            if not active:
                break
            sampled = [(prompt, sample) for _, sample, prompt, _ in active if id(sample) not in scripts]
            completions = iter(next_turns(self.policy, sampled, max_new_tokens, self.temperature, self.top_p,
                                          self.greedy, self.turn_tokens, prefixes) if sampled else [])
            actions, cut_turns = [], []
            for env, sample, _, prefix in active:
                script = scripts.get(id(sample))
                completion = next(completions) if script is None else self._played(script)
                turn_ids = add_turn(sample, completion, max_new_tokens)
                cut_turns.append(not completion.finished and len(sample.token_ids) < max_new_tokens)
                sample.finished = sample.finished or cut_turns[-1]  # only the episode's cap ends it mid-turn
                actions.append((env, "step", prefix + self.policy.decode(turn_ids)))
                sent.setdefault(id(sample), []).append(actions[-1][2])
            still = []
            for episode, cut_turn, result in zip(active, cut_turns, call_all(actions)):
                _, sample, _, prefix = episode
                record_step(sample, result)
                lost = self.max_invalid is not None and invalid_in_a_row(sample) >= self.max_invalid
                if result.done or not sample.finished or lost or turn == self.max_turns - 1:
                    continue  # over, cut at the token cap, lost (early exit) or out of turns: nothing more to read
                if add_observation(self.policy, sample, result.observation, after_eos=not cut_turn,
                                   response_prefix=prefix, max_tokens=max_new_tokens):
                    still.append(episode)
            active = still
            if self.tree is not None and turn + 1 in self.tree.branch_turns:
                active = self.tree.branch(turn + 1, groups, sizes, episodes, active, sent, set(scripts), self.make_env)
        played = [(prompt, sample) for _, sample, prompt, _ in episodes if id(sample) in scripts]
        if played:
            own_logprobs(self.policy, played, self.temperature)
        for env, sample, _, _ in episodes:
            set_own_text(self.policy, sample)
            if env is not None:  # a tree's copy of an episode already over has none
                env.close()
        return groups
