"""The web agent around the live sites: the operator agent's four roles, and the policy on real episodes
(the embedded model, marked slow)."""

from __future__ import annotations

import random

import pytest
from scripted import ScriptedBackend

from autotelic.envs.web.env import WebEnv
from autotelic.envs.web.sites import WebServer
from autotelic.rewards.web import WebJudge, web_metrics
from autotelic.rollout.operator import OperatorAgent
from autotelic.tasks.web import WEB_FAMILIES
from autotelic.types import Group, Task
from autotelic.web.actions import parse_action


@pytest.fixture(scope="module")
def server():
    with WebServer() as running:
        yield running


SKYRAIL = Task("How many cabins does the Skyrail have?", "24", "web_wiki", 2, "skyrail",
               meta={"start": "/wiki/", "success": [{"answer": "24"}], "progress": [{"url": "/wiki/skyrail"}]},
               response_prefix="Action:")


def test_operator_agent_runs_reflector_planner_grounder_every_step_and_summarizes_at_the_end(server):
    """OpAgent's order: from the second step on the reflector judges the last step, the planner rewrites the plan
    from what happened (its reflection and previous plan included), the grounder acts (its replies continue the
    task's "Action:" prefix) seeing the last keep_recent steps; once the episode ends the summarizer sums it up."""
    plans = ["1. Open the Skyrail article. 2. Answer.", "1. Act.", "1. Go back.", "1. Open Skyrail.", "1. Answer."]
    roles = {"planner": ScriptedBackend(plans),
             "grounder": ScriptedBackend(["I think", ' click("Brisa")', " back()", ' click("Skyrail")',
                                          ' answer("24")']),
             "reflector": ScriptedBackend(["Reply with an action such as click(3).", "Wrong article.", "Back home.",
                                           "Now answer."]),
             "summarizer": ScriptedBackend(["Found the Skyrail's 24 cabins."])}
    agent = OperatorAgent(roles, lambda: WebEnv("html", server), max_turns=6, keep_recent=2)
    (group,) = agent.generate([SKYRAIL], 1, 256)
    sample = group.samples[0]
    assert [s["valid"] for s in sample.info["steps"]] == [False, True, True, True, True]
    assert sample.info["steps"][-1]["success"] and sample.info["turns"] == 5
    assert sample.info["roles"] == {"plans": plans, "reflections": roles["reflector"].replies,
                                    "summary": "Found the Skyrail's 24 cabins."}
    planner = roles["planner"].messages
    assert SKYRAIL.prompt in planner[0] and '[7] link "Lake Varden"' in planner[0]
    assert "Done so far: nothing yet" in planner[0] and "Reflection" not in planner[0]
    assert "Done so far: I think -> failed:" in planner[1]
    assert "Reflection on the last step: Reply with an action such as click(3)." in planner[1]
    assert "Previous plan:\n1. Open the Skyrail article. 2. Answer." in planner[1]
    assert "Reflection on the last step: Wrong article." in planner[2] and "Previous plan:\n1. Act." in planner[2]
    reflector = roles["reflector"].messages
    assert len(reflector) == 4 and "The web agent did: I think -> failed:" in reflector[0]
    assert 'The web agent did: click("Brisa") -> now at /wiki/brisa' in reflector[1] and "URL: /wiki/brisa" in reflector[1]
    grounder = roles["grounder"].messages
    assert "Plan:\n1. Open the Skyrail article." in grounder[0] and "Last actions" not in grounder[0]
    assert "Plan:\n1. Open Skyrail." in grounder[3]
    assert 'Last actions: click("Brisa") -> now at /wiki/brisa; back() -> now at /wiki/' in grounder[3]
    assert 'Last actions: back() -> now at /wiki/; click("Skyrail") -> now at /wiki/skyrail' in grounder[4]
    assert "URL: /wiki/skyrail" in grounder[4]  # the grounder always reads the current page
    (summarizer,) = roles["summarizer"].messages
    assert 'click("Skyrail") -> now at /wiki/skyrail' in summarizer and "Then the task is done." in summarizer


def test_operator_agent_needs_every_role(server):
    with pytest.raises(ValueError, match="missing: reflector, summarizer"):
        OperatorAgent({"planner": ScriptedBackend([]), "grounder": ScriptedBackend([])}, lambda: WebEnv("html", server))


def test_web_judge_reads_the_trajectory(server):
    """The outcome judge grades each trajectory from its step facts; an ungraded one is nan (dropped)."""
    judge_backend = ScriptedBackend(["8", "no idea"])
    roles = {role: ScriptedBackend(replies) for role, replies in
             {"planner": ["plan", "plan"], "grounder": [' click("Skyrail")', ' answer("24")'],
              "reflector": ["Opened it."], "summarizer": ["Answered."]}.items()}
    (group,) = OperatorAgent(roles, lambda: WebEnv("html", server)).generate([SKYRAIL], 1, 256)
    stray = OperatorAgent({role: ScriptedBackend(["x", "y", "z"] * 4) for role in roles},
                          lambda: WebEnv("html", server), max_turns=1).generate([SKYRAIL], 1, 256)[0]
    both = Group(SKYRAIL, [], group.samples + stray.samples)
    scores = WebJudge(judge_backend)(both)
    assert scores[0] == pytest.approx(7 / 9) and scores[1] != scores[1]  # nan
    graded, ungraded = judge_backend.messages
    assert 'click("Skyrail") -> now at /wiki/skyrail' in graded and "Final answer: 24" in graded
    assert "failed: no action found" in ungraded and "stopped without finishing" in ungraded
    metrics = web_metrics(both.samples)
    assert metrics["web/success_rate"] == 0.5 and metrics["web/valid_actions"] == pytest.approx(2 / 3)


@pytest.mark.slow
def test_policy_episodes_on_the_sites(server, tmp_path):
    """The embedded model plays real episodes: each turn starts with the written "Action:" prefix (masked),
    is at most turn_tokens long, the environment's facts are recorded per turn, and an episode ends after
    two invalid actions in a row."""
    from autotelic.backends.hf import HFPolicy
    from autotelic.config import ModelConfig
    from autotelic.rollout.generate import EpisodeSampler

    policy = HFPolicy(ModelConfig(threads=2))
    tasks = [family.generate(random.Random(3), 1) for family in WEB_FAMILIES.values()]
    groups = EpisodeSampler(policy, lambda: WebEnv("html", server), 1.0, 1.0, max_turns=4,
                            turn_tokens=12, max_invalid=2).generate(tasks, 3, 768)
    for group in groups:
        for sample in group.samples:
            turns = sample.info["turns"]
            assert turns == len(sample.info["steps"]) >= 1
            own = [t for t, m in zip(sample.token_ids, sample.mask) if m]
            assert len(own) <= 12 * turns
            masked = policy.decode([t for t, m in zip(sample.token_ids, sample.mask) if not m])
            assert masked.count("assistant\nAction:") == turns - 1  # each later turn opens with it (the first: prompt)
            assert policy.decode(group.prompt_ids).endswith("Action:")
            valid = [step["valid"] for step in sample.info["steps"]]
            assert [False, False] not in [valid[i:i + 2] for i in range(len(valid) - 2)]  # early exit after two
            if turns > 1 and sample.info["steps"][0]["valid"]:
                assert "URL: " in sample.info["observations"][0] or "did not change" in sample.info["observations"][0]


def test_a_demonstrated_task_has_one_episode_play_its_reference_with_the_policys_logprobs(server):
    """Guided rollouts by demonstration (curricula/hints.py): the group's first episode plays the task's scripted
    solution, a line a turn, and succeeds; its action tokens carry their log-probs under the policy (as sampled
    tokens carry theirs), its observations none; the other episodes are sampled as usual. Memory replay banks the
    solving episode as its actions."""
    import torch

    from autotelic.backends.hf import HFPolicy
    from autotelic.config import ModelConfig
    from autotelic.curricula.bandit import BanditCurriculum
    from autotelic.curricula.hints import demonstrated
    from autotelic.curricula.memory import MemoryCurriculum
    from autotelic.heldout import HeldOut
    from autotelic.rollout.generate import EpisodeSampler

    policy = HFPolicy(ModelConfig(threads=2))
    rng = random.Random(5)
    question = next(t for t in (WEB_FAMILIES["web_shop"].generate(rng, 1) for _ in range(50)) if t.answer)
    solution = question.meta["columns"]["solution"]
    task = demonstrated(question, solution)
    assert task.prompt == question.prompt and task.meta["demonstration"] == solution.splitlines()
    (group,) = EpisodeSampler(policy, lambda: WebEnv("html", server), 1.0, 1.0, max_turns=3,
                              turn_tokens=12).generate([task], 3, 256)
    shown, *sampled = group.samples
    assert shown.info["demonstration"] and not any(s.info.get("demonstration") for s in sampled)
    assert [step["action"] for step in shown.info["steps"]] == [str(parse_action(a)) for a in solution.splitlines()]
    assert shown.info["steps"][-1]["success"] and shown.info["turns"] == 2
    assert shown.text.split() == [w for a in solution.splitlines() for w in a.split()]
    with torch.no_grad():
        expected, _ = policy.completion_logprobs([group.prompt_ids], [shown.token_ids], 1, 1.0)
    own = [(lp, e) for lp, e, m in zip(shown.logprobs, expected[0].tolist(), shown.mask) if m]
    assert own and all(lp < 0 and lp == pytest.approx(e, abs=1e-4) for lp, e in own)
    assert all(lp == 0.0 for lp, m in zip(shown.logprobs, shown.mask) if not m)
    assert all(s.info["turns"] >= 1 and len([m for m in s.mask if m]) <= 12 * s.info["turns"] for s in sampled)
    # memory replay keeps a solving episode as the actions the environment read, one a line
    memory = MemoryCurriculum(BanditCurriculum(["web_shop"], [1], seed=0, heldout=HeldOut(())), fraction=0.0)
    for sample in group.samples:
        sample.reward = 1.0 if sample is shown else 0.0
    memory.observe([group])
    assert memory.bank == {question.prompt: "\n".join(f"Action: {parse_action(a)}" for a in solution.splitlines())}


@pytest.mark.slow
def test_episode_trees_copy_episodes_at_turn_boundaries_into_replayed_sites(server):
    """episode.tree_roots: a group of 6 starts 2 episodes, holds 3 after the first turn and 6 after the second; a
    copy shares its parent's turns and observations up to the branch point token for token (an episode already over
    is copied whole), and one still going acts on from a fresh site replayed through the parent's actions, with its
    own sampled log-probs. A demonstrated episode is one leaf besides the roots, never copied."""
    import torch

    from autotelic.backends.hf import HFPolicy
    from autotelic.config import ModelConfig
    from autotelic.curricula.hints import demonstrated
    from autotelic.rollout.episode_tree import EpisodeTree
    from autotelic.rollout.generate import EpisodeSampler

    policy = HFPolicy(ModelConfig(threads=2), seed=0)
    rng = random.Random(5)
    question = next(t for t in (WEB_FAMILIES["web_shop"].generate(rng, 1) for _ in range(50)) if t.answer)
    tasks = [family.generate(random.Random(3), 1) for family in WEB_FAMILIES.values()]
    tasks.append(demonstrated(question, question.meta["columns"]["solution"]))
    tree = EpisodeTree(roots=2, branch_turns=(1, 2))
    assert [tree.leaves(6, 1), tree.leaves(6, 2)] == [3, 6]
    groups = EpisodeSampler(policy, lambda: WebEnv("html", server), 1.0, 1.0, max_turns=3, turn_tokens=12,
                            tree=tree).generate(tasks, 6, 768)
    went_on = 0
    for group in groups:
        demonstrated = group.task is tasks[-1]  # its demonstration is a leaf besides the 2 roots
        assert len(group.samples) == 6 and sum("forked" not in s.info for s in group.samples) == 2 + demonstrated
        assert sum(bool(s.info.get("demonstration")) for s in group.samples) == demonstrated
        for child in (s for s in group.samples if "forked" in s.info):
            parent, after = group.samples[child.info["forked"]["from"]], child.info["forked"]["after_turn"]
            assert not parent.info.get("demonstration")
            over = parent.info["turns"] <= after or child.info["turns"] <= after
            shared = len(parent.token_ids) if over else parent.info["turn_starts"][after]
            assert child.token_ids[:shared] == parent.token_ids[:shared]
            assert child.info["steps"][:after] == parent.info["steps"][:after]
            if not over:  # acted on from the replayed site
                went_on += 1
                assert child.info["turns"] > after and len(child.info["steps"]) == child.info["turns"]
        with torch.no_grad():
            logprobs, _ = policy.completion_logprobs([group.prompt_ids], [s.token_ids for s in group.samples],
                                                     [len(group.samples)], 1.0)
        for row, sample in enumerate(group.samples):
            mask = torch.tensor(sample.loss_mask(), dtype=torch.bool)
            recorded = torch.tensor(sample.logprobs)[mask]
            assert torch.allclose(logprobs[row, :len(sample.token_ids)][mask], recorded, atol=2e-3)
    assert went_on > 0


@pytest.mark.slow
def test_the_operator_agent_plays_real_episodes_with_the_embedded_model_in_every_role(server):
    from autotelic.backends.hf import HFPolicy
    from autotelic.config import ModelConfig

    policy = HFPolicy(ModelConfig(threads=2))
    agent = OperatorAgent({role: policy for role in ("planner", "grounder", "reflector", "summarizer")},
                          lambda: WebEnv("html", server), max_turns=2, plan_tokens=16, action_tokens=12,
                          note_tokens=12)
    (group,) = agent.generate([SKYRAIL], 2, 256)
    for sample in group.samples:
        turns, roles = sample.info["turns"], sample.info["roles"]
        assert 1 <= turns == len(sample.info["steps"]) == len(roles["plans"]) <= 2
        assert len(roles.get("reflections", [])) == turns - 1 and isinstance(roles["summary"], str)
        assert all(plan for plan in roles["plans"])


def test_held_out_episodes_are_scored_by_the_success_check(server):
    """evaluate_episodes runs one episode per task with any agent and scores it by the site's own check."""
    from autotelic.evaluation import evaluate_episodes

    grounder = ScriptedBackend([' click("Skyrail")', ' answer("25")', ' answer("24")'])  # turn by turn, task by task
    roles = {"planner": ScriptedBackend(["plan"] * 3), "grounder": grounder,
             "reflector": ScriptedBackend(["ok"]), "summarizer": ScriptedBackend(["done", "done"])}
    wrong = Task("How many cabins? (wrong answer)", "24", "web_wiki", 1, "skyrail-wrong",
                 meta={**SKYRAIL.meta, "start": "/wiki/skyrail"}, response_prefix="Action:")
    result = evaluate_episodes(OperatorAgent(roles, lambda: WebEnv("html", server)), [SKYRAIL, wrong], 256)
    assert [r["reward"] for r in result.records] == [1.0, 0.0]
    assert result.records[0]["actions"] == ['click("Skyrail")', 'answer("24")'] and result.accuracy == 0.5
    assert result.by_level == {"1": 0.0, "2": 1.0}


@pytest.mark.slow
def test_the_web_recipe_demonstrates_the_questions_no_episode_answered(tmp_path):
    """recipes/opagent-web.yaml as shipped (hybrid reward with the judge, turn credit, checkpointed layers, guided
    rollouts by demonstration, pass@k), shrunk to two small steps on shop questions (groups of 2, episodes of 2 turns:
    a level-1 shop solution takes one or two actions): the first step's failed tasks (best reward at most the
    recipe's 0.9) come back in the second, each group with one episode that plays the task's solution and solves it
    (the success check's 1 and more: milestones, the judge's grade)."""
    import json

    from pathlib import Path

    from autotelic.loading import load_config
    from autotelic.trainer import train

    recipe = Path(__file__).resolve().parent.parent / "recipes" / "opagent-web.yaml"
    summary = train(load_config(recipe, [
        "train.export_model=false",  # the report is read below
        "curriculum.families=[web_shop]", "curriculum.levels=[1]", "eval.levels=[1]", "eval.per_level=1",
        "eval.pass_k=[1, 2]", "eval.pass_samples=2", "control.tasks_per_step=2", "generate.group_size=2",
        "episode.max_turns=2", "train.steps=2", "curriculum.hints.fraction=1.0", "logging.progress=false",
        "model.lora=true", "model.lora_rank=8", f"logging.runs_dir={tmp_path}", "logging.run_name=demo"]))
    assert summary["steps"] == 2 and summary["pass_at_k"]["samples"] == 2
    assert (tmp_path / "demo" / "report.html").is_file()
    steps = [json.loads(line) for line in (tmp_path / "demo" / "metrics.jsonl").read_text().splitlines()
             if '"reward/mean"' in line]
    assert steps[0]["hint/made"] >= 1 and "hint/demonstration_reward" not in steps[0]
    assert steps[1]["hint/demonstration_reward"] > 1.0
    rollouts = [json.loads(line) for line in (tmp_path / "demo" / "rollouts.jsonl").read_text().splitlines()]
    shown = [r for r in rollouts if r.get("demonstration")]  # the log tells the played episodes apart
    assert shown and all(r["step"] == 2 and r["reward"] > 1.0 for r in shown)


def test_the_web_recipe_ranks_turns_against_turns_from_the_same_state(tmp_path):
    """algorithm.turn_baseline=state (GiGPO's step groups) on the web recipe, one step of real episodes on the shop:
    the update finds later turns that another episode took from the same state (the same page with the same
    progress, whatever the route: after an invalid action, the page the episode was already on)."""
    import json

    from pathlib import Path

    from autotelic.loading import load_config
    from autotelic.trainer import train

    recipe = Path(__file__).resolve().parent.parent / "recipes" / "opagent-web.yaml"
    train(load_config(recipe, [
        "train.export_model=false", "logging.report=false", "algorithm.turn_baseline=state",
        "filter.rewards=[{name: web_success}, {name: web_progress, options: {step_penalty: 0.1}}]",
        "curriculum.families=[web_shop]", "curriculum.levels=[1]", "eval.levels=[1]", "eval.per_level=1",
        "eval.pass_k=[]", "control.tasks_per_step=2", "generate.group_size=4", "episode.max_turns=2",
        "train.steps=1", "logging.progress=false", "model.lora=true", "model.lora_rank=8",
        f"logging.runs_dir={tmp_path}", "logging.run_name=states"]))
    step = next(json.loads(line) for line in (tmp_path / "states" / "metrics.jsonl").read_text().splitlines()
                if '"reward/mean"' in line)
    assert 0 < step["train/later_turns_sharing_a_state"] <= 1
