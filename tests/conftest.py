"""Shared fixtures, and how the suite shares this machine's cores between pytest-xdist workers.

Under xdist each worker is pinned to its own share of the cores (the policy's torch threads follow the affinity,
and so do the processes a test starts), so two workers on two cores never oversubscribe them. Tests that run
several processes at once (Ray clusters, FSDP ranks, two runs side by side) are marked ``all_cores`` and get
every core back while they run."""

import os

import pytest

_ALL_CORES = frozenset(os.sched_getaffinity(0))
_worker_cores = _ALL_CORES


def pytest_configure(config):
    global _worker_cores
    config.addinivalue_line("markers", "all_cores: runs several processes at once; unpinned from its worker's core")
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if worker is not None and 1 < count <= len(_ALL_CORES):
        _worker_cores = frozenset(sorted(_ALL_CORES)[int(worker.removeprefix("gw"))::count])


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before any fixture of the test starts (a module's Ray cluster too): its processes inherit these cores."""
    os.sched_setaffinity(0, _ALL_CORES if item.get_closest_marker("all_cores") else _worker_cores)


@pytest.fixture(scope="session")
def embedded_dir():
    from autotelic.backends.embedded import embedded_model_dir

    return embedded_model_dir()


@pytest.fixture(scope="session")
def embedded_tokenize(embedded_dir):
    """The embedded model's tokenizer as the policy's ``tokenize`` (where ReST-GRPO's prefixes are cut)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(embedded_dir))
    return lambda text: tokenizer(text, add_special_tokens=False).input_ids
