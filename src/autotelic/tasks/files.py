"""Your own data as a task family: ``file:PATH`` (JSONL, JSON, CSV or Parquet) or ``hf:NAME[:CONFIG][:SPLIT]``
(a Hugging Face dataset: a directory saved with ``save_to_disk``, a local data file, or a hub name when online).

Columns (renamed with ``curriculum.columns``, e.g. ``{prompt: question, answer: solution}``):
- ``prompt``: the user message, or a list of ``{role, content}`` chat messages (required);
- ``answer``: checked strictly: an integer must be the completion's first number, a number or LaTeX expression
  must be mathematically equal (math-verify), any other text must be the whole reply (up to case, surrounding
  whitespace, quotes and a final period);
- ``tests``: Python test code (asserts) run after the completion's code in the sandbox, in the harness of
  ``harness.py``: the ``unit_tests`` reward pays the share of asserts that held, accuracy 1 when all did; or
  standard-input cases (APPS's ``input_output``), an object ``{"inputs": [...], "outputs": [...]}`` (or its JSON
  text): the completion's program runs once per case with the input as stdin, its printed output compared token
  by token, the reward the share of cases passed; a list of assert lines (MBPP's ``test_list``) is Python tests;
  unittest TestCase classes (BigCodeBench's ``test``) count each test method as one assert;
- ``level`` (an integer from 1) or ``difficulty`` (easy/medium/hard, APPS's introductory/interview/competition,
  or numbers ranked into levels 1-3): the curriculum's levels; without either every row is level 1, and ``curriculum.name=regret`` ranks the rows
  themselves by the pass rates of their own groups (its ``gate`` keeps the rows the policy gets partly right);
- every other column rides along on the Task (``meta["columns"]``) and reaches reward functions by name.

A row with neither answer nor tests has no check of its own: the ``verifier`` scores it nan (its group is dropped
as unscorable, and held-out accuracy counts it unsolved), so train such data with a reward function. Data loads
when a run is checked (``data_problems``), before any model: a bad row stops the run with the file, its line
(row for JSON, Parquet and datasets) and the fix.
"""

from __future__ import annotations

import ast
import csv
import json
import math
import random
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from autotelic.config import DATA_COLUMNS, ConfigError
from autotelic.tasks import task_uid
from autotelic.tasks.harness import Harnessed, harness, io_cases, io_harness, passes
from autotelic.text import first_integer_matches, parse_gold, parse_prediction
from autotelic.types import Task

FILE_PREFIX, HF_PREFIX = "file:", "hf:"
FORMATS = (".jsonl", ".json", ".csv", ".parquet")
DIFFICULTY_WORDS = {"easy": 1, "simple": 1, "medium": 2, "moderate": 2, "intermediate": 2, "hard": 3,
                    "difficult": 3, "introductory": 1, "interview": 2, "competition": 3}  # the last three: APPS's
DIFFICULTY_LEVELS = 3  # numeric difficulties are ranked into this many levels
CHAT_ROLES = ("system", "user", "assistant")
_NUMBER = re.compile(r"-?\d+(\.\d+)?(/\d+)?")
_INTEGER = re.compile(r"-?\d+")


def is_data_family(name: str) -> bool:
    return name.startswith((FILE_PREFIX, HF_PREFIX))


@dataclass(frozen=True)
class Row:
    """One raw record and where it came from (``path:line`` or ``path row N``), for error messages."""

    where: str
    values: dict[str, Any]


@dataclass(frozen=True)
class DataRow:
    prompt: str
    messages: tuple[dict[str, str], ...] | None
    answer: str | None
    tests: str | None
    difficulty: Any  # the raw level or difficulty value; None: level 1
    columns: dict[str, Any] = field(hash=False, compare=False)
    io: tuple[tuple[str, str], ...] | None = None  # standard-input cases (input, expected output)


# ---- reading records ------------------------------------------------------------------------------------
def _read_jsonl(path: Path) -> list[Row]:
    rows = []
    for number, line in enumerate(path.read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except (ValueError, UnicodeDecodeError) as error:
            raise ConfigError(f"{path}:{number}: not valid JSON ({str(error).splitlines()[0]}); each line must be "
                              'one JSON object like {"prompt": "...", "answer": "..."}') from None
        rows.append(Row(f"{path}:{number}", value))
    return rows


def _read_json(path: Path) -> list[Row]:
    try:
        value = json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: not valid JSON ({str(error).splitlines()[0]}); write a list of objects like "
                          '[{"prompt": "...", "answer": "..."}], or one object per line in a .jsonl file') from None
    if not isinstance(value, list):
        raise ConfigError(f"{path}: a JSON data file holds a list of row objects, not a {type(value).__name__}")
    return [Row(f"{path} row {number}", item) for number, item in enumerate(value, 1)]


def _read_csv(path: Path) -> list[Row]:
    try:
        with path.open(newline="", encoding="utf-8") as file:
            reader = csv.DictReader(file)
            rows = []
            for record in reader:  # line_num: the line the record ends on (the header is line 1)
                extra = record.pop(None, None)
                if extra is not None:
                    raise ConfigError(f"{path}:{reader.line_num}: {len(extra)} more value(s) than the header's "
                                      f"columns; quote values that contain commas")
                # an empty cell is a missing value, as pandas reads it
                rows.append(Row(f"{path}:{reader.line_num}", {k: v for k, v in record.items() if v not in ("", None)}))
            return rows
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text; save the CSV as UTF-8") from None
    except csv.Error as error:
        raise ConfigError(f"{path}: not valid CSV ({error})") from None


def _read_parquet(path: Path) -> list[Row]:
    import pyarrow.parquet

    try:
        records = pyarrow.parquet.read_table(path).to_pylist()
    except Exception as error:  # pyarrow reports a damaged file with several error types
        raise ConfigError(f"{path}: not a readable Parquet file ({str(error).splitlines()[0]})") from None
    return [Row(f"{path} row {number}", record) for number, record in enumerate(records, 1)]


READERS = {".jsonl": _read_jsonl, ".json": _read_json, ".csv": _read_csv, ".parquet": _read_parquet}


def read_file(path: Path) -> list[Row]:
    if not path.is_file():
        raise ConfigError(f"data file not found: {path}; give curriculum.families an existing file as file:PATH")
    if path.suffix.lower() not in READERS:
        raise ConfigError(f"{path}: unknown data format '{path.suffix}'; use one of {', '.join(FORMATS)}")
    return READERS[path.suffix.lower()](path)


def read_hf(spec: str) -> list[Row]:
    """``NAME[:CONFIG][:SPLIT]``: a ``save_to_disk`` directory (then one part after it is the split), a local data
    file, or a hub dataset (default split ``train``)."""
    name, *rest = spec.split(":")
    local = Path(name).expanduser()
    if local.is_file():
        return read_file(local)
    import datasets

    if local.is_dir():
        try:
            loaded = datasets.load_from_disk(str(local))
        except FileNotFoundError as error:
            raise ConfigError(f"hf:{spec}: {local} is not a dataset saved with save_to_disk ({error})") from None
        split = rest[-1] if rest else "train"
        if isinstance(loaded, datasets.DatasetDict):
            if split not in loaded:
                raise ConfigError(f"hf:{spec}: {local} has no split '{split}'; its splits: {', '.join(loaded)}")
            loaded = loaded[split]
    else:
        config, split = (rest + [None, None])[:2] if len(rest) != 1 else (rest[0], None)
        try:
            loaded = datasets.load_dataset(name, config, split=split or "train")
        except Exception as error:  # offline: ConnectionError; unknown name: DatasetNotFoundError; and more
            call = ", ".join(repr(part) for part in (name, config) if part)
            raise ConfigError(f"hf:{spec}: cannot load '{name}' ({str(error).splitlines()[0]}); without network, "
                              f"save it where there is one (datasets.load_dataset({call}).save_to_disk(DIR)) and "
                              "use hf:DIR, or use a local file as file:PATH") from None
    return [Row(f"hf:{spec} row {number}", record) for number, record in enumerate(loaded, 1)]


# ---- checking rows ----------------------------------------------------------------------------------------
def _text(value: Any) -> str | None:
    """A cell as text: numbers become their digits; missing values (None, NaN) None."""
    if value is None or isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return str(int(value)) if float(value).is_integer() else str(value)
    return value if isinstance(value, str) else None


def _messages(where: str, column: str, value: list[Any]) -> tuple[dict[str, str], ...]:
    fix = f"'{column}' as chat messages must be a list of {{\"role\": system|user|assistant, \"content\": text}}"
    if not value:
        raise ConfigError(f"{where}: {fix}, got an empty list")
    for message in value:
        if not isinstance(message, dict) or message.get("role") not in CHAT_ROLES or not isinstance(
                message.get("content"), str):
            raise ConfigError(f"{where}: {fix}, got {message!r}")
    if value[-1]["role"] != "user":
        raise ConfigError(f"{where}: {fix} ending with the user's message, got a last message by "
                          f"'{value[-1]['role']}'")
    return tuple({"role": m["role"], "content": m["content"]} for m in value)


def parse_row(row: Row, columns: dict[str, str]) -> DataRow:
    """A record checked and read through the column mapping (role -> the data's column name)."""
    if not isinstance(row.values, dict):
        raise ConfigError(f"{row.where}: a row must be an object of columns, got {type(row.values).__name__}")
    names = {role: columns.get(role, role) for role in DATA_COLUMNS}
    values = row.values
    prompt = values.get(names["prompt"])
    mapped = "" if "prompt" in columns else ", or map another column with curriculum.columns={prompt: NAME}"
    if prompt is None or prompt == "" or prompt == []:
        raise ConfigError(f"{row.where}: no '{names['prompt']}': every row needs a prompt (text or chat messages)"
                          f"{mapped}")
    if isinstance(prompt, list):
        messages: tuple[dict[str, str], ...] | None = _messages(row.where, names["prompt"], prompt)
        text = "\n".join(f"{m['role']}: {m['content']}" for m in messages)
    elif isinstance(prompt, str):
        messages, text = None, prompt
    else:
        raise ConfigError(f"{row.where}: '{names['prompt']}' must be text or a list of chat messages, got "
                          f"{type(prompt).__name__} {prompt!r}")
    try:
        io = io_cases(values.get(names["tests"]))
    except ValueError as error:
        raise ConfigError(f"{row.where}: '{names['tests']}' {error}") from None
    checked: dict[str, str | None] = {"tests": None}
    for role in ("answer", "tests") if io is None else ("answer",):
        value = values.get(names[role])
        if role == "tests" and isinstance(value, list) and all(isinstance(line, str) for line in value):
            value = "\n".join(value)  # MBPP's test_list: one assert per entry
        checked[role] = _text(value)
        if value is not None and checked[role] is None and not (isinstance(value, float) and math.isnan(value)):
            raise ConfigError(f"{row.where}: '{names[role]}' must be text or a number, got {type(value).__name__}")
    if checked["tests"] is not None:
        try:
            ast.parse(checked["tests"])
        except SyntaxError as error:
            raise ConfigError(f"{row.where}: '{names['tests']}' is not valid Python (line {error.lineno}: "
                              f"{error.msg}): tests are Python asserts") from None
    level = values.get(names["level"])
    difficulty = level if level is not None else values.get(names["difficulty"])
    if isinstance(difficulty, float) and math.isnan(difficulty):
        difficulty = None
    # every column but the prompt reaches reward functions, under its own name and (answer, tests) the mapped one
    extra = {key: value for key, value in values.items() if key != names["prompt"]}
    named = {role: value for role in ("answer", "tests") if (value := checked[role]) is not None}
    return DataRow(text, messages, checked["answer"], checked["tests"], difficulty, {**extra, **named}, io)


def levels_of(rows: list[DataRow], where: list[str], by_level: bool) -> list[int]:
    """Each row's curriculum level. ``level`` values are integers from 1, used as they are; ``difficulty`` words
    map to 1-3 (easy, medium, hard); difficulty numbers are ranked, their distinct values split into 3 levels."""
    if all(row.difficulty is None for row in rows):
        return [1] * len(rows)
    levels: list[int] = []
    numbers: dict[int, float] = {}
    for index, (row, place) in enumerate(zip(rows, where)):
        value = row.difficulty
        if value is None:
            raise ConfigError(f"{place}: no level or difficulty, while other rows have one; give every row one")
        if by_level or isinstance(value, int) and not isinstance(value, bool):
            text = str(value).strip()
            if isinstance(value, bool) or not _INTEGER.fullmatch(text) or int(text) < 1:
                raise ConfigError(f"{place}: level must be an integer from 1, got {value!r}")
            levels.append(int(text))
            continue
        word = str(value).strip().casefold()
        if word in DIFFICULTY_WORDS:
            levels.append(DIFFICULTY_WORDS[word])
            continue
        try:
            numbers[index] = float(word)
        except ValueError:
            raise ConfigError(f"{place}: difficulty {value!r} is neither a number nor one of "
                              f"{', '.join(DIFFICULTY_WORDS)}") from None
        levels.append(0)  # ranked below
    distinct = sorted(set(numbers.values()))
    for index, number in numbers.items():
        levels[index] = 1 + DIFFICULTY_LEVELS * distinct.index(number) // len(distinct)
    return levels


# ---- scoring ---------------------------------------------------------------------------------------------
def _plain(text: str) -> str:
    return " ".join(text.strip().strip("\"'`").rstrip(".").casefold().split())


def answer_score(answer: str, completion: str) -> float:
    """The strict check of a data answer (see the module note)."""
    if _INTEGER.fullmatch(answer.strip()):
        return first_integer_matches(completion, answer.strip())
    if _NUMBER.fullmatch(answer.strip()) or answer.strip().startswith(("\\", "$")):
        from math_verify import verify

        gold, prediction = parse_gold(answer), parse_prediction(completion)
        return float(bool(gold) and bool(prediction) and verify(gold, prediction))
    return float(_plain(completion) == _plain(answer))


# ---- the family -----------------------------------------------------------------------------------------
@dataclass
class DataFamily:
    """A task family over the rows of a data set; ``generate`` draws a row of the level."""

    name: str
    columns: dict[str, str] = field(default_factory=dict)

    @cached_property
    def rows(self) -> dict[int, list[DataRow]]:
        """Rows by level, read on first use: scoring needs only the Task, so a reward worker never reads the file."""
        source = self.name.removeprefix(FILE_PREFIX).removeprefix(HF_PREFIX)
        records = read_file(Path(source).expanduser()) if self.name.startswith(FILE_PREFIX) else read_hf(source)
        if not records:
            raise ConfigError(f"{source} holds no rows: give at least one row with a prompt")
        parsed = [parse_row(record, self.columns) for record in records]
        by_level = any(self.columns.get("level", "level") in r.values for r in records if isinstance(r.values, dict))
        by: dict[int, list[DataRow]] = {}
        for row, level in zip(parsed, levels_of(parsed, [r.where for r in records], by_level)):
            by.setdefault(level, []).append(row)
        return by

    @property
    def levels(self) -> tuple[int, ...]:
        return tuple(sorted(self.rows))

    @property
    def runs_code(self) -> bool:
        """Whether scoring runs model-written code (some row has tests): the run then needs the sandbox."""
        return any(row.tests or row.io for rows in self.rows.values() for row in rows)

    def task(self, row: DataRow, level: int) -> Task:
        meta = {"columns": row.columns, **({"tests": row.tests} if row.tests else {}),
                **({"io": [list(case) for case in row.io]} if row.io else {})}
        return Task(row.prompt, row.answer or "", self.name, level, task_uid(self.name, row.prompt), meta=meta,
                    messages=row.messages)

    def generate(self, rng: random.Random, level: int) -> Task:
        if level not in self.rows:
            raise ValueError(f"family '{self.name}' has levels {self.levels}, not {level}")
        return self.task(rng.choice(self.rows[level]), level)

    def tests(self, task: Task, completion: str) -> Harnessed:
        """The completion's code, then the row's tests, in the harness."""
        from autotelic.tasks.code import extract_code

        if "io" in task.meta:
            return io_harness(extract_code(completion), task.meta["io"])
        if "tests" not in task.meta:
            raise ValueError(f"this row of '{self.name}' has no tests (its tests column is empty)")
        return harness(extract_code(completion), task.meta["tests"])

    def score(self, task: Task, completion: str) -> float:
        if "tests" in task.meta or "io" in task.meta:
            return passes(self.tests(task, completion))
        if task.answer:
            return answer_score(task.answer, completion)
        return math.nan  # no check of its own: a reward function scores this row


_LOADED: dict[str, DataFamily] = {}


def data_family(name: str, columns: dict[str, str] | None = None) -> DataFamily:
    """The family ``name``; ``columns`` (the run's ``curriculum.columns``) replaces the mapping it was loaded with.
    Without ``columns`` the family loaded last under that name (or a fresh one with the data's own names)."""
    family = _LOADED.get(name)
    if family is None or columns is not None and family.columns != columns:
        family = _LOADED[name] = DataFamily(name, dict(columns or {}))
    return family


def use_columns(families: list[str], columns: dict[str, str]) -> None:
    """The run's data families keep its column mapping in this process (a Ray worker's too), for every later
    ``get_family``; nothing is read until a family is drawn from."""
    for name in families:
        if is_data_family(name):
            data_family(name, columns)


def data_problems(families: list[str], columns: dict[str, str]) -> list[str]:
    """Each data family of the run loaded and checked with the run's column mapping: its first problem, one line."""
    problems = []
    for name in families:
        if is_data_family(name):
            try:
                data_family(name, columns).rows
            except ConfigError as error:
                problems.append(str(error))
    return problems
