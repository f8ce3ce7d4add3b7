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

`steps.csv` (where the folder has it): whole decode steps of a Llama-3.1-8B-shaped model in plain torch, one CUDA
graph per step (scripts/device_steps.py), against `chalk.estimate` of llama-3.1-8b at tp=1, bf16 weights and bf16
KV: measured / estimate as is and without the estimate's fitted `overhead` op (median, p10, p90), over all cells and
by regime ('weights': the step reads fewer KV bytes than weight bytes; 'kv': the rest), and the step split by the
same kernels timed alone in kernels.csv (`steps_decomposition`).

`kernels_fp8q.csv` (where the folder has it): the FP8 linear with its activation's quantisation timed beside bf16
and bare FP8 in one run (`gemm_fp8_dynq`: dynamic per-tensor scale; `gemm_fp8_staticq`: a fixed scale;
scripts/device_kernels.py's docstring). Printed per framework, op and m bucket (m <= 256, m > 256): the medians in
us of the measured time, chalk's time (the FP8 table capped at the bf16 table, `KernelProfile.wider_math`), the FP8
table before that cap and the bf16 table; measured / chalk, measured / uncapped FP8 table (median, p10, p90); and,
shape by shape in the same run, what the quantisation adds to the bare FP8 GEMM next to what the uncapped FP8 table
carries over it.

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
#: the quantised-FP8-linear run's ops (kernels_fp8q.csv), and its m buckets: decode-sized steps, and larger
FP8Q_OPS = ("gemm_bf16", "gemm_fp8", "gemm_fp8_dynq", "gemm_fp8_staticq")
M_BUCKETS = (("m<=256", 1, 256), ("m>256", 257, float("inf")))


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


def fp8_table_uncapped_s(profile, m: float, n: float, k: float) -> float:
    """chalk's FP8 GEMM table time before the cap at the same GEMM's bf16 time (`KernelProfile.wider_math`, which
    `gemm_time_s` applies): the table as distilled, floor included."""
    from chalk.analyses.step.kernels import GemmShape

    shape = GemmShape(profile, float(n), float(k), "fp8")
    shape._wider = None  # the cap's one input: without it, time() is the table's own (private, read only here)
    return float(shape.time(float(m)))


def fp8q_rows(rows, chip, framework: str) -> list[dict]:
    """Each timed row of a kernels_fp8q.csv with chalk's times for its shape under `framework`: `chalk_s` (what
    chalk uses: bf16 rows the bf16 table, FP8 rows the FP8 table capped at bf16), `fp8_raw_s` (the FP8 table
    uncapped), `bf16_s` (the bf16 table), and `bare_fp8_s` (the same shape's bare FP8 GEMM measured in the run)."""
    from chalk.analyses.step.kernels import kernel_profile

    prof = kernel_profile(chip, framework)
    bare = {key(r)[1:]: _f(r, "measured_s") for r in rows if r["op"] == "gemm_fp8"}
    out = []
    for r in rows:
        m, n, k = _f(r, "m"), _f(r, "n"), _f(r, "k")
        out.append({"op": r["op"], "m": m, "n": n, "k": k, "measured_s": _f(r, "measured_s"),
                    "chalk_s": table_time_s(prof, r), "fp8_raw_s": fp8_table_uncapped_s(prof, m, n, k),
                    "bf16_s": float(prof.gemm_time_s(m, n, k, "bf16")), "bare_fp8_s": bare.get(key(r)[1:])})
    return out


def fp8q_summary(rows, chip, framework: str) -> dict:
    """{op: {bucket: figures}} of `fp8q_rows`: medians in us (measured, chalk, uncapped FP8 table, bf16 table),
    `summary`s of measured / chalk and measured / uncapped FP8 table, and the us added over the same shape's bare
    FP8 GEMM, measured (`added_us`) and in the uncapped table (`table_added_us`: table - bare measured)."""
    rs = fp8q_rows(rows, chip, framework)
    out: dict = {}
    for op in FP8Q_OPS:
        for name, lo, hi in M_BUCKETS:
            sel = [x for x in rs if x["op"] == op and lo <= x["m"] <= hi]
            if not sel:
                continue
            col = {c: np.array([x[c] for x in sel]) for c in ("measured_s", "chalk_s", "fp8_raw_s", "bf16_s")}
            bare = np.array([x["bare_fp8_s"] for x in sel], dtype=float)
            out.setdefault(op, {})[name] = {
                **{f"{c[:-2]}_us": float(np.median(v)) * 1e6 for c, v in col.items()},
                "over_chalk": summary(col["measured_s"] / col["chalk_s"]),
                "over_fp8_raw": summary(col["measured_s"] / col["fp8_raw_s"]),
                "added_us": summary((col["measured_s"] - bare) * 1e6),
                "table_added_us": summary((col["fp8_raw_s"] - bare) * 1e6)}
    return out


def cast_stream_tb_per_s(rows, m_min: float = 257.0) -> list[float]:
    """The scaled bf16 -> e4m3 cast's streaming rate (TB/s) at each shape of m >= `m_min` of a kernels_fp8q.csv,
    by difference: 3 m k bytes (bf16 read, e4m3 written) over (static-quant FP8 linear - bare FP8 GEMM)."""
    by: dict = {}
    for r in rows:
        by.setdefault(key(r)[1:], {})[r["op"]] = r
    out = []
    for ops in by.values():
        if "gemm_fp8_staticq" in ops and "gemm_fp8" in ops and _f(ops["gemm_fp8"], "m") >= m_min:
            q, b = ops["gemm_fp8_staticq"], ops["gemm_fp8"]
            dt = _f(q, "measured_s") - _f(b, "measured_s")
            if dt > 0:
                out.append(3.0 * _f(q, "m") * _f(q, "k") / dt / 1e12)
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


#: the layers of the timed step model (scripts/device_steps.py: Llama-3.1-8B, 32 layers) and its linear layers
STEP_LAYERS = 32
STEP_GEMMS = ("qkv", "o", "gate_up", "down")


def load_steps(path, variant: str = "gqa", pass_: int = 1) -> list[dict]:
    """The timed rows of a steps.csv (scripts/device_steps.py) of one attention variant and pass, errors left out."""
    with open(path, newline="") as fh:
        return [r for r in csv.DictReader(fh) if not r.get("error") and r["variant"] == variant
                and int(r["pass"]) == pass_]


def step_regime(r: dict) -> str:
    """'weights' where the step reads fewer KV bytes than weight bytes (small batch x context), else 'kv'."""
    return "kv" if _f(r, "kv_bytes") >= _f(r, "weight_bytes") else "weights"


def steps_vs_estimate(rows, hardware: str = "h200", model: str = "llama-3.1-8b") -> list[dict]:
    """Each measured decode step next to `chalk.estimate` of the same model, chip, batch and context at tp=1, bf16
    weights and bf16 KV: the estimate, its fitted `overhead` op, its attention op, and chalk's weight-GEMM ops."""
    import chalk

    out = []
    for r in rows:
        b, L = int(r["batch"]), int(r["context"])
        e = chalk.estimate(model, hardware, b, L, phase="decode", layout="tp=1", precision="bf16",
                           kv_precision="bf16")
        ops = {o["name"]: float(o["time_s"]) for o in e.ops}
        out.append({"batch": b, "context": L, "regime": step_regime(r), "measured_s": _f(r, "measured_s"),
                    "p10_s": _f(r, "p10_s"), "p90_s": _f(r, "p90_s"), "estimate_s": float(e.step_time_s),
                    "overhead_s": ops.get("overhead", 0.0), "attention_s": ops.get("attention_decode", 0.0),
                    "gemms_s": ops.get("attn_proj", 0.0) + ops.get("mlp", 0.0), "lm_head_s": ops.get("lm_head", 0.0),
                    "bound": str(e.bound)})
    return out


def steps_summary(cases) -> dict:
    """{regime ('all', 'weights', 'kv'): {'as_is': summary of measured / estimate, 'no_overhead': summary of
    measured / (estimate - its overhead op)}}."""
    out = {}
    for reg in ("all", "weights", "kv"):
        sel = [c for c in cases if reg == "all" or c["regime"] == reg]
        if sel:
            out[reg] = {"as_is": summary([c["measured_s"] / c["estimate_s"] for c in sel]),
                        "no_overhead": summary([c["measured_s"] / (c["estimate_s"] - c["overhead_s"])
                                                for c in sel])}
    return out


def steps_decomposition(cases, kernel_rows) -> list[dict]:
    """Where kernels.csv (the same kind of H200, an earlier lease) timed the step's kernels alone at the same shape
    (bf16 GEMMs of Llama-3.1-8B TP1 at m = batch, SDPA decode at batch x context): the step's weight GEMMs
    (layers x qkv, o, gate_up, down) and attention (layers x one SDPA) as timed alone, the rest of the measured
    step (lm_head, norms, RoPE, the KV write, SiLU, residuals, argmax, gaps), and chalk's counterparts; `swapped`:
    measured / (chalk's estimate without its overhead op, its attention op replaced by the kernel timed alone)."""
    g, a = {}, {}
    for r in kernel_rows:
        if r["model"] != "llama-3.1-8b" or r["tp"] != "1":
            continue
        if r["op"] == "gemm_bf16":
            g[(r["layer"], int(r["m"]))] = _f(r, "measured_s")
        elif r["op"] == "attention_decode":
            a[(int(r["batch"]), int(r["L"]))] = _f(r, "measured_s")
    out = []
    for c in cases:
        b, L = c["batch"], c["context"]
        if (b, L) not in a or any((la, b) not in g for la in STEP_GEMMS):
            continue
        gem = STEP_LAYERS * sum(g[(la, b)] for la in STEP_GEMMS)
        att = STEP_LAYERS * a[(b, L)]
        rest_chalk = c["estimate_s"] - c["overhead_s"] - c["attention_s"] - c["gemms_s"]
        out.append({"batch": b, "context": L, "regime": c["regime"], "measured_s": c["measured_s"],
                    "gemms_alone_s": gem, "gemms_chalk_s": c["gemms_s"], "attention_alone_s": att,
                    "attention_chalk_s": c["attention_s"], "rest_s": c["measured_s"] - gem - att,
                    "rest_chalk_s": rest_chalk, "overhead_s": c["overhead_s"],
                    "swapped": c["measured_s"] / (c["estimate_s"] - c["overhead_s"] - c["attention_s"] + att)})
    return out


def print_steps(data: Path, kernel_rows, hardware: str) -> dict:
    """Print (and return) the whole decode steps of steps.csv against `chalk estimate`."""
    env = json.loads((data / "env_steps.json").read_text()) if (data / "env_steps.json").exists() else {}
    rows = load_steps(data / "steps.csv")
    cases = steps_vs_estimate(rows, hardware)
    print(f"\nwhole decode steps, one CUDA graph each ({len(rows)} cells of {data / 'steps.csv'}, variant gqa, pass 1: "
          f"{rows[0]['source'] if rows else ''}; {rows[0]['attn_backend'] if rows else ''}) against chalk estimate "
          f"-m llama-3.1-8b -H {hardware} --layout tp=1 --kv-precision bf16 (bf16 weights); 'no ovh' = the "
          f"estimate less its fitted overhead op ({cases[0]['overhead_s'] * 1e3:.2f} ms)")
    if env.get("copy_bytes_per_s"):
        print(f"device copy {env['copy_bytes_per_s'] / 1e12:.2f} TB/s (read + written); weights "
              f"{env.get('weight_bytes', 0) / 1e9:.2f} GB")
    print(f"{'batch':>6}{'ctx':>6} regime  {'measured ms':>12}{'(p10-p90)':>16}{'estimate':>10}{'no ovh':>8}"
          f"{'meas/est':>9}{'meas/no ovh':>12}  bound")
    for c in cases:
        print(f"{c['batch']:6d}{c['context']:6d} {c['regime']:8}{c['measured_s'] * 1e3:12.2f} ({c['p10_s'] * 1e3:6.2f}-"
              f"{c['p90_s'] * 1e3:6.2f}){c['estimate_s'] * 1e3:10.2f}{(c['estimate_s'] - c['overhead_s']) * 1e3:8.2f}"
              f"{c['measured_s'] / c['estimate_s']:9.2f}{c['measured_s'] / (c['estimate_s'] - c['overhead_s']):12.2f}"
              f"  {c['bound']}")
    sm = steps_summary(cases)
    for reg, x in sm.items():
        a, n = x["as_is"], x["no_overhead"]
        print(f"  {reg:8} ({a['rows']:2d} cells) measured / estimate median {a['median']:.2f} (p10 {a['p10']:.2f}, "
              f"p90 {a['p90']:.2f}); without its overhead op {n['median']:.2f} (p10 {n['p10']:.2f}, "
              f"p90 {n['p90']:.2f})")
    dec = steps_decomposition(cases, kernel_rows)
    print("the step split by the same kernels timed alone in kernels.csv (ms; chalk's op in brackets; rest = the step "
          "less the GEMMs and attention timed alone, chalk's = lm_head + elementwise + sampling); swapped = measured / "
          "(estimate less overhead, its attention replaced by the kernel timed alone)")
    for d in dec:
        print(f"{d['batch']:6d}{d['context']:6d} step {d['measured_s'] * 1e3:6.2f}  gemms "
              f"{d['gemms_alone_s'] * 1e3:5.2f} "
              f"({d['gemms_chalk_s'] * 1e3:5.2f})  attention {d['attention_alone_s'] * 1e3:6.2f} "
              f"({d['attention_chalk_s'] * 1e3:5.2f})  rest {d['rest_s'] * 1e3:5.2f} ({d['rest_chalk_s'] * 1e3:4.2f}, "
              f"+ overhead {d['overhead_s'] * 1e3:.2f})  swapped {d['swapped']:.2f}")
    again = {(r["batch"], r["context"]): _f(r, "measured_s") for r in load_steps(data / "steps.csv", pass_=2)}
    fold = {(r["batch"], r["context"]): _f(r, "measured_s") for r in load_steps(data / "steps.csv", "fold")}
    rr = summary([_f(r, "measured_s") / again[(r["batch"], r["context"])] for r in rows])
    rf = summary([_f(r, "measured_s") / fold[(r["batch"], r["context"])] for r in rows])
    print(f"run-to-run (pass 1 / pass 2): median {rr['median']:.3f}, p10 {rr['p10']:.3f}, p90 {rr['p90']:.3f}; "
          f"gqa / fold (GQA folded into the query rows): median {rf['median']:.3f}, min {rf['min']:.3f}, max "
          f"{rf['max']:.3f}")
    return {"cases": cases, "summary": sm, "decomposition": dec, "repeat": rr, "gqa_over_fold": rf}


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
    if (data / "kernels_fp8q.csv").exists():
        qrows = load_rows(data / "kernels_fp8q.csv")
        print(f"\nthe FP8 linear with its activation's quantisation, {len(qrows)} rows of {data / 'kernels_fp8q.csv'} "
              f"({qrows[0]['source'] if qrows else ''}); us are medians over the bucket's shapes; chalk = FP8 table "
              f"capped at bf16, fp8 table = uncapped; added = over the same shape's bare FP8 GEMM in the run")
        print(f"{'framework':10}{'op':18}{'m':8}{'measured':>9}{'chalk':>8}{'fp8 tab':>8}{'bf16 tab':>9}"
              f"{'meas/chalk':>11}{'meas/fp8tab (p10-p90)':>23}{'added us (p10-p90)':>21}{'table added':>12}")
        out["fp8q"] = {}
        for fw in FRAMEWORKS:
            sm = out["fp8q"][fw] = fp8q_summary(qrows, chip, fw)
            for op, buckets in sm.items():
                for b, x in buckets.items():
                    oc, orw, ad = x["over_chalk"], x["over_fp8_raw"], x["added_us"]
                    print(f"{fw:10}{op:18}{b:8}{x['measured_us']:9.1f}{x['chalk_us']:8.1f}{x['fp8_raw_us']:8.1f}"
                          f"{x['bf16_us']:9.1f}{oc['median']:11.2f}{orw['median']:9.2f} ({orw['p10']:.2f}-"
                          f"{orw['p90']:.2f}){ad['median']:9.1f} ({ad['p10']:5.1f}-{ad['p90']:5.1f})"
                          f"{x['table_added_us']['median']:12.1f}")
        s = summary(cast_stream_tb_per_s(qrows))
        out["fp8q_cast_stream_tb_per_s"] = s
        frac = s["median"] * 1e12 / chip.hbm_bandwidth_bytes_per_s
        print(f"torch's scaled cast alone (static-quant linear - bare FP8 GEMM, m > 256) streams 3mk bytes at median "
              f"{s['median']:.2f} TB/s (p10 {s['p10']:.2f}, p90 {s['p90']:.2f}): {frac:.0%} of the catalog HBM "
              f"bandwidth, "
              f"so at large m the added times are torch's, an upper bound for a fused engine kernel; bf16 rows' "
              f"'added' is bf16 over bare FP8")
        if (data / "kernels_fp8q_repeat.csv").exists():
            s = summary(repeat_ratios(qrows, load_rows(data / "kernels_fp8q_repeat.csv")))
            out["fp8q_repeat"] = s
            print(f"run-to-run of that run ({s['rows']} rows): median {s['median']:.3f}, p10 {s['p10']:.3f}, "
                  f"p90 {s['p90']:.3f}")
        old = {key(r): _f(r, "measured_s") for r in rows}
        for op in ("gemm_bf16", "gemm_fp8"):
            rr = [_f(r, "measured_s") / old[key(r)] for r in qrows if r["op"] == op and key(r) in old]
            if rr:
                s = summary(rr)
                out.setdefault("fp8q_vs_kernels", {})[op] = s
                print(f"{op} in this run / in kernels.csv ({s['rows']} rows): median {s['median']:.3f}, p10 "
                      f"{s['p10']:.3f}, p90 {s['p90']:.3f}")
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
    if (data / "steps.csv").exists():
        out["steps"] = print_steps(data, rows, args.chip)
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
