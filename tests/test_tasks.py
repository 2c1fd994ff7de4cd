import random

import pytest

from autotelic.heldout import heldout_tasks
from autotelic.tasks import UnknownFamilyError, get_family
from autotelic.text import first_integer, first_integer_matches

FAMILIES = ["add", "subtract", "compare", "successor", "rg_chain_sum", "rg_leg_counting"]


@pytest.mark.parametrize("name", FAMILIES)
def test_every_level_generates_tasks_its_verifier_accepts(name):
    family = get_family(name)
    rng = random.Random(0)
    for level in family.levels:
        task = family.generate(rng, level)
        assert task.family == name and task.level == level
        assert task.prompt.endswith("Reply with only the number.")
        assert family.score(task, f"{task.answer}") == 1.0
        assert family.score(task, f"{int(task.answer) + 1}") == 0.0
        assert family.score(task, "no idea") == 0.0


def test_levels_make_numbers_bigger():
    family = get_family("add")
    rng = random.Random(1)
    answers = {level: [int(family.generate(rng, level).answer) for _ in range(50)] for level in family.levels}
    assert max(answers[1]) <= 18 < max(answers[2]) and max(answers[2]) < max(answers[3])


def test_verifier_is_strict_about_the_first_number():
    assert first_integer("The answer is -12, not 13") == -12
    assert first_integer("1,234 apples") == 1234
    assert first_integer("none") is None
    assert first_integer_matches("7", "7") == 1.0
    assert first_integer_matches("3 + 4 = 7", "7") == 0.0  # restating the question is not answering


def test_reasoning_gym_verifier_is_used():
    family = get_family("rg_chain_sum")
    task = family.generate(random.Random(3), 1)
    assert "entry" in task.meta
    assert family.score(task, f"It is {task.answer}.") == 1.0
    assert family.score(task, f"It is {int(task.answer) + 1}.") == 0.0


def test_unknown_families_are_named():
    with pytest.raises(UnknownFamilyError, match="unknown task family 'nope'; known: add"):
        get_family("nope")
    with pytest.raises(UnknownFamilyError, match="reasoning-gym has no dataset 'nope'"):
        get_family("rg_nope")


def test_heldout_set_is_deterministic_distinct_and_spans_families_and_levels():
    first = heldout_tasks(["add", "successor"], [1, 2, 3], 8, seed=5)
    second = heldout_tasks(["add", "successor"], [1, 2, 3], 8, seed=5)
    assert [t.uid for t in first] == [t.uid for t in second]
    assert len({t.uid for t in first}) == len(first) == 2 * 3 * 8
    assert {(t.family, t.level) for t in first} == {(f, lv) for f in ("add", "successor") for lv in (1, 2, 3)}
    assert [t.uid for t in heldout_tasks(["add"], [1], 8, seed=6)] != [t.uid for t in first[:8]]
