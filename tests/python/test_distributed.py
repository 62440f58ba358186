"""Tensor-parallel eviction (kvevict.distributed) on the CPU: two torchrun processes with gloo on a
tiny random Llama with 4 KV heads (examples/tp_generate.py --tiny). Each rank evicts its own 2 KV
heads; ``--check`` then runs the same press on the whole model in one process and compares every
layer's kept positions per head and the generated tokens (the script exits 1 on a mismatch).

Policies covered: uniform (no communication), adakv (one all-gather of the per-head scores per
layer) and tova (one all-gather of the per-KV-head partial rows), plus decode-time eviction.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tp_generate.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_tp(tmp_path, *args) -> dict:
    out = tmp_path / "report.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
           str(EXAMPLE), "--tiny", "--check", "--json", str(out), *args]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return json.loads(out.read_text())


@pytest.mark.parametrize("method,policy,gathers", [
    ("dropkv", "uniform", False),
    ("adadropkv", "adakv", True),
    ("tova", None, True),
])
def test_tp2_kept_sets_and_tokens_equal_one_process(tmp_path, method, policy, gathers):
    args = ["--method", method, "--budget", "0.25"]
    if policy:
        args += ["--policy", policy]
    report = run_tp(tmp_path, *args)
    assert report["tp"] == 2
    assert report["check"] == "equal", report["check"]
    # The collective is there exactly when the policy needs the whole layer.
    assert (report["gathers_per_prefill"] > 0) == gathers, report
    # Each rank holds half the KV heads; under a uniform budget both hold the same K/V bytes
    # (adakv moves rows between heads, so between ranks).
    per_rank = report["kv_bytes_per_rank"]
    assert len(per_rank) == 2 and min(per_rank) > 0
    if policy == "uniform":
        assert per_rank[0] == per_rank[1]


def test_tp2_decode_time_eviction_equals_one_process(tmp_path):
    report = run_tp(tmp_path, "--no-prefill", "--decode-budget", "40", "--decode-score", "dropkv",
                    "--prompt-len", "64", "--new-tokens", "16")
    assert report["check"] == "equal", report["check"]
    assert report["gathers_per_prefill"] == 0
