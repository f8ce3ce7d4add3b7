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
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

# The stages live in common.py, ceilings.py, steps.py and fit.py of this package. This module is
# the public entry point: it re-exports their names (private helpers included) for existing imports.
from chalk.analyses.step.measure.ceilings import (  # noqa: F401
    Ceilings, _copy_bandwidth, _cpu_name, _default_dtypes, _host_available_bytes, _host_memory_bytes,
    _matmul_flops, _slug, calibrated_chip, chip_yaml, measure_ceilings, measured_system, merge_ceilings,
    write_chip_yaml)
from chalk.analyses.step.measure.common import (  # noqa: F401
    _THREAD_NOTE, MISSING_DEPS, STATISTICS, TORCH_TO_CHALK, _calibrate_inner, _check_device,
    _check_transformers_version, _loadavg, _prepare_openmp, _stat, _sync_fn, _time_fn, _torch, _transformers)
from chalk.analyses.step.measure.fit import (  # noqa: F401
    PREDICTED_BY, FitResult, _grid_losses, _roofline_cases, fit_efficiency, split_held_out)
from chalk.analyses.step.measure.steps import (  # noqa: F401
    _CPU_DECODE_QUICK, _CPU_PREFILL_QUICK, _GPU_DECODE_QUICK, _GPU_PREFILL_QUICK, QUICK_MODEL_CONFIG,
    QUICK_MODEL_CONFIG_GPU, QUICK_MODEL_ID, QUICK_MODEL_ID_GPU, StepTiming, _attention_for, _choose_dtype,
    _config_dict, _DecodeCase, _hf_config, _kv_fits, _kv_shapes, _params, _PrefillCase, build_model,
    default_grid, time_steps)
from chalk.analyses.step.model_sizes import ModelSizes
from chalk.errors import ChalkError, InputError
from chalk.specs.hardware import Chip
from chalk.specs.files import atomic_path, make_folder
from chalk.specs.model import ModelSpec


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
            "predicted_by": PREDICTED_BY,
        }



def _refuse_unless_fits(spec: ModelSpec, precision: str, device: str, mem_avail: float) -> None:
    """One ChalkError line when `spec`'s weights at `precision` take more than half the memory free on `device`."""
    weight_bytes = ModelSizes(spec).weight_bytes(precision)
    if weight_bytes > 0.5 * mem_avail:
        raise ChalkError(f"{spec.id} needs {weight_bytes / 1e9:.1f} GB of {precision} weights; "
                         f"this {device} has {mem_avail / 1e9:.1f} GB free (use a smaller config)")


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
    _stat([1.0], statistic)
    cfg, spec = _config_dict(model, device)
    # cheap checks first: a model too big for this machine is refused before torch loads or anything is measured,
    # at the narrowest dtype the run could pick (checked again below at the one it picks)
    narrowest = TORCH_TO_CHALK.get(dtype, "bf16") if dtype != "float8" else "bf16"
    if device == "cpu":
        _refuse_unless_fits(spec, narrowest, device, _host_available_bytes())
    torch = _torch()
    _check_transformers_version()
    device = _check_device(torch, device)
    if device == "cuda":
        _refuse_unless_fits(spec, narrowest, device, float(torch.cuda.mem_get_info()[0]))
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
    _refuse_unless_fits(spec, precision, device, mem_avail)

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
    from chalk.specs.hardware import ChipEfficiency

    fitted_on = (f"fitted by chalk measure on {spec.id} in {dtype} ({len(timings)} steps, {int(train.sum())} to "
                 f"fit, the rest held out)")
    chip = replace(
        chip, notes=(f"{chip.notes} Efficiency {fitted_on}: see the efficiency block, which chalk uses when this "
                     f"file is passed as --hardware.").strip(),
        efficiency=ChipEfficiency(compute=fit.compute, memory=fit.memory, overhead_s=fit.overhead_s,
                                  overhead_prefill_s=fit.overhead_prefill_s, source=fitted_on))
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
    make_folder(p.parent, "measure output")
    with atomic_path(p, "measure output") as tmp, open(tmp, "w", newline="", encoding="utf-8") as f:
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
             f"predicted  by {PREDICTED_BY}",
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


if __name__ == "__main__":  # python -m chalk.analyses.step.measure [cpu|cuda]
    res = run_measure(sys.argv[1] if len(sys.argv) > 1 else "cpu", quick=True, progress=lambda s: print(s, flush=True))
    print(format_report(res))
