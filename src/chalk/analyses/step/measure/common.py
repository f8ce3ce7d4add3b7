"""Shared plumbing of `chalk measure` (see `chalk.analyses.step.measure`): optional torch/transformers
imports, the OpenMP wait policy set before torch's first import, device checks and timing helpers.

torch and transformers are imported inside functions only; a missing one raises `ChalkError`
naming the extra to install.
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from chalk.errors import ChalkError, InputError

MISSING_DEPS = "chalk measure needs torch and transformers: pip install -e '.[measure]'"

#: torch dtype name -> chalk precision name.
TORCH_TO_CHALK = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float8": "fp8"}

_THREAD_NOTE: list[str] = []


# =========================================================================== optional imports
def _prepare_openmp() -> None:
    """Before torch's first import: make idle OpenMP threads sleep instead of spinning.

    See the CPU note in `chalk.analyses.step.measure`'s module doc.
    """
    if _THREAD_NOTE:
        return
    if "OMP_WAIT_POLICY" in os.environ:
        _THREAD_NOTE.append(f"OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']} (from the environment)")
    elif "torch" in sys.modules:
        _THREAD_NOTE.append("torch was imported before chalk measure, so its OpenMP wait policy is the default "
                            "(set OMP_WAIT_POLICY=PASSIVE if CPU steps show multi-ms stalls)")
    else:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
        _THREAD_NOTE.append("OMP_WAIT_POLICY=PASSIVE set before importing torch (idle threads sleep)")


def _torch():
    _prepare_openmp()
    try:
        import torch
    except ImportError:
        raise ChalkError(MISSING_DEPS) from None
    return torch


def _transformers():
    try:
        import transformers
    except ImportError:
        raise ChalkError(MISSING_DEPS) from None
    return transformers


def _check_transformers_version() -> None:
    """Decode timing resets a StaticCache's per-layer length counter, which transformers 5 introduced."""
    tr = _transformers()
    try:
        major = int(str(tr.__version__).split(".")[0])
    except ValueError:
        return
    if major < 5:
        raise ChalkError(f"chalk measure needs transformers >= 5 (found {tr.__version__}): "
                         "pip install -U 'transformers>=5'")


def _check_device(torch, device: str) -> str:
    device = str(device).strip().lower()
    if device not in ("cpu", "cuda"):
        raise InputError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ChalkError("device 'cuda' asked for but torch sees no CUDA GPU (use --device cpu)")
    return device


def _sync_fn(torch, device: str) -> Callable[[], None]:
    if device == "cuda":
        return torch.cuda.synchronize
    return lambda: None


STATISTICS = ("min", "median")


def _stat(samples: Sequence[float], statistic: str = "min") -> float:
    """The time a set of repeats stands for: their minimum (default) or median."""
    if statistic == "min":
        return float(min(samples))
    if statistic == "median":
        return float(statistics.median(samples))
    raise InputError(f"statistic must be one of {', '.join(STATISTICS)}, got {statistic!r}")


def _loadavg() -> float | None:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _time_fn(fn: Callable[[], object], sync: Callable[[], None], *, warmup: int = 2, repeats: int = 5,
             inner: int = 1, statistic: str = "median") -> tuple[float, list[float]]:
    """Wall time of one call of `fn` (each sample runs it `inner` times) by `statistic`, and the samples."""
    for _ in range(warmup):
        fn()
    sync()
    samples = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        sync()
        samples.append((time.perf_counter() - t0) / inner)
    return _stat(samples, statistic), samples


def _calibrate_inner(fn, sync, target_s: float) -> int:
    """How many calls make one sample last about `target_s` (after one warm-up call)."""
    fn()
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    t1 = max(time.perf_counter() - t0, 1e-7)
    return max(1, min(1000, int(math.ceil(target_s / t1))))
