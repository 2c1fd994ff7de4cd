"""A backend that replies fixed texts, for testing the logic around model calls (judges, evolvers) by hand.

Not a stand-in for the model in behaviour tests: those use the real embedded model (marked slow).
"""

from collections.abc import Callable

from autotelic.backends import Completion

EOS = 0


class ScriptedBackend:
    """Replies ``replies[i]`` to the i-th prompt it encodes, recording the messages and generate calls."""

    version = 0

    def __init__(self, replies):
        self.replies, self.messages, self.generate_calls = replies, [], []

    def encode_prompt(self, user_message, response_prefix=""):
        self.messages.append(user_message)
        return [len(self.messages) - 1]

    def decode(self, token_ids):
        return self.replies[token_ids[0]]

    def token_ids_containing(self, text):
        return []

    def generate(self, prompts, n, max_new_tokens, temperature, top_p=1.0, greedy=False, stop_token_ids=(),
                 prefixes=None):
        self.generate_calls.append((len(prompts), n, max_new_tokens, greedy))
        return [[Completion(token_ids=p, logprobs=[0.0], finished=True)] for p in prompts]


class ScriptedPolicy:
    """Characters as tokens; ``choose(context, k)`` writes the k-th reply to a context."""

    version = 0

    def __init__(self, choose: Callable[[str, int], str]):
        self.choose = choose

    def encode_prompt(self, user_message: str, response_prefix: str = "") -> list[int]:
        return [ord(c) for c in f"<u>{user_message}<a>{response_prefix}"]

    def encode_followup(self, observation: str, after_eos: bool, response_prefix: str = "") -> list[int]:
        return [ord(c) for c in f"<u>{observation}<a>{response_prefix}"]

    def decode(self, token_ids: list[int]) -> str:
        return "".join(chr(t) for t in token_ids if t != EOS)

    def generate(self, prompts, n, max_new_tokens, temperature, top_p=1.0, greedy=False, prefixes=None):
        sizes = [n] * len(prompts) if isinstance(n, int) else list(n)
        outputs = []
        for prompt, size in zip(prompts, sizes):
            replies = [[ord(c) for c in self.choose(self.decode(prompt), k)] + [EOS] for k in range(size)]
            outputs.append([Completion(ids[:max_new_tokens], [-0.5] * len(ids[:max_new_tokens]),
                                       finished=len(ids) <= max_new_tokens) for ids in replies])
        return outputs
