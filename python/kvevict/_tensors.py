"""The caller's framework: numpy arrays or torch tensors (CPU or CUDA).

kvevict computes on the arrays it is given (zero copy, through DLPack) and allocates every output
with the same framework on the same device, so the framework owns that memory (torch's CUDA
caching allocator included). torch is optional: nothing here imports it unless a tensor is one.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, Optional, Sequence, Tuple

import numpy as np

_NP_DTYPES = {
    "float32": np.float32,
    "float64": np.float64,
    "float16": np.float16,
    "int32": np.int32,
    "int64": np.int64,
    "uint8": np.uint8,
    "bool": np.bool_,
}


def _torch():
    import torch

    return torch


def is_torch(x: Any) -> bool:
    """True for a torch.Tensor (without importing torch when it is not loaded)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def is_array(x: Any) -> bool:
    return isinstance(x, np.ndarray) or is_torch(x)


def is_cuda(x: Any) -> bool:
    return is_torch(x) and x.is_cuda


def where(x: Any) -> str:
    """'numpy', 'torch cpu' or 'torch cuda:N', for error messages."""
    if isinstance(x, np.ndarray):
        return "numpy"
    if is_torch(x):
        return f"torch {x.device}"
    return type(x).__name__


def dtype_name(x: Any) -> str:
    """'float32', 'bfloat16', ... in either framework."""
    return str(x.dtype).replace("torch.", "")


def shape_of(x: Any) -> tuple:
    return tuple(int(s) for s in x.shape)


def nbytes(x: Any) -> int:
    if is_torch(x):
        return int(x.numel() * x.element_size())
    return int(x.nbytes)


def for_kernel(x: Any) -> Any:
    """What the extension may read: numpy as is, torch detached (DLPack refuses tensors that
    require grad; detach() is a view, no copy) and with a negative bit resolved (a
    ``torch._neg_view`` holds -x in memory; the copy makes it hold x)."""
    if is_torch(x):
        if x.requires_grad:
            x = x.detach()
        if x.is_neg():
            x = x.resolve_neg()
    return x


def empty(like: Any, shape: Sequence[int], dtype: str) -> Any:
    """An uninitialised array of `shape` and `dtype` in `like`'s framework and device."""
    if is_torch(like):  # new_empty: like's device without building a device object
        return like.new_empty(tuple(shape), dtype=getattr(_torch(), dtype))
    return np.empty(tuple(shape), dtype=_NP_DTYPES[dtype])


def zeros(like: Any, shape: Sequence[int], dtype: str) -> Any:
    if is_torch(like):
        torch = _torch()
        return torch.zeros(tuple(shape), dtype=getattr(torch, dtype), device=like.device)
    return np.zeros(tuple(shape), dtype=_NP_DTYPES[dtype])


def from_host(like: Any, a: np.ndarray) -> Any:
    """Host array `a` in `like`'s framework and device (a copy only when it must move)."""
    if is_torch(like):
        torch = _torch()
        t = torch.from_numpy(np.ascontiguousarray(a))
        return t.to(like.device, non_blocking=False) if like.device.type != "cpu" else t
    return a


def to_host(x: Any) -> np.ndarray:
    """A host numpy view (CPU) or copy (CUDA; synchronizes)."""
    if is_torch(x):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def workspace(like: Any, nbytes: int) -> Any:
    """Scratch bytes for a kernel in `like`'s framework and device, or None when none is needed."""
    return empty(like, (int(nbytes),), "uint8") if nbytes > 0 else None


def stream_handle(x: Any) -> int:
    """torch's current CUDA stream on x's device as an integer handle (0 for host arrays).

    torch's raw-stream query (what its own Triton launchers call) costs a fraction of building a
    ``torch.cuda.Stream`` object; the public API is the fallback."""
    if not is_cuda(x):
        return 0
    torch = _torch()
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return int(raw(x.get_device()))
    return int(torch.cuda.current_stream(x.device).cuda_stream)


# Device scratch shared by the CUDA ops, one buffer per (device, stream, thread), grown on
# demand. A buffer is only ever used by work one thread queues on one stream: those ops run one
# after another and need their scratch only while they run, so score, select and the others can
# share it (two threads may queue on one stream concurrently, the binding releases the GIL while
# it launches: each has its own buffer). The memory comes from torch's caching allocator
# (allocated while that stream is current, so a replaced buffer is reused only after the
# stream's queued work).
_SCRATCH: dict = {}


def scratch_key(like: Any, stream: int) -> tuple:
    return (like.get_device(), stream, threading.get_ident())


def scratch(like: Any, stream: int, nbytes: int) -> Any:
    """A device uint8 tensor of at least `nbytes` for work on `stream` (`like`'s device) by the
    calling thread."""
    key = scratch_key(like, stream)
    buf = _SCRATCH.get(key)
    if buf is None or buf.numel() < nbytes:
        grown = max(int(nbytes), 2 * (0 if buf is None else int(buf.numel())), 1 << 16)
        buf = _SCRATCH[key] = empty(like, (grown,), "uint8")
    return buf


def release_scratch() -> None:
    """Drops the cached CUDA scratch buffers (they return to torch's caching allocator)."""
    _SCRATCH.clear()


def cat(parts: Sequence[Any]) -> Any:
    if is_torch(parts[0]):
        return _torch().cat(list(parts))
    return np.concatenate(list(parts))


def reshape(x: Any, shape: Sequence[int]) -> Any:
    return x.reshape(tuple(shape))


def contiguous(x: Any) -> Any:
    if is_torch(x):
        return x.contiguous()
    return np.ascontiguousarray(x)


def astype(x: Any, dtype: str) -> Any:
    if is_torch(x):
        return x.to(getattr(_torch(), dtype))
    return x.astype(_NP_DTYPES[dtype], copy=False)


def isnan_any(x: Any) -> bool:
    if is_torch(x):
        return bool(_torch().isnan(x).any())
    return bool(np.isnan(x).any())


def all_finite(x: Any) -> bool:
    if is_torch(x):
        return bool(_torch().isfinite(x).all())
    return bool(np.isfinite(x).all())


def first_inf(x: Any) -> Optional[Tuple[int, ...]]:
    """The index of the first infinite element of x (row-major), or None."""
    if is_torch(x):
        hits = _torch().isinf(x).flatten().nonzero()
        if hits.numel() == 0:
            return None
        flat = int(hits[0, 0])
    else:
        hits = np.flatnonzero(np.isinf(x))
        if hits.size == 0:
            return None
        flat = int(hits[0])
    return tuple(int(i) for i in np.unravel_index(flat, tuple(x.shape)))
