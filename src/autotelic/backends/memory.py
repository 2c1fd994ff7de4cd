"""A process's memory as the step metrics report it: the driver's, each Ray actor's, each train rank's."""

from __future__ import annotations

import resource

import torch


def peak_rss_mib() -> float:
    """This process's peak resident memory so far, in MiB (what an out-of-memory killer judges; on a CPU it
    includes activations)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def memory_metrics(device: str) -> dict[str, float]:
    """This process's peak resident memory so far, and on a CUDA device the allocator's peak since the last call
    (the last step's row), which is then reset."""
    metrics = {"perf/peak_rss_mib": peak_rss_mib()}
    if device.startswith("cuda"):
        metrics["perf/peak_cuda_mib"] = torch.cuda.max_memory_allocated() / 2**20
        torch.cuda.reset_peak_memory_stats()
    return metrics
