"""From groups to loss inputs: the algorithm's settings, advantages, masks and preference pairs."""

import pytest

from autotelic.algorithms import get_algorithm
from autotelic.config import AlgorithmConfig
from autotelic.types import Group, Sample, Task
from autotelic.update import _normalizer, _targets, loss_settings, rollout_pairs

TASK = Task("q", "1", "add", 1, "u")


def _sample(reward, length=3, mask=None, parent=None, branch_at=0):
    return Sample("x", [5] * length, [0.0] * length, True, reward=reward, mask=mask, parent=parent,
                  branch_at=branch_at)


def test_config_values_override_the_algorithms_own():
    gspo = loss_settings(get_algorithm("gspo"), AlgorithmConfig(name="gspo"))
    assert (gspo.clip_low, gspo.clip_high, gspo.ratio_level, gspo.loss_agg) == (3e-4, 4e-4, "sequence",
                                                                                 "seq-mean-token-mean")
    dapo = loss_settings(get_algorithm("dapo"), AlgorithmConfig(name="dapo", clip_low=0.1, loss_agg="seq-mean-token-mean"))
    assert (dapo.clip_low, dapo.clip_high, dapo.loss_agg) == (0.1, 0.28, "seq-mean-token-mean")


def test_advantages_per_sample_and_masks_from_observations():
    groups = [Group(TASK, [1], [_sample(1.0), _sample(0.0, mask=[1, 0, 1])]),
              Group(TASK, [1], [_sample(0.0), _sample(0.0), _sample(1.0)])]
    rloo = _targets(groups, get_algorithm("rloo"))
    assert rloo.advantages == pytest.approx([1.0, -1.0, -0.5, -0.5, 1.0])
    assert rloo.masks == [[1, 1, 1], [1, 0, 1], [1, 1, 1], [1, 1, 1], [1, 1, 1]]
    assert _normalizer(rloo.masks, "token-mean", 24) == 14
    assert _normalizer(rloo.masks, "seq-mean-token-mean", 24) == 5
    assert _normalizer(rloo.masks, "seq-mean-token-sum-norm", 24) == 5 * 24
    # a sequence masked whole (an overlong one cut, under control.overlong=mask) is no sequence of the mean
    assert _normalizer([[1, 1], [0, 0], [0, 1]], "seq-mean-token-mean", 24) == 2


def test_tree_groups_get_per_token_advantages_and_prefix_masks_times_own_masks():
    root = _sample(1.0, length=4)
    branch = _sample(0.0, length=4, mask=[1, 1, 1, 0], parent=0, branch_at=2)
    lone = _sample(0.0, length=2)
    targets = _targets([Group(TASK, [1], [root, branch, lone])], get_algorithm("dr_grpo"))
    # V_root = 0.5, V_lone = 0, baseline 0.25; no std scaling for Dr.GRPO
    expected = [[0.25, 0.25, 0.5, 0.5], [0, 0, -0.5, -0.5], [-0.25, -0.25]]
    assert [row == pytest.approx(want) for row, want in zip(targets.advantages, expected)] == [True] * 3
    assert targets.masks == [[1, 1, 1, 1], [0, 0, 1, 0], [1, 1]]


def test_online_dpo_pairs_the_best_and_worst_sample_of_each_group():
    best, worst = _sample(1.0, mask=[1, 0, 1]), _sample(-1.0)
    groups = [Group(TASK, [7], [_sample(0.0), best, worst]), Group(TASK, [8], [_sample(1.0), _sample(1.0)])]
    pairs = rollout_pairs(groups)
    assert len(pairs) == 1  # equal rewards give no preference
    assert pairs[0].prompt_ids == [7] and pairs[0].chosen_mask == [1, 0, 1] and pairs[0].rejected_mask == [1, 1, 1]


def test_micro_batches_bound_groups_and_tokens_and_cut_a_group_over_the_limit_into_runs_of_samples():
    from autotelic.micro_batches import micro_batches

    def group(prompt: int, lengths: list[int]) -> Group:
        return Group(Task("", "", "add", 1, "u"), [0] * prompt, [Sample("", [1] * n, [0.0] * n, True) for n in lengths])

    groups = [group(10, [5, 20]), group(10, [30, 0]), group(50, [100]), group(5, [1, 1])]
    costs = [10 + 2 * 20, 10 + 2 * 30, 50 + 100, 5 + 2]  # prompt + samples x the longest completion
    assert [len(b) for b in micro_batches(groups, 8, None)] == [4]
    assert [len(b) for b in micro_batches(groups, 3, None)] == [3, 1]
    assert micro_batches(groups, 8, costs[0] + costs[1]) == [groups[:2], [groups[2]], [groups[3]]]
    assert micro_batches(groups, 8, costs[2] + costs[3]) == [groups[:2], groups[2:]]  # a limit is inclusive
    assert micro_batches(groups, 8, 100) == [[groups[0]], [groups[1]], [groups[2]], [groups[3]]]  # a sample alone
    # over the limit, a group goes in runs of its samples, in order, each run with the group's prompt
    batches = micro_batches(groups, 8, 45)
    pieces = [piece for batch in batches for piece in batch]
    assert [[len(s.token_ids) for s in piece.samples] for piece in pieces] == [[5], [20], [30], [0], [100], [1, 1]]
    assert [len(batch) for batch in batches] == [2, 1, 1, 1, 1]  # 10+5 and 10+20 share a pass; 10+30, 10+0 do not
    assert all(piece.prompt_ids == whole.prompt_ids for piece, whole in zip(pieces, [groups[i] for i in
                                                                                    (0, 0, 1, 1, 2, 3)]))


def test_a_group_cut_into_pieces_trains_as_the_whole_group():
    """One GRPO update of the same groups from the same weights of a real (tiny, random) model, whole and cut into
    single samples by the token limit: the same update, up to float noise next to the change."""
    import torch

    from autotelic.backends.hf import HFPolicy
    from autotelic.config import ModelConfig
    from autotelic.micro_batches import micro_batches
    from autotelic.update import policy_gradient_update

    def policy() -> HFPolicy:
        return HFPolicy(ModelConfig(path="random:qwen2-tiny", lora=False, threads=1), lr=1e-3, seed=0)

    reference = policy()
    prompts = [[11, 12, 13, 14], [21, 22, 23]]
    completions = [[[5, 6, 7], [8, 9], [10, 11, 12, 13]], [[30, 31], [32, 33, 34]]]
    groups = []
    for prompt, samples, rewards in zip(prompts, completions, [[1.0, 0.0, 0.5], [0.0, 1.0]]):
        with torch.no_grad():
            logprobs, mask = reference.completion_logprobs([prompt], samples, len(samples), 1.0)
        groups.append(Group(TASK, prompt, [Sample("", ids, row[:len(ids)].tolist(), True, reward=r)
                                           for ids, row, r in zip(samples, logprobs, rewards)]))
    limit = 8  # a prompt and one sample fit, never two samples of a group
    assert sum(len(batch) for batch in micro_batches(groups, 8, limit)) == 5
    initial = {k: v.clone() for k, v in reference.trainable_state().items()}
    states = []
    for tokens in (None, limit):
        model = policy()
        policy_gradient_update(model, groups, get_algorithm("grpo"),
                               AlgorithmConfig(name="grpo", micro_batch_tokens=tokens), 1.0, 8)
        states.append(model.trainable_state())
    whole, cut = states
    change = sum((whole[k] - initial[k]).norm() ** 2 for k in whole) ** 0.5
    difference = sum((whole[k] - cut[k]).norm() ** 2 for k in whole) ** 0.5
    assert change > 0 and difference <= 1e-2 * change, f"difference {difference} against a change of {change}"


def test_bf16_mixed_trains_float32_weights_with_bf16_forwards():
    """model.dtype=bf16-mixed: the forward runs in bfloat16 but the weights stay float32, so an update far under
    bf16's resolution still lands; bfloat16 weights round the same update away (the H200 run in bench/RESULTS.md
    where they learned a quarter as much)."""
    import torch

    from autotelic.backends.hf import HFPolicy
    from autotelic.config import ModelConfig

    moved, computed = {}, {}
    for dtype in ("bf16-mixed", "bfloat16"):
        policy = HFPolicy(ModelConfig(path="random:qwen2-tiny", lora=False, threads=1, dtype=dtype), lr=1e-6)
        projection = policy.causal_lm.get_decoder().layers[0].mlp.down_proj  # the residual stream stays float32
        projection.register_forward_hook(lambda module, args, out: computed.__setitem__(dtype, out.dtype))
        before = [p.detach().clone() for p in policy.trainable]
        logprobs, mask = policy.completion_logprobs([[11, 12, 13, 14]], [[5, 6, 7], [8, 9]], 2)
        (-(logprobs * mask).sum()).backward()
        policy.optimizer_step()
        assert logprobs.dtype == torch.float32 and policy.trainable[0].dtype == {"bf16-mixed": torch.float32,
                                                                                 "bfloat16": torch.bfloat16}[dtype]
        changed = sum(int((p.detach() != b).sum()) for p, b in zip(policy.trainable, before))
        moved[dtype] = changed / sum(b.numel() for b in before)
    assert computed == {"bf16-mixed": torch.bfloat16, "bfloat16": torch.bfloat16}
    assert moved["bf16-mixed"] > 0.5 and moved["bfloat16"] < 0.1, moved


def test_gradient_checkpointing_keeps_prefix_sharing_exact_and_saves_less():
    """model.gradient_checkpointing: the completion pass's layers are replayed in backward reading the prompt's
    cache (never writing it twice), so log-probs equal a plain forward over prompt + completion, gradients equal
    the un-checkpointed ones, and the decoder saves far fewer bytes for backward."""
    import torch

    from autotelic.backends.forward import completion_hidden
    from autotelic.backends.hf import HFPolicy
    from autotelic.config import ModelConfig

    prompts, completions = [[11, 12, 13, 14], [21, 22, 23]], [[5, 6, 7] * 20, [8, 9], [30, 31] * 25, [1, 2, 3]]
    results = {}
    for checkpointed in (False, True):
        policy = HFPolicy(ModelConfig(path="random:qwen2-tiny", lora=False, threads=1,
                                      gradient_checkpointing=checkpointed), seed=0)
        logprobs, mask = policy.completion_logprobs(prompts, completions, 2)
        (-(logprobs * mask).sum()).backward()
        saved = [0]

        def pack(tensor: torch.Tensor) -> torch.Tensor:
            saved[0] += tensor.numel() * tensor.element_size()
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            completion_hidden(policy.causal_lm, prompts, completions, [2, 2], policy.pad_id, policy.device)
        results[checkpointed] = (logprobs.detach(), [p.grad.clone() for p in policy.trainable], saved[0])
        with torch.no_grad():
            full = policy.causal_lm(input_ids=torch.tensor([prompts[1] + completions[2]])).logits[0].log_softmax(-1)
        plain = full[len(prompts[1]) - 1:-1].gather(1, torch.tensor(completions[2])[:, None]).squeeze(1)
        assert torch.allclose(logprobs[2, :len(completions[2])], plain, atol=1e-4)
    (whole, whole_grads, whole_bytes), (replayed, replayed_grads, replayed_bytes) = results[False], results[True]
    assert torch.allclose(whole, replayed, atol=1e-6)
    assert all(torch.allclose(a, b, atol=1e-6, rtol=1e-5) for a, b in zip(whole_grads, replayed_grads))
    assert replayed_bytes < 0.5 * whole_bytes, (replayed_bytes, whole_bytes)
