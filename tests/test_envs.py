"""Environments: tool calling (parser, calculator, python sandbox, ToolUseEnv) and textarena self-play games.

The last test runs the real embedded model through EpisodeSampler with the calculator environment.
"""

import random
import time

import pytest

from autotelic.envs import make_env_factory
from autotelic.envs.textarena_games import TextArenaSelfPlayEnv
from autotelic.envs.tools import (
    Calculator,
    PythonTool,
    ToolCallError,
    ToolUseEnv,
    parse_tool_call,
    tool_prompt,
)
from autotelic.tasks import get_family
from autotelic.types import Task

# ---- parse_tool_call ----------------------------------------------------------------------

CALC = ("calculator", {"expression": "2+3"})


@pytest.mark.parametrize("text, expected", [
    ('<tool_call>{"name": "calculator", "arguments": {"expression": "2+3"}}</tool_call>', CALC),
    ('<tool_call>\n{"name": "calculator", "arguments": {"expression": "2+3"}}\n</tool_call>', CALC),
    ('Let me compute.\n<tool_call>{"name": "calculator", "arguments": {"expression": "2+3"}}</tool_call>', CALC),
    ('<tool_call>{"name": "calculator", "arguments": {"expression": "2+3"}}', CALC),  # stopped before the close tag
    ('<tool_call>{"name": "calculator", "arguments": {"expression": "2+3"}} and more', CALC),
    ('{"name": "calculator", "arguments": {"expression": "2+3"}}', CALC),
    ('  {"name": "calculator", "arguments": {"expression": "2+3"}}\n', CALC),
    ('```json\n{"name": "calculator", "arguments": {"expression": "2+3"}}\n```', CALC),
    ('I will call {"name": "calculator", "arguments": {"expression": "2+3"}} now', CALC),
    ('{"name": "calculator", "parameters": {"expression": "2+3"}}', CALC),  # Llama 3.1 spelling
    ('{"type": "function", "function": {"name": "calculator", "arguments": "{\\"expression\\": \\"2+3\\"}"}}', CALC),
    ('[{"name": "calculator", "arguments": {"expression": "2+3"}}]', CALC),
    ('<tool_call>{"name": "now"}</tool_call>', ("now", {})),
    ('{"name": "now", "arguments": ""}', ("now", {})),
    ("The answer is 5.", None),
    ("5", None),
    ("", None),
    ("A set {1, 2} has two elements.", None),
    ('The dict {"a": 1} has no name key.', None),
])
def test_parse_tool_call_reads_the_common_formats(text, expected):
    assert parse_tool_call(text) == expected


@pytest.mark.parametrize("text, problem", [
    ('<tool_call>{"name": "calculator", "arguments": {"expression": "2+3"</tool_call>', "not valid JSON"),
    ("<tool_call></tool_call>", "not valid JSON"),
    ('<tool_call>{"arguments": {"expression": "2+3"}}</tool_call>', "needs a 'name'"),
    ('<tool_call>{"name": 7}</tool_call>', "needs a 'name'"),
    ('<tool_call>"calculator"</tool_call>', "must be a JSON object"),
    ('{"name": "calculator", "arguments": [1, 2]}', "must be a JSON object"),
    ('{"name": "calculator", "arguments": "{not json"}', "not valid JSON"),
    ('{"name": "calculator", "arguments": {"expression": ', "not valid JSON"),
    ("{oops}", "not valid JSON"),
])
def test_parse_tool_call_reports_malformed_calls(text, problem):
    with pytest.raises(ToolCallError, match=problem):
        parse_tool_call(text)


def test_tool_prompt_lists_the_schema_and_the_call_format():
    prompt = tool_prompt([Calculator()])
    assert '"name": "calculator"' in prompt and '"required": ["expression"]' in prompt
    assert '<tool_call>{"name": "<tool name>", "arguments": {<arguments>}}</tool_call>' in prompt


# ---- calculator ---------------------------------------------------------------------------

@pytest.mark.parametrize("expression, result", [
    ("2+3", "5"), ("(12 + 7) * 3", "57"), ("-(3-5)**2", "-4"), ("-2**2", "-4"), ("+4 - -4", "8"),
    ("7/2", "3.5"), ("4/2", "2"), ("7//2", "3"), ("-7//2", "-4"), ("7 % 3", "1"), ("2**-2", "0.25"),
    ("2**0.5", "1.41421356237"), ("0.1 + 0.2", "0.3"), ("1_000 * 3", "3000"),
    ("2**100", "1267650600228229401496703205376"), ("123456789 * 987654321", "121932631112635269"),
])
def test_calculator_computes(expression, result):
    assert Calculator()(expression) == result


@pytest.mark.parametrize("expression, problem", [
    ("__import__('os')", "not a function call"),
    ("__import__('os').system('echo hi')", "not a function call"),
    ("(1).real", "not attribute access '.real'"),
    ("x + 1", "not the name 'x'"),
    ("'a' * 3", "not the constant 'a'"),
    ("True + 1", "not the constant True"),
    ("[1, 2]", "not 'List'"),
    ("1 if 1 else 2", "not 'IfExp'"),
    ("2 << 3", "not 'BinOp'"),
    ("1j", "not the constant 1j"),
    ("9**9**9", "too large"),
    ("2**100000", "too large"),
    ("(2**9999) * (2**9999)", "too large"),
    ("10**4000", "too large"),
    ("1e308 * 10", "floating-point range"),
    ("10**3000 / 3", "floating-point range"),
    ("(-8) ** 0.5", "not a real number"),
    ("1 / 0", "division by zero"),
    ("5 % 0", "division by zero"),
    ("2 +", "not an arithmetic expression"),
    ("import os", "not an arithmetic expression"),
    ("(" * 400 + "1" + ")" * 400, "longer than 300"),
])
def test_calculator_refuses(expression, problem):
    started = time.perf_counter()
    with pytest.raises(ValueError, match=problem):
        Calculator()(expression)
    assert time.perf_counter() - started < 1.0


# ---- ToolUseEnv ---------------------------------------------------------------------------

ADD = Task("What is 59 + 6? Reply with only the number.", "65", "add", 2, "add:59+6")


def _call(expression: str) -> str:
    return f'<tool_call>{{"name": "calculator", "arguments": {{"expression": "{expression}"}}}}</tool_call>'


def test_a_tool_call_then_a_final_answer():
    env = make_env_factory("calculator")()
    assert isinstance(env, ToolUseEnv)
    prompt = env.reset(ADD)
    assert prompt.startswith("You can use these tools:") and prompt.endswith(ADD.prompt)
    step = env.step(_call("59 + 6"))
    assert step == ("65", 0.0, False, {"tool": "calculator", "ok": True, "tool_calls": 1, "tool_successes": 1})
    step = env.step("65")
    assert step == ("", 1.0, True, {"answered": True, "answer": "65", "tool_calls": 1, "tool_successes": 1})


def test_a_wrong_final_answer_scores_zero_without_calls():
    env = make_env_factory("calculator")()
    env.reset(ADD)
    assert env.step("64") == ("", 0.0, True, {"answered": True, "answer": "64", "tool_calls": 0,
                                               "tool_successes": 0})


def test_the_verifier_of_a_reasoning_gym_family_pays_the_answer():
    family = get_family("rg_chain_sum")
    task = family.generate(random.Random(0), 1)
    env = make_env_factory("calculator")()
    env.reset(task)
    assert env.step(task.answer).reward == 1.0


class _Boom:
    name = "boom"
    description = "always fails"
    parameters = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": []}

    def __call__(self, **arguments) -> str:
        raise RuntimeError("the tool broke")


@pytest.mark.parametrize("action, tool, error", [
    ('<tool_call>{"name": "calculator", "arguments": {"expression": </tool_call>', None,
     "Error: the tool call is not valid JSON: Expecting value: line 1 column 51 (char 50)"),
    ('<tool_call>{"name": "search", "arguments": {"q": "x"}}</tool_call>', "search",
     "Error: unknown tool 'search'; available: calculator, boom"),
    ('<tool_call>{"name": "calculator", "arguments": {"expr": "1+1"}}</tool_call>', "calculator",
     "Error: 'calculator' has no argument 'expr'; it takes 'expression'"),
    ('<tool_call>{"name": "calculator", "arguments": {}}</tool_call>', "calculator",
     "Error: 'calculator' needs argument 'expression'"),
    ('<tool_call>{"name": "calculator", "arguments": {"expression": 5}}</tool_call>', "calculator",
     "Error: argument 'expression' of 'calculator' must be of type string"),
    ('<tool_call>{"name": "boom", "arguments": {"n": true}}</tool_call>', "boom",
     "Error: argument 'n' of 'boom' must be of type integer"),
    (_call("__import__('os')"), "calculator",
     "Error: only numbers, + - * / // % ** and parentheses are allowed, not a function call"),
    ('<tool_call>{"name": "boom", "arguments": {"n": 1}}</tool_call>', "boom", "Error: the tool broke"),
])
def test_malformed_calls_are_reported_not_raised(action, tool, error):
    env = ToolUseEnv([Calculator(), _Boom()], max_calls=4)
    env.reset(ADD)
    step = env.step(action)
    assert step == (error, 0.0, False, {"tool": tool, "ok": False, "valid": False, "tool_calls": 1, "tool_successes": 0})
    assert env.step(_call("1+1")).info == {"tool": "calculator", "ok": True, "tool_calls": 2, "tool_successes": 1}


def test_a_call_past_the_budget_ends_the_episode_unpaid():
    env = ToolUseEnv([Calculator()], max_calls=2)
    env.reset(ADD)
    assert env.step(_call("1+1")).observation == "2"
    last = env.step(_call("59+6"))
    assert last.observation == "65\n(No tool calls left: reply with your final answer.)" and not last.done
    over = env.step(_call("59+6"))
    assert over == ("Error: no tool calls left (limit 2)", 0.0, True,
                    {"tool": "calculator", "ok": False, "valid": False, "tool_calls": 3, "tool_successes": 2})
    env.reset(ADD)
    env.step(_call("1"))
    env.step(_call("2"))
    assert env.step("<tool_call>{oops").done  # a malformed attempt past the budget ends it too


def test_reset_clears_the_counts():
    env = ToolUseEnv([Calculator()], max_calls=2)
    env.reset(ADD)
    env.step(_call("1+1"))
    env.reset(ADD)
    assert env.step("65").info == {"answered": True, "answer": "65", "tool_calls": 0, "tool_successes": 0}


# ---- python tool (the project's sandbox) --------------------------------------------------

def test_python_tool_runs_code_in_the_sandbox():
    from autotelic.sandbox import SandboxLimits

    tool = PythonTool()
    assert tool(code="print(2+3)") == "5"
    assert tool(code="x = 1") == "(no output: print the result)"
    assert tool(code="print('a' * 1000)") == "a" * 400 + " ...[truncated]"
    failed = tool(code="raise ValueError('bad input')")
    assert failed.startswith("error (exit code 1):") and failed.endswith("ValueError: bad input")
    hung = PythonTool(limits=SandboxLimits(cpu_seconds=1, wall_seconds=2))(code="while True: pass")
    assert hung.startswith("timeout (exit code ")


def test_python_env_episode():
    env = make_env_factory("python")()
    env.reset(ADD)
    step = env.step('<tool_call>{"name": "python", "arguments": {"code": "print(59 + 6)"}}</tool_call>')
    assert step == ("65", 0.0, False,
                    {"tool": "python", "ok": True, "tool_calls": 1, "tool_successes": 1})
    assert env.step("65").reward == 1.0


# ---- textarena self-play ------------------------------------------------------------------

def _kuhn(seed: int) -> Task:
    return Task("", "", "ta_kuhn_poker", 1, "", meta={"env_id": "KuhnPoker-v0", "seed": seed,
                                                      "env_kwargs": {"max_rounds": 1}})


TICTACTOE = Task("", "", "ta_tictactoe", 1, "", meta={"env_id": "TicTacToe-v0", "seed": 0})


def _play(env: TextArenaSelfPlayEnv, moves: list[str]):
    steps = [env.step(move) for move in moves]
    assert [s.done for s in steps] == [False] * (len(moves) - 1) + [True]
    return steps


def test_kuhn_poker_fold_loses_the_pot():
    env = TextArenaSelfPlayEnv()
    opening = env.reset(_kuhn(0))  # seed 0 deals Player 1 the K and Player 0 the J; Player 1 opens
    assert opening.startswith("Player 1's turn.\nYou are Player 1") and "Your card is: 'K'" in opening
    assert "'J'" not in opening  # the other hand stays hidden
    bet, fold = _play(env, ["[bet]", "[fold]"])
    assert bet.observation.startswith("Player 0's turn.\nYou are Player 0") and "Your card is: 'J'" in bet.observation
    assert "Player 1, submitted move: '[bet]'." in bet.observation and bet.info == {"player": 1, "valid": True}
    assert fold.reward == -1.0 and fold.info == {"player": 0, "valid": True, "rewards": {0: -1.0, 1: 1.0}}
    assert fold.observation == "Game over. Player 1 won by having more chips at the end of all 1 rounds."


def test_kuhn_poker_showdown_pays_the_higher_card():
    env = TextArenaSelfPlayEnv()
    env.reset(_kuhn(4))  # Player 1: Q, Player 0: K
    check, showdown = _play(env, ["[check]", "[check]"])
    assert showdown.reward == 1.0 and showdown.info == {"player": 0, "valid": True, "rewards": {0: 1.0, 1: -1.0}}


def test_kuhn_poker_invalid_moves_retry_then_lose():
    env = TextArenaSelfPlayEnv()
    env.reset(_kuhn(0))
    retry = env.step("[call]")  # no bet to call yet
    assert retry == ("Player 1's turn.\nPlayer 1 attempted an invalid move. Reason: Action must be [check], [bet]. "
                     "Please resubmit a valid move and remember to follow the game rules to avoid penalties.",
                     0.0, False, {"player": 1, "valid": False})
    lost = env.step("I fold")
    assert lost.done and lost.reward == -1.0
    assert lost.info == {"player": 1, "valid": False, "rewards": {0: 1.0, 1: -1.0}}
    with pytest.raises(RuntimeError, match="after the game ended"):
        env.step("[bet]")


def test_tictactoe_win_draw_and_invalid_move():
    env = TextArenaSelfPlayEnv()
    opening = env.reset(TICTACTOE)
    assert opening.startswith("Player 0's turn.\nYou are Player 0 in Tic Tac Toe.")
    steps = _play(env, ["[4]", "[0]", "[1]", "[8]", "[7]"])  # O takes the middle column
    assert [s.info["player"] for s in steps] == [0, 1, 0, 1, 0]
    assert steps[0].observation.startswith("Player 1's turn.\nYou are Player 1 in Tic Tac Toe.")
    assert steps[1].observation.startswith("Player 0's turn.\nPlayer 1 placed their symbol (X) in cell 0.")
    assert steps[1].observation.count("Current Board") == 1  # shown once, not once per player
    assert steps[-1].reward == 1.0 and steps[-1].info["rewards"] == {0: 1.0, 1: -1.0}
    assert steps[-1].observation == "Game over. Player 0 has won!"

    env.reset(TICTACTOE)
    env.step("[4]")
    occupied = env.step("[4]")
    assert occupied.info == {"player": 1, "valid": False} and "cell 4 is already occupied" in occupied.observation
    assert occupied.observation.startswith("Player 1's turn.")
    draw = _play(env, ["[0]", "[8]", "[1]", "[7]", "[6]", "[2]", "[5]", "[3]"])
    assert draw[-1] == ("Game over. The game is a draw!", 0.0, True,
                        {"player": 0, "valid": True, "rewards": {0: 0.0, 1: 0.0}})


def test_games_are_reproducible_and_leave_global_random_alone():
    random.seed(11)
    expected = random.random()
    random.seed(11)
    first, second = TextArenaSelfPlayEnv(), TextArenaSelfPlayEnv()
    assert first.reset(_kuhn(5)) == second.reset(_kuhn(5))
    assert first.step("[check]") == second.step("[check]")
    assert random.random() == expected


def test_textarena_families_make_self_play_tasks():
    kuhn, tictactoe = get_family("ta_kuhn_poker"), get_family("ta_tictactoe")
    assert kuhn.levels == tictactoe.levels == (1,)
    rng = random.Random(0)
    tasks = [kuhn.generate(rng, 1) for _ in range(40)]
    assert len({t.meta["seed"] for t in tasks}) == 40 and len({t.uid for t in tasks}) == 6  # a uid per deal
    for task in tasks:
        assert make_env_factory("textarena")().reset(task) == task.prompt
        assert kuhn.score(task, "[check]") == 1.0 and kuhn.score(task, "[fold]") == 0.0
    boards = [tictactoe.generate(rng, 1) for _ in range(2)]
    assert boards[0].prompt == boards[1].prompt and boards[0].uid == boards[1].uid  # no chance, one game
    assert tictactoe.score(boards[0], "[4]") == 1.0 and tictactoe.score(boards[0], "4") == 0.0
    with pytest.raises(ValueError, match="levels"):
        kuhn.generate(rng, 2)


# ---- the real model through EpisodeSampler ------------------------------------------------

@pytest.mark.slow
def test_real_model_episodes_with_the_calculator(embedded_dir):
    from autotelic.backends.hf import HFPolicy
    from autotelic.config import ModelConfig
    from autotelic.rollout.generate import EpisodeSampler

    policy = HFPolicy(ModelConfig(path=str(embedded_dir), threads=2), seed=0)
    envs: list[ToolUseEnv] = []

    def make_env() -> ToolUseEnv:
        envs.append(make_env_factory("calculator")())
        return envs[-1]

    family = get_family("add")
    tasks = [family.generate(random.Random(seed), 1) for seed in (1, 2)]
    groups = EpisodeSampler(policy, make_env, temperature=1.0, max_turns=2).generate(tasks, 4, 48)
    samples = [s for g in groups for s in g.samples]
    assert len(samples) == len(envs) == 8
    for env, sample in zip(envs, samples):
        mask = sample.loss_mask()
        assert len(mask) == len(sample.token_ids) == len(sample.logprobs) <= 48
        assert all(lp == 0.0 for lp, m in zip(sample.logprobs, mask) if not m)
        assert 1 <= sample.info["turns"] <= 2 and len(sample.info["observations"]) == sample.info["turns"]
        answered = sample.info["observations"][-1] == ""  # tool results and errors are never empty
        # every turn is a tool call (counted) or the final answer (ends the episode)
        assert env.calls == sample.info["turns"] - int(answered)
        assert sample.info["invalid_actions"] == env.calls - env.successes
        assert sample.info["return"] in (0.0, 1.0) and (answered or sample.info["return"] == 0.0)
        if sample.info["turns"] > 1:
            observed = policy.tokenizer.decode([t for t, m in zip(sample.token_ids, mask) if not m])
            assert sample.info["observations"][0] in observed and "<|im_start|>user" in observed
