"""Pairwise win rate on open-ended instructions (AlpacaEval / Arena-Hard style), the way eva is evaluated: the
trained policy's answer to each instruction against a fixed reference model's, judged by a third model.

Each pair is judged twice with the answers' positions swapped, which cancels the judge's preference for a
position: a pair scores the share of its readable verdicts that prefer the policy's answer (1 when it wins both
orders, 0.5 when the orders disagree, 0 when it loses both); a pair with no readable verdict is left out. The reference and the judge are
role models (``backends.hf.role_backend``): ``base``, a frozen copy of the starting model, by default, so an
untrained policy scores 0.5 against it up to the judge's noise. The instructions ship here (``OPEN_PROMPTS``),
written for this purpose: no task family draws them, so training never sees them; a JSONL file of
``{"prompt": ...}`` rows replaces them (``eval.win_rate.prompts``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotelic.backends import PolicyBackend

OPEN_PROMPTS: tuple[str, ...] = (
    "Give three tips for staying focused while studying.",
    "Explain what a leap year is to a ten-year-old.",
    "Write a short, friendly reminder to water the office plants.",
    "Suggest a name for a bakery that sells only bread, and say why.",
    "Describe the smell of rain in two sentences.",
    "What should someone pack for a one-day hike?",
    "Write a polite message declining an invitation to a party.",
    "Explain why the sky looks blue, in plain words.",
    "Give a simple recipe for a cheese sandwich.",
    "List three ways to save water at home.",
    "Write a two-line poem about a cat sleeping in the sun.",
    "How can I remember people's names better?",
    "Explain the difference between weather and climate.",
    "Suggest a fun game for four friends with only a deck of cards.",
    "Write a one-sentence slogan for a bicycle repair shop.",
    "What are good habits for keeping a tidy desk?",
    "Describe a sunrise over the sea for someone who has never seen one.",
    "Give advice to someone starting to learn the guitar.",
    "Explain what a map legend is.",
    "Write a short thank-you note to a neighbour who fed your fish.",
    "What is a good way to start a conversation with a new classmate?",
    "Explain why we should wash our hands before eating.",
    "Suggest three healthy snacks for an afternoon at work.",
    "Write a short story opening about a lost key.",
    "How do you make a paper aeroplane fly farther?",
    "Explain what recycling is and why it helps.",
    "Give two reasons to read books every day.",
    "Describe your ideal weekend in three sentences.",
    "What should you do if you feel tired during the day?",
    "Write a short welcome message for a new team member.",
    "Explain how a compass helps you find your way.",
    "Suggest a simple way to make a small room feel bigger.",
)
JUDGE_PROMPT = ("Which response follows the instruction better: more helpful, correct and clear? Reply with only the "
                "letter A or B.\n\nInstruction: {instruction}\n\nResponse A: {a}\n\nResponse B: {b}")
_VERDICT = re.compile(r"\b([AB])\b")


@dataclass(frozen=True)
class WinRate:
    win_rate: float  # mean pair score over the judged pairs
    parse_rate: float  # share of the judge's verdicts that named A or B
    first_position_rate: float  # share of readable verdicts that chose A (0.5: no position bias)
    records: list[dict[str, Any]]

    def summary(self) -> dict[str, float]:
        return {"win_rate": self.win_rate, "parse_rate": self.parse_rate,
                "first_position_rate": self.first_position_rate, "pairs": float(len(self.records))}


def read_prompts(path: str | None) -> list[str]:
    """The shipped instructions, or a JSONL file's ``prompt`` fields."""
    if path is None:
        return list(OPEN_PROMPTS)
    return [json.loads(line)["prompt"] for line in Path(path).read_text().splitlines() if line.strip()]


def prompts_problems(path: str) -> list[str]:
    """What is wrong with an instructions file, in one line, or nothing."""
    fix = 'give a JSONL file with one {"prompt": "..."} object per line'
    try:
        prompts = read_prompts(path)
    except OSError as error:
        return [f"eval.win_rate.prompts={path} cannot be read ({error.strerror}): {fix}"]
    except (ValueError, KeyError, TypeError):
        return [f"eval.win_rate.prompts={path} has a line that is not a JSON object with a \"prompt\": {fix}"]
    return [] if prompts and all(isinstance(p, str) and p for p in prompts) else [
        f"eval.win_rate.prompts={path} holds no instructions: {fix}"]


def verdict(reply: str) -> str | None:
    """The judge's choice: the first standalone A or B in its reply, else None."""
    found = _VERDICT.search(reply.strip())
    return found.group(1) if found else None


def pair_score(policy_first: str | None, policy_second: str | None) -> float | None:
    """The policy's score from the two verdicts (policy as A, then as B); None when neither is readable."""
    wins = [v == "A" for v in (policy_first,) if v is not None] + [v == "B" for v in (policy_second,) if v is not None]
    return sum(wins) / len(wins) if wins else None


def _answers(backend: PolicyBackend, prompts: list[str], max_new_tokens: int) -> list[str]:
    encoded = [backend.encode_prompt(prompt) for prompt in prompts]
    return [backend.decode(c[0].token_ids) for c in backend.generate(encoded, 1, max_new_tokens, greedy=True)]


def win_rate(policy: PolicyBackend, reference: PolicyBackend, judge: PolicyBackend, prompts: list[str],
             max_new_tokens: int, verdict_tokens: int = 4) -> WinRate:
    """Greedy answers of the policy and the reference to each prompt, each pair judged in both orders."""
    ours, theirs = _answers(policy, prompts, max_new_tokens), _answers(reference, prompts, max_new_tokens)
    asks = [JUDGE_PROMPT.format(instruction=p, a=a, b=b) for p, o, t in zip(prompts, ours, theirs)
            for a, b in ((o, t), (t, o))]
    replies = _answers(judge, asks, verdict_tokens)
    verdicts = [verdict(reply) for reply in replies]
    records = []
    for index, (prompt, mine, other) in enumerate(zip(prompts, ours, theirs)):
        first, second = verdicts[2 * index], verdicts[2 * index + 1]
        records.append({"prompt": prompt, "policy": mine, "reference": other, "verdicts": [first, second],
                        "score": pair_score(first, second)})
    judged = [r["score"] for r in records if r["score"] is not None]
    readable = [v for v in verdicts if v is not None]
    return WinRate(sum(judged) / len(judged) if judged else 0.5, len(readable) / max(1, len(verdicts)),
                   sum(v == "A" for v in readable) / len(readable) if readable else 0.5, records)
