"""eva's creator: which prompts seed an evolution, what the evolver makes of them, and how the pool mixes
generations. The evolver's model calls are scripted here; the real model evolves prompts in the slow run."""

import pytest
import torch
from scripted import ScriptedBackend

from autotelic.algorithms import get_algorithm
from autotelic.curricula import PromptPoolCurriculum
from autotelic.curricula.evolve import (
    EvolvingPromptPool,
    PromptEvolver,
    Rewrite,
    clean_prompt,
    creator_groups,
    evolve_message,
    generation_of,
    split_instruction,
)
from autotelic.config import ConfigError
from autotelic.heldout import HeldOut
from autotelic.checks import TrainingError, check_combination
from autotelic.loading import load_config
from autotelic.types import Group, Sample, Task

NO_HELDOUT = HeldOut(())


def _task(i: int) -> Task:
    return Task(prompt=f"What is {i} + {i}?", answer=str(2 * i), family="add", level=1, uid=f"add/{i}")


def _group(task: Task, rewards: list[float]) -> Group:
    return Group(task, [0], [Sample(str(r), [1], [0.0], True, reward=r) for r in rewards])


@pytest.mark.parametrize("reply, expected", [
    ("New task: What is 3 + 4 + 5?", "What is 3 + 4 + 5?"),
    ('"What is 30 + 40?"', "What is 30 + 40?"),
    ("**New task:** What is 2 + 9?", "What is 2 + 9?"),
    ("**What is 1 + 1?", None),  # a copy under markdown is still a copy
    ("Question: How many legs do 3 cats have?", "How many legs do 3 cats have?"),
    ("  what is 1 + 1?  ", None),  # the parent again, up to case and spaces
    ("Task:", None),
    ("What is 5 + 6?\nThe answer is 11.", "What is 5 + 6?"),  # the first line only
    ("x" * 500, None),
])
def test_clean_prompt(reply, expected):
    assert clean_prompt(reply, parent="What is 1 + 1?", min_chars=8, max_chars=400) == expected


def test_split_instruction_keeps_the_answer_format_apart():
    assert split_instruction("What is 3 + 4? Reply with only the number.") == ("What is 3 + 4?",
                                                                              "Reply with only the number.")
    assert split_instruction("Which is larger, 3 or 4?") == ("Which is larger, 3 or 4?", "")
    assert split_instruction("Reply with a haiku.") == ("Reply with a haiku.", "")  # nothing left to rewrite


def test_an_evolved_task_gets_its_parents_format_instruction_back():
    seed = Task("What is 3 + 4? Reply with only the number.", "7", "add", 1, "add/x")
    backend = ScriptedBackend(["What is 3 + 4 + 10?"])
    [child], rejected = PromptEvolver(backend, variants=1).evolve([seed], generation=1)
    assert child.prompt == "What is 3 + 4 + 10? Reply with only the number." and rejected == 0
    assert backend.messages == [evolve_message("What is 3 + 4?", "harder")]
    assert "Reply with only the number" not in backend.messages[0].split("Task: ")[-1]


def test_evolver_rewrites_each_seed_with_operations_in_turn_and_drops_copies():
    seeds = [_task(1), _task(2)]
    replies = ["What is 1 + 1 + 9?", "What is 1 + 1?", "What is 2 + 2 + 2?", "What is 1 + 1 + 9?"]
    backend = ScriptedBackend(replies)
    evolver = PromptEvolver(backend, operations=["harder", "topic"], variants=2, max_new_tokens=40)
    children, rejected = evolver.evolve(seeds, generation=3)
    assert backend.generate_calls == [(4, 1, 40, False)]  # one batched call, one sample per rewrite
    assert backend.messages[0] == evolve_message("What is 1 + 1?", "harder")
    # operations rotate within a seed's rewrites and start one further for each next seed
    assert "different topic" in backend.messages[1] and "different topic" in backend.messages[2]
    assert "harder" in backend.messages[3]
    assert [c.prompt for c in children] == ["What is 1 + 1 + 9?", "What is 2 + 2 + 2?"]
    assert rejected == 2  # the parent copied back, and a duplicate of another child
    child = children[1]
    assert child.answer == "" and child.uid.startswith("evo/") and child.family == "add"
    assert child.meta == {"created_by": "evolver", "parent": "add/2", "parent_prompt": "What is 2 + 2?", "generation": 3, "operation": "topic"}
    with pytest.raises(ValueError, match="unknown evolution operation 'shorter'"):
        PromptEvolver(backend, operations=["shorter"])


def test_the_most_informative_prompt_seeds_the_evolution_and_the_new_generation_dominates_draws():
    tasks = [_task(i) for i in range(4)]
    pool = PromptPoolCurriculum(tasks, NO_HELDOUT, seed=0, metric="gap")
    eva = EvolvingPromptPool(pool, every=2, fraction=0.25, old_fraction=0.25, seed=0)
    backend = ScriptedBackend([f"What is {i} + {i} + 1?" for i in range(10)])
    eva.attach(PromptEvolver(backend, variants=3))
    rewards = {0: [1, 1, 1], 1: [0, 1, 1], 2: [0, 0, 0], 3: [0, 0, 1]}  # gaps 0, 1, 0, 1: task 1 or 3
    metrics = eva.observe([_group(tasks[i], r) for i, r in rewards.items() if i < 2])
    assert "evolve/children" not in metrics and eva.generation == 0  # every=2: not yet
    eva.observe([_group(tasks[2], rewards[2]), _group(tasks[0], [0.0, 1.0, 0.0])])  # task 0's gap rises to 1
    assert eva.generation == 1
    [event] = eva.take_events()
    assert eva.take_events() == []
    # one seed (a quarter of the 3 observed prompts), drawn only among gap 1 prompts: zero weights lose
    [seed] = event["seeds"]
    assert seed["prompt"] in ("What is 0 + 0?", "What is 1 + 1?") and seed["informativeness"] == 1.0
    assert len(event["children"]) == 3 and all(c["parent"] == seed["prompt"] for c in event["children"])
    assert event["pool_size"] == 7 and event["informativeness_by_generation"] == {"0": pytest.approx(2 / 3)}
    drawn = eva.next_tasks(8)
    assert sum(generation_of(t) == 0 for t in drawn) == 2 and sum(generation_of(t) == 1 for t in drawn) == 6
    metrics = eva.observe([_group(t, [0.0, 1.0]) for t in drawn])
    assert metrics["curriculum/evolved_share"] == 6 / 8 and metrics["curriculum/generation"] == 1.0

    restored = EvolvingPromptPool(PromptPoolCurriculum([], NO_HELDOUT, seed=5), every=2, fraction=0.25,
                                  old_fraction=0.25, seed=5)
    restored.load_state_dict(eva.state_dict())
    assert restored.generation == 1 and restored.recent == eva.recent
    assert [t.uid for t in restored.next_tasks(5)] == [t.uid for t in eva.next_tasks(5)]


def test_without_an_evolver_or_with_every_zero_the_pool_stays_fixed():
    tasks = [_task(i) for i in range(3)]
    eva = EvolvingPromptPool(PromptPoolCurriculum(tasks, NO_HELDOUT, seed=0), every=1, fraction=1.0, old_fraction=0.0,
                             seed=0)
    eva.observe([_group(tasks[0], [0.0, 1.0])])
    assert eva.generation == 0 and len(eva.pool.pool) == 3 and eva.take_events() == []
    with pytest.raises(ValueError, match="old_fraction in \\[0, 1\\]"):
        EvolvingPromptPool(PromptPoolCurriculum(tasks, NO_HELDOUT, seed=0), every=1, fraction=0.5, old_fraction=2.0,
                           seed=0)


def test_evolution_needs_the_regret_curriculum_and_a_label_free_reward():
    spec = get_algorithm("rloo")
    good = load_config(None, ["curriculum.name=regret", "curriculum.evolve.every=2",
                              "filter.rewards=[{name: majority_vote}]"])
    check_combination(good, spec)
    with pytest.raises(TrainingError, match="no reference answer, so reward 'verifier' cannot score them"):
        check_combination(load_config(None, ["curriculum.name=regret", "curriculum.evolve.every=2"]), spec)
    with pytest.raises(TrainingError, match="curriculum.name=regret, not learnability"):
        check_combination(load_config(None, ["curriculum.evolve.every=2", "filter.rewards=[{name: judge}]"]), spec)
    with pytest.raises(TrainingError, match="unknown curriculum.evolve.operations entry 'longer'"):
        check_combination(load_config(None, ["curriculum.name=regret", "curriculum.evolve.every=1",
                                             "curriculum.evolve.operations=[longer]",
                                             "filter.rewards=[{name: majority_vote}]"]), spec)


def test_test_time_training_draws_the_heldout_prompts_and_refuses_labelled_rewards():
    from autotelic.heldout import build_heldout
    from autotelic.build import build_curriculum

    config = load_config(None, ["curriculum.name=test_time", "filter.rewards=[{name: majority_vote}]",
                                "eval.per_level=2"])
    heldout = build_heldout(config)
    curriculum = build_curriculum(config, heldout)
    assert {t.uid for t in curriculum.next_tasks(len(heldout))} == {t.uid for t in heldout}
    check_combination(config, get_algorithm("grpo"))
    with pytest.raises(TrainingError, match="test_time trains on the held-out prompts, so reward 'math_verify'"):
        check_combination(load_config(None, ["curriculum.name=test_time", "filter.rewards=[{name: math_verify}]"]),
                          get_algorithm("grpo"))


def test_creator_groups_reward_each_rewrite_with_the_solvers_informativeness_on_its_child():
    seed, other = _task(1), _task(2)
    reply = Sample("x", [5], [-0.1], True)
    rewrites = [Rewrite(seed, [0], reply, _task(10)), Rewrite(seed, [0], reply, None),  # rejected: 0
                Rewrite(seed, [0], reply, _task(11)),  # not yet drawn: left out
                Rewrite(other, [1], reply, _task(12))]  # alone in its group: nothing to compare with
    scores = {"add/10": 0.75, "add/11": None, "add/12": 1.0}
    [group] = creator_groups(rewrites, scores.get)
    assert group.task == seed and group.prompt_ids == [0] and group.rewards == [0.75, 0.0]
    assert group.samples[0].token_ids == [5] and group.samples[0].logprobs == [-0.1]


def test_a_trained_creator_learns_from_its_rewrites_at_the_next_evolution_and_resumes():
    """The real (tiny, random) model writes the rewrites and takes the update; informativeness is set by hand."""
    from autotelic.backends.hf import HFPolicy
    from autotelic.config import AlgorithmConfig, ModelConfig
    from autotelic.update import SideLearner

    def creator(seed: int) -> SideLearner:
        model = HFPolicy(ModelConfig(path="random:qwen2-tiny", lora=False, threads=1), lr=1e-2, seed=seed)
        return SideLearner(model, get_algorithm("rloo"), AlgorithmConfig(name="rloo"), 1.0, 8)

    def pool(learner: SideLearner) -> EvolvingPromptPool:
        eva = EvolvingPromptPool(PromptPoolCurriculum([_task(i) for i in range(4)], NO_HELDOUT, seed=0, metric="gap"),
                                 every=1, fraction=0.5, old_fraction=0.0, seed=0)
        eva.attach(PromptEvolver(learner.policy, variants=4, max_new_tokens=8, min_chars=1, grouped=True), learner)
        return eva

    learner = creator(0)
    eva = pool(learner)
    tasks = eva.next_tasks(4)
    metrics = eva.observe([_group(t, [0.0, 1.0]) for t in tasks])  # every gap 1: two seeds, 4 rewrites each
    assert "creator/groups" not in metrics  # nothing measured yet: the creator waits for the solver
    assert len(eva.rewrites) == 8 and len({tuple(r.prompt_ids) for r in eva.rewrites}) == 2  # one request per seed
    children = [r.child for r in eva.rewrites if r.child is not None]
    assert children, "the model's replies should include a usable line"
    # the solver disagrees on the first child of each seed only: the rewrites of one request differ in reward
    parents = {c.meta["parent"] for c in children}
    measured = {seed: next(c for c in children if c.meta["parent"] == seed) for seed in parents}
    before = {k: v.clone() for k, v in learner.policy.trainable_state().items()}
    metrics = eva.observe([_group(c, [0.0, 1.0] if c in measured.values() else [1.0, 1.0]) for c in children])
    # a group per request (its 4 rewrites); a seed's measured child earns 1, its other rewrites 0
    assert metrics["creator/groups"] == 2 and metrics["creator/reward_mean"] == pytest.approx(len(parents) / 8)
    assert "creator/loss" in metrics and learner.policy.version == 1
    assert any(not torch.equal(before[k], v) for k, v in learner.policy.trainable_state().items())
    # a resume restores the creator's weights and optimizer and the rewrites still waiting for their rewards
    state = eva.state_dict()
    restored_learner = creator(1)
    restored = pool(restored_learner)
    restored.load_state_dict(state)
    assert restored_learner.policy.version == 1 and [r.reply.text for r in restored.rewrites] == \
        [r.reply.text for r in eva.rewrites]
    assert all(torch.equal(v, learner.policy.trainable_state()[k])
               for k, v in restored_learner.policy.trainable_state().items())


def test_training_the_evolver_needs_a_model_of_its_own():
    with pytest.raises(ConfigError, match="curriculum.evolve.train trains the evolver as a model of its own"):
        load_config(None, ["curriculum.name=regret", "curriculum.evolve.every=1", "curriculum.evolve.train=true",
                           "curriculum.evolve.model=policy", "filter.rewards=[{name: majority_vote}]"])
