"""The transformers backend on the real embedded model: log-prob invariants, updates, export."""

import pytest
import torch

from autotelic.backends import PrefixCache
from autotelic.backends.forward import completion_logprobs
from autotelic.backends.hf import HFPolicy
from autotelic.config import ModelConfig

pytestmark = pytest.mark.slow

QUESTIONS = ["What is 3 + 4? Reply with only the number.", "What number comes right after 41? Reply with only the number."]


@pytest.fixture(scope="module")
def policy(embedded_dir):
    return HFPolicy(ModelConfig(path=str(embedded_dir), lora=True, lora_rank=8), lr=1e-3, seed=0)


def _flatten(groups):
    return [c for group in groups for c in group]


def equal_to_rounding(grads: list[torch.Tensor], others: list[torch.Tensor]) -> bool:
    """Each gradient equal to the other's within float rounding of sums taken in another order or over batches padded
    to other lengths: up to 1.3e-4 of a layer norm's largest gradient on AVX2-only CPUs, where a wrong gradient (a
    micro-batch normalised by its own tokens, a token dropped) is off by a share of ~1."""
    return all(float((a - b).abs().max()) <= 1e-3 * float(a.abs().max()) for a, b in zip(grads, others, strict=True))


def test_prefix_shared_logprobs_match_generation_and_a_plain_forward(policy):
    prompts = [policy.encode_prompt(q) for q in QUESTIONS]
    completions = _flatten(policy.generate(prompts, 3, 12, temperature=1.0))
    assert len(completions) == 6 and all(1 <= len(c.token_ids) <= 12 for c in completions)
    with torch.no_grad():
        logprobs, mask = policy.completion_logprobs(prompts, [c.token_ids for c in completions], 3)
    for row, completion in enumerate(completions):
        length = len(completion.token_ids)
        assert mask[row].sum() == length
        assert torch.allclose(logprobs[row, :length], torch.tensor(completion.logprobs), atol=1e-3)
        prompt = prompts[row // 3]
        with torch.no_grad():
            full = policy.causal_lm(input_ids=torch.tensor([prompt + completion.token_ids])).logits[0].log_softmax(-1)
        plain = full[len(prompt) - 1:-1].gather(1, torch.tensor(completion.token_ids)[:, None]).squeeze(1)
        assert torch.allclose(logprobs[row, :length], plain, atol=1e-3)


def test_chunked_logprobs_equal_the_whole_batchs_values_and_gradients():
    """Past LOGIT_CHUNK_TOKENS completion tokens the log-probs are computed a chunk at a time and their logits
    recomputed in backward (what frees GPU memory for large micro-batches): the same numbers and gradients (of every
    weight: a small model of the embedded one's vocabulary and tied head, where a full backward takes a second)."""
    model = HFPolicy(ModelConfig(path="random:qwen2-tiny", lora=False), seed=0)
    prompts = [model.encode_prompt(q) for q in QUESTIONS]
    completions = [c.token_ids for c in _flatten(model.generate(prompts, 3, 10, temperature=1.0))]
    results = []
    for chunk in (10_000, 7):  # one piece; pieces of 7 tokens that cut through completions
        model.zero_grad()
        logprobs, mask = completion_logprobs(model.causal_lm, prompts, completions, [3, 3], 0.7, model.pad_id,
                                             model.device, chunk_tokens=chunk)
        (logprobs * mask).sum().backward()
        results.append((logprobs.detach(), [p.grad.clone() for p in model.trainable]))
    assert int(mask.sum()) > 7 * 3  # several chunks ran
    (whole, whole_grads), (chunked, chunked_grads) = results
    assert torch.allclose(whole, chunked, atol=1e-5)
    # the same sums in another order (the tied head's gradient gathers chunk by chunk)
    assert equal_to_rounding(whole_grads, chunked_grads)
    assert any(float(g.abs().sum()) > 0 for g in chunked_grads)


def test_a_turn_continued_from_the_kept_cache_equals_one_computed_afresh(policy):
    """The next turn of multi-turn sequences (prompt, reply, observation) starts from the KV cache the last call
    kept (PrefixCache): the same greedy tokens and log-probs as from scratch, computing only what each shares
    with no kept sequence; a reply cut short reuses what it shares; another model never reads the kept state."""
    prompts = [policy.encode_prompt(q) for q in QUESTIONS]
    cache = PrefixCache()
    policy.generator.manual_seed(3)
    replies = [c.token_ids for c in _flatten(policy.generate(prompts, [2, 1], 10, temperature=1.0, prefixes=cache))]
    assert len(cache.entries) == 3 and cache.reused_tokens == 0
    followup = policy.encode_followup("Are you sure? Answer once more.", after_eos=True)
    turns = [prompts[0] + replies[0] + followup, prompts[0] + replies[1][:2] + followup,
             prompts[1] + replies[2] + followup]
    continued = _flatten(policy.generate(turns, 1, 10, greedy=True, prefixes=cache))
    afresh = _flatten(policy.generate(turns, 1, 10, greedy=True))
    for a, b in zip(continued, afresh):
        assert a.token_ids == b.token_ids
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-3)
    # each turn read its episode's kept sequence: everything up to the reply's last token (never fed back)
    kept = [prompts[0] + replies[0][:-1], prompts[0] + replies[1][:-1], prompts[1] + replies[2][:-1]]
    shared = [max(next((i for i, (x, y) in enumerate(zip(turn, k)) if x != y), min(len(turn), len(k)))
                  for k in kept) for turn in turns]
    assert cache.reused_tokens == sum(shared) >= len(prompts[0]) * 2 + len(prompts[1])
    assert len(cache.entries) == 3  # the continued sequences replaced those they continued
    other = HFPolicy(ModelConfig(path="random:qwen2-tiny"), seed=0)
    other.generate(turns[:1], 1, 4, greedy=True, prefixes=cache)
    assert cache.reused_tokens == sum(shared) and cache.owner == id(other.causal_lm)
    # kept within a memory bound, the newest first; the turns still equal those computed afresh
    def kept_bytes(prefixes: PrefixCache) -> list[int]:  # what the tensors hold, not the entries' own count
        return [sum(k.nbytes + v.nbytes for k, v in entry.layers) for entry in prefixes.entries]

    unbounded = PrefixCache()
    policy.generate(prompts, [2, 1], 10, greedy=True, prefixes=unbounded)
    bounded = PrefixCache(max_bytes=sum(sorted(kept_bytes(unbounded))[-2:]))  # room for two of the three
    policy.generate(prompts, [2, 1], 10, greedy=True, prefixes=bounded)
    assert len(kept_bytes(unbounded)) == 3 and len(kept_bytes(bounded)) == 2
    assert [c.token_ids for c in _flatten(policy.generate(turns, 1, 10, greedy=True, prefixes=bounded))] == \
        [c.token_ids for c in afresh] and sum(kept_bytes(bounded)) <= bounded.max_bytes


def test_greedy_is_deterministic_and_sampling_is_seeded(policy):
    prompts = [policy.encode_prompt(QUESTIONS[0])]
    first = policy.generate(prompts, 1, 8, greedy=True)[0][0].token_ids
    assert policy.generate(prompts, 1, 8, greedy=True)[0][0].token_ids == first
    policy.generator.manual_seed(7)
    a = [c.token_ids for c in policy.generate(prompts, 4, 8)[0]]
    policy.generator.manual_seed(7)
    assert [c.token_ids for c in policy.generate(prompts, 4, 8)[0]] == a


def test_gradient_accumulation_equals_one_big_batch(policy):
    """TRL's invariant: 1 micro-batch x 2 groups gives the gradient of 2 micro-batches x 1 group."""
    prompts = [policy.encode_prompt(q) for q in QUESTIONS]
    completions = [c.token_ids for c in _flatten(policy.generate(prompts, 2, 6))]
    weights = torch.tensor([1.0, -1.0, 0.5, -0.5])

    total = sum(len(c) for c in completions)

    def gradient(prompt_ranges):
        policy.optimizer.zero_grad(set_to_none=True)
        for lo, hi in prompt_ranges:
            lp, mask = policy.completion_logprobs(prompts[lo:hi], completions[2 * lo:2 * hi], 2)
            ((lp * mask).sum(1) * weights[2 * lo:2 * hi]).sum().div(total).backward()
        grads = [p.grad.clone() for p in policy.trainable]
        policy.optimizer.zero_grad(set_to_none=True)
        return grads

    whole, split = gradient([(0, 2)]), gradient([(0, 1), (1, 2)])
    # the two micro-batches pad to their own lengths: other matrix shapes, sums in another order
    assert equal_to_rounding(whole, split)


def test_an_update_changes_only_the_adapters_and_export_loads_in_transformers(policy, tmp_path):
    from transformers import AutoModelForCausalLM

    base_before = {n: p.detach().clone() for n, p in policy.model.named_parameters() if not p.requires_grad}
    lora_before = [p.detach().clone() for p in policy.trainable]
    prompts = [policy.encode_prompt(QUESTIONS[0])]
    completion = policy.generate(prompts, 1, 6)[0][0].token_ids
    logprobs, mask = policy.completion_logprobs(prompts, [completion], 1)
    (-(logprobs * mask).sum()).backward()
    policy.optimizer_step()
    assert policy.version == 1
    assert any(not torch.equal(a, b) for a, b in zip(lora_before, policy.trainable))
    assert all(torch.equal(p, base_before[n]) for n, p in policy.model.named_parameters() if n in base_before)

    policy.export(tmp_path / "model")
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "model")
    ids = torch.tensor([prompts[0] + completion])
    with torch.no_grad():
        assert torch.allclose(exported(input_ids=ids).logits, policy.model(input_ids=ids).logits, atol=1e-3)


def test_reference_logprobs_are_the_base_model(policy, embedded_dir):
    from transformers import AutoModelForCausalLM

    prompts = [policy.encode_prompt(QUESTIONS[1])]
    completion = policy.generate(prompts, 1, 6, greedy=True)[0][0].token_ids
    reference, _ = policy.completion_logprobs(prompts, [completion], 1, reference=True)
    base = AutoModelForCausalLM.from_pretrained(embedded_dir)
    with torch.no_grad():
        full = base(input_ids=torch.tensor([prompts[0] + completion])).logits[0].log_softmax(-1)
    plain = full[len(prompts[0]) - 1:-1].gather(1, torch.tensor(completion)[:, None]).squeeze(1)
    assert torch.allclose(reference[0, :len(completion)], plain, atol=1e-3)


def test_inverse_cdf_sampling_follows_the_distribution_and_respects_top_p():
    from autotelic.backends.sampling import sample_token

    generator = torch.Generator().manual_seed(0)
    logprobs = torch.log_softmax(torch.tensor([[2.0, 1.0, 0.0, -1.0]] * 2), dim=-1)
    draws = torch.stack([sample_token(logprobs, 1.0, generator) for _ in range(20000)])  # (S, 2)
    frequencies = torch.bincount(draws[:, 0], minlength=4) / 20000
    assert torch.allclose(frequencies, logprobs[0].exp(), atol=0.015)
    # top_p = 0.7 keeps the two most likely tokens (0.64 + 0.24 crosses 0.7), renormalised
    nucleus = torch.stack([sample_token(logprobs, 0.7, generator) for _ in range(5000)])[:, 1]
    assert set(nucleus.tolist()) == {0, 1}
    assert (nucleus == 0).float().mean().item() == pytest.approx(0.644 / (0.644 + 0.237), abs=0.03)


def test_devices_are_resolved_and_a_missing_gpu_is_named():
    from autotelic.backends.embedded import ModelFileError
    from autotelic.backends.hf import resolve_device

    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto") == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ModelFileError, match="no CUDA GPU is visible"):
            resolve_device("cuda:0")
    with pytest.raises(ModelFileError, match="not a device"):
        resolve_device("gpu-please")


def test_a_random_shape_has_its_architectures_size_and_an_unknown_one_is_named():
    """random:qwen2-0.5b (the 0.5B GPU recipe's model) has Qwen2-0.5B's body, built here without weights."""
    from autotelic.backends.embedded import ModelFileError, random_model
    from autotelic.backends.model_dir import resolve_model_dir

    model, _ = random_model("qwen2-0.5b", device="meta")
    body = sum(p.numel() for name, p in model.named_parameters() if "embed_tokens" not in name)
    assert body == 24 * (2 * 896 * 896 + 2 * 896 * 128 + 896 + 2 * 128 + 3 * 896 * 4864 + 2 * 896) + 896
    assert model.config.vocab_size == model.get_input_embeddings().num_embeddings == 49152  # the embedded tokenizer's
    with pytest.raises(ModelFileError, match="random:llama-70b: unknown shape; known: qwen2-0.5b"):
        resolve_model_dir("random:llama-70b")


def test_runs_started_together_on_a_fresh_cache_convert_the_embedded_model_once(tmp_path):
    """A bench's parallel arms start at once: on a fresh cache each used to clear the other's half-saved copy."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "AUTOTELIC_CACHE": str(tmp_path)}
    code = "from autotelic.backends.embedded import embedded_model_dir; print(embedded_model_dir())"
    runs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True) for _ in range(3)]
    outputs = [run.communicate(timeout=600) for run in runs]
    assert [run.returncode for run in runs] == [0, 0, 0], [err[-500:] for _, err in outputs]
    model_dir = tmp_path / "models" / outputs[0][0].strip().rsplit("/", 1)[-1]
    assert {out.strip() for out, _ in outputs} == {str(model_dir)}
    assert sorted(p.name for p in model_dir.parent.iterdir()) == sorted([model_dir.name, f"{model_dir.name}.lock"])
