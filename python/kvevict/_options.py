"""Method names and keyword arguments -> the C++ ScoreOptions / SelectOptions.

The defaults are the CLI's (``kvevict score``): a method's SPEC window, pooling, aggregation,
policy and sinks come from the library's method_parse, and only what the caller passes overrides
them. Selection protects the observation window (select window = score window) unless told
otherwise.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Optional, Union

from kvevict import _checks as C
from kvevict._ext import ext

BudgetLike = Union[float, int, str]


@dataclass(frozen=True)
class Settings:
    """Everything one eviction run needs, resolved; `describe()` reports it."""

    score: "ext.ScoreOptions"
    select: "ext.SelectOptions"

    def describe(self) -> str:
        return f"{self.score.describe()} {self.select.describe()}"


def score_options(method: str, *, window: Optional[int] = None, pool: Optional[str] = None,
                  aggregate: Optional[str] = None, h2o_normalize: bool = False, seed: int = 0,
                  scale: Optional[float] = None) -> "ext.ScoreOptions":
    if not isinstance(method, str):
        raise ValueError(f"method is a {type(method).__name__}; expected a name such as 'dropkv'")
    key = (method, C.text("aggregate", aggregate),
           C.optional_integer("window", window, 0, C.MAX_TOKENS), C.text("pool", pool),
           C.flag("h2o_normalize", h2o_normalize), C.integer("seed", seed, 0, (1 << 64) - 1),
           C.optional_number("scale", scale, float32=True) or 0.0)
    return _score_options_cached(*key)


@functools.lru_cache(maxsize=512)
def _score_options_cached(method, aggregate, window, pool, h2o_normalize, seed, scale):
    """Parsed once per distinct argument set (a per-call parse showed in the scorer's time); the
    options are never mutated after this."""
    return ext.score_options(method, aggregate, window, pool, h2o_normalize, seed, scale)


def settings(method: str, budget: Optional[BudgetLike] = None, *,
             compression_ratio: Optional[float] = None, policy: Optional[str] = None,
             window: Optional[int] = None, pool: Optional[str] = None,
             aggregate: Optional[str] = None, sink: Optional[int] = None,
             alpha: Optional[float] = None, h2o_normalize: bool = False, seed: int = 0,
             select_window: Optional[int] = None) -> Settings:
    """ScoreOptions + SelectOptions as `kvevict score` builds them (see the module docstring)."""
    so = score_options(method, window=window, pool=pool, aggregate=aggregate,
                       h2o_normalize=h2o_normalize, seed=seed)
    _, default_policy, default_sink = ext.method_defaults(method)
    sel = select_options(C.text("policy", policy) or default_policy, budget, compression_ratio,
                         alpha, default_sink if sink is None else sink,
                         so.window if select_window is None else select_window)
    return Settings(so, sel)


# adakv's safeguard when the caller gives none (SPEC section 3; `kvevict score --alpha`'s default).
DEFAULT_ALPHA = 0.2


def select_options(policy: str, budget: Optional[BudgetLike], compression_ratio: Optional[float],
                   alpha: Optional[float], sink: int, window: int) -> "ext.SelectOptions":
    """SelectOptions from checked arguments (the library checks the ranges it names). An alpha
    given with the uniform policy is an error, as ``kvevict score --alpha`` is: that policy never
    reads it."""
    policy = C.text("policy", policy, optional=False)
    alpha = C.optional_number("alpha", alpha)
    if alpha is not None and policy == "uniform":
        raise ValueError(f"alpha={alpha} has no effect with the uniform policy; expected "
                         "policy='adakv' (or leave alpha out)")
    return ext.select_options(policy, C.budget("budget", budget),
                              C.optional_number("compression_ratio", compression_ratio),
                              DEFAULT_ALPHA if alpha is None else alpha,
                              C.integer("sink", sink, 0, C.MAX_TOKENS),
                              C.integer("window", window, 0, C.MAX_TOKENS))
