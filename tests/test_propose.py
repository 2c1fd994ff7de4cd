"""Creator-executor self-play (ProposeSampler, R-Zero / Agent0): rewards, band, pseudo-labels, phases.

Pure functions first, then the sampler on a scripted character-level policy whose every proposal and
answer is known, so each reward can be computed by hand. The real embedded model runs the same sampler
in test_pipeline_runs.py (a real agent0 run, resumed).
"""

from itertools import count

import pytest
from scripted import ScriptedPolicy

from autotelic.algorithms import get_algorithm
from autotelic.config import ConfigError
from autotelic.envs import make_env_factory
from autotelic.heldout import HeldOut
from autotelic.loading import load_config
from autotelic.rollout.propose import (
    EXECUTOR,
    INSTRUCTION,
    PROPOSER,
    ProposerReward,
    ProposeSampler,
    cluster_sizes,
    filters,
    in_band,
    learnability,
    parse_proposal,
    phase,
    proposal_metrics,
    vote,
)
from autotelic.rollout.propose_code import CODE_INSTRUCTION, Program, answer_matches, parse_program
from autotelic.tasks.numbers import FORMAT
from autotelic.checks import TrainingError, check_combination
from autotelic.rollout.filter import apply_filters
from autotelic.types import Group, Task

NO_HELDOUT = HeldOut(())


def _seed(question: str = "What is 6 + 6?") -> Task:
    return Task(f"{question} {FORMAT}", "12", "add", 1, f"add:{question}")


# ---- pure pieces ------------------------------------------------------------------------------

def test_proposer_reward_is_min_p_one_minus_p_minus_the_cluster_share_plus_the_tool_bonus():
    plain = ProposerReward(repetition_penalty=0.0, tool_bonus=0.0)
    assert [plain(p, 1, 4, 0.0) for p in (0.0, 0.3, 0.5, 0.8, 1.0)] == pytest.approx([0.0, 0.3, 0.5, 0.2, 0.0])
    reward = ProposerReward(repetition_penalty=1.0, tool_bonus=0.1)
    assert reward(0.5, 1, 4, 0.0) == pytest.approx(0.5 - 1 / 4)  # R-Zero: |cluster| / batch, singletons too
    assert reward(0.5, 3, 4, 0.0) == pytest.approx(0.5 - 3 / 4)
    assert reward(0.5, 1, 4, 0.5) == pytest.approx(0.5 - 1 / 4 + 0.05)


def test_near_duplicates_cluster_transitively_and_distinct_numbers_do_not():
    questions = [
        "What is 12 plus 7 apples?",
        "What is 12 plus 7 apples today?",  # 3 of 6 word 3-grams shared with the first: Jaccard 0.5
        "Is 12 plus 7 apples today?",  # linked to the second only (Jaccard 0.8; 0.33 to the first)
        "How many legs do 3 spiders have?",
        "What is 13 + 4?",
        "What is 5 + 9?",  # same template, other numbers: no 3-gram in common, a different task
    ]
    assert cluster_sizes(questions, 0.5) == [3, 3, 3, 1, 1, 1]
    assert cluster_sizes(questions, 0.51) == [1, 2, 2, 1, 1, 1]
    assert cluster_sizes(["What is 1 + 1?"] * 3, 1.0) == [3, 3, 3]
    assert cluster_sizes([], 0.5) == []


@pytest.mark.parametrize("text, question", [
    ("What is 17 + 25?", "What is 17 + 25?"),
    ("Question: How many legs do 3 spiders have? Answer: 24", "How many legs do 3 spiders have?"),
    ("How about this one? What is (98 + 10) + 5? Easy.", "What is (98 + 10) + 5?"),  # the first with a number
    ("Here:\nSam has 3 pens. He loses 1. How many are left?", "Sam has 3 pens. He loses 1. How many are left?"),
    ('**New question 1:** "What is 4 times 9?"\nThe answer is 36.', "What is 4 times 9?"),
    ("", None),
    ("The answer is 3", None),  # no question
    ("What is two plus two?", None),  # no number: not an arithmetic task
    ("12+5?", None),  # too short to be a self-contained question
    ("What is 6 + 6? I copied it.", None),  # the example itself
])
def test_parse_proposal(text, question):
    assert parse_proposal(text, "What is 6 + 6?", duplicate_threshold=0.5) == question


def test_vote_gives_the_pseudo_label_its_share_of_all_answers_and_the_executor_rewards():
    assert vote(["12", "12", "13", None]) == ("12", 0.5, [1.0, 1.0, 0.0, 0.0])
    assert vote(["7", "8"]) == ("7", 0.5, [1.0, 0.0])  # a tie goes to the first answer seen
    assert vote([None, None]) == (None, 0.0, [0.0, 0.0])
    band = (0.3, 0.8)
    assert [in_band(p, band) for p in (0.2, 0.3, 0.5, 0.8, 0.9)] == [False, True, True, True, False]


def test_phases_alternate_proposer_first_and_zero_trains_both():
    assert [phase(i, 2) for i in range(7)] == [PROPOSER, PROPOSER, EXECUTOR, EXECUTOR, PROPOSER, PROPOSER, EXECUTOR]
    assert [phase(i, 1) for i in range(3)] == [PROPOSER, EXECUTOR, PROPOSER]
    assert {phase(i, 0) for i in range(5)} == {"both"}


# ---- code tasks (Absolute Zero deduction) ---------------------------------------------------------

@pytest.mark.parametrize("text, program", [
    ("```python\ndef f(x):\n    return x * 3\n```\nINPUT: 4", Program("def f(x):\n    return x * 3", "4")),
    ("```python\nimport math\ndef f(a, b):\n    return [a] * b\n```\n**Input:** `'x', 2`",
     Program("import math\ndef f(a, b):\n    return [a] * b", "'x', 2")),
    # no INPUT line: the first literal call; the test harness around f is dropped
    ("Sure!\ndef f(n):\n    return n + 1\n\ndef main():\n    print(f(y))\n    print(f(3))\n\nmain()",
     Program("def f(n):\n    return n + 1", "3")),
    ("```python\ndef f(x):\n    return -x\n\ndef g(:\n```\nINPUT: 5", Program("def f(x):\n    return -x", "5")),
    ("```python\ndef f(x):\n    return x + 1\n```", Program("def f(x):\n    return x + 1", "3")),  # the default
    ("```python\ndef f():\n    return 7\n```", Program("def f():\n    return 7", "")),  # nothing to pass
    ("```python3\ndef twice(s):\n    return s * 2\n```\nINPUT: 'ab'", Program("def twice(s):\n    return s * 2",
                                                                              "'ab'", "twice")),  # no f: the first
    ("```python\ndef f(x):\n    return x * 2 + 1  # mine\n```\nINPUT: 4", None),  # the format example itself
    ("```python\ndef triple(x):\n    return x * 2 + 1\n```", None),  # the example renamed
    ("```python\ndef f(x):\n    return x\n```\nINPUT: y", None),  # not a literal input
    ("```python\ndef f(x):\n    return x\n```\nINPUT: __import__('os').getcwd()", None),
    ("def f(x) return x\nINPUT: 1", None),  # no valid syntax
    ("The answer is 3.", None),
])
def test_parse_program(text, program):
    assert parse_program(text) == program


@pytest.mark.parametrize("reply, label, match", [
    ("12", "12", True),
    ("`12`.", "12", True),
    ("The output of `f(1)` is `12`.", "12", True),  # the last backticked span
    ("[1,2]", "[1, 2]", True),  # equal as literals
    ("3.0", "3", True),
    ("```python\n'ab'\n```", "'ab'", True),
    ("ab", "'ab'", True),  # an unquoted string
    ('"a  b"', "'a b'", False),  # literals differ: whitespace inside a string matters
    ("12\nbecause 2 * 6", "12", True),  # the first line
    ("13", "12", False),
    ("", "''", False),
    ("it returns 12", "12", False),  # no prose: the value, alone or in backticks
])
def test_answer_matches(reply, label, match):
    assert answer_matches(reply, label) is match


def test_the_code_proposer_earns_azr_learnability():
    assert [learnability(p) for p in (0.0, 0.25, 0.5, 0.875, 1.0)] == [0.0, 0.75, 0.5, 0.125, 0.0]
    reward = ProposerReward(repetition_penalty=1.0, tool_bonus=0.0, edge=learnability)
    assert reward(0.25, 2, 4, 0.0) == pytest.approx(0.75 - 2 / 4)
    assert reward(1.0, 1, 4, 0.0) == pytest.approx(-1 / 4)


CODE_PROPOSALS = [
    "```python\ndef f(x):\n    return x * 3\n```\nINPUT: 4",  # 12
    "def f(a, b):\n    return [a] * b\nprint(f('x', 2))",  # ['x', 'x']
    "```python\ndef f(x):\n    raise ValueError(x)\n```\nINPUT: 1",  # raises
    "```python\nimport random\ndef f(x):\n    return random.random()\n```\nINPUT: 1",  # differs run to run
    "```python\ndef f(x):\n    return x * 2 + 1\n```\nINPUT: 3",  # copies the format example
    "I cannot write code.",
]
CODE_ANSWERS = {"return x * 3": ["12", "`12`", "13", "twelve"], "[a] * b": ["['x', 'x']"] * 4}


def test_code_proposals_are_labelled_by_running_them_in_the_sandbox(tmp_path):
    hostile = f"```python\ndef f(p):\n    return open(p, 'w').write('x')\n```\nINPUT: {str(tmp_path / 'pwned')!r}"
    proposals = iter(CODE_PROPOSALS + [hostile, hostile])

    def choose(context: str, k: int) -> str:
        if context.startswith(f"<u>{CODE_INSTRUCTION}"):
            return next(proposals)
        return next(answers[k] for body, answers in CODE_ANSWERS.items() if body in context)

    sampler = ProposeSampler(ScriptedPolicy(choose), NO_HELDOUT, answers=4, band=(0.1, 0.9), kind="code",
                             reward=ProposerReward(repetition_penalty=1.0, tool_bonus=0.0, edge=learnability))
    groups = _filtered(sampler.generate([_seed(), _seed("What is 2 + 5?")], 4, 200), sampler.band)
    proposers, executors = groups[:2], groups[2:]
    assert proposers[0].task.prompt == CODE_INSTRUCTION
    assert [g.task.prompt for g in executors] == [
        "Given this code:\n```python\ndef f(x):\n    return x * 3\n```\nWhat does f(4) return? "
        "Reply with only the value.",
        "Given this code:\n```python\ndef f(a, b):\n    return [a] * b\n```\nWhat does f('x', 2) return? "
        "Reply with only the value."]
    assert [g.task.answer for g in executors] == ["12", "['x', 'x']"]  # executed, not voted
    assert [s.info["return"] for s in executors[0].samples] == [1.0, 1.0, 0.0, 0.0]
    assert [g.task.meta["p"] for g in executors] == [0.5, 1.0]
    assert [g.dropped_by for g in executors] == [None, "out_of_band"]
    returns = [s.info["return"] for g in proposers for s in g.samples]
    assert returns == pytest.approx([0.5 - 1 / 2, 0.0 - 1 / 2] + [-1.0] * 6)  # two distinct programs: clusters of 1
    errors = [s.info["proposal"].get("error") for g in proposers for s in g.samples]
    assert errors == [None, None, "execution", "execution", "unparsed", "unparsed", "execution", "execution"]
    assert not (tmp_path / "pwned").exists()  # the sandbox's files are not the host's
    assert proposal_metrics(groups)["creator/validity"] == 2 / 8


# ---- the sampler on a scripted policy ---------------------------------------------------------

# what the executor answers to each question, answer k of 4
ANSWERS = {
    "What is 17 + 25?": ["42", "42", "41", "42"],  # p = 0.75: in band
    "What is 3 + 4?": ["7", "7", "7", "7"],  # p = 1: too easy
    "Now what is 17 + 25?": ["42", "40", "41", "42"],  # p = 0.5, a near-duplicate of the first (Jaccard 0.75)
    "What is 99 * 99?": ["9801", "nine", "9800", "9701"],  # p = 0.25: too hard
}
PROPOSALS = ["What is 17 + 25?", "Question: What is 3 + 4?", "no idea", "What is 6 + 6?",  # prompt 1
             "Now what is 17 + 25?", "What is 99 * 99?", "", "What is 3 + 4? 7"]  # prompt 2


def _answers(context: str, k: int) -> str:
    question = context[len("<u>"):].split(f" {FORMAT}")[0]
    return ANSWERS[question][k]


def _scripted(context: str, k: int, proposals=iter(PROPOSALS)) -> str:
    return next(proposals) if context.startswith(f"<u>{INSTRUCTION}") else _answers(context, k)


def _run(phase_steps: int = 0, rounds: int = 0):
    proposals = iter(PROPOSALS)
    policy = ScriptedPolicy(lambda context, k: _scripted(context, k, proposals))
    sampler = ProposeSampler(policy, NO_HELDOUT, answers=4, band=(0.3, 0.8), phase_steps=phase_steps,
                             reward=ProposerReward(repetition_penalty=1.0, duplicate_threshold=0.5, tool_bonus=0.1,
                                                   invalid_reward=-1.0))
    sampler.rounds = rounds
    return _filtered(sampler.generate([_seed(), _seed("What is 2 + 5?")], 4, 64), sampler.band)


def _filtered(groups: list[Group], band: tuple[float, float]) -> list[Group]:
    """The groups after the mode's filters, as the pipeline applies them: the band's misses, the role at rest."""
    apply_filters(groups, filters(band))
    return groups


def test_rewards_band_and_pseudo_labels_by_hand():
    groups = _run()
    proposers, executors = groups[:2], groups[2:]
    assert [g.task.family for g in proposers] == [PROPOSER] * 2 and all(g.task.answer == "" for g in proposers)
    assert proposers[0].task.prompt == f"{INSTRUCTION}\nExample question: What is 6 + 6?"
    # readable: 17 + 25, 3 + 4, now 17 + 25, 99 * 99, 3 + 4 (again); "What is 6 + 6?" copies its example
    questions = ["What is 17 + 25?", "What is 3 + 4?", "Now what is 17 + 25?", "What is 99 * 99?", "What is 3 + 4?"]
    assert [g.task.prompt for g in executors] == [f"{q} {FORMAT}" for q in questions]
    assert [g.task.answer for g in executors] == ["42", "7", "42", "9801", "7"]  # pseudo-labels, never ground truth
    assert [g.task.meta["p"] for g in executors] == [0.75, 1.0, 0.5, 0.25, 1.0]
    assert [g.dropped_by for g in executors] == [None, "out_of_band", None, "out_of_band", "out_of_band"]
    assert [s.info["return"] for s in executors[0].samples] == [1.0, 1.0, 0.0, 1.0]
    assert [s.info["return"] for s in executors[2].samples] == [1.0, 0.0, 0.0, 1.0]
    # clusters over the 5 readable proposals: {17 + 25, now 17 + 25}, {3 + 4, 3 + 4}, {99 * 99}
    batch = 5
    expected = [0.25 - 2 / batch, 0.0 - 2 / batch, -1.0, -1.0,
                0.5 - 2 / batch, 0.25 - 1 / batch, -1.0, 0.0 - 2 / batch]
    returns = [s.info["return"] for g in proposers for s in g.samples]
    assert returns == pytest.approx(expected)
    assert all(g.kept for g in proposers)
    info = proposers[1].samples[0].info["proposal"]
    assert info == {"question": "Now what is 17 + 25?", "p": 0.5, "label": "42", "cluster": 2, "tool_share": 0.0,
                    "in_band": True}
    metrics = proposal_metrics(groups)
    assert metrics["creator/validity"] == 5 / 8
    assert metrics["propose/mean_p"] == pytest.approx((0.75 + 1 + 0.5 + 0.25 + 1) / 5)
    assert metrics["propose/in_band_share"] == pytest.approx(2 / 5)
    assert metrics["propose/duplicate_rate"] == pytest.approx(4 / 5)
    assert metrics["propose/proposer_reward"] == pytest.approx(sum(expected) / 8)
    assert metrics["propose/executor_reward"] == pytest.approx((3 + 2) / 8)  # the two in-band groups


def test_the_role_at_rest_is_generated_but_dropped_as_phase():
    proposer_phase = _run(phase_steps=2, rounds=1)  # rounds 0, 1: the proposer's
    assert all(g.kept for g in proposer_phase[:2])
    assert [g.dropped_by for g in proposer_phase[2:]] == ["phase", "out_of_band", "phase", "out_of_band", "out_of_band"]
    executor_phase = _run(phase_steps=2, rounds=2)
    assert all(g.dropped_by == "phase" for g in executor_phase[:2])
    assert [g.dropped_by for g in executor_phase[2:]] == [None, "out_of_band", None, "out_of_band", "out_of_band"]
    # rewards do not depend on the phase
    assert [s.info["return"] for g in proposer_phase for s in g.samples] == \
        [s.info["return"] for g in executor_phase for s in g.samples]


def test_the_phase_clock_counts_calls_and_resumes_from_its_state():
    sampler = ProposeSampler(ScriptedPolicy(lambda context, k: "no idea"), NO_HELDOUT, answers=2, phase_steps=1)
    for _ in range(3):
        sampler.generate([_seed()], 2, 16)
    assert sampler.state_dict() == {"rounds": 3}
    resumed = ProposeSampler(sampler.policy, NO_HELDOUT, answers=2, phase_steps=1)
    resumed.load_state_dict(sampler.state_dict())
    groups = _filtered(resumed.generate([_seed()], 2, 16), resumed.band)  # round 3: the executor's, so the proposer group is dropped
    assert [g.dropped_by for g in groups] == ["phase"]
    assert [s.info["proposal"] for s in groups[0].samples] == [{"question": None}] * 2


def test_executor_tool_calls_earn_the_proposer_its_bonus():
    call = '<tool_call>{"name": "calculator", "arguments": {"expression": "17 + 25"}}</tool_call>'

    def choose(context: str, k: int, turns=count()) -> str:
        if context.startswith(f"<u>{INSTRUCTION}"):
            return "What is 17 + 25?"
        if context.endswith("<u>42<a>"):  # the calculator's result came back: answer
            return "42"
        return call if next(turns) % 2 == 0 else "41"  # executors 0 and 2 call the tool, 1 and 3 guess 41

    sampler = ProposeSampler(ScriptedPolicy(choose), NO_HELDOUT, answers=4, make_env=make_env_factory("calculator"),
                             reward=ProposerReward(repetition_penalty=0.0, tool_bonus=0.1), max_turns=3)
    proposer, executor = sampler.generate([_seed()], 1, 400)
    assert executor.task.family == EXECUTOR
    assert sampler.policy.decode(executor.prompt_ids).startswith("<u>You can use these tools:")
    assert [s.info["env"]["answer"] for s in executor.samples] == ["42", "41", "42", "41"]
    assert [s.info["return"] for s in executor.samples] == [1.0, 0.0, 1.0, 0.0]
    assert executor.task.answer == "42" and executor.task.meta["p"] == 0.5
    (sample,) = proposer.samples
    assert sample.info["proposal"]["tool_share"] == 0.5
    assert sample.info["return"] == pytest.approx(0.5 + 0.1 * 0.5)


@pytest.mark.parametrize("override, message", [
    ("filter.rewards=[{name: verifier}]", "filter.rewards=\\[{name: env}\\]"),
    ("filter.dynamic_sampling=true", "one proposer-executor round per step"),
    ("control.early_exit_probe=2", "one proposer-executor round per step"),
    ("propose.answers_per_task=1", "answers_per_task must be at least 2"),
    ("propose.band=[0.8, 0.3]", "propose.band must be"),
    ("propose.duplicate_threshold=0", "duplicate_threshold must lie in"),
    ("propose.phase_steps=-1", "phase_steps must be 0"),
    ("generate.env=python", "propose.executor_tools, not generate.env"),
])
def test_bad_propose_settings_are_named(override, message):
    with pytest.raises((ConfigError, TrainingError), match=message):  # a range on load, a combination after
        config = load_config(None, ["generate.mode=propose", "filter.rewards=[{name: env}]", override])
        check_combination(config, get_algorithm(config.algorithm.name))


def test_bad_code_propose_settings_are_named():
    config = load_config(None, ["generate.mode=propose", "filter.rewards=[{name: env}]", "propose.kind=code",
                                "propose.executor_tools=python"])
    with pytest.raises(TrainingError, match="propose.kind=code asks the executor to predict"):
        check_combination(config, get_algorithm(config.algorithm.name))
    with pytest.raises(ConfigError, match="propose.kind' must be one of arithmetic, code"):
        load_config(None, ["propose.kind=words"])
    config.propose.kind, config.propose.executor_tools = "words", None  # a config built in code, not loaded
    with pytest.raises(TrainingError, match="propose.kind must be one of arithmetic, code, got 'words'"):
        check_combination(config, get_algorithm(config.algorithm.name))


@pytest.mark.parametrize("recipe, kind", [("agent0", "arithmetic"), ("agent0-code", "code")])
def test_the_agent0_recipes_pass_the_checks(recipe, kind):
    from pathlib import Path

    config = load_config(Path(__file__).parent.parent / "recipes" / f"{recipe}.yaml")
    check_combination(config, get_algorithm(config.algorithm.name))
    assert config.generate.mode == "propose" and config.propose.kind == kind


# ---- the real embedded model ------------------------------------------------------------------

TINY = ["train.steps=2", "control.tasks_per_step=2", "generate.group_size=4", "propose.answers_per_task=4",
        "control.max_new_tokens=24", "propose.phase_steps=2", "curriculum.families=[add, successor]",
        "eval.levels=[1]", "eval.per_level=1", "eval.max_new_tokens=8", "model.lora=true", "model.lora_rank=8",
        "logging.progress=false", "train.max_minutes=null", "train.checkpoint_every=1", "train.export_model=false",
        "logging.report=false"]


def _check_step(rows: list[dict], config, proposer_phase: bool) -> None:
    """Every reward in one step's rollouts follows from the logged proposals and answers."""
    from autotelic.rewards.majority import default_extract

    cfg = config.propose
    proposals = [r for r in rows if r["family"] == PROPOSER]
    answers = [r for r in rows if r["family"] == EXECUTOR]
    assert len(proposals) == config.control.tasks_per_step * config.generate.group_size
    valid = [r for r in proposals if r["proposal"]["question"] is not None]
    assert len(answers) == len(valid) * cfg.answers_per_task
    clusters = cluster_sizes([r["proposal"]["question"] for r in valid], cfg.duplicate_threshold)
    for row in proposals:
        assert row["filter"] != "phase" if proposer_phase else row["filter"] == "phase"
        if row["proposal"]["question"] is None:
            assert row["reward"] == cfg.invalid_reward
    for k, (row, cluster) in enumerate(zip(valid, clusters)):
        proposal = row["proposal"]
        group = answers[k * cfg.answers_per_task:(k + 1) * cfg.answers_per_task]
        assert {r["prompt"] for r in group} == {f"{proposal['question']} {FORMAT}"}
        assert {r["answer"] for r in group} == {proposal["label"] or ""}  # the pseudo-label
        votes = [default_extract(r["completion"]) for r in group]
        assert proposal["p"] == pytest.approx(votes.count(proposal["label"]) / len(votes) if proposal["label"] else 0)
        assert [r["reward"] for r in group] == [float(v is not None and v == proposal["label"]) for v in votes]
        assert proposal["cluster"] == cluster
        p = proposal["p"]
        assert row["reward"] == pytest.approx(min(p, 1 - p) - cfg.repetition_penalty * cluster / len(valid))
        banded = cfg.band[0] <= p <= cfg.band[1]
        expected = ("phase" if proposer_phase else "kept") if banded else "out_of_band"
        assert {r["filter"] for r in group} == {expected}


@pytest.mark.slow
def test_agent0_runs_on_the_real_model_and_resumes_in_phase(tmp_path):
    import json
    from pathlib import Path

    from autotelic.run_state import new_run_dir

    from autotelic.trainer import Trainer, resume

    recipe = Path(__file__).parent.parent / "recipes" / "agent0.yaml"
    config = load_config(recipe, TINY + [f"logging.runs_dir={tmp_path}", "logging.run_name=agent0"])
    run_dir = new_run_dir(config)
    assert Trainer(config, run_dir).run()["steps"] == 2
    rollouts = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in metrics if "reward/mean" in m]
    for step, row in enumerate(steps, start=1):  # phase_steps=2: both steps are the proposer's
        _check_step([r for r in rollouts if r["step"] == step], config, proposer_phase=True)
        assert {"creator/validity", "propose/mean_p", "propose/in_band_share", "propose/duplicate_rate",
                "propose/proposer_reward", "propose/executor_reward"} <= set(row)
    assert any(r["proposal"]["question"] for r in rollouts if r["family"] == PROPOSER)
    # resume for a third step: the phase clock comes back from the checkpoint, so step 3 is the executor's
    summary = resume(run_dir, ["train.steps=3"])
    assert summary["steps"] == 3
    rollouts = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    assert {r["step"] for r in rollouts} == {1, 2, 3}
    _check_step([r for r in rollouts if r["step"] == 3], load_config(run_dir / "config.yaml"), proposer_phase=False)
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    third = [m for m in metrics if "reward/mean" in m][-1]
    assert third["filter/dropped_phase"] >= config.control.tasks_per_step  # the proposer groups rest


@pytest.mark.slow
def test_agent0_code_runs_on_the_real_model_with_executed_labels(tmp_path):
    import json
    from pathlib import Path

    from autotelic.rollout.propose_code import CODE_LIMITS, label_programs
    from autotelic.sandbox import Sandbox
    from autotelic.run_state import new_run_dir
    from autotelic.trainer import Trainer

    recipe = Path(__file__).parent.parent / "recipes" / "agent0-code.yaml"
    tiny = ["train.steps=1", "control.tasks_per_step=2", "generate.group_size=4", "propose.answers_per_task=2",
            "control.max_new_tokens=64",  # proposals and answers: the recipe's 96 only lengthen the rambling ones
            "propose.phase_steps=0", "eval.levels=[1]", "eval.per_level=1", "eval.max_new_tokens=8",
            "model.lora=true", "model.lora_rank=8", "logging.progress=false",
            "train.export_model=false", "logging.report=false",
            "train.max_minutes=null", f"logging.runs_dir={tmp_path}", "logging.run_name=code"]
    config = load_config(recipe, tiny)
    assert Trainer(config, new_run_dir(config)).run()["steps"] == 1
    rows = [json.loads(line) for line in (tmp_path / "code" / "rollouts.jsonl").read_text().splitlines()]
    cfg = config.propose
    proposals = [r for r in rows if r["family"] == PROPOSER]
    answers = [r for r in rows if r["family"] == EXECUTOR]
    assert len(proposals) == 8
    valid = [r for r in proposals if r["proposal"]["question"] is not None]
    assert len(answers) == len(valid) * cfg.answers_per_task
    assert all(r["reward"] == cfg.invalid_reward for r in proposals if r not in valid)
    programs = [parse_program(r["completion"]) for r in valid]
    with Sandbox(CODE_LIMITS) as sandbox:  # the labels are what the programs print, run again here
        assert label_programs(sandbox, programs) == [r["proposal"]["label"] for r in valid]
    for k, row in enumerate(valid):
        proposal = row["proposal"]
        group = answers[k * cfg.answers_per_task:(k + 1) * cfg.answers_per_task]
        assert {r["prompt"] for r in group} == {programs[k].question()}
        assert {r["answer"] for r in group} == {proposal["label"]}  # the executed label
        rewards = [float(answer_matches(r["completion"], proposal["label"])) for r in group]
        assert [r["reward"] for r in group] == rewards and proposal["p"] == pytest.approx(sum(rewards) / len(group))
        assert row["reward"] == pytest.approx(learnability(proposal["p"])
                                              - cfg.repetition_penalty * proposal["cluster"] / len(valid))
        banded = cfg.band[0] <= proposal["p"] <= cfg.band[1]
        assert {r["filter"] for r in group} == {"kept" if banded else "out_of_band"}
