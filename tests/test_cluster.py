"""The default recipe on a Ray cluster started as on real machines: ``ray start --head`` and ``ray start --address``
for a second node (both on this machine, each its own raylet), then ``autotelic run dist.address=...`` as its own
process joining it."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from autotelic.dist.actors import ClusterUnreachableError, check_address

# Ray instances and several processes at once: one xdist worker runs them in turn, on every core.
pytestmark = [pytest.mark.all_cores, pytest.mark.xdist_group("ray")]

RECIPE = Path(__file__).parent.parent / "recipes" / "default.yaml"


def _free_port() -> int:
    """A port nothing listens on once the probe closes."""
    with socket.socket() as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def _node(*args: str, env: dict[str, str]) -> subprocess.Popen:
    """A Ray node in the foreground (``--block``), in its own process group: every process Ray starts for it
    (GCS, raylet, workers) stays in that group, so tearing it down touches no other Ray instance on this machine
    (``ray stop`` would end them all)."""
    command = [sys.executable, "-m", "ray.scripts.scripts", "start", *args, "--num-cpus=1", "--num-gpus=0",
               "--disable-usage-stats", "--block"]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


@pytest.fixture()
def two_node_cluster():
    """A head and a worker node with one logical CPU each: two one-CPU rollout actors must take one node each.
    With token authentication, as docs/scale-out.md sets it up: every process of the cluster (nodes and driver)
    runs with RAY_AUTH_MODE=token and the cluster's token."""
    sessions = tempfile.mkdtemp(prefix="ray-")  # its own session files (short: Ray's socket paths must fit 107 bytes)
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32), "RAY_TMPDIR": sessions}
    port = _free_port()
    address = f"{socket.gethostbyname(socket.gethostname())}:{port}"
    nodes = [_node("--head", f"--port={port}", "--include-dashboard=false", env=env)]
    try:
        deadline = time.monotonic() + 120
        while True:  # the head's GCS takes connections: the second node can join
            assert nodes[0].poll() is None, "ray start --head failed"
            with socket.socket() as gcs:
                if gcs.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline, "the head node did not start in 2 minutes"
            time.sleep(0.5)
        nodes.append(_node(f"--address={address}", env=env))  # actors wait for its CPU until it has joined
        yield address, env
    finally:
        for node in nodes:
            os.killpg(node.pid, signal.SIGKILL)
            node.wait()
        shutil.rmtree(sessions, ignore_errors=True)


def _learn(tmp_path: Path, name: str, options: list[str], env: dict[str, str]) -> subprocess.Popen:
    """`autotelic run` on the default recipe, shrunk to two families at level 1, groups of 4 and 7 steps, one torch
    thread per process (the driver and the cluster's two workers share this machine's 2 cores)."""
    return subprocess.Popen(
        [sys.executable, "-m", "autotelic.cli", "run", "--config", str(RECIPE), "train.steps=7", "generate.group_size=4",
         "curriculum.families=[successor, compare]", "curriculum.levels=[1]", "eval.levels=[1]", "eval.per_level=16",
         "eval.every=0", "model.threads=1", "logging.progress=false", "train.export_model=false",
         "logging.report=false", f"logging.runs_dir={tmp_path}", f"logging.run_name={name}", *options],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _results(tmp_path: Path, name: str, run: subprocess.Popen) -> tuple[dict, list[dict]]:
    _, errors = run.communicate(timeout=900)
    assert run.returncode == 0, errors[-3000:]
    rows = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
    return json.loads((tmp_path / name / "summary.json").read_text()), [r for r in rows if "reward/mean" in r]


@pytest.mark.slow
def test_the_default_recipe_learns_on_a_two_node_cluster(two_node_cluster, tmp_path):
    """Rollouts on 2 workers of a `ray start` cluster, one per node, learn: the run raises the training reward,
    and the held-out accuracy by 10 points or more (32 tasks; 8 groups of 4 samples per step: 16% -> 69% in a
    trial, the training reward 0.31 -> 0.49 over the first and last 3 steps)."""
    address, env = two_node_cluster
    run = _learn(tmp_path, "cluster", [f"dist.address={address}", "dist.rollout_workers=2"], env)
    # a driver without the cluster's token (Ray retries for about 20 s, so it runs beside the run) is told what to set
    without_token = {k: v for k, v in env.items() if not k.startswith("RAY_AUTH")}
    tokenless = subprocess.run([sys.executable, "-m", "autotelic.cli", "run", f"dist.address={address}",
                                "dist.rollout_workers=1", f"logging.runs_dir={tmp_path}", "logging.run_name=tokenless"],
                               env=without_token, capture_output=True, text=True, timeout=300)
    assert tokenless.returncode == 2, tokenless.stderr[-3000:]
    assert f"error: dist.address={address}: the Ray cluster there asks for its token" in tokenless.stderr
    assert "RAY_AUTH_MODE=token" in tokenless.stderr
    summary, steps = _results(tmp_path, "cluster", run)
    assert len(steps) == 7
    rewards = [r["reward/mean"] for r in steps]  # 32 samples a step, and the curriculum moves the task mix: means
    assert sum(rewards[-3:]) > sum(rewards[:3]), rewards  # of 3 steps (their spread makes a margin flaky)
    before, after = summary["eval_before"]["accuracy"], summary["eval_after"]["accuracy"]
    assert after >= before + 0.1, (before, after)
    assert all(r["dist/worker_restarts"] == 0 for r in steps)  # both workers lived, and were counted


def test_an_address_where_no_cluster_listens_is_named_at_once():
    """Ray retries such an address for minutes; the driver stops at once, naming it."""
    port = _free_port()
    started = time.monotonic()
    with pytest.raises(ClusterUnreachableError, match=f"dist.address=127.0.0.1:{port}: no Ray cluster answers there"):
        check_address(f"127.0.0.1:{port}")
    assert time.monotonic() - started < 5
    check_address("auto")  # Ray's to resolve: no probe
