"""One check for every argument of the public API (`chalk.__all__`), by parameter name.

The CLI validates its flags as it parses them; a notebook call skips the parser, so each public function
passes its arguments through `check_arguments` first: a wrong type, NaN, inf, a negative or zero count, a
huge number, an empty name, bytes, complex, Decimal or a container where a name belongs becomes one
`InputError` naming the parameter, never an AttributeError or a silently accepted value deep inside.
"""

from __future__ import annotations

import functools
import inspect
import numbers
import os
from decimal import Decimal

import numpy as np

from chalk.errors import InputError
from chalk.specs.workload import MAX_GPUS, MAX_QUANTITY, count, positive, short

#: parameters that are switches: True or False only (a string "x" is not read as True)
FLAGS = frozenset({"ideal", "aggregate", "refined", "strict_fit", "disaggregated", "pareto", "curves",
                   "prefix_cache", "lecture_weights", "ray", "resume"})
#: names of catalog entries or choices: a non-empty string (or None where the default is None)
NAMES = frozenset({"precision", "kv_precision", "phase", "engine", "eplb", "scheduler", "draft_model",
                   "checkpoint", "sparse_law", "kind", "schedule", "compare", "ray_address", "objective"})
#: whole numbers >= 1
COUNTS = frozenset({"gpus", "chips", "concurrency", "requests", "max_batch", "prefill_chunk", "prefill_gpus",
                    "max_seqs", "max_tokens", "sim_requests", "pipeline_stages", "interleave", "seq_len",
                    "kv_capacity_tokens", "mtp", "stages", "microbatches", "workers"})
#: finite numbers > 0
POSITIVE = frozenset({"rate", "speedup", "min_user_tps", "max_ttft_s", "tpot_p99_s", "ttft_p99_s", "period_s",
                      "tokens", "global_batch_tokens", "inference_tokens_per_s", "deployment_days",
                      "rl_flops_per_param", "rl_inefficiency", "inference_inefficiency", "users",
                      "active_params", "ratio", "cache_context", "mode_context"})
#: finite numbers >= 0
NON_NEGATIVE = frozenset({"client_latency_s", "rl_tokens", "usd_per_kwh"})
#: numbers in a range: (low, low inclusive, high, high inclusive)
FRACTIONS = {"cache_hit": (0.0, True, 1.0, False), "obsolescence_probability": (0.0, True, 1.0, False),
             "kernel_mfu": (1e-6, True, 1.0, True), "moe_residual_efficiency": (1e-6, True, 1.0, True),
             "acceptance": (0.0, True, 1.0, True), "pue": (1.0, True, 10.0, True)}
#: a batch or context: a positive number or an array of them
QUANTITIES = frozenset({"batch", "context", "batches", "contexts"})
#: token lengths: a number >= 1 (or an array), or a distribution / lengths file named by a string
LENGTHS = frozenset({"input_len", "output_len"})
#: file paths: a non-empty string or path
PATHS = frozenset({"trace", "output", "results"})
#: never a value of these types where a name, a path or a spec object belongs
_SCALARS = (bool, np.bool_, numbers.Number, Decimal, bytes, bytearray)
_LAYOUT_KEYS = ("tp", "ep", "etp", "pp", "attn_dp", "dp_attn", "attention_dp", "dp_attention")
#: Keys an answer's own `layout` dict carries beside them, so it passes back as given (`estimate.parse_layout` checks
#: dp and gpus against the layout; QA 2026-11-28: `layout=estimate(...).to_dict()['layout']` was refused on 'dp')
LAYOUT_ANSWER_KEYS = ("dp", "gpus", "label", "out_of_gpus")


def _flag(name, v):
    if not isinstance(v, (bool, np.bool_)):
        raise InputError(f"{name} must be True or False, got {short(v)}")


def _text(name, v, what="a name"):
    if not isinstance(v, str) or not v.strip():
        raise InputError(f"{name} must be {what} (a non-empty string), got {short(v)}")


def _entity(name, v):
    """A model or hardware: a non-empty id, alias or path, or a spec object (ModelSpec, System)."""
    if isinstance(v, (str, os.PathLike)):
        _text(name, os.fspath(v), "an id or a path")
    elif v is None or isinstance(v, (_SCALARS, dict, list, tuple, set, np.ndarray)):
        raise InputError(f"{name} must be an id, an alias or a path, got {short(v)}")


def _range(name, v, low, low_in, high, high_in):
    x = positive(name, v, allow_zero=True, scalar=True, maximum=high)
    if (x < low or (x == low and not low_in)) or (x > high or (x == high and not high_in)):
        lo, hi = "[" if low_in else "(", "]" if high_in else ")"
        raise InputError(f"{name} must be in {lo}{low:g}, {high:g}{hi}, got {short(v)}")


def _length(name, v):
    if isinstance(v, (str, os.PathLike)):
        _text(name, os.fspath(v), "a number, a distribution or a lengths file")
        return
    if hasattr(v, "sample") or hasattr(v, "mean") and not isinstance(v, (np.ndarray, list, tuple)):
        return  # a length distribution object
    x = positive(name, v)
    if np.any(np.asarray(x, dtype=float) < 1):
        raise InputError(f"{name} must be at least 1 token, got {short(v)}")


def _layout(name, v):
    if isinstance(v, dict):
        if not v:
            raise InputError(f"{name} must name at least one of tp, ep, etp, pp, attn_dp, got {{}}")
        bad = [k for k in v if str(k).lower() not in _LAYOUT_KEYS + LAYOUT_ANSWER_KEYS]
        if bad:
            raise InputError(f"{name} key {short(bad[0])} is not one of tp, ep, etp, pp, attn_dp")
    elif isinstance(v, str):
        _text(name, v, "a layout like tp=8,ep=8")
    elif isinstance(v, (_SCALARS, list, tuple, set, np.ndarray)):
        raise InputError(f"{name} must be a layout like 'tp=8,ep=8' or a dict, got {short(v)}")


def check_value(name: str, v, default=inspect.Parameter.empty) -> None:
    """Raise one InputError when `v` is not a sensible value for the public parameter `name`."""
    # None is "the default" where the default is None, and for these whatever the default says (precision: the
    # checkpoint's own, also where plan's default explores narrower ones)
    if v is None and (default is None or name in ("layout", "speculative", "kv_precision", "precision")):
        return
    if name == "disaggregated":  # throughput also takes 'auto': whichever mode serves more (the CLI's --mode all)
        if not (isinstance(v, str) and v == "auto") and not isinstance(v, (bool, np.bool_)):
            raise InputError(f"disaggregated must be True, False or 'auto', got {short(v)}")
    elif name in FLAGS:
        _flag(name, v)
    elif name in NAMES:
        _text(name, v)
    elif name in ("model", "hardware", "ref_model", "ref_hardware", "mode_hardware"):
        if name == "hardware" and isinstance(v, (list, tuple)):  # plan: several chips
            if not v:
                raise InputError("hardware must name at least one chip or system, got an empty list")
            for h in v:
                _entity(name, h)
        else:
            _entity(name, v)
    elif name in COUNTS:
        count(name, v, maximum=MAX_GPUS if name in ("gpus", "chips", "prefill_gpus") else MAX_QUANTITY)
    elif name == "seed":
        positive(name, v, integer=True, allow_zero=True, scalar=True, maximum=2**32 - 1)
    elif name in POSITIVE:
        positive(name, v, scalar=True)
    elif name in NON_NEGATIVE:
        positive(name, v, allow_zero=True, scalar=True)
    elif name in FRACTIONS:
        _range(name, v, *FRACTIONS[name])
    elif name in QUANTITIES:
        positive(name, v)
    elif name in LENGTHS:
        _length(name, v)
    elif name in PATHS:
        if not isinstance(v, (str, os.PathLike)) or not os.fspath(v).strip():
            raise InputError(f"{name} must be a file path, got {short(v)}")
    elif name == "layout":
        _layout(name, v)
    elif name == "speculative":
        if isinstance(v, str):
            _text(name, v, "'auto', 'none' or a method")
        elif isinstance(v, (_SCALARS, dict, list, tuple, set, np.ndarray)):
            raise InputError(f"{name} must be 'auto', 'none', a method or a Speculation, got {short(v)}")
    elif name == "modes":
        items = [v] if isinstance(v, str) else v
        if not isinstance(items, (list, tuple)) or not items or not all(isinstance(m, str) and m.strip()
                                                                        for m in items):
            raise InputError(f"modes must be 'aggregated', 'disaggregated' or a list of them, got {short(v)}")
    elif name == "prices":
        if isinstance(v, str):
            _text(name, v, "'chip=$/h' pairs")
        elif isinstance(v, dict):
            if not v:
                raise InputError("prices must name at least one chip, got {}")
            for k, p in v.items():
                _text("prices key", k, "a chip id")
                positive(f"price of {k}", p, scalar=True)
        else:
            raise InputError(f"prices must be a dict {{chip: $/GPU-hour}} or 'chip=price' text, got {short(v)}")
    elif name == "diurnal":
        if isinstance(v, (_SCALARS, dict, set)) or isinstance(v, str) and not v.strip():
            raise InputError(f"diurnal must be a file path or 24 numbers, got {short(v)}")


def _expect(name: str, v, cls) -> None:
    if not isinstance(v, cls):
        what = " or ".join(c.__name__ for c in cls) if isinstance(cls, tuple) else cls.__name__
        raise InputError(f"{name} must be a {what}, got {short(v)}")


def checked(fn=None, *, types: dict | None = None, skip: tuple = (), like=None):
    """Decorate a public function: every bound argument passes `check_value` (by name) or, for the names in
    `types` (name -> a function returning the class, imported late), an isinstance check (None allowed where the
    default is None) before `fn` runs. `like`: a function returning the function that `**kwargs` are passed to,
    whose defaults say where None is allowed."""
    def _one(pname, v, default):
        if types and pname in types:
            if not (v is None and default is None):
                _expect(pname, v, types[pname]())
        else:
            check_value(pname, v, default)

    def wrap(f):
        sig = inspect.signature(f)

        @functools.wraps(f)
        def inner(*args, **kwargs):
            try:
                bound = sig.bind(*args, **kwargs)
            except TypeError as e:
                raise InputError(f"{f.__name__}: {e}") from None
            for pname, v in bound.arguments.items():
                p = sig.parameters[pname]
                if pname in skip:
                    continue
                if p.kind is p.VAR_KEYWORD:  # options passed on: their defaults are those of `like`
                    target = inspect.signature(like()).parameters if like is not None else {}
                    named = {k: q for k, q in target.items() if q.kind not in (q.VAR_POSITIONAL, q.VAR_KEYWORD)}
                    # a stand-in wrapping the function (*args, **kwargs) states no defaults: None stays "not given"
                    unknown = inspect.Parameter.empty if named else None
                    for k, x in v.items():
                        _one(k, x, named[k].default if k in named else unknown)
                    continue
                _one(pname, v, p.default)
            return f(*args, **kwargs)

        return inner

    return wrap(fn) if fn is not None else wrap
