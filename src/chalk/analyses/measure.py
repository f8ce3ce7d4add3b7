"""`chalk measure`: measure this machine's ceilings, time real transformer steps, fit the roofline.

Three stages, each usable on its own:

1. `measure_ceilings` times a large square matmul per dtype (FLOP/s = 2 n^3 / t) and a large
   device-to-device copy (bytes/s = 2 * nbytes / t: each byte is read once and written once),
   warm-ups first, `torch.cuda.synchronize()` around every GPU sample, the fastest (default) or
   median repeat. `calibrated_chip` turns them into a `Chip` (`measured=True`) that loads back
   through `resolve_hardware(path)` once `write_chip_yaml` has written it.
2. `time_steps` builds a `transformers` causal LM with random weights from a config dict (no
   download), fills a static KV cache with random keys/values of the right shape, and times
   single-token decode steps over a (batch, context) grid and prefill forward passes over
   (batch, prompt) lengths. The grid is walked in several interleaved passes so that load from
   other processes lands on a few repeats of many cases, not on all repeats of one.
3. `fit_efficiency` fits the calibrated roofline

       t = max(F / (P * e_c), B / (W * e_m)) + overhead

   where F and B come from chalk's own `roofline.step(..., efficiency=IDEAL)` on the measured
   system and P, W are the measured ceilings, by minimising the mean squared log error over a
   training subset (alternate cases in (batch, context) order within each phase; the rest are
   held out). Global parameters only: e_c, e_m and a fixed overhead per phase (decode and
   prefill run the same per-layer kernels, but a prefill pass also builds its causal mask and
   a (batch x prompt x vocab) logits tensor, a decode step resets and indexes a static cache,
   so their fixed host-side costs differ; `separate_overheads=False` fits one). The held-out
   cases are then predicted by `roofline.step` with the fitted `Efficiency`.

`run_measure` chains the three and returns a `MeasureResult`.

Measurement choices, and why:
- A case's time is the minimum over its repeats by default (`statistic="min"`): on a shared
  machine slower repeats are other processes interfering, not the step (the `timeit` argument).
  The ceilings are re-measured after every pass and the best kept, so the ceilings and the steps
  see the same machine; otherwise a busy moment during the ceiling run makes steps appear to
  beat their "ceiling" and pins e_c at 1.
- On CPU the model runs in bf16 where the bf16 matmul ceiling is at least 1.5x fp32's (fp32
  small-batch GEMMs run far below the fp32 ceiling), with transformers' eager attention: torch's
  CPU SDPA kernel reads a bf16 KV cache at about half eager's rate in decode.
- The whole-step roofline takes the max of compute and memory time. An eager CPU step runs its
  compute-bound GEMMs and its memory-bound attention one after the other, so where both are
  large (big batch AND long context) the real time nears their sum and chalk is optimistic. The
  quick grid samples the regimes where one ceiling dominates; the full grid adds balanced cases.

torch and transformers are optional: they are imported inside functions, and a missing one
raises `ChalkError` naming the extra to install.

CPU note: on small VMs an OpenMP runtime whose idle threads spin can stall other parallel
regions by a whole scheduler tick (we saw 4-8 ms steps for 20 us attention calls on a 2-vCPU
Firecracker VM). If torch has not been imported yet, `OMP_WAIT_POLICY=PASSIVE` is set (unless
the user set it) before importing it; the thread count is left at torch's default.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as _dt
import math
import os
import platform
import socket
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from chalk.analyses import roofline as RL
from chalk.analyses.model_sizes import ModelSizes
from chalk.errors import ChalkError, InputError
from chalk.specs.hardware import Chip, System
from chalk.specs.model import ModelSpec, model_from_config

MISSING_DEPS = "chalk measure needs torch and transformers: pip install -e '.[measure]'"

#: torch dtype name -> chalk precision name.
TORCH_TO_CHALK = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float8": "fp8"}

#: The default CPU model: a small llama (~0.17 B parameters, 8 layers, 8 heads). Big enough that a
#: decode step streams ~0.27 GB of bf16 weights (far past the last-level cache), small enough that
#: the quick run takes about two minutes on a 2-core CPU. Full multi-head attention (8 KV heads):
#: with GQA, transformers' eager attention (the CPU default here, see `_attention_for`) would
#: materialise repeated K/V copies every step, traffic chalk's roofline rightly does not count.
QUICK_MODEL_CONFIG: dict = {
    "model_type": "llama",
    "hidden_size": 1024,
    "intermediate_size": 2816,
    "num_hidden_layers": 8,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 32000,
    "max_position_embeddings": 8192,
    "tie_word_embeddings": False,
    "rms_norm_eps": 1e-5,
}
QUICK_MODEL_ID = "chalk-measure-llama-170m"

#: The default GPU model: a ~1.1 B llama (GQA 16 q / 8 kv heads), so a bf16 decode step reads
#: ~2 GB and is not pure kernel-launch overhead.
QUICK_MODEL_CONFIG_GPU: dict = {
    "model_type": "llama",
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 32000,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": False,
    "rms_norm_eps": 1e-5,
}
QUICK_MODEL_ID_GPU = "chalk-measure-llama-1.1b"

_THREAD_NOTE: list[str] = []


# =========================================================================== optional imports
def _prepare_openmp() -> None:
    """Before torch's first import: make idle OpenMP threads sleep instead of spinning (see module doc)."""
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


# =========================================================================== 1. ceilings
@dataclass(frozen=True)
class Ceilings:
    """Measured ceilings of one device. SI units; `flops_per_s` maps chalk precision -> FLOP/s."""

    device: str  # "cpu" or "cuda"
    device_name: str
    host: str
    date: str
    flops_per_s: dict[str, float]
    mem_bandwidth_bytes_per_s: float
    memory_bytes: float
    matmul_n: dict[str, int]
    copy_bytes: int
    threads: int
    notes: tuple[str, ...] = ()
    statistic: str = "min"  # how repeats became one time: "min" (fastest) or "median"

    @property
    def peak_flops_per_s(self) -> float:
        """The highest measured dense rate over the dtypes."""
        return max(self.flops_per_s.values())

    def to_dict(self) -> dict:
        return {"device": self.device, "device_name": self.device_name, "host": self.host, "date": self.date,
                "flops_per_s": dict(self.flops_per_s), "mem_bandwidth_bytes_per_s": self.mem_bandwidth_bytes_per_s,
                "memory_bytes": self.memory_bytes, "matmul_n": dict(self.matmul_n),
                "copy_bytes": self.copy_bytes, "threads": self.threads, "notes": list(self.notes),
                "statistic": self.statistic}


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def _host_memory_bytes() -> float:
    """Physical memory: MemTotal from /proc/meminfo (psutil is not a dependency)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                parts = line.split()
                return float(parts[1]) * (1024 if len(parts) < 3 or parts[2].lower() == "kb" else 1)
    except OSError:
        pass
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0.0


def _host_available_bytes() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024
    except OSError:
        pass
    return _host_memory_bytes() * 0.5


def _default_dtypes(torch, device: str) -> tuple[str, ...]:
    if device == "cpu":
        return ("float32", "bfloat16")
    return ("float16", "bfloat16", "float8")


def _matmul_flops(torch, dtype: str, n: int, device: str, sync, repeats: int, target_s: float,
                  statistic: str = "min") -> float | None:
    """FLOP/s of an n x n x n matmul at `dtype` (None when the dtype does not run here)."""
    g = torch.Generator(device=device).manual_seed(0)
    if dtype == "float8":
        if device != "cuda" or not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
            return None
        try:
            a = torch.randn(n, n, device=device, generator=g).to(torch.float8_e4m3fn)
            b = torch.randn(n, n, device=device, generator=g).to(torch.float8_e4m3fn).t()  # column-major
            one = torch.ones((), device=device, dtype=torch.float32)

            def fn():
                return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

            fn()
            sync()
        except Exception:  # noqa: BLE001 - any failure means "no fp8 matmul on this device"
            return None
    else:
        dt = getattr(torch, dtype)
        a = torch.randn(n, n, device=device, generator=g).to(dt)
        b = torch.randn(n, n, device=device, generator=g).to(dt)
        c = torch.empty(n, n, device=device, dtype=dt)

        def fn():
            return torch.mm(a, b, out=c)
    inner = _calibrate_inner(fn, sync, target_s)
    t, _ = _time_fn(fn, sync, warmup=1, repeats=repeats, inner=inner, statistic=statistic)
    return 2.0 * n ** 3 / t


def _copy_bandwidth(torch, nbytes: int, device: str, sync, repeats: int, statistic: str = "min") -> float:
    """Bytes/s of a device-to-device copy: 2 * nbytes per copy (read once, written once)."""
    x = torch.empty(nbytes // 4, dtype=torch.float32, device=device).fill_(1.0)
    y = torch.empty_like(x).fill_(0.0)  # touch every page before timing
    t, _ = _time_fn(lambda: y.copy_(x), sync, warmup=2, repeats=repeats, statistic=statistic)
    return 2.0 * x.numel() * 4 / t


def measure_ceilings(device: str = "cpu", quick: bool = False, dtypes: Sequence[str] | None = None,
                     progress: Callable[[str], None] | None = None, *, matmul_sizes: Sequence[int] | None = None,
                     copy_bytes: int | None = None, statistic: str = "min",
                     repeats: int | None = None) -> Ceilings:
    """Measure matmul FLOP/s per dtype and copy bandwidth on `device` ("cpu" or "cuda").

    Matmul: square n x n at a few sizes (cpu 1024 and 2048; cuda 4096 and 8192); the ceiling is
    the best rate over sizes, each size's time being the `statistic` ("min": the fastest repeat,
    "median") of its repeats. Copy: a float32 buffer far larger than the last-level cache
    (cpu 256 MB quick / 512 MB full; cuda 1 GB, halved until it fits). `matmul_sizes` and
    `copy_bytes` override the sizes (tests use small ones; the figures then mean little).
    """
    torch = _torch()
    device = _check_device(torch, device)
    sync = _sync_fn(torch, device)
    say = progress or (lambda s: None)
    dtypes = tuple(dtypes) if dtypes else _default_dtypes(torch, device)
    for d in dtypes:
        if d not in TORCH_TO_CHALK:
            raise InputError(f"unknown dtype {d!r}; choose from {', '.join(TORCH_TO_CHALK)}")
    sizes = tuple(int(n) for n in matmul_sizes) if matmul_sizes else ((1024, 2048) if device == "cpu"
                                                                      else (4096, 8192))
    repeats = int(repeats) if repeats else (5 if quick else 9)
    target = 0.05 if quick else 0.1
    flops: dict[str, float] = {}
    best_n: dict[str, int] = {}
    notes = list(_THREAD_NOTE)
    with torch.inference_mode():
        for d in dtypes:
            say(f"matmul {d}")
            rates = {n: _matmul_flops(torch, d, n, device, sync, repeats, target, statistic) for n in sizes}
            rates = {n: r for n, r in rates.items() if r is not None}
            if not rates:
                notes.append(f"{d} matmul unavailable on this device; skipped")
                continue
            n = max(rates, key=rates.get)
            flops[TORCH_TO_CHALK[d]], best_n[TORCH_TO_CHALK[d]] = rates[n], n
        if not flops:
            raise ChalkError(f"no matmul dtype ran on {device}")
        if device == "cpu":
            nbytes = (256 if quick else 512) * 2 ** 20
            mem = _host_memory_bytes()
            name = _cpu_name()
        else:
            free, mem = torch.cuda.mem_get_info()
            nbytes = 2 ** 30
            while nbytes > 2 ** 24 and 2 * nbytes > 0.5 * free:
                nbytes //= 2
            name = torch.cuda.get_device_name()
        if copy_bytes:
            nbytes = max(4096, int(copy_bytes) // 4 * 4)
        say(f"copy {nbytes / 2 ** 20:.0f} MB")
        bw = _copy_bandwidth(torch, nbytes, device, sync, repeats + 2, statistic)
    if device == "cuda":
        torch.cuda.empty_cache()
    return Ceilings(device=device, device_name=name, host=socket.gethostname(),
                    date=_dt.date.today().isoformat(), flops_per_s=flops, mem_bandwidth_bytes_per_s=bw,
                    memory_bytes=float(mem), matmul_n=best_n, copy_bytes=int(nbytes),
                    threads=int(torch.get_num_threads()), notes=tuple(notes), statistic=statistic)


def merge_ceilings(a: Ceilings, b: Ceilings) -> Ceilings:
    """The better of two measurements of the same device: highest rate per dtype, highest bandwidth."""
    flops = dict(a.flops_per_s)
    best_n = dict(a.matmul_n)
    for p, v in b.flops_per_s.items():
        if v > flops.get(p, 0.0):
            flops[p], best_n[p] = v, b.matmul_n.get(p, 0)
    bw, nbytes = max((a.mem_bandwidth_bytes_per_s, a.copy_bytes), (b.mem_bandwidth_bytes_per_s, b.copy_bytes))
    return dataclasses.replace(a, flops_per_s=flops, matmul_n=best_n, mem_bandwidth_bytes_per_s=bw,
                               copy_bytes=nbytes)


def _slug(s: str) -> str:
    out = "".join(c.lower() if c.isalnum() else "-" for c in s)
    while "--" in out:
        out = out.replace("--", "-")
    return out.strip("-") or "device"


def calibrated_chip(ceilings: Ceilings, name: str | None = None, id: str | None = None) -> Chip:
    """A `Chip` whose ceilings are the measured ones (`measured=True`)."""
    where = f"{ceilings.device_name} ({ceilings.device}) on host {ceilings.host} {ceilings.date}"
    src = f"measured by chalk measure on {where}"
    mem_src = ("MemTotal from /proc/meminfo" if ceilings.device == "cpu" else "torch.cuda.mem_get_info total")
    rates = ", ".join(f"{p} {ceilings.matmul_n.get(p, 0)}^3 matmul" for p in ceilings.flops_per_s)
    how = "fastest of repeats" if ceilings.statistic == "min" else f"{ceilings.statistic} of repeats"
    return Chip(
        id=id or f"measured-{_slug(ceilings.device_name)}",
        name=name or f"{ceilings.device_name} (measured)",
        vendor="measured",
        flops_per_s=dict(ceilings.flops_per_s),
        hbm_bytes=max(ceilings.memory_bytes, 1.0),
        hbm_bandwidth_bytes_per_s=ceilings.mem_bandwidth_bytes_per_s,
        confidence="measured",
        sources={"dense_tflops": f"{src}: {how}, best over sizes ({rates})",
                 "hbm_tb_per_s": f"{src}: device-to-device copy of {ceilings.copy_bytes / 2 ** 20:.0f} MiB, "
                                 f"2 x bytes per copy, {how}",
                 "hbm_gb": f"{src}: {mem_src}"},
        notes=("Calibrated spec: measured ceilings, not datasheet peaks; "
               f"{ceilings.threads} torch threads. " + "; ".join(ceilings.notes)).strip(),
        measured=True,
    )


def chip_yaml(chip: Chip) -> str:
    """The catalog YAML (vendor units) of a chip."""
    return yaml.safe_dump(chip.to_yaml_dict(), sort_keys=False, allow_unicode=True)


def write_chip_yaml(chip: Chip, path) -> Path:
    """Write `chip` as catalog YAML; `resolve_hardware(path)` loads it back."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(chip_yaml(chip))
    return p


def measured_system(chip: Chip) -> System:
    return System(id=chip.id, name=chip.name, chip=chip, chips=1, kind="chip")


# =========================================================================== 2. real steps
@dataclass(frozen=True)
class StepTiming:
    phase: str  # "decode" | "prefill"
    batch: int
    context: int  # decode: tokens already cached; prefill: prompt length
    measured_s: float  # the chosen statistic of samples_s
    samples_s: tuple[float, ...]

    @property
    def median_s(self) -> float:
        return float(statistics.median(self.samples_s))

    @property
    def min_s(self) -> float:
        return float(min(self.samples_s))


def _config_dict(model, device: str = "cpu") -> tuple[dict, ModelSpec]:
    """(HF config dict, chalk ModelSpec) from None (the quick llama), a dict, a catalog id or a path."""
    from chalk.specs.catalog import load_model, read_json

    if model is None:
        cfg, mid = ((dict(QUICK_MODEL_CONFIG_GPU), QUICK_MODEL_ID_GPU) if device == "cuda"
                    else (dict(QUICK_MODEL_CONFIG), QUICK_MODEL_ID))
        return cfg, model_from_config(cfg, id=mid, source="chalk measure quick config")
    if isinstance(model, dict):
        cfg = dict(model)
        return cfg, model_from_config(cfg, id=str(cfg.get("_name_or_path") or "custom-config"),
                                      source="config dict")
    spec = load_model(str(model))
    p = Path(str(model))
    if p.exists():
        cfg = read_json(p / "config.json" if p.is_dir() else p)
    else:
        from importlib import resources

        cfg = read_json(resources.files("chalk") / "catalog" / "models" / spec.id / "config.json",
                        f"catalog model {spec.id}/config.json")
    return cfg, spec


def _hf_config(cfg: dict):
    tr = _transformers()
    d = {k: v for k, v in cfg.items() if k not in ("quantization_config", "auto_map", "architectures",
                                                     "torch_dtype", "dtype", "_name_or_path",
                                                     "transformers_version")}
    mt = d.pop("model_type", None)
    if not mt:
        raise InputError("model config needs a model_type")
    try:
        return tr.AutoConfig.for_model(mt, **d)
    except (ValueError, KeyError) as e:
        raise ChalkError(f"transformers cannot build model_type {mt!r}: {e}") from None


def build_model(cfg: dict, dtype: str = "float32", device: str = "cpu", attn_implementation: str = "sdpa",
                seed: int = 0):
    """A `transformers` causal LM with random weights from a config dict (no download), eval mode."""
    torch = _torch()
    tr = _transformers()
    hf_cfg = _hf_config(cfg)
    torch.manual_seed(seed)
    dt = getattr(torch, dtype)
    kwargs = {"attn_implementation": attn_implementation}
    with torch.device(device):
        try:
            m = tr.AutoModelForCausalLM.from_config(hf_cfg, dtype=dt, **kwargs)
        except TypeError:  # transformers 4.x spells it torch_dtype
            m = tr.AutoModelForCausalLM.from_config(hf_cfg, torch_dtype=dt, **kwargs)
    return m.to(device=device, dtype=dt).eval()


def _params(fn) -> set[str]:
    import inspect

    try:
        return set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return set()


def _kv_shapes(torch, hf, device):
    """Per-layer (heads, key_dim, value_dim) of the model's KV cache, from a one-token probe."""
    tr = _transformers()
    cache = tr.DynamicCache(config=hf.config) if "config" in _params(tr.DynamicCache) else tr.DynamicCache()
    hf(input_ids=torch.zeros((1, 1), dtype=torch.long, device=device), past_key_values=cache, use_cache=True)
    return [(int(layer.keys.shape[1]), int(layer.keys.shape[-1]), int(layer.values.shape[-1]))
            for layer in cache.layers]


class _DecodeCase:
    """A static KV cache holding `context` random tokens for `batch` sequences, and one decode step.

    Each timed step writes token `context` in place and attends over `context + 1` entries; the
    cache's length counter is reset before every step, so every repeat is the same step.
    """

    def __init__(self, torch, hf, shapes, batch: int, context: int, device: str, seed: int = 0):
        tr = _transformers()
        self.hf, self.context = hf, context
        self.cache = tr.StaticCache(config=hf.config, max_cache_len=context + 1)
        if not all(hasattr(layer, "cumulative_length") for layer in self.cache.layers):
            raise ChalkError("this transformers version's StaticCache has no per-layer length counter; "
                             "chalk measure needs transformers >= 5")
        dt = next(hf.parameters()).dtype
        g = torch.Generator(device=device).manual_seed(seed)
        made: dict = {}
        for i, (h, dk, dv) in enumerate(shapes):
            if (h, dk, dv) not in made:  # one random tensor per distinct shape; the values do not matter
                k = (torch.randn(batch, h, context, dk, generator=g, device=device) * 0.5).to(dt)
                v = k if dv == dk else (torch.randn(batch, h, context, dv, generator=g, device=device) * 0.5).to(dt)
                made[(h, dk, dv)] = (k, v)
            self.cache.update(*made[(h, dk, dv)], i)
        del made
        self.ids = torch.randint(0, hf.config.vocab_size, (batch, 1), generator=g, device=device)

    def __call__(self):
        for layer in self.cache.layers:
            layer.cumulative_length.fill_(self.context)
            if hasattr(layer, "cumulative_length_int"):
                layer.cumulative_length_int = self.context
        return self.hf(input_ids=self.ids, past_key_values=self.cache, use_cache=True)


class _PrefillCase:
    """One forward pass over `batch` random prompts of `context` tokens (all logits, KV written once)."""

    def __init__(self, torch, hf, batch: int, context: int, device: str, seed: int = 0):
        g = torch.Generator(device=device).manual_seed(seed)
        self.hf = hf
        self.ids = torch.randint(0, hf.config.vocab_size, (batch, context), generator=g, device=device)

    def __call__(self):
        return self.hf(input_ids=self.ids, use_cache=True)


def time_steps(hf, device: str, decode_grid: Sequence[tuple[int, int]], prefill_grid: Sequence[tuple[int, int]],
               *, passes: int = 3, budget_per_case_s: float = 1.0, min_repeats: int = 3, max_repeats: int = 15,
               statistic: str = "min", progress: Callable[[str], None] | None = None,
               between_passes: Callable[[int], None] | None = None) -> list[StepTiming]:
    """Wall time of real decode steps (batch, context) and prefill passes (batch, prompt).

    The grid is walked `passes` times, each case taking a share of its repeats per pass (its
    cache rebuilt each time), so a burst of load from elsewhere on the machine lands on a few
    samples of many cases rather than on all samples of one. A case's time is the `statistic`
    of all its samples: "min" (default; as `timeit` argues, slower repeats are other processes
    interfering, not the step) or "median". `between_passes(p)` runs after each pass p (the
    caller re-measures the ceilings there, so they see the same machine state as the steps).
    """
    _stat([1.0], statistic)
    torch = _torch()
    if decode_grid:
        _check_transformers_version()
    sync = _sync_fn(torch, device)
    say = progress or (lambda s: None)
    grid = [("decode", int(b), int(c)) for b, c in decode_grid] + [("prefill", int(b), int(c))
                                                                   for b, c in prefill_grid]
    samples: list[list[float]] = [[] for _ in grid]
    n_rep = [0] * len(grid)
    passes = max(1, int(passes))
    with torch.inference_mode():
        shapes = _kv_shapes(torch, hf, device) if decode_grid else []
        for p in range(passes):
            for i, (phase, b, c) in enumerate(grid):
                say(f"pass {p + 1}/{passes}: {phase} batch {b} {'context' if phase == 'decode' else 'prompt'} {c}")
                case = (_DecodeCase(torch, hf, shapes, b, c, device, seed=i) if phase == "decode"
                        else _PrefillCase(torch, hf, b, c, device, seed=i))
                if p == 0:  # first visit: a warm-up, then size the repeats from one timed call
                    case()
                    sync()
                    t0 = time.perf_counter()
                    case()
                    sync()
                    n_rep[i] = max(min_repeats, min(max_repeats,
                                                    int(budget_per_case_s // max(time.perf_counter() - t0, 1e-6))))
                share = max(1, -(-n_rep[i] // passes))
                _, got = _time_fn(case, sync, warmup=1, repeats=share)
                samples[i].extend(got)
                del case
            if between_passes is not None:
                between_passes(p)
    if device == "cuda":
        torch.cuda.empty_cache()
    return [StepTiming(phase, b, c, _stat(s, statistic), tuple(s)) for (phase, b, c), s in zip(grid, samples)]


# =========================================================================== 3. the fit
@dataclass(frozen=True)
class FitResult:
    """Global efficiencies of the calibrated roofline and the training loss (mean squared log error)."""

    compute: float
    memory: float
    overhead_s: float
    overhead_prefill_s: float
    msle_train: float
    n_train: int
    separate_overheads: bool

    def efficiency(self, phase: str = "decode", label: str = "measured") -> RL.Efficiency:
        o = self.overhead_prefill_s if phase == "prefill" else self.overhead_s
        return RL.Efficiency(compute=self.compute, memory=self.memory, overhead_s=o, label=label)


def _grid_losses(tc, tm, y, ec, em, o):
    """Sum over cases of squared log error for every (ec, em, o): shape (len(ec), len(em), len(o))."""
    t = np.maximum(tc[None, None, None, :] / ec[:, None, None, None],
                   tm[None, None, None, :] / em[None, :, None, None]) + o[None, None, :, None]
    r = np.log(t) - np.log(y)[None, None, None, :]
    return np.sum(r * r, axis=-1)


def fit_efficiency(compute_s, memory_s, measured_s, phases=None, *, separate_overheads: bool = False,
                   rounds: int = 12) -> FitResult:
    """Fit e_c, e_m in (0, 1] and overhead >= 0 (one, or one per phase) to measured step times.

    `compute_s`, `memory_s`: the ideal roofline times (efficiency 1) of each case; the model is
    t = max(compute_s / e_c, memory_s / e_m) + overhead. Minimises the mean squared log error by a
    dense grid search (log-spaced e_c, e_m in [1e-4, 1], overhead in [0, min measured]) zoomed in
    `rounds` times around the best point. The loss separates over phases for fixed (e_c, e_m), so
    per-phase overheads cost no more than one. Ties (an efficiency the training cases do not
    constrain) resolve to the highest efficiency and the smallest overhead. Pure numpy, deterministic.
    """
    tc = np.asarray(compute_s, dtype=float).ravel()
    tm = np.asarray(memory_s, dtype=float).ravel()
    y = np.asarray(measured_s, dtype=float).ravel()
    if not (tc.shape == tm.shape == y.shape) or y.size < 3:
        raise InputError("fit needs at least three cases with compute, memory and measured times")
    if np.any(~np.isfinite(y)) or np.any(y <= 0) or np.any(tc < 0) or np.any(tm < 0):
        raise InputError("fit needs positive finite measured times and non-negative roofline times")
    ph = np.asarray(phases if phases is not None else ["decode"] * y.size).ravel()
    groups = [ph == g for g in (("decode", "prefill") if separate_overheads else ())] or [np.ones(y.size, bool)]
    groups = [g for g in groups if g.any()]

    lec, hec = np.log(1e-4), 0.0
    lem, hem = np.log(1e-4), 0.0
    o_rng = [(0.0, float(np.min(y[g]))) for g in groups]
    n_e, n_o = 41, 41
    best = None
    for _ in range(rounds):
        ec = np.exp(np.linspace(hec, lec, n_e))  # descending: argmin's first tie is the highest efficiency
        em = np.exp(np.linspace(hem, lem, n_e))
        total = np.zeros((n_e, n_e))
        o_grids, o_best_idx = [], []
        for g, (olo, ohi) in zip(groups, o_rng):
            o = np.linspace(olo, ohi, n_o)
            L = _grid_losses(tc[g], tm[g], y[g], ec, em, o)
            idx = np.argmin(L, axis=2)
            total += np.take_along_axis(L, idx[..., None], axis=2)[..., 0]
            o_grids.append(o)
            o_best_idx.append(idx)
        i, j = np.unravel_index(np.argmin(total), total.shape)
        os_ = [og[ib[i, j]] for og, ib in zip(o_grids, o_best_idx)]
        best = (float(ec[i]), float(em[j]), [float(x) for x in os_], float(total[i, j]))
        # zoom: +-2 grid steps around the optimum, clipped to the feasible box
        dec = (hec - lec) / (n_e - 1) * 2
        dem = (hem - lem) / (n_e - 1) * 2
        lec, hec = max(np.log(1e-4), np.log(ec[i]) - dec), min(0.0, np.log(ec[i]) + dec)
        lem, hem = max(np.log(1e-4), np.log(em[j]) - dem), min(0.0, np.log(em[j]) + dem)
        new_rng = []
        for (olo, ohi), ov, g in zip(o_rng, os_, groups):
            step = (ohi - olo) / (n_o - 1) * 2
            new_rng.append((max(0.0, ov - step), min(float(np.min(y[g])), ov + step)))
        o_rng = new_rng
    ec_, em_, os_, loss = best
    od, op = (os_[0], os_[1]) if len(os_) == 2 else (os_[0], os_[0])
    return FitResult(compute=min(1.0, ec_), memory=min(1.0, em_), overhead_s=od, overhead_prefill_s=op,
                     msle_train=loss / y.size, n_train=int(y.size), separate_overheads=separate_overheads)


# =========================================================================== 4. run it all
@dataclass(frozen=True)
class MeasuredCase:
    phase: str
    batch: int
    context: int
    measured_s: float
    predicted_s: float
    held_out: bool
    flops: float
    bytes_moved: float
    ideal_compute_s: float
    ideal_memory_s: float
    bound: str
    repeats: int
    median_s: float = float("nan")
    min_s: float = float("nan")

    @property
    def rel_error(self) -> float:
        return (self.predicted_s - self.measured_s) / self.measured_s

    def to_dict(self) -> dict:
        return {"phase": self.phase, "batch": self.batch, "context": self.context,
                "measured_s": self.measured_s, "predicted_s": self.predicted_s, "held_out": self.held_out,
                "rel_error": self.rel_error, "flops": self.flops, "bytes_moved": self.bytes_moved,
                "ideal_compute_s": self.ideal_compute_s, "ideal_memory_s": self.ideal_memory_s,
                "bound": self.bound, "repeats": self.repeats, "median_s": self.median_s, "min_s": self.min_s}


@dataclass(frozen=True)
class MeasureResult:
    ceilings: Ceilings
    chip: Chip
    fit: FitResult
    cases: tuple[MeasuredCase, ...]
    device: str
    dtype: str  # torch dtype the model ran in
    precision: str  # chalk precision used for weights, KV and the compute ceiling
    model: str
    model_config: dict
    attention: str
    statistic: str
    wall_s: float
    files: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def _errors(self, held_out: bool) -> np.ndarray:
        return np.array([abs(c.rel_error) for c in self.cases if c.held_out == held_out])

    @property
    def n_held_out(self) -> int:
        return sum(c.held_out for c in self.cases)

    @property
    def median_abs_error_held_out(self) -> float:
        e = self._errors(True)
        return float(np.median(e)) if e.size else float("nan")

    @property
    def p90_abs_error_held_out(self) -> float:
        e = self._errors(True)
        return float(np.percentile(e, 90)) if e.size else float("nan")

    @property
    def median_abs_error_train(self) -> float:
        e = self._errors(False)
        return float(np.median(e)) if e.size else float("nan")

    @property
    def p90_abs_error_train(self) -> float:
        e = self._errors(False)
        return float(np.percentile(e, 90)) if e.size else float("nan")

    @property
    def calibrated_chip_yaml(self) -> str:
        return chip_yaml(self.chip)

    def to_dict(self) -> dict:
        return {
            "peak_flops_per_s": self.chip.peak_flops_per_s(self.precision),
            "peak_flops_per_s_by_precision": dict(self.ceilings.flops_per_s),
            "mem_bandwidth_bytes_per_s": self.ceilings.mem_bandwidth_bytes_per_s,
            "memory_bytes": self.ceilings.memory_bytes,
            "cases": [c.to_dict() for c in self.cases],
            "median_abs_error_held_out": self.median_abs_error_held_out,
            "p90_abs_error_held_out": self.p90_abs_error_held_out,
            "n_held_out": self.n_held_out,
            "median_abs_error_train": self.median_abs_error_train,
            "p90_abs_error_train": self.p90_abs_error_train,
            "n_train": len(self.cases) - self.n_held_out,
            "efficiency": {"compute": self.fit.compute, "memory": self.fit.memory,
                           "overhead_s": self.fit.overhead_s, "overhead_prefill_s": self.fit.overhead_prefill_s,
                           "separate_overheads": self.fit.separate_overheads,
                           "msle_train": self.fit.msle_train},
            "device": self.device,
            "device_name": self.ceilings.device_name,
            "dtype": self.dtype,
            "precision": self.precision,
            "model": self.model,
            "attention": self.attention,
            "model_config": dict(self.model_config),
            "calibrated_chip_yaml": self.calibrated_chip_yaml,
            "ceilings": self.ceilings.to_dict(),
            "statistic": self.statistic,
            "wall_s": self.wall_s,
            "files": dict(self.files),
            "notes": list(self.notes),
        }


#: Quick CPU grid for the default model (bf16, 32 KB of KV per token), in the three regimes where
#: one ceiling dominates a step: weight-bound decode (small batch, short context), KV-bound decode
#: (long contexts, up to ~1 GB of cache), compute-bound decode (batch 64-256 at short contexts),
#: and prefill passes of 16 to 256 tokens (memory- to compute-bound). The full grid adds balanced
#: cases (large batch AND long context, long prompts), where an eager CPU step runs its
#: compute-bound GEMMs and its memory-bound attention one after the other, so the measured time
#: nears the SUM of the two roofline terms, not their max: the whole-step roofline is optimistic there.
_CPU_DECODE_QUICK = [(1, 128), (1, 1024), (1, 4096), (2, 512), (4, 2048), (8, 512), (8, 4096), (16, 256),
                     (16, 2048), (32, 64), (64, 32), (128, 16), (128, 64), (256, 16)]
_CPU_PREFILL_QUICK = [(1, 16), (1, 32), (1, 64), (2, 32), (1, 128), (4, 32), (2, 128), (1, 256), (4, 64)]
_GPU_DECODE_QUICK = [(1, 512), (1, 4096), (1, 16384), (8, 2048), (8, 8192), (32, 1024), (32, 4096), (64, 512),
                     (128, 256), (128, 2048), (256, 128), (512, 64), (512, 128)]
_GPU_PREFILL_QUICK = [(1, 512), (1, 2048), (2, 2048), (1, 4096), (4, 2048), (1, 8192), (8, 1024)]


def default_grid(quick: bool = True, device: str = "cpu") -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(decode (batch, context) grid, prefill (batch, prompt) grid) for the default model."""
    if device == "cuda":
        dec, pre = list(_GPU_DECODE_QUICK), list(_GPU_PREFILL_QUICK)
        if not quick:
            dec += [(2, 8192), (16, 16384), (64, 2048), (256, 512), (1024, 64)]
            pre += [(16, 1024), (2, 8192), (1, 16384)]
        return dec, pre
    dec, pre = list(_CPU_DECODE_QUICK), list(_CPU_PREFILL_QUICK)
    if not quick:
        dec += [(2, 8000), (32, 1024), (48, 256), (64, 512), (96, 64), (128, 256)]
        pre += [(1, 512), (2, 256), (8, 64), (1, 1024)]
    return dec, pre


def split_held_out(decode_grid, prefill_grid) -> tuple[list[bool], list[bool]]:
    """Alternate cases held out, in (batch, context) order within each phase (a checkerboard on a full grid)."""
    def alternate(grid):
        order = sorted(range(len(grid)), key=lambda i: (grid[i][0], grid[i][1], i))
        held = [False] * len(grid)
        for rank, i in enumerate(order):
            held[i] = rank % 2 == 1
        return held

    return alternate(list(decode_grid)), alternate(list(prefill_grid))


def _kv_fits(spec: ModelSpec, grid, precision: str, cap_bytes: float):
    sz = ModelSizes(spec)
    return [(b, c) for b, c in grid if b * sz.kv_bytes_per_sequence(c + 1, precision) <= cap_bytes]


def _choose_dtype(device: str, ceilings: Ceilings, dtype: str | None) -> tuple[str, str]:
    """The dtype the model runs in, and why."""
    if dtype:
        if dtype not in TORCH_TO_CHALK or dtype == "float8":
            raise InputError(f"model dtype must be float32, bfloat16 or float16, got {dtype!r}")
        return dtype, "asked for"
    if device == "cuda":
        return "bfloat16", "the GPU default"
    f32, b16 = ceilings.flops_per_s.get("fp32", 0.0), ceilings.flops_per_s.get("bf16", 0.0)
    if b16 >= 1.5 * f32:
        return "bfloat16", (f"bf16 matmul measured {b16 / max(f32, 1):.1f}x fp32 here; fp32 small-batch GEMMs on "
                            "CPU also fall far below the fp32 ceiling")
    return "float32", f"bf16 matmul is not faster than fp32 here ({b16 / 1e9:.0f} vs {f32 / 1e9:.0f} GFLOP/s)"


def _attention_for(device: str, dtype: str) -> tuple[str, str]:
    """transformers attention implementation for the timed model, and why."""
    if device == "cpu" and dtype in ("bfloat16", "float16"):
        return "eager", ("eager attention: torch's CPU SDPA kernel reads a bf16 KV cache at about half the rate "
                         "of eager matmul+softmax in decode")
    return "sdpa", "SDPA attention"


def _roofline_cases(spec: ModelSpec, system: System, timings: Sequence[StepTiming], precision: str,
                    efficiency: Callable[[str], RL.Efficiency] | None = None) -> list[RL.RooflineResult]:
    """chalk's own roofline for every timed case (IDEAL efficiency unless given one per phase)."""
    return [RL.step(spec, system, t.batch, t.context, phase=t.phase, precision=precision, kv_precision=precision,
                    efficiency=efficiency(t.phase) if efficiency else RL.IDEAL) for t in timings]


def run_measure(device: str = "cpu", quick: bool = True, model=None, out_dir=None,
                progress: Callable[[str], None] | None = None, *, dtype: str | None = None,
                attn_implementation: str | None = None,
                decode_grid: Sequence[tuple[int, int]] | None = None,
                prefill_grid: Sequence[tuple[int, int]] | None = None,
                separate_overheads: bool = True, passes: int | None = None,
                budget_per_case_s: float | None = None, chip_name: str | None = None,
                ceilings: Ceilings | None = None, statistic: str = "min") -> MeasureResult:
    """Measure ceilings, time real steps of `model` (None: the quick llama), fit, report.

    `model` may be None, a config dict, a catalog id or a config.json path. `dtype` (float32,
    bfloat16, float16) defaults to bf16 on GPU, and on CPU to bf16 where its matmul ceiling is at
    least 1.5x fp32's, else fp32. With `out_dir`, writes `calibrated-chip.yaml` and `cases.csv`.
    `ceilings` reuses an earlier `measure_ceilings`. `statistic` ("min" or "median") turns each
    case's interleaved repeats into its time.
    """
    t_start = time.perf_counter()
    say = progress or (lambda s: None)
    torch = _torch()
    _check_transformers_version()
    device = _check_device(torch, device)
    _stat([1.0], statistic)
    cfg, spec = _config_dict(model, device)
    notes: list[str] = []
    load0 = _loadavg()

    if ceilings is None:
        say("measuring ceilings")
        ceilings = measure_ceilings(device, quick=quick, progress=lambda s: say(f"ceilings: {s}"),
                                    statistic=statistic)
        remeasure = True
    elif ceilings.device != device:
        raise InputError(f"ceilings were measured on {ceilings.device}, not {device}")
    else:
        remeasure = False
    notes.extend(ceilings.notes)

    dtype, why = _choose_dtype(device, ceilings, dtype)
    precision = TORCH_TO_CHALK[dtype]
    if precision not in ceilings.flops_per_s:
        raise ChalkError(f"no {precision} matmul ceiling was measured on {device}; pick another dtype")
    attn, attn_why = (attn_implementation, "asked for") if attn_implementation else _attention_for(device, dtype)
    notes.append(f"model runs in {dtype} ({why}); {attn_why}")
    if attn == "eager" and spec.attention == "gqa" and spec.num_kv_heads < spec.num_heads:
        notes.append("GQA under eager attention: transformers copies K/V to every query head each step, "
                     "traffic chalk's roofline does not count (KV-heavy steps will run slower than predicted)")
    if spec.attention == "mla":
        notes.append("MLA: transformers caches decompressed per-head K/V, chalk counts the compressed latent; "
                     "KV-heavy steps will run slower than predicted")
    sz = ModelSizes(spec)
    weight_bytes = sz.weight_bytes(precision)
    mem_avail = _host_available_bytes() if device == "cpu" else float(torch.cuda.mem_get_info()[0])
    if weight_bytes > 0.5 * mem_avail:
        raise ChalkError(f"{spec.id} needs {weight_bytes / 1e9:.1f} GB of {precision} weights; "
                         f"this {device} has {mem_avail / 1e9:.1f} GB free (use a smaller config)")

    dgrid, pgrid = default_grid(quick, device)
    if decode_grid is not None:
        dgrid = [(int(b), int(c)) for b, c in decode_grid]
    if prefill_grid is not None:
        pgrid = [(int(b), int(c)) for b, c in prefill_grid]
    for b, c in dgrid + pgrid:
        if b < 1 or c < 1:
            raise InputError(f"grid points need batch and context >= 1, got ({b}, {c})")
    kv_cap = 0.25 * (mem_avail - weight_bytes) if device == "cpu" else 0.5 * (mem_avail - weight_bytes)
    kept = _kv_fits(spec, dgrid, precision, kv_cap)
    if len(kept) < len(dgrid):
        notes.append(f"dropped {len(dgrid) - len(kept)} decode cases whose KV cache exceeds {kv_cap / 1e9:.1f} GB")
    dgrid = kept
    hd_dec, hd_pre = split_held_out(dgrid, pgrid)
    held = list(hd_dec) + list(hd_pre)
    if len(held) < 4 or sum(held) < 1 or len(held) - sum(held) < 3:
        raise InputError("need at least four cases (decode + prefill): three or more to fit, one or more held out")

    say(f"building {spec.id} ({sz.total_params / 1e6:.0f} M params, {dtype}, {attn} attention) with random weights")
    hf = build_model(cfg, dtype, device, attn_implementation=attn)
    best = {"c": ceilings}

    def refresh(p: int) -> None:
        """Re-measure every dtype's matmul (at its best size) and the copy after each pass; keep the best."""
        if not remeasure:
            return
        say(f"ceilings: re-measuring after pass {p + 1}")
        c = best["c"]
        for prec, n in c.matmul_n.items():
            torch_name = next(k for k, v in TORCH_TO_CHALK.items() if v == prec)
            again = measure_ceilings(device, quick=True, dtypes=(torch_name,), matmul_sizes=(n,),
                                     copy_bytes=c.copy_bytes, statistic=statistic, repeats=3)
            c = merge_ceilings(c, again)
        best["c"] = c

    timings = time_steps(hf, device, dgrid, pgrid, passes=passes or (4 if quick else 6),
                         budget_per_case_s=budget_per_case_s or (0.6 if quick else 2.0),
                         min_repeats=4 if quick else 6, max_repeats=12 if quick else 30, statistic=statistic,
                         progress=lambda s: say(f"timing: {s}"), between_passes=refresh)
    ceilings = best["c"]
    if remeasure:
        notes.append("ceilings: best of the first measurement and re-measurements (every dtype's matmul at its "
                     "best size, and the copy) after every timing pass")
    chip = calibrated_chip(ceilings, name=chip_name)
    system = measured_system(chip)
    load1 = _loadavg()
    cores = os.cpu_count() or 1
    if device == "cpu" and load0 is not None and load1 is not None and max(load0, load1) > cores + 0.5:
        notes.append(f"machine busy: load average {load0:.1f} at the start, {load1:.1f} after timing, on "
                     f"{cores} CPUs; other processes shared the cores, so timings are noisy")
    spread = [float(np.median(t.samples_s) / min(t.samples_s) - 1) for t in timings]
    notes.append(f"repeat spread: median over cases of (median/min - 1) = {float(np.median(spread)) * 100:.0f}%; "
                 f"each case's time is the {statistic} of its repeats")
    del hf

    say("fitting")
    ideal = _roofline_cases(spec, system, timings, precision)
    tc = np.array([float(r.compute_time_s) for r in ideal])
    tm = np.array([float(r.memory_time_s) for r in ideal])
    y = np.array([t.measured_s for t in timings])
    ph = np.array([t.phase for t in timings])
    train = ~np.array(held)
    sep = separate_overheads and len(set(ph[train])) == 2
    fit = fit_efficiency(tc[train], tm[train], y[train], ph[train], separate_overheads=sep)
    if separate_overheads and not sep:
        notes.append("one overhead for both phases (the training cases hold only one phase)")
    pred = _roofline_cases(spec, system, timings, precision, efficiency=fit.efficiency)
    chip = chip.model_copy(update={"notes": (
        f"{chip.notes} Fitted on {spec.id} in {dtype} ({len(timings)} steps, {int(train.sum())} to fit): "
        f"efficiency compute {fit.compute:.3f}, memory {fit.memory:.3f}, overhead {fit.overhead_s * 1e3:.2f} ms "
        f"per decode step, {fit.overhead_prefill_s * 1e3:.2f} ms per prefill pass.").strip()})
    cases = tuple(
        MeasuredCase(phase=t.phase, batch=t.batch, context=t.context, measured_s=t.measured_s,
                     predicted_s=float(r.step_time_s), held_out=bool(h), flops=float(r0.flops),
                     bytes_moved=float(r0.bytes_moved), ideal_compute_s=float(r0.compute_time_s),
                     ideal_memory_s=float(r0.memory_time_s), bound=str(r.bound), repeats=len(t.samples_s),
                     median_s=t.median_s, min_s=t.min_s)
        for t, r0, r, h in zip(timings, ideal, pred, held))

    files: dict[str, str] = {}
    if out_dir is not None:
        out = Path(out_dir)
        files["calibrated_chip"] = str(write_chip_yaml(chip, out / "calibrated-chip.yaml"))
        files["cases"] = str(write_cases_csv(cases, out / "cases.csv"))
    say("done")
    return MeasureResult(ceilings=ceilings, chip=chip, fit=fit, cases=cases, device=device, dtype=dtype,
                         precision=precision, model=spec.id, model_config=dict(cfg), attention=attn,
                         statistic=statistic,
                         wall_s=time.perf_counter() - t_start, files=files, notes=tuple(notes))


CSV_FIELDS = ("phase", "batch", "context", "measured_s", "predicted_s", "held_out", "rel_error", "flops",
              "bytes_moved", "ideal_compute_s", "ideal_memory_s", "bound", "repeats", "median_s", "min_s")


def write_cases_csv(cases: Sequence[MeasuredCase], path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for c in cases:
            d = c.to_dict()
            w.writerow({k: d[k] for k in CSV_FIELDS})
    return p


def format_report(result: MeasureResult) -> str:
    """A plain-text summary (the CLI may render its own)."""
    c = result.ceilings
    lines = [f"device     {result.device}: {c.device_name} ({c.threads} threads), host {c.host}, {c.date}",
             "ceilings   " + ", ".join(f"{p} {v / 1e9:.1f} GFLOP/s" for p, v in c.flops_per_s.items())
             + f"; copy {c.mem_bandwidth_bytes_per_s / 1e9:.1f} GB/s; memory {c.memory_bytes / 1e9:.1f} GB",
             f"model      {result.model} in {result.dtype}, {result.attention} attention",
             f"fit        e_c {result.fit.compute:.3f}  e_m {result.fit.memory:.3f}  overhead decode "
             f"{result.fit.overhead_s * 1e3:.2f} ms  prefill {result.fit.overhead_prefill_s * 1e3:.2f} ms",
             f"{'phase':8}{'batch':>6}{'ctx':>7}{'measured ms':>13}{'predicted ms':>14}{'err':>8}  bound    set"]
    for k in result.cases:
        lines.append(f"{k.phase:8}{k.batch:6d}{k.context:7d}{k.measured_s * 1e3:13.2f}{k.predicted_s * 1e3:14.2f}"
                     f"{k.rel_error * 100:7.1f}%  {k.bound:8} {'held-out' if k.held_out else 'train'}")
    lines.append(f"held-out   n={result.n_held_out}  median |err| {result.median_abs_error_held_out * 100:.1f}%  "
                 f"p90 {result.p90_abs_error_held_out * 100:.1f}%   (train median "
                 f"{result.median_abs_error_train * 100:.1f}%, p90 {result.p90_abs_error_train * 100:.1f}%)")
    lines.append(f"wall       {result.wall_s:.1f} s")
    for n in result.notes:
        lines.append(f"note       {n}")
    return "\n".join(lines)


if __name__ == "__main__":  # python -m chalk.analyses.measure [cpu|cuda]
    res = run_measure(sys.argv[1] if len(sys.argv) > 1 else "cpu", quick=True, progress=lambda s: print(s, flush=True))
    print(format_report(res))
