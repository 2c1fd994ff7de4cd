"""A backend that replies fixed texts, for testing the logic around model calls (judges, evolvers) by hand.

Not a stand-in for the model in behaviour tests: those use the real embedded model (marked slow).
"""

from autotelic.backends import Completion


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

    def generate(self, prompts, n, max_new_tokens, temperature, top_p=1.0, greedy=False, stop_token_ids=()):
        self.generate_calls.append((len(prompts), n, max_new_tokens, greedy))
        return [[Completion(token_ids=p, logprobs=[0.0], finished=True)] for p in prompts]
