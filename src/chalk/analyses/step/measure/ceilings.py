"""`chalk measure`, stage 1: this machine's ceilings (see `chalk.analyses.step.measure`).

`measure_ceilings` times a large square matmul per dtype (FLOP/s = 2 n^3 / t) and a large
device-to-device copy (bytes/s = 2 * nbytes / t: each byte is read once and written once),
warm-ups first, `torch.cuda.synchronize()` around every GPU sample, the fastest (default) or
median repeat. `calibrated_chip` turns them into a `Chip` (`measured=True`) that loads back
through `resolve_hardware(path)` once `write_chip_yaml` has written it.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import platform
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from chalk.analyses.step.measure.common import (TORCH_TO_CHALK, _THREAD_NOTE, _calibrate_inner, _check_device,
                                           _sync_fn, _time_fn, _torch)
from chalk.errors import ChalkError, InputError
from chalk.specs.engine import MEASURED_VENDOR
from chalk.specs.files import atomic_write, make_folder
from chalk.specs.hardware import Chip, System


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
        vendor=MEASURED_VENDOR,
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
    make_folder(p.parent, "measure output")
    atomic_write(p, chip_yaml(chip), "measure output")
    return p


def measured_system(chip: Chip) -> System:
    return System(id=chip.id, name=chip.name, chip=chip, chips=1, kind="chip")
