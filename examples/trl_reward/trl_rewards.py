"""Reward functions written for TRL's GRPOTrainer, as its documentation writes them for a conversational
dataset: each completion is a list of messages, and dataset columns (here ``solution``) arrive as keyword
arguments. autotelic calls them unchanged."""


def accuracy_reward(completions, solution, **kwargs):
    """1.0 when the reply is exactly the solution."""
    contents = [completion[0]["content"] for completion in completions]
    return [1.0 if content.strip() == expected else 0.0 for content, expected in zip(contents, solution)]


def reward_len(completions, **kwargs):
    """TRL's length example: replies near 20 characters score best."""
    return [-abs(20 - len(completion[0]["content"])) for completion in completions]
