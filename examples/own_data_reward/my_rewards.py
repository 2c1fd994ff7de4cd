"""A plain reward function with TRL's signature: one float per completion (None: not scored)."""

import re


def correct_and_brief(completions, answer, **kwargs):
    """1.0 when the reply's first number is the row's answer, less 0.05 per word after the first: right and short."""
    rewards = []
    for completion, expected in zip(completions, answer):
        number = re.search(r"-?\d+", completion)
        correct = float(number is not None and number.group() == expected)
        rewards.append(correct - 0.05 * max(0, len(completion.split()) - 1))
    return rewards
