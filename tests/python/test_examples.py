"""The README's Python examples (examples/python/*.py) run as a user would run them, so a change of a
library default that breaks one is seen here (a w = 8 example against dropkv's measured w = 32 once
passed every other test and failed only in use)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "python"


def run_example(name: str) -> str:
    env = dict(os.environ, OMP_NUM_THREADS="2")
    done = subprocess.run([sys.executable, str(EXAMPLES / name)], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, f"{name} exited {done.returncode}:\n{done.stderr}"
    return done.stdout


def test_tensors_example_compacts_and_attends():
    out = run_example("tensors.py")
    # kept rows at a 10% budget, then the bytes of the compacted cache below the dense one
    found = re.search(r"\(total (\d+) of (\d+)\)", out)
    assert found, out
    kept, rows = int(found.group(1)), int(found.group(2))
    assert rows == 8 * 4096 and 0.09 * rows <= kept <= 0.11 * rows, out
    before, after = out.split("KV bytes: ")[1].split("\n")[0].split(" -> ")
    assert int(after) < int(before) // 5, out


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None
                    or importlib.util.find_spec("torch") is None,
                    reason="needs torch and transformers (the hf extra)")
def test_hf_generate_example_generates_and_saves_memory():
    out = run_example("hf_generate.py")
    assert "generated 16 tokens" in out, out
    full, kept = out.split("KV ")[-1].split(" MiB")[0], out.split("-> ")[-1].split(" MiB")[0]
    assert float(kept) < float(full) / 2, out
