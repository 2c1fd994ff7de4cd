"""Training across Ray actors with torch FSDP2 (``dist.train_workers``), behind update.py's own calls.

Each actor is a rank: it builds the same HFPolicy (same seed, same weights), joins a process group (gloo on CPU,
NCCL when ``dist.gpus_per_worker`` gives each rank a GPU) and shards the model with ``fully_shard`` (every decoder
layer, then a root around the whole model), so that each rank holds a shard of the trainable weights and of the
optimizer state (LoRA's frozen base model stays whole on every rank). ``update`` splits a batch into contiguous,
near-equal shares of whole groups; every rank runs update.py's loss on its share with the whole batch's normalizer,
and gradients are summed over ranks (FSDP would average them): the step equals the in-process one. Advantages are
per group, so splitting whole groups is exact; RAE (``algorithm.name=spiral``) keeps role baselines across groups
and REINFORCE++ whitens over the whole batch: both are refused.

Gradients are reduced once per optimizer step, not after every backward: shares differ in their number of
micro-batches (a rank gets none when the batch has fewer groups than ranks), and HFPolicy's prefix-sharing forward
calls the decoder once or twice depending on the completions, so collectives issued per forward would not line up
across ranks. Each step all-gathers the parameters once, accumulates gradients locally and reduce-scatters them by
one fixed one-token pass: every rank runs the same collectives whatever its data. Memory is ZeRO-2-like: optimizer
state and reduced gradients stay sharded, parameters and local gradients are whole during the step.

A training rank that dies cannot be replaced mid-step (its peers wait on its shards in their collectives): the
group stops, names the rank, and the run resumes from its last checkpoint (``autotelic resume``). A non-finite loss
on one rank skips the step on every rank, as the in-process FloatingPointError does. GPU ranks take a whole GPU
each (NCCL cannot put two ranks on one device); one rank over NCCL has run on an H200 (bench/RESULTS.md), several
GPU ranks and the Ray-launched GPU group have not run yet.
"""

from __future__ import annotations

import contextlib
import itertools
import socket
from collections import defaultdict
from dataclasses import replace
from typing import Any, NoReturn, cast

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import FSDPModule, fully_shard

from autotelic.algorithms import BATCH_WHITENED, AlgorithmSpec
from autotelic.backends.hf import HFPolicy, settings_kept
from autotelic.backends.memory import memory_metrics
from autotelic.config import AlgorithmConfig, DistConfig, ModelConfig
from autotelic.dist.actors import actor_threads, check_room, completed, connect
from autotelic.types import Group
from autotelic.update import PreferencePair, batch_normalizer, dpo_update, policy_gradient_update, rollout_pairs

_SUMMED = ("train/loss", "train/trained_tokens", "train/pairs")  # other metrics are averages over a rank's share
_LARGEST = ("perf/train_worker_peak_rss_mib", "perf/train_worker_peak_cuda_mib")  # the rank nearest its limit
_FULL = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=True)  # whole tensors, rank 0


class TrainWorkerError(RuntimeError):
    """A training rank died or failed: the group is stopped; the run resumes from its last checkpoint."""


class _OtherRankFailed(FloatingPointError):
    """This rank's step was dropped because another rank's loss was not finite."""


class _ShardedPolicy(torch.nn.Module):
    """The FSDP root, trained by update.py as it trains an HFPolicy. Its forward is the policy's log-prob
    computation, which calls the decoder and the LM head separately: one module around both makes the embedding,
    final norm and (tied) head a unit whose hooks run on every call."""

    def __init__(self, policy: HFPolicy) -> None:
        super().__init__()
        self.model = policy.model
        self.policy = policy
        self.accumulating = False  # a loss was computed since the ranks last agreed on their step
        self.steps_left = 0  # optimizer steps this update still takes; the parameters are gathered for each

    def forward(self, prompts: list[list[int]], completions: list[list[int]], n: int | list[int],
                temperature: float = 1.0, reference: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        return self.policy.completion_logprobs(prompts, completions, n, temperature, reference)

    def completion_logprobs(self, prompts: list[list[int]], completions: list[list[int]], n: int | list[int],
                            temperature: float = 1.0, reference: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        self.accumulating |= torch.is_grad_enabled() and not reference
        return self(prompts, completions, n, temperature, reference)

    def units(self) -> list[FSDPModule]:
        """The FSDP units, root first: the same order on every rank."""
        return [m for m in self.modules() if isinstance(m, FSDPModule)]

    def gather(self) -> None:
        """All-gather every unit's parameters (no-op where gathered): the step's forwards then need no collective."""
        for unit in self.units():
            unit.unshard()

    def agree(self, failed: bool) -> None:
        """Every rank tells whether its loss was finite. If one's was not, every rank drops the step's gradients
        (none reduced yet) and raises; the next update gathers the parameters again."""
        failed_rank = torch.tensor([dist.get_rank() + 1 if failed else 0], device=self.policy.device)  # NCCL: GPU
        dist.all_reduce(failed_rank, op=dist.ReduceOp.MAX)
        self.accumulating = False
        if failed_rank.item():
            self.zero_grad()  # the gathered parameters' local gradients
            cast(FSDPModule, self).reset_iter_state()  # a forward without its backward leaves FSDP mid-iteration
            raise _OtherRankFailed(f"the loss of train rank {failed_rank.item() - 1} was not finite")

    def reduce(self) -> None:
        """Reduce-scatter the accumulated gradients, through the backward of a fixed one-token pass with zero loss."""
        root = cast(FSDPModule, self)
        root.set_requires_gradient_sync(True)
        root.set_reshard_after_backward(True)
        pad = self.policy.pad_id
        logprobs, _ = self([[pad]], [[pad]], [1])
        (logprobs.sum() * 0).backward()
        root.set_requires_gradient_sync(False)
        root.set_reshard_after_backward(False)

    def optimizer_step(self) -> dict[str, float]:
        self.agree(failed=False)
        self.reduce()
        self.steps_left -= 1
        try:
            return self.policy.optimizer_step()  # clips by the norm over every rank's shard
        finally:
            if self.steps_left:  # the next pass over the batch reads the new weights
                self.gather()


class TrainRank:
    """One FSDP rank: a policy copy, sharded by ``join``. FSDPTrainGroup runs each as a Ray actor; a process of
    its own can run one too (bench/gpu_throughput.py's part d joins a one-rank NCCL group without Ray)."""

    role = "train worker"

    def __init__(self, model: ModelConfig, algo: AlgorithmConfig, spec: AlgorithmSpec, seed: int) -> None:
        torch.manual_seed(seed)  # LoRA's initial adapters: the same on every rank
        self.policy = HFPolicy(model, lr=algo.lr, weight_decay=algo.weight_decay, max_grad_norm=algo.max_grad_norm,
                               seed=seed)
        self.algo, self.spec = algo, spec
        if algo.beta > 0:  # full fine-tuning's frozen reference, copied before sharding: a plain module outside FSDP
            self.policy._reference_lm()
        self.model_keys = _model_keys(self.policy)
        self.sharded = _ShardedPolicy(self.policy)

    def endpoint(self) -> tuple[str, int]:
        """This node's address and a free port, for the process group's rendezvous."""
        import ray

        with socket.socket() as probe:
            probe.bind(("", 0))
            return ray.util.get_node_ip_address(), probe.getsockname()[1]

    def join(self, host: str, port: int, rank: int, world: int) -> None:
        on_gpu = self.policy.device.type == "cuda"
        if on_gpu:  # the GPU Ray gave this actor (CUDA_VISIBLE_DEVICES): FSDP's default mesh takes the current one
            torch.cuda.set_device(self.policy.device.index or 0)  # model.device=cuda names no index: the first
        dist.init_process_group("nccl" if on_gpu else "gloo", init_method=f"tcp://{host}:{port}", rank=rank,
                                world_size=world)
        # frozen weights (LoRA's base model) stay whole on every rank: sharding them would all-gather the whole
        # model every step to train a few MB of adapters
        frozen = {p for p in self.policy.model.parameters() if not p.requires_grad}
        for layer in self.policy.causal_lm.get_decoder().layers:
            fully_shard(layer, reshard_after_forward=False, ignored_params=frozen)
        fully_shard(self.sharded, reshard_after_forward=False, ignored_params=frozen)
        root = cast(FSDPModule, self.sharded)
        for unit in self.sharded.units():
            unit.set_gradient_divide_factor(1.0)  # sum: each rank's loss is already its share of the batch's
            unit.set_force_sum_reduction_for_comms(True)  # gloo has no PREMUL_SUM
        root.set_requires_gradient_sync(False)
        root.set_reshard_after_backward(False)
        # the optimizer has no state yet: point it at the sharded parameters (read now: gathering swaps them out)
        self.policy.trainable = [p for p in self.policy.model.parameters() if p.requires_grad]
        self.policy.optimizer.param_groups[0]["params"] = self.policy.trainable
        with torch.no_grad():  # a first forward makes the wrapper FSDP's root and gathers every unit
            self.sharded([[self.policy.pad_id]], [[self.policy.pad_id]], [1])

    def train(self, share: list[Any], dpo: bool, normalizer: float, temperature: float,
              max_new_tokens: int) -> tuple[dict[str, float], str | None, int]:
        """update.py's step on this rank's share of groups (or of preference pairs, ``dpo``): (metrics, why the
        step was skipped or None, policy version)."""
        self.sharded.gather()
        self.sharded.steps_left = self.algo.updates_per_batch
        metrics: dict[str, float] = {}
        try:
            if not share:  # nothing to learn from, but the same optimizer steps and collectives as the others
                for _ in range(self.algo.updates_per_batch):
                    metrics = {f"train/{k}": v for k, v in self.sharded.optimizer_step().items()}
            elif dpo:
                metrics = dpo_update(self.sharded, share, self.algo, normalizer)
            else:
                metrics = policy_gradient_update(self.sharded, share, self.spec, self.algo, temperature,
                                                 max_new_tokens, normalizer=normalizer)
        except _OtherRankFailed:
            return {}, None, self.policy.version
        except FloatingPointError as error:
            if self.sharded.accumulating:  # this rank's own loss: the others learn it when they agree, and skip too
                with contextlib.suppress(_OtherRankFailed):
                    self.sharded.agree(failed=True)
            return {}, str(error), self.policy.version
        memory = {key.replace("perf/", "perf/train_worker_"): value
                  for key, value in memory_metrics(str(self.policy.device)).items()}
        return {**metrics, **memory}, None, self.policy.version

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """HFPolicy.trainable_state()'s keys and whole tensors on rank 0 (empty elsewhere)."""
        state = get_model_state_dict(self.policy.model, options=_FULL)
        if self.policy.config.lora:
            from peft import get_peft_model_state_dict

            return get_peft_model_state_dict(self.policy.model, state_dict=state)
        return state

    def optimizer_state(self) -> dict[str, Any] | None:
        """None before the first step: DCP would make Adam's state by a zero step, which Adam counts as its first."""
        if not self.policy.optimizer.state:
            return None
        return get_optimizer_state_dict(self.policy.model, self.policy.optimizer, options=_FULL)

    def load(self, state: dict[str, Any]) -> None:
        trainable = {self.model_keys.get(key, key): value for key, value in state["trainable"].items()}
        whole = StateDictOptions(full_state_dict=True, strict=False)
        set_model_state_dict(self.policy.model, trainable, options=whole)
        if state["optimizer"] is None:
            self.policy.optimizer.state.clear()
        else:
            with settings_kept(self.policy.optimizer):
                set_optimizer_state_dict(self.policy.model, self.policy.optimizer, state["optimizer"], options=whole)
        self.policy.version = state["policy_version"]


def _model_keys(policy: HFPolicy) -> dict[str, str]:
    """HFPolicy.trainable_state()'s key -> the model's parameter name, where they differ (peft drops the adapter
    name): peft's own renaming applied to the names' indices."""
    if not policy.config.lora:
        return {}
    from peft import get_peft_model_state_dict

    names = [name for name, p in policy.model.named_parameters() if p.requires_grad]
    renamed = get_peft_model_state_dict(policy.model, state_dict={n: torch.tensor(i) for i, n in enumerate(names)})
    return {key: names[int(index)] for key, index in renamed.items()}


def _shares(items: list[Any], parts: int) -> list[list[Any]]:
    """Contiguous, near-equal shares, one per rank; empty ones kept (every rank takes part in every step)."""
    bounds = [round(i * len(items) / parts) for i in range(parts + 1)]
    return [items[a:b] for a, b in itertools.pairwise(bounds)]


def _error(ray: Any, ref: Any) -> Exception | None:
    """What a finished remote call raised, if anything."""
    from ray.exceptions import RayError

    try:
        ray.get(ref)
    except RayError as error:
        return error
    return None


class FSDPTrainGroup:
    """``dist.train_workers`` Ray actors that train one policy together; the same steps and metrics as update.py
    in-process. The driver's own HFPolicy takes the weights with ``trainable_state`` (evaluation, export, rollouts)."""

    def __init__(self, model: ModelConfig, algo: AlgorithmConfig, spec: AlgorithmSpec, settings: DistConfig,
                 seed: int) -> None:
        workers = settings.train_workers
        if workers < 1:
            raise ValueError(f"dist.train_workers must be at least 1 for an FSDP group, got {workers}")
        if spec.advantage == "rae" or spec.advantage in BATCH_WHITENED:
            spans = "RAE's role baselines span" if spec.advantage == "rae" else "its advantages are whitened over"
            raise ValueError(f"dist.train_workers cannot train algorithm.name={spec.name}: {spans} every group of "
                             "the batch, which the ranks split; use dist.train_workers=0")
        gpus = settings.gpus_per_worker
        if gpus and gpus != int(gpus):
            raise ValueError(f"dist.gpus_per_worker={gpus}: a train rank needs whole GPUs (NCCL cannot put two ranks "
                             "on one device); use 1, or train_workers=0 to train on the driver")
        import ray

        connect(settings)
        self._ray = ray
        self.algo, self.spec, self.version = algo, spec, 0
        self._stopped: str | None = None
        check_room(TrainRank.role, workers, settings.cpus_per_worker, gpus)
        remote = ray.remote(num_cpus=settings.cpus_per_worker, num_gpus=gpus)(TrainRank)
        model = replace(model, threads=actor_threads(model.threads, settings.cpus_per_worker),
                        device="cuda" if gpus else "cpu")
        self.actors = [remote.remote(model, algo, spec, seed) for _ in range(workers)]
        (host, port), = self._run([self.actors[0].endpoint.remote()])
        self._run([actor.join.remote(host, port, rank, workers) for rank, actor in enumerate(self.actors)])

    def update(self, groups: list[Group], temperature: float, max_new_tokens: int) -> dict[str, float]:
        """One update over a batch of groups (policy gradient, or online DPO from each group's best and worst)."""
        if self.spec.kind == "dpo":
            return self.update_pairs(rollout_pairs(groups))
        return self._train(groups, False, batch_normalizer(groups, self.spec, self.algo, max_new_tokens),
                           temperature, max_new_tokens)

    def update_pairs(self, pairs: list[PreferencePair]) -> dict[str, float]:
        """DPO over preference pairs (offline DPO's batches)."""
        if not pairs:
            return {"train/pairs": 0.0}
        return self._train(pairs, True, len(pairs), 1.0, 0)

    def _train(self, batch: list[Any], dpo: bool, normalizer: float, temperature: float,
               max_new_tokens: int) -> dict[str, float]:
        shares = _shares(batch, len(self.actors))
        outcomes = self._run([actor.train.remote(share, dpo, normalizer, temperature, max_new_tokens)
                              for actor, share in zip(self.actors, shares)])
        self.version = outcomes[0][2]
        for rank, (_, skipped, _) in enumerate(outcomes):
            if skipped is not None:
                raise FloatingPointError(f"{skipped} (train rank {rank})")
        merged: dict[str, float] = defaultdict(float)
        for share, (metrics, _, _) in zip(shares, outcomes):
            for key, value in metrics.items():
                if key in _SUMMED:
                    merged[key] += value
                elif key in _LARGEST:
                    merged[key] = max(merged[key], value)
                elif key == "train/grad_norm":  # the norm over all shards: every rank's is the same
                    merged[key] = value
                else:
                    merged[key] += value * len(share) / len(batch)
        return dict(merged)

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """The whole trainable state on the driver's CPU, as HFPolicy.trainable_state() gives it."""
        return self._run([actor.trainable_state.remote() for actor in self.actors])[0]

    def optimizer_state(self) -> dict[str, Any] | None:
        """The whole optimizer state (None before the first step), independent of the number of ranks."""
        return self._run([actor.optimizer_state.remote() for actor in self.actors])[0]

    def state_dict(self) -> dict[str, Any]:
        """For checkpoints: whole tensors, independent of the number of ranks."""
        return {"trainable": self.trainable_state(), "optimizer": self.optimizer_state(),
                "policy_version": self.version}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        shared = self._ray.put({key: state[key] for key in ("trainable", "optimizer", "policy_version")})
        self._run([actor.load.remote(shared) for actor in self.actors])
        self.version = state["policy_version"]

    def _run(self, refs: list[Any]) -> list[Any]:
        """Every rank's result, in rank order. A rank that dies or fails stops the group: its peers would wait for
        it in their collectives."""
        from ray.exceptions import RayError

        if self._stopped is not None:
            raise TrainWorkerError(self._stopped)
        pending = {ref: rank for rank, ref in enumerate(refs)}
        results: list[Any] = [None] * len(refs)
        for rank, ref in completed(self._ray, pending):
            try:
                results[rank] = self._ray.get(ref)
            except RayError as error:  # RayActorError: the rank died; RayTaskError: it raised
                self._stop(rank, error, pending)
        return results

    def _stop(self, rank: int, error: Exception, pending: dict[Any, int]) -> NoReturn:
        from ray.exceptions import RayActorError

        if not isinstance(error, RayActorError) and pending:  # a peer's death fails this rank's collectives too
            ready, _ = self._ray.wait(list(pending), num_returns=len(pending), timeout=5.0)
            errors = [(pending[ref], _error(self._ray, ref)) for ref in ready]
            deaths = [(peer, death) for peer, death in errors if isinstance(death, RayActorError)]
            rank, error = deaths[0] if deaths else (rank, error)
        self.shutdown()
        what = "died" if isinstance(error, RayActorError) else f"failed ({str(error).strip().splitlines()[-1]})"
        self._stopped = (f"train worker rank {rank} {what}; an FSDP step needs every rank (the others hold its "
                         "shards), so the group stopped: resume the run from its last checkpoint")
        raise TrainWorkerError(self._stopped) from error

    def shutdown(self) -> None:
        for actor in self.actors:
            self._ray.kill(actor)
