#!/usr/bin/env python3
"""Kernels timed on a real GPU (scripts/device_kernels.py) against chalk's distilled kernel tables, and the steps of
`chalk measure --device cuda` against `chalk estimate`.

    python scripts/compare_device.py [--data tests/data/h200_device] [--chip h200] [--rows]

For every timed row (a GEMM at bf16 or FP8, a decode or prefill attention) chalk's own lookup answers the same
kernel at the same shape (`KernelProfile.gemm_time_s` / `attention_time_s` of `kernel_profile(chip, framework)`,
at chalk's default table version) for each framework whose tables the chip has (trtllm, vllm, sglang). Printed
per kernel kind and framework: rows, and the median, p10 and p90 of measured / table (above 1: the real kernel is
slower than the table says). Also: the fastest streaming and compute rates of the measured rows as fractions of the
chip's catalog HBM bandwidth and peak (chalk's byte and FLOP counts, `chalk.equations.kernels`), the run-to-run
spread of a repeated run, and the measured steps of `chalk measure` next to chalk's fitted whole-step roofline and
`chalk.estimate` (op by op, at tp=1, bf16 weights and KV) of the same model and shape.

The measured kernels are torch's: cuBLAS for bf16 (`torch.mm`), cuBLASLt FP8 with per-tensor scales
(`torch._scaled_mm`), FlashAttention-2 through `scaled_dot_product_attention`; the tables are TensorRT-LLM's,
vLLM's and SGLang's own kernels as aiconfigurator-core measured them. A ratio far from 1 says the engines' kernels
and torch's differ at that shape, not by itself that the table is wrong.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "h200_device"
OPS = ("gemm_bf16", "gemm_fp8", "attention_decode", "attention_prefill")


def load_rows(path) -> list[dict]:
    """The timed rows of a kernels.csv (rows that recorded an error are left out)."""
    with open(path, newline="") as fh:
        return [r for r in csv.DictReader(fh) if not r.get("error")]


def _f(r: dict, k: str) -> float:
    return float(r[k])


def table_time_s(profile, r: dict) -> float:
    """chalk's kernel time for the row's kernel and shape under `profile` (a `KernelProfile`)."""
    if r["family"] == "gemm":
        return float(profile.gemm_time_s(_f(r, "m"), _f(r, "n"), _f(r, "k"), r["dtype"]))
    phase = r["family"].split("_", 1)[1]
    return float(profile.attention_time_s(phase, "mha", _f(r, "batch"), _f(r, "q"), _f(r, "L"), _f(r, "heads"),
                                          _f(r, "kv_heads"), _f(r, "head_dim"), r["dtype"]))


def work(r: dict) -> tuple[float, float, str]:
    """(FLOPs, HBM bytes, peak precision) of a row by chalk's own counts (`chalk.equations.kernels`)."""
    from chalk.equations import kernels as K

    if r["family"] == "gemm":
        eb = 2.0 if r["dtype"] == "bf16" else 1.0
        m, n, k = _f(r, "m"), _f(r, "n"), _f(r, "k")
        return K.gemm_kernel_flops(m, n, k), K.gemm_kernel_bytes(m, n, k, eb), r["dtype"]
    b, L, h, kvh, d = (_f(r, x) for x in ("batch", "L", "heads", "kv_heads", "head_dim"))
    if r["family"] == "mha_decode":
        return K.decode_attention_flops(b, 1.0, L, h, d), K.decode_attention_bytes(b, L, kvh, d, 2.0), "bf16"
    return K.prefill_attention_flops(b, L, L, h, d), K.prefill_attention_bytes(b, L, L, h, kvh, d, 2.0), "bf16"


def fractions(r: dict, chip) -> tuple[float, float]:
    """(bytes streamed per second / catalog HBM bandwidth, FLOP/s / catalog peak) of a measured row."""
    fl, by, p = work(r)
    t = _f(r, "measured_s")
    return by / t / chip.hbm_bandwidth_bytes_per_s, fl / t / chip.peak_flops_per_s(p)


def summary(x) -> dict:
    x = np.asarray(x, dtype=float)
    return {"rows": int(x.size), "median": float(np.median(x)), "p10": float(np.percentile(x, 10)),
            "p90": float(np.percentile(x, 90)), "min": float(x.min()), "max": float(x.max())}


def ratios(rows, chip, framework: str) -> dict:
    """{op: [measured / table]} under one framework's tables."""
    from chalk.analyses.step.kernels import kernel_profile

    prof = kernel_profile(chip, framework)
    out: dict = {}
    for r in rows:
        out.setdefault(r["op"], []).append(_f(r, "measured_s") / table_time_s(prof, r))
    return out


def key(r: dict) -> tuple:
    return tuple(r[k] for k in ("op", "model", "tp", "layer", "m", "n", "k", "batch", "L"))


def repeat_ratios(rows, again) -> list[float]:
    """measured_s of each row over the same row's in a repeated run."""
    by = {key(r): _f(r, "measured_s") for r in again}
    return [_f(r, "measured_s") / by[key(r)] for r in rows if key(r) in by]


def measure_vs_estimate(measure: dict, hardware: str = "h200") -> list[dict]:
    """`chalk measure`'s cases next to `chalk.estimate` of the same model config and shape (tp=1, bf16 weights and KV):
    measured, the measure fit's prediction, the estimate and its bound."""
    import chalk
    from chalk.specs.model import model_from_config

    spec = model_from_config(measure["model_config"], id=measure["model"], source="chalk measure's GPU model config")
    out = []
    for c in measure["cases"]:
        e = chalk.estimate(spec, hardware, c["batch"], c["context"], phase=c["phase"], layout="tp=1",
                           precision="bf16", kv_precision="bf16")
        out.append({"phase": c["phase"], "batch": c["batch"], "context": c["context"], "held_out": c["held_out"],
                    "measured_s": c["measured_s"], "fit_s": c["predicted_s"], "estimate_s": float(e.step_time_s),
                    "estimate_bound": str(e.bound)})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(DATA), help="folder with kernels.csv (and kernels_repeat.csv, measure.json)")
    ap.add_argument("--chip", default="h200")
    ap.add_argument("--rows", action="store_true", help="print every row's measured and table times (trtllm)")
    ap.add_argument("--json", dest="json_out", help="also write the figures to this JSON file")
    args = ap.parse_args(argv)
    from chalk.analyses.step.kernels import FRAMEWORKS, STREAM_CEILING, kernel_profile
    from chalk.specs.catalog import load_chip

    data = Path(args.data)
    chip = load_chip(args.chip)
    rows = load_rows(data / "kernels.csv")
    env = json.loads((data / "env.json").read_text()) if (data / "env.json").exists() else {}
    print(f"{len(rows)} rows from {data / 'kernels.csv'}: {rows[0]['source'] if rows else ''}")
    if env:
        print(f"device {env.get('device_name')}, driver {env.get('driver')}, torch {env.get('torch')}, CUDA "
              f"{env.get('cuda')}, {env.get('date_utc')}")
    out: dict = {"source": rows[0]["source"] if rows else "", "ratios": {}}
    print(f"\nmeasured / chalk table on {chip.id} (above 1: the real kernel is slower than the table)")
    print(f"{'framework':10}{'op':20}{'rows':>5}{'median':>9}{'p10':>8}{'p90':>8}{'min':>8}{'max':>8}")
    for fw in FRAMEWORKS:
        for op, v in sorted(ratios(rows, chip, fw).items(), key=lambda kv: OPS.index(kv[0])):
            s = summary(v)
            out["ratios"].setdefault(fw, {})[op] = s
            print(f"{fw:10}{op:20}{s['rows']:5d}{s['median']:9.3f}{s['p10']:8.3f}{s['p90']:8.3f}{s['min']:8.3f}"
                  f"{s['max']:8.3f}")
    print(f"\nfastest measured rows, as fractions of {chip.id}'s catalog HBM bandwidth "
          f"({chip.hbm_bandwidth_bytes_per_s / 1e12:.2f} TB/s; chalk's STREAM_CEILING {STREAM_CEILING}) and peak")
    out["fractions"] = {}
    for op in OPS:
        fr = [fractions(r, chip) for r in rows if r["op"] == op]
        if not fr:
            continue
        bw, pk = float(max(f[0] for f in fr)), float(max(f[1] for f in fr))
        over = int(sum(f[0] > STREAM_CEILING for f in fr))
        out["fractions"][op] = {"max_stream": bw, "max_compute": pk, "rows_over_stream_ceiling": over}
        print(f"  {op:20} stream <= {bw:.3f}  compute <= {pk:.3f}  rows above STREAM_CEILING: {over}")
    if (data / "kernels_repeat.csv").exists():
        rr = repeat_ratios(rows, load_rows(data / "kernels_repeat.csv"))
        s = summary(rr)
        out["repeat"] = s
        print(f"\nrun-to-run (run 1 / run 2, {s['rows']} rows): median {s['median']:.3f}, p10 {s['p10']:.3f}, "
              f"p90 {s['p90']:.3f}, min {s['min']:.3f}, max {s['max']:.3f}")
    if (data / "measure.json").exists():
        m = json.loads((data / "measure.json").read_text())
        print(f"\nchalk measure on {m['device_name']}: model {m['model']} ({m['dtype']}, {m['attention']} attention); "
              f"ceilings bf16 {m['ceilings']['flops_per_s']['bf16'] / 1e12:.0f} TFLOP/s, fp8 "
              f"{m['ceilings']['flops_per_s'].get('fp8', float('nan')) / 1e12:.0f} TFLOP/s, copy "
              f"{m['mem_bandwidth_bytes_per_s'] / 1e12:.2f} TB/s; fit e_c {m['efficiency']['compute']:.3f} e_m "
              f"{m['efficiency']['memory']:.3f} overhead {m['efficiency']['overhead_s'] * 1e3:.2f} ms; held-out "
              f"|error| median {m['median_abs_error_held_out']:.1%} p90 {m['p90_abs_error_held_out']:.1%} over "
              f"{m['n_held_out']} steps")
        cases = measure_vs_estimate(m, args.chip)
        out["measure_vs_estimate"] = cases
        print(f"{'phase':8}{'batch':>6}{'ctx':>7}{'measured ms':>13}{'fit ms':>9}{'estimate ms':>13}  bound     "
              f"measured/estimate")
        for c in cases:
            print(f"{c['phase']:8}{c['batch']:6d}{c['context']:7d}{c['measured_s'] * 1e3:13.2f}{c['fit_s'] * 1e3:9.2f}"
                  f"{c['estimate_s'] * 1e3:13.2f}  {c['estimate_bound']:9} {c['measured_s'] / c['estimate_s']:.2f}")
        for ph in ("decode", "prefill"):
            s = summary([c["measured_s"] / c["estimate_s"] for c in cases if c["phase"] == ph])
            out.setdefault("measure_over_estimate", {})[ph] = s
            print(f"  {ph}: measured / estimate median {s['median']:.2f} (p10 {s['p10']:.2f}, p90 {s['p90']:.2f})")
    if args.rows:
        prof = kernel_profile(chip, "trtllm")
        for r in rows:
            t = table_time_s(prof, r)
            print(f"{r['op']:18} {r['model']:14} tp{r['tp']} {r['layer']:9} m={r['m']:>5} n={r['n']:>6} "
                  f"k={r['k']:>6} b={r['batch']:>4} L={r['L']:>6} measured {_f(r, 'measured_s'):.3e} table "
                  f"{t:.3e} ratio {_f(r, 'measured_s') / t:.2f}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
