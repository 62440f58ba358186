"""Shared fixtures of the Python suite.

Inputs are made in numpy (fixed seeds) and handed to the framework under test: ``numpy``,
``torch`` (CPU tensors) and, when ``KVEVICT_TEST_CUDA=1`` and a device is visible, ``cuda``
(torch CUDA tensors; tools/python_gpu_check.sh sets it). The ground truth is always the C++
double-precision reference on host copies of the same (dtype-rounded) inputs.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import kvevict

try:
    import torch
except ImportError:  # the numpy path is tested without torch
    torch = None

WANT_CUDA = os.environ.get("KVEVICT_TEST_CUDA") == "1"
HAVE_CUDA = torch is not None and torch.cuda.is_available() and kvevict.cuda_available()

FRAMEWORKS = ["numpy"]
if torch is not None:
    FRAMEWORKS.append("torch")
if WANT_CUDA:
    FRAMEWORKS.append("cuda")


def pytest_report_header(config):
    return (f"kvevict frameworks under test: {', '.join(FRAMEWORKS)}; torch "
            f"{getattr(torch, '__version__', 'absent')}; cuda backend built "
            f"{bool(kvevict.ext.cuda_built)}, device {HAVE_CUDA}")


@pytest.fixture(params=FRAMEWORKS)
def fw(request):
    """A converter from host numpy arrays to the framework under test."""
    name = request.param
    if name == "cuda" and not HAVE_CUDA:
        pytest.fail("KVEVICT_TEST_CUDA=1 but no CUDA device or no CUDA backend in this build")
    return Framework(name)


class Framework:
    def __init__(self, name: str):
        self.name = name

    def __repr__(self):
        return self.name

    @property
    def is_cuda(self) -> bool:
        return self.name == "cuda"

    def put(self, a: np.ndarray, dtype: str = None):
        """a (host numpy) in this framework; dtype "bfloat16" needs torch."""
        if self.name == "numpy":
            return a if dtype is None else a.astype(dtype)
        t = torch.from_numpy(np.ascontiguousarray(a))
        if dtype is not None:
            t = t.to(getattr(torch, dtype))
        return t.cuda() if self.is_cuda else t

    @staticmethod
    def host(x) -> np.ndarray:
        if torch is not None and isinstance(x, torch.Tensor):
            return x.detach().float().cpu().numpy() if x.is_floating_point() else x.cpu().numpy()
        return np.asarray(x)


def qkv(rng, hq=6, hkv=2, n=79, m=8, d=16, scale_k=1.0):
    q = rng.standard_normal((hq, m, d)).astype(np.float32)
    k = (scale_k * rng.standard_normal((hkv, n, d))).astype(np.float32)
    v = rng.standard_normal((hkv, n, d)).astype(np.float32)
    return q, k, v


def assert_close(got, want, atol, rtol, what):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape} vs {want.shape}"
    err = np.abs(got - want)
    bad = err > atol + rtol * np.abs(want)
    if bad.any():
        idx = np.argwhere(bad)[:5]
        raise AssertionError(
            f"{what}: max abs err {err.max():.3g}, max rel err "
            f"{(err / np.maximum(np.abs(want), 1e-30)).max():.3g}; first mismatches "
            + ", ".join(f"{tuple(i)}: {got[tuple(i)]:.6g} vs {want[tuple(i)]:.6g}" for i in idx))


def kept_sets(sel) -> list:
    off = sel.offsets_host()
    idx = Framework.host(sel.index)
    return [set(idx[off[h]:off[h + 1]].tolist()) for h in range(len(off) - 1)]


def assert_same_kept(got, want, ref_scores: np.ndarray, tol: float, what: str):
    """Kept index sets equal per head; where they differ (float rounding near the cut), every
    swapped row's reference score must sit within tol * max|score| of the cut: the head's best
    evicted score (uniform) or the layer's (adakv moves rows between heads)."""
    g, w = kept_sets(got), kept_sets(want)
    assert len(g) == len(w), f"{what}: {len(g)} heads vs {len(w)}"
    assert sum(map(len, g)) == sum(map(len, w)), f"{what}: total kept differs"
    n = ref_scores.shape[1]
    best = [max((ref_scores[h][j] for j in range(n) if j not in b), default=-np.inf)
            for h, b in enumerate(w)]
    span = max(1e-30, float(np.abs(ref_scores).max()))
    for h, (a, b) in enumerate(zip(g, w)):
        for j in a ^ b:
            dist = min(abs(ref_scores[h][j] - best[h]), abs(ref_scores[h][j] - max(best)))
            assert dist <= tol * span, (
                f"{what}: head {h} row {j} (score {ref_scores[h][j]:.6g}) differs from the "
                f"reference selection; the best evicted score is {best[h]:.6g} in the head, "
                f"{max(best):.6g} in the layer")
