"""Held-out hygiene: no training source of any recipe hands out a held-out task, and reported accuracy is strict.

Every recipe's task sources are built as the trainer builds them (no model: the eva evolver runs on a scripted
backend that writes held-out prompts on purpose), fed real groups so derived tasks appear (ReST prefixes, web
failure cuts, evolved prompts), and drawn from 2000 times. A draw is checked against the held-out set drawn
afresh from the config (``heldout_tasks``), not against ``HeldOut``'s own indexes.
"""

import itertools
import random
from pathlib import Path

import pytest
from scripted import ScriptedBackend, ScriptedPolicy

from autotelic.config import ConfigError
from autotelic.curricula import BanditCurriculum
from autotelic.curricula.base import CurriculumWrapper
from autotelic.curricula.evolve import EvolvingPromptPool, PromptEvolver, split_instruction
from autotelic.curricula.failures import FailureCurriculum
from autotelic.curricula.prefixes import PrefixCurriculum
from autotelic.evaluation import evaluate
from autotelic.heldout import HeldOut, build_heldout, heldout_tasks, normalise, split_tasks
from autotelic.loading import load_config
from autotelic.rewards import build_reward
from autotelic.rollout.propose import EXECUTOR, INSTRUCTION, ProposerReward, ProposeSampler
from autotelic.tasks import get_family, task_uid
from autotelic.tasks.numbers import FORMAT
from autotelic.build import build_curriculum
from autotelic.types import Group, Sample, Task
from autotelic.vm_mcts import value_tasks

RECIPES = sorted((Path(__file__).resolve().parent.parent / "recipes").glob("*.yaml"))
DRAWS = 2000
CODE = "```python\ndef f(x):\n    y = x + 1\n    z = y * 2\n    return z\n```"


def _forbidden(config) -> tuple[set[str], set[str]]:
    """The held-out uids of the split evaluated (and of test, where validation is), and the prompts that identify
    their held-out task, drawn afresh from the config."""
    ev = config.eval
    held = [task for part in split_tasks(config.curriculum.families, ev.levels, ev.per_level, ev.seed, ev.split)
            for task in part]
    return {t.uid for t in held}, {normalise(t.prompt) for t in held if t.uid == task_uid(t.family, t.prompt)}


def _group(task: Task) -> Group:
    """A group one sample of which is right (code to cut into prefixes), and which fails its web task at its
    first milestone (a failure cut); two rewards apart, so prompt pools score it informative."""
    steps = [{"reached": [], "success": False}]
    samples = [Sample(CODE, [1], [0.0], True, reward=reward, info={"steps": steps}) for reward in (1.0, 0.0)]
    return Group(task, [], samples)


def _layers(curriculum) -> list:
    layers = [curriculum]
    while isinstance(layers[-1], CurriculumWrapper):  # prefixes, failure cuts, hints, over the base
        layers.append(layers[-1].base)
    return layers


def _evolver_writing(heldout: list[Task]) -> PromptEvolver:
    """An evolver whose every other rewrite is a held-out question (the evolver puts its format sentence back),
    the others new ones."""
    held = itertools.cycle(split_instruction(t.prompt)[0] for t in heldout)
    replies = [next(held) if i % 2 else f"What is {1000 + i} + 1000?" for i in range(100_000)]
    return PromptEvolver(ScriptedBackend(replies), variants=4)


@pytest.mark.parametrize("recipe", RECIPES, ids=[r.stem for r in RECIPES])
def test_no_training_draw_of_any_recipe_is_a_heldout_task(recipe, embedded_tokenize):
    config = load_config(recipe)
    heldout = build_heldout(config)
    if heldout.trained_on:  # TTRL and self-play use the evaluation tasks on purpose: said, not excluded
        expected = "test_time" if config.curriculum.name == "test_time" else "self_play"
        assert heldout.kind == expected and heldout.summary()["heldout_kind"] == expected
        return
    uids, prompts = _forbidden(config)
    curriculum = build_curriculum(config, heldout)
    layers = _layers(curriculum)
    for layer in layers:
        if isinstance(layer, PrefixCurriculum):  # as build_pipeline sets it once the policy has loaded
            layer.tokenize = embedded_tokenize
    evolving = next((layer for layer in layers if isinstance(layer, EvolvingPromptPool)), None)
    if evolving is not None:
        evolving.attach(_evolver_writing(list(heldout.tasks)))
    drawn: list[Task] = []
    batch = config.control.tasks_per_step
    while len(drawn) < DRAWS:
        tasks = curriculum.next_tasks(batch)
        drawn += tasks
        curriculum.observe([_group(t) for t in tasks])
    if config.value.enabled:
        drawn += value_tasks(config, heldout)
    hits = [t for t in drawn if t.uid in uids or normalise(t.prompt) in prompts]
    assert not hits, f"{len(hits)} of {len(drawn)} draws are held out, e.g. {hits[0].prompt!r}"
    derived = [t for t in drawn if t.response_prefix or "parent" in t.meta]  # prefixes, failure cuts, evolved
    if config.curriculum.prefixes.fraction or config.curriculum.failure_fraction or evolving is not None:
        assert derived, "the recipe's derived tasks were never drawn: the check above did not reach them"
    if evolving is not None:  # half the rewrites were held-out questions: only the new ones joined the pool
        children = [c["prompt"] for e in evolving.events for c in e["children"]]
        assert children and all(c.endswith(f" + 1000? {FORMAT}") for c in children)


def test_a_failure_cut_that_is_a_heldout_task_is_never_queued():
    shop = get_family("web_shop")
    rng = random.Random(0)
    opened = next(t for t in iter(lambda: shop.generate(rng, 1), None) if t.prompt.startswith("Open the page"))
    product = opened.prompt[len("Open the page of the "):-1]
    order = next(t for t in iter(lambda: shop.generate(rng, 3), None) if f"x {product} for" in t.prompt)
    for heldout, queued in ((HeldOut(()), 1), (HeldOut((opened,)), 0)):
        failures = FailureCurriculum(BanditCurriculum(["web_shop"], [3], 0, heldout), heldout)
        failures.observe([_group(order)])  # failed at its first milestone: "Open the page of the <product>."
        assert len(failures.queue) == queued
        if queued:
            assert failures.queue[0].uid == opened.uid  # the cut is the held-out task itself


def _proposals(context: str, k: int, written: list[str]) -> str:
    return written[k] if context.startswith(f"<u>{INSTRUCTION}") else "7"


def test_a_proposal_that_writes_a_heldout_question_is_invalid_and_never_answered():
    held = Task(f"What is 3 + 4? {FORMAT}", "7", "add", 1, task_uid("add", f"What is 3 + 4? {FORMAT}"))
    written = ["what is 3+4 ?", "What is 30 + 40?"]  # the held-out question up to case and spacing; a new one
    seed = Task(f"What is 6 + 6? {FORMAT}", "12", "add", 1, task_uid("add", f"What is 6 + 6? {FORMAT}"))
    for heldout, answered in ((HeldOut(()), 2), (HeldOut((held,)), 1)):
        sampler = ProposeSampler(ScriptedPolicy(lambda context, k: _proposals(context, k, written)), heldout,
                                 answers=2, band=(0.0, 1.0), reward=ProposerReward(invalid_reward=-1.0))
        groups = sampler.generate([seed], 2, 64)
        executors = [g for g in groups if g.task.family == EXECUTOR]
        assert len(executors) == answered
        if answered == 1:
            assert normalise(executors[0].task.prompt) == normalise(f"What is 30 + 40? {FORMAT}")
            first = groups[0].samples[0]
            assert first.info["proposal"] == {"question": None, "error": "heldout"} and first.info["return"] == -1.0


def test_heldout_uids_are_identities_not_draws():
    # the same task drawn from a training seed has the held-out copy's uid
    add = get_family("add")
    held = heldout_tasks(["add"], [1], 16, seed=5)
    again = {t.uid: t for t in (add.generate(random.Random(i), 1) for i in range(2000))}
    assert all(again[t.uid].prompt == t.prompt and again[t.uid].answer == t.answer for t in held)
    # a game is its deal, not its seed: Kuhn poker has 6 deals, tic-tac-toe one
    assert len(heldout_tasks(["ta_kuhn_poker", "ta_tictactoe"], [1], 16, seed=5)) == 6 + 1


def test_a_heldout_set_that_leaves_nothing_to_train_on_is_a_config_error():
    config = load_config(None, ["curriculum.families=[guess_number]", "curriculum.levels=[1]", "eval.levels=[1]",
                                "eval.per_level=16"])
    with pytest.raises(ConfigError, match="eval.per_level=16 holds out every task of family 'guess_number' level 1"):
        build_heldout(config)


def test_reported_accuracy_is_strict_while_the_training_reward_may_give_partial_credit():
    family = get_family("rg_chain_sum")
    task = family.generate(random.Random(3), 1)
    near = f"1{task.answer}"  # the answer among other digits: reasoning-gym grades it len(answer)/len(reply)
    assert family.partial_score(task, near) == pytest.approx(len(task.answer) / len(near))
    assert family.score(task, near) == 0.0 and family.score(task, task.answer) == 1.0
    assert build_reward("verifier")(task, [near]) == [0.0]
    assert build_reward("verifier", {"partial_credit": True})(task, [near, task.answer]) == [
        pytest.approx(len(task.answer) / len(near)), 1.0]
    result = evaluate(ScriptedBackend([near, task.answer]), [task, task], max_new_tokens=8)
    assert [r["correct"] for r in result.records] == [0.0, 1.0] and result.accuracy == 0.5


def test_test_time_and_self_play_sets_are_labelled():
    ttrl = build_heldout(load_config(RECIPES[0].parent / "ttrl.yaml"))
    spiral = build_heldout(load_config(RECIPES[0].parent / "spiral.yaml"))
    plain = build_heldout(load_config(None, ["eval.per_level=2"]))
    assert (ttrl.kind, spiral.kind, plain.kind) == ("test_time", "self_play", "held_out")
    assert "trained on the evaluation prompts" in ttrl.label and plain.label == "held-out"
    assert all(not h.excludes(t) for h in (ttrl, spiral) for t in h.tasks)  # trained on: nothing left out
    assert all(plain.excludes(t) for t in plain.tasks)


def test_the_validation_split_is_drawn_like_test_disjoint_from_it_and_both_kept_out_of_its_training():
    config = load_config(RECIPES[0].parent / "default.yaml")
    test = build_heldout(config)
    config.eval.split = "validation"
    validation = build_heldout(config)
    assert test.split == "test" and validation.split == "validation" and not test.set_aside
    assert validation.summary()["heldout_split"] == "validation" and len(validation) == len(test)
    assert not {t.uid for t in test} & {t.uid for t in validation}
    cells = lambda tasks: sorted((t.family, t.level) for t in tasks)  # noqa: E731
    assert cells(test) == cells(validation)  # as many tasks a family and level
    assert all(validation.excludes(task) for task in [*test, *validation])  # choosing settings never sees test
    assert not any(test.excludes(task) for task in validation)  # a test run trains as before
    assert {t.uid for t in validation.set_aside} == {t.uid for t in test}
