"""Reward functions: exact values on hand-made groups, the registry's errors, and a real-model judge."""

import math
import threading

import pytest
from scripted import ScriptedBackend

from autotelic.rewards import build_reward
from autotelic.rewards.checks import FormatReward, LengthPenalty
from autotelic.rewards.judge import DEFAULT_RUBRIC, LLMJudge, parse_score
from autotelic.rewards.majority import (
    MajorityVoteReward,
    default_extract,
    majority_answer,
    ngram_jaccard,
    novelty,
)
from autotelic.rewards.math import MathVerifyReward, extract_answer
from autotelic.rewards.verifiers import VerifierReward
from autotelic.rollout.filter import completion_scorer, weighted_scorer
from autotelic.types import Group, Sample, Task


def _task(answer: str, family: str = "math", prompt: str = "What is it?") -> Task:
    return Task(prompt=prompt, answer=answer, family=family, level=1, uid=f"{family}:{prompt}")


@pytest.fixture(scope="module")
def math_reward():
    return MathVerifyReward()


# ---- verifier -----------------------------------------------------------------------------------
def test_verifier_reward_uses_the_task_familys_scorer():
    task = _task("12", family="add", prompt="What is 5 + 7? Reply with only the number.")
    assert VerifierReward()(task, ["12", "12 or 13", "13 or 12", "no idea"]) == [1.0, 1.0, 0.0, 0.0]
    assert VerifierReward().name == "verifier"


# ---- math_verify --------------------------------------------------------------------------------
def test_math_verify_compares_answers_symbolically(math_reward):
    assert math_reward(_task("0.5"), ["\\boxed{\\frac{1}{2}}", "1/2", "0.50", "\\boxed{0.6}"]) == [1.0, 1.0, 1.0, 0.0]
    assert math_reward(_task("4"), ["The answer is 3", "The answer is $\\boxed{4}$."]) == [0.0, 1.0]
    assert math_reward(_task("2"), ["x = 2", "So $x = 2$.", "x = 3"]) == [1.0, 1.0, 0.0]
    assert math_reward(_task("\\sqrt{2}"), ["$\\sqrt{2}$", "$2^{1/2}$", "1.41"]) == [1.0, 1.0, 0.0]


def test_math_verify_scores_reasoning_gym_word_problems(math_reward):
    """GSM-Symbolic word problems (recipes/math-word.yaml): the family's answer is the gold."""
    import random

    from autotelic.tasks import get_family

    family = get_family("rg_gsm_symbolic")
    for level in family.levels:
        task = family.generate(random.Random(level), level)
        answer = int(task.answer)
        replies = [f"So the total is \\boxed{{{answer}}}.", f"{answer}.0", f"The answer is {answer + 1}"]
        assert math_reward(task, replies) == [1.0, 1.0, 0.0]


def test_math_verify_scores_unparseable_predictions_zero_and_unparseable_gold_nan(math_reward):
    assert math_reward(_task("7"), ["no idea at all", "", "\\boxed{}"]) == [0.0, 0.0, 0.0]
    assert all(math.isnan(v) for v in math_reward(_task(""), ["7", "8"]))
    assert math_reward(_task("7"), []) == []


def test_math_verify_and_extract_answer_work_off_the_main_thread(math_reward):
    results = {}

    def work():
        results["rewards"] = math_reward(_task("0.5"), ["\\boxed{\\frac{1}{2}}", "The answer is 3", "junk"])
        results["answer"] = extract_answer("x = 0.25")

    worker = threading.Thread(target=work)
    worker.start()
    worker.join(timeout=60)
    assert results == {"rewards": [1.0, 0.0, 0.0], "answer": "1/4"}


@pytest.mark.parametrize("text, expected", [
    ("\\boxed{\\frac{1}{2}}", "1/2"),
    ("0.5", "1/2"),
    ("1/2", "1/2"),
    ("The answer is 42.", "42"),
    ("$x = -3$", "-3"),
    ("2.0", "2"),
    ("no answer here", None),
    ("", None),
])
def test_extract_answer_is_canonical(text, expected):
    assert extract_answer(text) == expected


# ---- majority vote ------------------------------------------------------------------------------
def test_majority_answer_ties_break_by_first_occurrence_and_share_counts_all_answers():
    assert majority_answer(["3", "4", "4", "3"]) == ("3", 0.5)
    assert majority_answer(["4", "3", "3", "4", None]) == ("4", 0.4)
    assert majority_answer([None, "5", None, None]) == ("5", 0.25)
    assert majority_answer([None, None]) == (None, 0.0)
    assert majority_answer([]) == (None, 0.0)


def test_default_extract_falls_back_to_the_first_integer():
    assert default_extract("\\boxed{7}") == "7"
    assert default_extract("nothing") is None


def test_majority_vote_rewards_agreement_with_the_group():
    reward = MajorityVoteReward()
    group = ["The answer is 4", "\\boxed{4}", "I get 5", "no clue", "x = 4.0"]
    # the gold answer is never read: a wrong "answer" changes nothing
    assert reward(_task("999"), group) == [1.0, 1.0, 0.0, 0.0, 1.0]
    assert reward(_task("4"), ["no clue", "none"]) == [0.0, 0.0]
    assert reward.name == "majority_vote"


def test_majority_vote_with_a_custom_extractor():
    reward = MajorityVoteReward(extract=lambda text: text[:1] or None)
    assert reward(_task("x"), ["ab", "b", "ac", ""]) == [1.0, 0.0, 1.0, 0.0]


def test_ngram_jaccard_and_novelty_by_hand():
    a, b, c = "the answer is 4", "the answer is 5", "i think 4"
    # a: {(the answer is), (answer is 4)}, b: {(the answer is), (answer is 5)}, c: {(i think 4)}
    assert ngram_jaccard(a, b) == pytest.approx(1 / 3)
    assert ngram_jaccard(a, c) == 0.0
    assert ngram_jaccard("Two Words", "two words") == 1.0  # shorter than 3 words: one gram, lower-cased
    assert ngram_jaccard("", "") == 1.0
    assert novelty([a, b, c]) == pytest.approx([5 / 6, 5 / 6, 1.0])
    assert novelty([a]) == [0.0]


def test_majority_vote_adds_the_novelty_bonus():
    group = ["the answer is 4", "the answer is 5", "i think 4"]
    rewards = MajorityVoteReward(novelty_weight=0.5)(_task("4"), group)
    assert rewards == pytest.approx([1 + 0.5 * 5 / 6, 0.5 * 5 / 6, 1 + 0.5 * 1.0])
    constant = MajorityVoteReward(novelty_weight=2.0, similarity=lambda x, y: 0.25)(_task("4"), group)
    assert constant == pytest.approx([2.5, 1.5, 2.5])


# ---- format and length --------------------------------------------------------------------------
def test_format_reward():
    reward = FormatReward(r"\\boxed\{.+\}")
    assert reward(_task("1"), ["so \\boxed{12}", "\\boxed{}", "12", "\\boxed{1\n2}"]) == [1.0, 0.0, 0.0, 1.0]
    assert reward.name == "format" and FormatReward("x", name="has_x").name == "has_x"


def test_length_penalty():
    reward = LengthPenalty(max_chars=10)
    assert reward(_task("1"), ["", "a" * 10, "a" * 15, "a" * 20, "a" * 100]) == [0.0, 0.0, -0.5, -1.0, -1.0]
    with pytest.raises(ValueError, match="max_chars"):
        LengthPenalty(0)


# ---- composition and registry -------------------------------------------------------------------
class _Fixed:
    def __init__(self, name, values):
        self.name, self.values = name, values

    def __call__(self, task, completions):
        return list(self.values)


def _scored(reward, answer: str, completions: list[str]) -> list[float]:
    group = Group(_task(answer), [], [Sample(c, [], [], True) for c in completions])
    return reward(group)


def test_weighted_sum_adds_weighted_parts_and_propagates_nan():
    total = weighted_scorer([(completion_scorer(_Fixed("a", [1.0, 0.0, 1.0])), 1.0),
                             (completion_scorer(_Fixed("b", [0.5, float("nan"), -1.0])), 0.5)])
    values = _scored(total, "1", ["x", "y", "z"])
    assert total.__name__ == "a+b"
    assert values[0] == 1.25 and math.isnan(values[1]) and values[2] == 0.5


def test_weighted_sum_of_real_rewards():
    total = weighted_scorer([(completion_scorer(build_reward("math_verify", {})), 1.0),
                             (completion_scorer(build_reward("format", {"pattern": r"\\boxed"})), 0.2)])
    assert total.__name__ == "math_verify+format"
    assert _scored(total, "3", ["\\boxed{3}", "3", "\\boxed{4}"]) == pytest.approx([1.2, 1.0, 0.2])


def test_build_reward_builds_each_reward():
    assert isinstance(build_reward("verifier", {}), VerifierReward)
    assert build_reward("length", {"max_chars": 5}).max_chars == 5
    assert build_reward("majority_vote", {"novelty_weight": 0.1}).novelty_weight == 0.1
    assert build_reward("math_verify", {"timeout_seconds": 2}).timeout_seconds == 2
    judge = build_reward("judge", {"high": 5}, backend=object())
    assert isinstance(judge, LLMJudge) and judge.high == 5 and judge.rubric == DEFAULT_RUBRIC


def test_build_reward_errors():
    with pytest.raises(ValueError, match="unknown reward 'nope'; valid: format, judge, length, majority_vote"):
        build_reward("nope", {})
    with pytest.raises(ValueError, match="unknown option 'max_len' for reward 'length'; valid options: max_chars"):
        build_reward("length", {"max_len": 5})
    with pytest.raises(ValueError, match="unknown option 'extract'"):  # functions are not config values
        build_reward("majority_vote", {"extract": "first_integer"})
    with pytest.raises(ValueError, match="needs option 'pattern'"):
        build_reward("format", {})
    with pytest.raises(ValueError, match="reward .judge. needs a model backend"):
        build_reward("judge", {})


# ---- judge --------------------------------------------------------------------------------------
@pytest.mark.parametrize("reply, expected", [
    ("7", 7.0),
    ("Score: 7", 7.0),
    ("7/10", 7.0),
    ("**8** out of 10", 8.0),
    ("I would rate this response a 9.", 9.0),
    ("10/10", 10.0),
    ("1", 1.0),
    ("7.5", 7.5),
    ("  3\nThe response is wrong.", 3.0),
    ("0/10", None),
    ("Score: 11", None),
    ("-3", None),
    ("100", None),
    ("Excellent!", None),
    ("", None),
])
def test_parse_score(reply, expected):
    assert parse_score(reply, 1, 10) == expected


def test_parse_score_respects_other_ranges():
    assert parse_score("0", 0, 5) == 0.0
    assert parse_score("5", 0, 5) == 5.0
    assert parse_score("6", 0, 5) is None


def test_judge_normalises_scores_counts_parses_and_batches_one_call():
    backend = ScriptedBackend(["Score: 10", "1", "no idea", "5.5/10"])
    judge = LLMJudge(backend, rubric="Be strict.", max_new_tokens=6)
    values = judge(_task("4", prompt="What is 2 + 2?"), ["4", "5", "four", "2+2"])
    assert values[:2] == [1.0, 0.0] and math.isnan(values[2]) and values[3] == 0.5
    assert (judge.calls, judge.unparsed) == (4, 1)
    assert backend.generate_calls == [(4, 1, 6, True)]
    assert "What is 2 + 2?" in backend.messages[2] and "four" in backend.messages[2]
    assert "Be strict." in backend.messages[2] and backend.messages[2].endswith("Reply with only a score from 1 to 10.")
    assert judge(_task("4"), []) == [] and judge.calls == 4
    with pytest.raises(ValueError, match="low < high"):
        LLMJudge(backend, low=5, high=5)


@pytest.mark.slow
def test_the_real_embedded_model_judges_completions():
    from autotelic.backends.hf import HFPolicy
    from autotelic.config import ModelConfig

    policy = HFPolicy(ModelConfig())
    version = policy.version
    judge = LLMJudge(policy)
    tasks = [_task("7", prompt="What is 3 + 4? Reply with only the number."),
             _task("42", prompt="What number comes right after 41? Reply with only the number.")]
    groups = [["7", "The answer is 9."], ["42", "I don't know."]]
    for task, completions in zip(tasks, groups):
        messages = judge.messages(task, completions)
        assert all(DEFAULT_RUBRIC in m and task.prompt in m and c in m for m, c in zip(messages, completions))
        values = judge(task, completions)
        assert len(values) == 2
        assert all(math.isnan(v) or 0.0 <= v <= 1.0 for v in values)
    assert judge.calls == 4 and 0 <= judge.unparsed <= 4
    assert policy.version == version  # judging never steps the optimizer


@pytest.mark.slow
def test_self_certainty_matches_a_plain_forward_and_prefers_the_models_own_answer():
    import torch

    from autotelic.backends.hf import HFPolicy
    from autotelic.config import ModelConfig

    policy = HFPolicy(ModelConfig())
    task = _task("7", prompt="What is 3 + 4? Reply with only the number.")
    prompt = policy.encode_prompt(task.prompt)
    [[greedy]] = policy.generate([prompt], 1, 12, greedy=True)
    own = policy.decode(greedy.token_ids)
    scrambled = "zebra quantum lattice 19 umbrella"
    reward = build_reward("self_certainty", {}, backend=policy)
    values = reward(task, [own, scrambled])
    assert values[0] > values[1] > 0.0
    with torch.no_grad():  # the same statistic from one plain forward over prompt + completion
        completion = policy.encode_completion(scrambled)
        logits = policy.causal_lm(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1:-1].float()
        expected = (-math.log(logits.shape[-1]) - torch.log_softmax(logits, -1).mean(-1)).mean().item()
    assert values[1] == pytest.approx(expected, rel=1e-4)
