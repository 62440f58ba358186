"""Argument checks of the Python API: a ValueError naming the argument, what was seen and what
was expected, before anything reaches C++ (which checks again and raises kvevict.Error, itself a
ValueError, with the library's message)."""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import numpy as np

from kvevict import _tensors as T

FLOAT_DTYPES = ("float32", "float64", "float16", "bfloat16")
INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")

# Token counts (windows, sinks, slack, budgets per head) are at most the longest context a model
# may declare, as on the command line (src/cli/numeric_options.h: kMaxTokens).
MAX_TOKENS = 1 << 24
# Positions are stored as int32.
MAX_POSITION = (1 << 31) - 1
_FLOAT32_MAX = float(np.finfo(np.float32).max)


# ----------------------------------------------------------------------------------------------
# scalar arguments: the type is checked, never converted (int(2.7) was a window of 2, True a
# budget that kept everything, "0.5" a float, bool("false") True), and a bad one is a ValueError
# naming the argument, not nanobind's "incompatible function arguments" or std::bad_cast.


def _shown(x: Any) -> str:
    r = repr(x)
    return (r if len(r) <= 60 else r[:57] + "...") + f" ({type(x).__name__})"


def _is_bool(x: Any) -> bool:
    return isinstance(x, (bool, np.bool_))


def _is_number(x: Any) -> bool:
    """A Python or numpy integer or float, not a bool (a bool is an int to isinstance)."""
    return not _is_bool(x) and isinstance(x, (int, float, np.integer, np.floating))


def integer(name: str, x: Any, lo: Optional[int] = None, hi: Optional[int] = None) -> int:
    """x as an int: a Python or numpy integer (not a bool, float or string) in [lo, hi]."""
    if _is_bool(x) or not isinstance(x, (int, np.integer)):
        raise ValueError(f"{name} is {_shown(x)}; expected an integer")
    v = int(x)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        want = (f"in [{lo}, {hi}]" if lo is not None and hi is not None else
                f">= {lo}" if lo is not None else f"<= {hi}")
        raise ValueError(f"{name} is {v}; expected an integer {want}")
    return v


def optional_integer(name: str, x: Any, lo: Optional[int] = None,
                     hi: Optional[int] = None) -> Optional[int]:
    return None if x is None else integer(name, x, lo, hi)


def number(name: str, x: Any, float32: bool = False) -> float:
    """x as a float: a Python or numpy number (not a bool or string); with float32, one that
    float32 can hold (1e39 became inf, and the error then named inf). Ranges are the library's
    to check (it names the value)."""
    if not _is_number(x):
        raise ValueError(f"{name} is {_shown(x)}; expected a number")
    v = float(x)
    if float32 and math.isfinite(v) and abs(v) > _FLOAT32_MAX:
        raise ValueError(f"{name} is {x!r}; expected a number float32 can hold "
                         f"(magnitude <= {_FLOAT32_MAX:.4g})")
    return v


def optional_number(name: str, x: Any, float32: bool = False) -> Optional[float]:
    return None if x is None else number(name, x, float32)


def flag(name: str, x: Any) -> bool:
    if not _is_bool(x):
        raise ValueError(f"{name} is {_shown(x)}; expected True or False")
    return bool(x)


def text(name: str, x: Any, optional: bool = True) -> Optional[str]:
    """A non-empty string (None when optional: the default). An empty string used to mean the
    default without a word."""
    if x is None and optional:
        return None
    if not isinstance(x, str):
        raise ValueError(f"{name} is {_shown(x)}; expected a string"
                         + (" or None" if optional else ""))
    if not x:
        raise ValueError(f"{name} is empty; expected a name" + (" (None for the default)"
                                                                  if optional else ""))
    return x


def budget(name: str, x: Any) -> Any:
    """A budget as the library parses it: a number (kept fraction <= 1 or token count > 1) or a
    string ("10%"), or None."""
    if x is None or isinstance(x, str):
        return x
    if not _is_number(x):
        raise ValueError(f"{name} is {_shown(x)}; expected a kept fraction (<= 1), a token count "
                         "(> 1) or a string such as '10%'")
    return x


def int32_rows(name: str, x: Any, what: str) -> None:
    """An integer array with values in [0, 2^31 - 1], checked before the cast to the int32 the
    library stores (floats were truncated, NaN cast to garbage, a position 2^40 and an int64
    selection row 2^32 + 5 wrapped to int32 without a word). `what` names the values."""
    if T.dtype_name(x) not in INT_DTYPES:
        raise ValueError(f"{name} has dtype {T.dtype_name(x)}; expected integer {what}")
    if T.nbytes(x) > 0:
        lo, hi = int(x.min()), int(x.max())
        if lo < 0 or hi > MAX_POSITION:
            raise ValueError(f"{name} holds {lo if lo < 0 else hi}; expected {what} in "
                             f"[0, {MAX_POSITION}]")


def positions(name: str, x: Any) -> None:
    """Original token positions, stored as int32."""
    int32_rows(name, x, "positions")


def instance(name: str, x: Any, cls: type, what: str) -> Any:
    if not isinstance(x, cls):
        raise ValueError(f"{name} is {_shown(x)}; expected {what}")
    return x



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
    """What same_place compares: the torch device (cheap to compare), or the framework
    otherwise (every ndarray subclass, np.memmap included, is numpy host memory)."""
    if T.is_torch(x):
        return x.device
    return np.ndarray if isinstance(x, np.ndarray) else type(x)


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


def no_unread_wo(wo: Any, method: str) -> None:
    """wo is criticalkv's alone: given to another method it would be ignored."""
    if wo is not None and method != "criticalkv":
        raise ValueError(f"wo is given but method {method!r} does not read it; expected wo=None "
                         "(only criticalkv reads the output projection)")


def no_nan(name: str, x: Any) -> None:
    if T.isnan_any(x):
        raise ValueError(f"{name} holds NaN; expected finite numbers")


def scores_fit_float32(method: str, name: str, scores: Any) -> None:
    """Device scores [Hkv, n] hold no inf: the host paths refuse a score that overflows float32
    (kvevict::check_scores_finite), and so does the CUDA path, naming the same head and row."""
    at = T.first_inf(scores)
    if at is not None:
        head, row = at
        raise ValueError(f"{method} {name} of head {head} row {row} is "
                         f"{float(scores[head, row])}: an infinite q, k or v, or finite ones whose "
                         "score overflows float32 (magnitude above 3.4e38); expected inputs whose "
                         "scores fit float32 (scale them down)")


def kv_heads(name: str, x: Any) -> int:
    """Hkv of a [Hkv, n, d] array, at least 1 (0 heads divided the query heads by zero)."""
    hkv = int(x.shape[0])
    if hkv < 1:
        raise ValueError(f"{name} has shape {T.shape_of(x)}; expected [Hkv, n, d] with at least "
                         "1 KV head")
    return hkv


def writable(name: str, x: Any) -> None:
    """Arrays a call writes in place (nanobind's own refusal of a read-only array names no
    argument)."""
    if isinstance(x, np.ndarray) and not x.flags.writeable:
        raise ValueError(f"{name} is read-only; expected a writable array")


def qkv(q: Any, k: Any, v: Any, needs_queries: bool) -> None:
    """q [Hq, m, d], k and v [Hkv, n, d] in one place, float, GQA-compatible."""
    ndim("k", k, 3, "[Hkv, n, d]")
    float_dtype("k", k)
    kv_heads("k", k)
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
