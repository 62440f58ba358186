"""Argument checks of the Python API: a ValueError naming the argument, what was seen and what
was expected, before anything reaches C++ (which checks again and raises kvevict.Error, itself a
ValueError, with the library's message)."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from kvevict import _tensors as T

FLOAT_DTYPES = ("float32", "float64", "float16", "bfloat16")


def array(name: str, x: Any) -> Any:
    if not T.is_array(x):
        raise ValueError(
            f"{name} is a {type(x).__name__}; expected a numpy array or a torch tensor")
    return x


def ndim(name: str, x: Any, dims: int, layout: str) -> None:
    array(name, x)
    if x.ndim != dims:
        raise ValueError(f"{name} has shape {T.shape_of(x)}; expected {layout} ({dims} dims)")


def shape(name: str, x: Any, expected: Sequence[Optional[int]], layout: str) -> None:
    """expected: sizes, None for any."""
    ndim(name, x, len(expected), layout)
    seen = tuple(x.shape)
    if any(e is not None and e != s for e, s in zip(expected, seen)):
        seen = T.shape_of(x)
        want = tuple("*" if e is None else e for e in expected)
        raise ValueError(f"{name} has shape {seen}; expected {layout} = {want}".replace("'", ""))


def float_dtype(name: str, x: Any) -> None:
    if T.dtype_name(x) not in FLOAT_DTYPES:
        raise ValueError(
            f"{name} has dtype {T.dtype_name(x)}; expected one of {', '.join(FLOAT_DTYPES)}")


def _place(x: Any) -> Any:
    """What same_place compares: the torch device (cheap to compare), or the type otherwise."""
    return x.device if T.is_torch(x) else type(x)


def same_place(names: Sequence[str], xs: Sequence[Any]) -> None:
    """All arrays in one framework on one device (the message is only formatted on a
    mismatch: this check runs on every kernel call)."""
    first = None
    for name, x in zip(names, xs):
        if x is None:
            continue
        if first is None:
            first = (name, x, _place(x))
        elif _place(x) != first[2]:
            raise ValueError(
                f"{name} is a {T.where(x)} array but {first[0]} is {T.where(first[1])}; expected "
                "every input in one framework on one device")


def inner_contiguous(name: str, x: Any) -> None:
    """The CUDA kernels read rows of d elements: the last dim must have stride 1."""
    if T.is_torch(x) and x.ndim > 0 and x.stride(-1) != 1 and x.shape[-1] > 1:
        raise ValueError(
            f"{name} has strides {tuple(x.stride())}; expected a unit stride in the last dim "
            "(call .contiguous())")


def no_nan(name: str, x: Any) -> None:
    if T.isnan_any(x):
        raise ValueError(f"{name} holds NaN; expected finite numbers")


def qkv(q: Any, k: Any, v: Any, needs_queries: bool) -> None:
    """q [Hq, m, d], k and v [Hkv, n, d] in one place, float, GQA-compatible."""
    ndim("k", k, 3, "[Hkv, n, d]")
    float_dtype("k", k)
    hkv, n, d = T.shape_of(k)
    shape("v", v, (hkv, n, d), "[Hkv, n, d] (the shape of k)")
    float_dtype("v", v)
    if q is None:
        if needs_queries:
            raise ValueError("q is None; this method needs the window queries [Hq, m, d]")
        same_place(("k", "v"), (k, v))
        return
    ndim("q", q, 3, "[Hq, m, d]")
    float_dtype("q", q)
    hq, _, dq = T.shape_of(q)
    if dq != d:
        raise ValueError(f"q has shape {T.shape_of(q)}; expected [Hq, m, d] with d = {d} (k's)")
    if hq % hkv != 0:
        raise ValueError(
            f"q has {hq} heads; expected a multiple of the {hkv} KV heads of k (GQA groups)")
    same_place(("q", "k", "v"), (q, k, v))
