#!/usr/bin/env python3
"""Time real GEMM and attention kernels on this machine's GPU, for comparison with chalk's distilled kernel tables.

    python scripts/device_kernels.py --device cuda --out DIR [--budget-s 170]
    python scripts/device_kernels.py --device cpu --out DIR --tiny      # a smoke test of every code path

Writes DIR/kernels.csv (one row per kernel and shape, flushed as it goes, so a run stopped early keeps what it
timed) and DIR/env.json (device name, driver, torch, CUDA, cuBLAS/cuDNN, date, the command). Needs torch only;
chalk is not imported, so the script runs on a bare machine. `scripts/compare_device.py` reads the CSV back and
asks chalk's `KernelProfile` for the same kernels.

What is timed, and how:
- GEMM: one linear layer's product, activations [m x k] times the weight [n x k] transposed (nn.Linear's layout),
  in bf16 (`torch.mm`, cuBLAS) and in FP8 e4m3 with per-tensor scales (`torch._scaled_mm`, scale tensors of one
  fp32 value each, bf16 output). Shapes: Llama-3.1-8B and -70B layers (qkv, o, gate_up, down) on one GPU of TP
  1/4/8, m (tokens in the step) from 1 to 8192.
- FP8 linear with the activation's quantisation (`--gemm-dtypes`, ops `gemm_fp8_dynq` and `gemm_fp8_staticq`,
  dtype fp8): the bf16 activation [m x k] is cast to e4m3 before the same `_scaled_mm`, as an engine's FP8 linear
  layer does. Dynamic per-tensor scale (`gemm_fp8_dynq`): amax = `torch.linalg.vector_norm(x, inf)` (one
  reduction over the bf16 activation, fp32 result), scale = amax / 448 (a one-value kernel), x / scale written
  straight to float8_e4m3fn (one elementwise kernel, the cast fused in: `torch.div(..., out=)`); three kernels
  before the GEMM, as vLLM's dynamic per-tensor quantisation runs (zeroed scale, amax reduction, scaled cast).
  Static scale (`gemm_fp8_staticq`): a fixed scale, x / scale cast to e4m3 (the one elementwise kernel). Where the
  fused cast fails on the device (probed in a child process first: a device-side assert would end this one) the
  division and the cast run as two kernels, and the row's `backend` says so. No saturation clamp: the scales keep
  |x / scale| <= 448 (a fused engine kernel clamps in registers, at no extra memory traffic).
- Attention: `torch.nn.functional.scaled_dot_product_attention` in bf16 with grouped-query heads (`enable_gqa`),
  the FlashAttention backend asked for first (then memory-efficient, cuDNN, math: the backend that ran is in the
  row). Decode: one query token per sequence over a K/V cache of batch x context; prefill: causal, batch x prompt.
  Heads per GPU as in Llama-3.1-8B (32 q / 8 kv) at TP1/TP4 and -70B (64 q / 8 kv) at TP4/TP8, head dim 128.
- Each row's inputs are allocated in several copies (at least ROTATE_BYTES = 256 MB in all, 4x the H200's L2) and
  the timed sequence walks through them, so a small kernel reads its operands from HBM as a real step does rather
  than from a warm L2. The sequence of calls is captured in one CUDA graph (launch gaps removed) and replayed;
  each replay is timed with CUDA events after warm-ups; a row's time is the median over replays of (replay time /
  calls in it). Where capture fails the calls run eagerly (the row's `method` says so).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import math
import os
import platform
import socket
import statistics
import subprocess
import sys
import time

#: Llama-3.1 layer shapes (hidden, query heads, KV heads, head dim, MLP intermediate), from the models' config.json
#: (meta-llama/Llama-3.1-8B, -70B on Hugging Face; also chalk's catalog entries llama-3.1-8b, llama-3.1-70b).
MODELS = {
    "llama-3.1-8b": (4096, 32, 8, 128, 14336),
    "llama-3.1-70b": (8192, 64, 8, 128, 28672),
}
#: (model, tensor-parallel size) layouts whose per-GPU shapes are timed
LAYOUTS = (("llama-3.1-8b", 1), ("llama-3.1-8b", 4), ("llama-3.1-70b", 4), ("llama-3.1-70b", 8))
GEMM_M = (1, 4, 16, 32, 64, 128, 256, 1024, 4096, 8192)
DECODE_BATCH = (1, 8, 32, 128)
DECODE_CONTEXT = (512, 2048, 8192, 32768)
PREFILL_BATCH = (1, 4)
PREFILL_PROMPT = (512, 2048, 8192)
ROTATE_BYTES = 256 * 2 ** 20
MAX_COPIES = 64
MIN_CALLS = 4

GEMM_DTYPES = ("bf16", "fp8", "fp8_dynq", "fp8_staticq")
E4M3_MAX = 448.0
FIELDS = ("op", "family", "dtype", "model", "tp", "layer", "m", "n", "k", "batch", "q", "L", "heads", "kv_heads",
          "head_dim", "measured_s", "min_s", "reps", "calls", "copies", "flops", "bytes", "tflops_per_s", "tb_per_s",
          "backend", "method", "error", "source")


def source_line(env: dict, script: str = "scripts/device_kernels.py") -> str:
    """Where a row comes from: the device, its driver, torch and CUDA, the date and the command (`environment`)."""
    return (f"measured on {env.get('device_name')} (driver {env.get('driver')}, torch {env.get('torch')}, CUDA "
            f"{env.get('cuda')}) {str(env.get('date_utc', ''))[:10]} by {script} --device {env.get('device')}")


def write_env(out: str, env: dict) -> None:
    """OUT/env.json: what the run read off the machine, rewritten whole as the run adds to it."""
    with open(os.path.join(out, "env.json"), "w") as fh:
        json.dump(env, fh, indent=1)


def gemm_shapes():
    """(model, tp, layer, n, k) of each linear layer on one GPU: column-parallel qkv and gate_up split n,
    row-parallel o and down split k."""
    out = []
    for model, tp in LAYOUTS:
        hid, h, kvh, d, inter = MODELS[model]
        out += [(model, tp, "qkv", (h + 2 * kvh) * d // tp, hid), (model, tp, "o", hid, h * d // tp),
                (model, tp, "gate_up", 2 * inter // tp, hid), (model, tp, "down", hid, inter // tp)]
    return out


def attention_heads():
    """(model, tp, query heads, KV heads, head dim) per GPU."""
    return [(model, tp, MODELS[model][1] // tp, max(1, MODELS[model][2] // tp), MODELS[model][3])
            for model, tp in LAYOUTS]


def environment(torch, device: str, argv) -> dict:
    env = {"date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "host": socket.gethostname(),
           "python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "command": " ".join(argv), "device": device, "rotate_bytes": ROTATE_BYTES}
    if device == "cuda":
        p = torch.cuda.get_device_properties(0)
        env.update(device_name=torch.cuda.get_device_name(0), sm_count=p.multi_processor_count,
                   memory_bytes=p.total_memory, capability=f"{p.major}.{p.minor}",
                   l2_bytes=getattr(p, "L2_cache_size", None),
                   cudnn=torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None)
        try:
            q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,"
                                "power.limit,clocks.sm,clocks.mem", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=20)
            env["nvidia_smi"] = q.stdout.strip()
            env["driver"] = q.stdout.split(",")[1].strip() if q.returncode == 0 else None
        except (OSError, subprocess.SubprocessError) as e:
            env["nvidia_smi"] = f"failed: {e}"
            env["driver"] = None
    else:
        env.update(device_name=platform.processor() or platform.machine(), driver=None)
    return env


class Timer:
    def __init__(self, torch, device: str, max_s: float = 0.15, min_reps: int = 3, max_reps: int = 30):
        self.torch, self.device, self.max_s, self.min_reps, self.max_reps = torch, device, max_s, min_reps, max_reps

    def sync(self):
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def __call__(self, run, calls: int):
        """(median s per call, min s per call, replays, method): `run()` issues `calls` kernel calls."""
        torch = self.torch
        if self.device != "cuda":
            run()
            samples = []
            t_end = time.perf_counter() + self.max_s
            while len(samples) < self.max_reps and (len(samples) < self.min_reps or time.perf_counter() < t_end):
                t0 = time.perf_counter()
                run()
                samples.append((time.perf_counter() - t0) / calls)
            return statistics.median(samples), min(samples), len(samples), "eager, perf_counter"
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-ups off the default stream, as graph capture wants
            run()
            run()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph, method = None, "cuda graph, events"
        try:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                run()
            replay = graph.replay
        except Exception as e:  # noqa: BLE001 - any capture failure: time eagerly, and say so
            torch.cuda.synchronize()
            graph, replay, method = None, run, f"eager, events (graph capture failed: {type(e).__name__})"
        replay()
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        samples = []
        t_end = time.perf_counter() + self.max_s
        while len(samples) < self.max_reps and (len(samples) < self.min_reps or time.perf_counter() < t_end):
            e0.record()
            replay()
            e1.record()
            e1.synchronize()
            samples.append(e0.elapsed_time(e1) / 1e3 / calls)
        del graph
        return statistics.median(samples), min(samples), len(samples), method


def copies_for(set_bytes: float) -> int:
    return max(1, min(MAX_COPIES, math.ceil(ROTATE_BYTES / max(set_bytes, 1.0))))


def sequence(sets, op):
    """A run over the copies, at least MIN_CALLS calls: (run, calls)."""
    reps = max(1, math.ceil(MIN_CALLS / len(sets)))
    order = [s for _ in range(reps) for s in sets]

    def run():
        for s in order:
            op(*s)
    return run, len(order)


FUSED_CAST_PROBE = """
import torch
x = torch.randn(64, 256, device="cuda", dtype=torch.bfloat16) * 3
amax = torch.empty((), device="cuda", dtype=torch.float32)
torch.linalg.vector_norm(x, float("inf"), dtype=torch.float32, out=amax)
s = torch.empty((), device="cuda", dtype=torch.float32)
torch.mul(amax, 1.0 / 448.0, out=s)
q = torch.empty(64, 256, device="cuda", dtype=torch.float8_e4m3fn)
torch.div(x, s, out=q)
torch.cuda.synchronize()
ref = (x.float() / s).to(torch.float8_e4m3fn).float()
assert abs(float(amax) - float(x.abs().max())) == 0.0
assert torch.isfinite(q.float()).all() and (q.float() - ref).abs().max().item() <= 32.0
print("fused cast ok")
"""


def fused_cast_ok(device: str) -> tuple[bool, str]:
    """(whether `torch.div(bf16, fp32 scale, out=<float8_e4m3fn>)` runs as one kernel on this device, why):
    probed in a child process, since an unsupported cast would raise a device-side assert that ends the process."""
    if device != "cuda":
        return True, "not probed (cpu)"
    try:
        p = subprocess.run([sys.executable, "-c", FUSED_CAST_PROBE], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        return False, f"probe failed: {type(e).__name__}"
    tail = (p.stdout + p.stderr).strip().splitlines()
    return p.returncode == 0 and "fused cast ok" in p.stdout, (tail[-1][:160] if tail else f"rc {p.returncode}")


def gemm_set_bytes(dtype: str, m: int, n: int, k: int) -> int:
    """Bytes one call moves, operands read once and results written once: bf16 A, B, C; fp8 A, B and bf16 C; the
    quantised FP8 linear adds the bf16 activation's reads (twice with a dynamic scale: amax, then the cast) and the
    e4m3 activation's write."""
    if dtype == "bf16":
        return (m * k + n * k) * 2 + m * n * 2
    base = m * k + n * k + m * n * 2
    if dtype == "fp8":
        return base
    return base + m * k + m * k * 2 * (2 if dtype == "fp8_dynq" else 1)


def time_gemm(torch, timer, device, dtype, m, n, k, fused_cast: bool = True):
    """(row fields) of one [m x k] @ [n x k]^T product at `dtype`: 'bf16', 'fp8' (e4m3 operands ready), or the FP8
    linear with its activation quantised from bf16 first, 'fp8_dynq' (dynamic per-tensor scale) or 'fp8_staticq'
    (a fixed scale). `fused_cast`: the scaled cast to e4m3 runs as one kernel (`fused_cast_ok`)."""
    set_bytes = gemm_set_bytes(dtype, m, n, k)
    copies = copies_for(set_bytes)
    g = torch.Generator(device=device).manual_seed(m * 7919 + n * 31 + k)
    sets = []
    f8 = torch.float8_e4m3fn
    if dtype == "bf16":
        for _ in range(copies):
            a = torch.randn(m, k, device=device, generator=g, dtype=torch.bfloat16)
            w = torch.randn(n, k, device=device, generator=g, dtype=torch.bfloat16)
            sets.append((a, w, torch.empty(m, n, device=device, dtype=torch.bfloat16)))

        def op(a, w, c):
            torch.mm(a, w.t(), out=c)
        backend = "torch.mm (cuBLAS)" if device == "cuda" else "torch.mm"
    elif dtype == "fp8":
        sa = torch.tensor(0.5, device=device, dtype=torch.float32)
        sb = torch.tensor(0.25, device=device, dtype=torch.float32)
        for _ in range(copies):
            a = (torch.randn(m, k, device=device, generator=g) * 2).to(f8)
            w = (torch.randn(n, k, device=device, generator=g) * 2).to(f8)  # row-major [n, k]: w.t() is column-major
            sets.append((a, w))

        def op(a, w):
            torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
        backend = "torch._scaled_mm e4m3 per-tensor scales, bf16 out"
    elif dtype in ("fp8_dynq", "fp8_staticq"):
        sb = torch.tensor(0.25, device=device, dtype=torch.float32)
        # the activation's scale: recomputed each call (dynamic) or fixed so |x| < 8 sigma fits e4m3 (static)
        sa = torch.tensor(8.0 / E4M3_MAX, device=device, dtype=torch.float32)
        amax = torch.empty((), device=device, dtype=torch.float32)
        for _ in range(copies):
            x = torch.randn(m, k, device=device, generator=g, dtype=torch.bfloat16)
            w = (torch.randn(n, k, device=device, generator=g) * 2).to(f8)
            sets.append((x, w, torch.empty(m, k, device=device, dtype=f8)))
        dynamic = dtype == "fp8_dynq"
        inf = float("inf")

        def op(x, w, xq):
            if dynamic:
                torch.linalg.vector_norm(x, inf, dtype=torch.float32, out=amax)
                torch.mul(amax, 1.0 / E4M3_MAX, out=sa)
            if fused_cast:
                torch.div(x, sa, out=xq)
            else:
                xq.copy_(torch.div(x, sa))
            torch._scaled_mm(xq, w.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
        cast = "div->e4m3 (one kernel)" if fused_cast else "div, then copy to e4m3 (two kernels)"
        backend = (("dynamic per-tensor quant: vector_norm(inf) amax, mul 1/448, " if dynamic else
                    "static per-tensor quant: ") + cast + " + torch._scaled_mm e4m3, bf16 out")
    else:
        raise ValueError(f"gemm dtype {dtype!r}: one of {GEMM_DTYPES}")
    run, calls = sequence(sets, op)
    med, mn, reps, method = timer(run, calls)
    del sets
    return dict(measured_s=med, min_s=mn, reps=reps, calls=calls, copies=copies, flops=2.0 * m * n * k,
                bytes=float(set_bytes), backend=backend, method=method)


def _sdpa(torch):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    F = torch.nn.functional
    order = [("flash", SDPBackend.FLASH_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION),
             ("cudnn", SDPBackend.CUDNN_ATTENTION), ("math", SDPBackend.MATH)]
    return F.scaled_dot_product_attention, sdpa_kernel, order


def time_attention(torch, timer, device, phase, b, L, h, kvh, d):
    """(row fields) of one layer's attention: decode (1 query token over L cached) or causal prefill (L tokens)."""
    sdpa, sdpa_kernel, order = _sdpa(torch)
    q_len = 1 if phase == "decode" else L
    set_bytes = 2 * (2 * b * kvh * L * d + 2 * b * h * q_len * d)  # K, V read; Q read, O written (bf16)
    copies = copies_for(set_bytes)
    g = torch.Generator(device=device).manual_seed(b * 131 + L * 17 + h)
    sets = []
    for _ in range(copies):
        q = torch.randn(b, h, q_len, d, device=device, generator=g, dtype=torch.bfloat16)
        kv = torch.randn(2, b, kvh, L, d, device=device, generator=g, dtype=torch.bfloat16)
        sets.append((q, kv[0], kv[1]))
    causal = phase == "prefill"
    last = None
    for name, backend in order:
        try:
            with sdpa_kernel([backend]):
                sdpa(*sets[0], is_causal=causal, enable_gqa=kvh != h)  # probe: does this backend take the shape?

                def op(q, k, v):
                    sdpa(q, k, v, is_causal=causal, enable_gqa=kvh != h)
                run, calls = sequence(sets, op)
                med, mn, reps, method = timer(run, calls)
            break
        except Exception as e:  # noqa: BLE001 - the next backend
            last = f"{name}: {type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
            if device == "cuda":
                torch.cuda.synchronize()
    else:
        raise RuntimeError(f"no SDPA backend ran ({last})")
    if phase == "decode":
        flops = 4.0 * b * L * h * d
    else:
        flops = 4.0 * b * h * d * L * (L + 1) / 2.0
    del sets
    return dict(measured_s=med, min_s=mn, reps=reps, calls=calls, copies=copies, flops=flops,
                bytes=float(set_bytes), backend=f"sdpa {name}", method=method)


def open_device(args):
    """The start every device run shares: `args.out` made, the device checked (None, after one line on stderr, where
    CUDA was asked and there is none) and TF32 matmuls off, so every timed GEMM runs at its stated dtype. Returns
    torch, or None."""
    import torch

    os.makedirs(args.out, exist_ok=True)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    return torch


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=170.0, help="stop starting new rows after this long")
    ap.add_argument("--tiny", action="store_true", help="tiny shapes (a CPU smoke test of every path)")
    ap.add_argument("--only", default="gemm,decode,prefill")
    ap.add_argument("--gemm-dtypes", default="bf16,fp8",
                    help=f"GEMM variants to time, of {','.join(GEMM_DTYPES)} (fp8_dynq, fp8_staticq: the FP8 linear "
                         "with its activation's quantisation)")
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    torch = open_device(args)
    if torch is None:
        return 2
    device = args.device
    env = environment(torch, device, [sys.executable] + sys.argv)
    write_env(args.out, env)
    print(json.dumps(env), flush=True)
    source = source_line(env)
    timer = Timer(torch, device, max_s=0.02 if args.tiny else 0.15)
    shapes = gemm_shapes()
    ms, heads = GEMM_M, attention_heads()
    dec_b, dec_L, pre_b, pre_L = DECODE_BATCH, DECODE_CONTEXT, PREFILL_BATCH, PREFILL_PROMPT
    if args.tiny:
        shapes = [(mo, tp, la, max(16, n // 64), max(16, k // 64)) for mo, tp, la, n, k in shapes[:4]]
        ms, dec_b, dec_L, pre_b, pre_L = (1, 16), (1, 2), (64,), (1,), (32,)
        heads = heads[:2]
    only = set(args.only.split(","))
    gemm_dtypes = tuple(d for d in args.gemm_dtypes.split(",") if d)
    if not set(gemm_dtypes) <= set(GEMM_DTYPES):
        ap.error(f"--gemm-dtypes: of {','.join(GEMM_DTYPES)}")
    fused_cast = True
    if "gemm" in only and {"fp8_dynq", "fp8_staticq"} & set(gemm_dtypes):
        fused_cast, why = fused_cast_ok(device)
        env["fused_cast_probe"] = {"fused": fused_cast, "said": why}
        print(f"fused bf16 -> e4m3 scaled cast: {fused_cast} ({why})", flush=True)
        write_env(args.out, env)
    jobs = []
    if "gemm" in only:
        jobs += [("gemm", dtype, (mo, tp, la, m, n, k)) for dtype in gemm_dtypes
                 for mo, tp, la, n, k in shapes for m in ms]
    if "decode" in only:
        jobs += [("decode", "bf16", (mo, tp, b, L, h, kvh, d)) for mo, tp, h, kvh, d in heads
                 for b in dec_b for L in dec_L]
    if "prefill" in only:
        jobs += [("prefill", "bf16", (mo, tp, b, L, h, kvh, d)) for mo, tp, h, kvh, d in heads
                 for b in pre_b for L in pre_L]
    # interleave the kinds so a stop at the budget leaves some of each: round-robin over (kind, dtype)
    groups: dict = {}
    for j in jobs:
        groups.setdefault((j[0], j[1]), []).append(j)
    order = []
    while any(groups.values()):
        for key in list(groups):
            if groups[key]:
                order.append(groups[key].pop(0))
    path = os.path.join(args.out, "kernels.csv")
    n_ok = n_err = 0
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        w.writeheader()
        for kind, dtype, spec in order:
            if time.perf_counter() - t_start > args.budget_s:
                print(f"budget of {args.budget_s:.0f} s reached: {len(order) - n_ok - n_err} rows not timed",
                      flush=True)
                break
            row = {k: "" for k in FIELDS}
            row["source"] = source
            try:
                if kind == "gemm":
                    mo, tp, la, m, n, k = spec
                    # dtype: the math's precision (the quantised FP8 linears are fp8 GEMMs); op names the variant
                    row.update(op=f"gemm_{dtype}", family="gemm", dtype=dtype.split("_")[0], model=mo, tp=tp,
                               layer=la, m=m, n=n, k=k)
                    try:
                        row.update(time_gemm(torch, timer, device, dtype, m, n, k, fused_cast))
                    except RuntimeError as e:
                        if not dtype.startswith("fp8") or m % 16 == 0:
                            raise
                        # a FP8 kernel that refuses m rows: time it padded to 16 rows and say so
                        if device == "cuda":
                            torch.cuda.synchronize()
                        row.update(time_gemm(torch, timer, device, dtype, 16, n, k, fused_cast))
                        row["flops"] = 2.0 * m * n * k
                        row["backend"] += f" (m padded to 16: {type(e).__name__})"

                else:
                    mo, tp, b, L, h, kvh, d = spec
                    row.update(op=f"attention_{kind}", family=f"mha_{kind}", dtype=dtype, model=mo, tp=tp,
                               layer="attention", batch=b, q=1 if kind == "decode" else L, L=L, heads=h,
                               kv_heads=kvh, head_dim=d)
                    row.update(time_attention(torch, timer, device, kind, b, L, h, kvh, d))
                row["tflops_per_s"] = f"{row['flops'] / row['measured_s'] / 1e12:.2f}"
                row["tb_per_s"] = f"{row['bytes'] / row['measured_s'] / 1e12:.3f}"
                row["measured_s"] = f"{row['measured_s']:.6e}"
                row["min_s"] = f"{row['min_s']:.6e}"
                n_ok += 1
            except Exception as e:  # noqa: BLE001 - record the failure, go on
                row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
                n_err += 1
                if device == "cuda":
                    try:
                        torch.cuda.synchronize()
                    except Exception:  # noqa: BLE001
                        pass
            w.writerow(row)
            fh.flush()
            if device == "cuda" and (n_ok + n_err) % 16 == 0:
                torch.cuda.empty_cache()
            print(f"{row['op']:18} {row['model']:14} tp{row['tp']} {row['layer']:9} m={row['m']!s:5} n={row['n']!s:6} "
                  f"k={row['k']!s:6} b={row['batch']!s:4} L={row['L']!s:6} {row['measured_s']:>12} "
                  f"{row['tflops_per_s']:>8} TF/s {row['tb_per_s']:>7} TB/s {row['backend']} {row['error']}",
                  flush=True)
    print(f"{n_ok} rows timed, {n_err} failed, {time.perf_counter() - t_start:.1f} s; wrote {path}", flush=True)
    return 0 if n_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
