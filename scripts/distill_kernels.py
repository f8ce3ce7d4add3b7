"""Distil aiconfigurator-core's measured kernel tables into chalk's compact kernel-efficiency grids.

Dev-time only (needs `pip install aiconfigurator-core pandas pyarrow`; chalk itself never imports them):

    PYTHONPATH=src python scripts/distill_kernels.py            # writes src/chalk/catalog/kernels/, prints checks

What it does, per measured system (H100 SXM, H200, B200, GB200, B300, GB300, A100 SXM), framework (TensorRT-LLM,
SGLang, vLLM; for each table the installed version with the most rows) and kernel family:

1. reads the table (figures only: latency in ms by shape), keeps the rows chalk's step model asks about
   (GEMM: bf16 / per-tensor fp8 / nvfp4; attention: full (no sliding window) heads <= 256 dims, 16-bit math;
   MLA: DeepSeek geometry; MoE: gated experts, moe_tp_size 1, block fp8 where present, twice: under power-law
   routing (family `moe`, MOE_DISTRIBUTION) and balanced routing (family `moe_balanced`, what an expert-load
   balancer approaches), and
   MXFP4 weights with 16-bit activations (w4a16) as their own key), takes
   the fastest kernel where a shape was measured with several (of those a default deployment runs: kernels only an
   opt-in switch selects, OPT_IN_KERNELS, are dropped; where an engine's default kernel was timed only by another
   framework's collector, that framework's grid stands in, SHARED_KERNELS), and holds out a random 20% of the rows
   (numpy default_rng(0) per table, rows in the table's sorted key order);
2. fits ln(time) on a coarse grid over the family's shape features (`chalk.analyses.step.kernels.FEATURES`, log2 axes
   `AXES` below) by robust (Huber) least squares with multilinear interpolation and a small second-difference
   smoothness penalty (LAMBDA), on the 80% only; for MoE it also picks the routing passes (bytes per routed copy of the
   whole EP group, `chalk.equations.kernels.moe_routing_bytes`) from PASSES by the in-sample median error;
3. stores eta = (roofline floor at the chip's catalog peaks) / (fitted time) per node, as round(100 ln eta);
4. reloads the written data through `chalk.analyses.step.kernels` (the run-time code) and reports median and p90
   |predicted / measured - 1| on the held-out rows, per family and system, plus a leave-one-system-out check of
   the curve family that chips without tables get; writes a sample of held-out rows to
   tests/data/kernel_holdout.csv for tests/test_kernels.py.

All-reduce (`--only allreduce` redoes just this part): the custom all-reduce tables (comm/<framework>/<version>/
custom_allreduce_perf.parquet; bf16, message sizes 2^7 to 2^29 bytes, 2 to 16 GPUs) are small enough to keep as
measured: per system, framework and GPU count, the time at each power-of-two message size (the fastest kernel;
CUDA-graph kernels, never eager ones, as engines decode under graphs), in allreduce.csv. A held-out check drops
every fifth size and predicts it from its neighbours by the run-time rule (linear in log time and log size).
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import sys
from importlib.metadata import version as pkg_version
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from chalk.analyses.step import kernels as KS  # noqa: E402
from chalk.specs.catalog import load_chip, write_compiled_catalog  # noqa: E402
from chalk.specs.precision import bytes_per_element  # noqa: E402

PKG = "aiconfigurator-core"
OUT = ROOT / "src" / "chalk" / "catalog" / "kernels"
SAMPLE = ROOT / "tests" / "data" / "kernel_holdout.csv"
#: aiconfigurator system -> chalk chip ids (first: the chip itself; others share its silicon)
SYSTEMS = {"h100_sxm": ["h100-sxm", "h800"], "h200_sxm": ["h200"], "b200_sxm": ["b200"], "gb200": ["gb200"],
           "b300_sxm": ["b300"], "gb300": ["gb300"], "a100_sxm": ["a100-sxm"]}
#: systems whose mean normalised grids form the curve family for chips without tables
CURVE_SYSTEMS = ["h100_sxm", "h200_sxm", "b200_sxm", "gb200", "b300_sxm", "gb300"]
FRAMEWORKS = ("trtllm", "sglang", "vllm")
SEED, HOLDOUT, LAMBDA = 0, 0.2, 0.1
#: Expert routing the MoE tables were measured under: served traffic is not balanced. aiconfigurator-core's own
#: default for DeepSeek-family models (and most others) is power_law with alpha 1.01 (sdk/config.py
#: workload_distribution "power_law"; sdk/models/deepseek.py _power_law_alpha); "balanced" times every expert
#: with the same tokens, which served traffic never sees (h100_sxm trtllm, DeepSeek-V3's layer on EP 32, 4096
#: tokens: 0.258 ms balanced, 0.532 ms power-law).
MOE_DISTRIBUTION = "power_law_1.01"
#: the same kernels with every expert given the same tokens: what an expert-load balancer (EPLB: redundant experts
#: placed by measured load) approaches; distilled as its own family, `moe_balanced`
MOE_BALANCED = "balanced"
#: kernel sources an engine runs only when a non-default switch is set: never taken as "the fastest kernel" for a
#: shape, since a deployment with default settings does not run them (each with the switch and where it is read)
OPT_IN_KERNELS = {
    "moe_torch_flow_min_latency": (
        "TensorRT-LLM's TRTLLM-gen NVFP4 MoE, timed without its finalize (unpermute and reduce) step: aiconfigurator's "
        "collector builds it with moe_backend 'trtllm' and forward(do_finalize=False) (ai-dynamo/aiconfigurator "
        "collector/trtllm/collect_moe.py, trtllm>=1.3.0rc20). TensorRT-LLM runs NVFP4 experts on TRTLLM-gen only with "
        "moe_config.backend TRTLLM: the default was CUTLASS, and AUTO (1.3.0rc20) resolves NVFP4 to CUTLASS except "
        "for GPT-OSS and DeepSeek-V4 (tensorrt_llm/_torch/model_config.py ModelConfig.resolve_moe_backend; "
        "llmapi/llm_args.py MoeConfig.backend)"),
}
#: where an engine's default kernel for a table dtype was measured only by another framework's collector, that
#: framework's distilled grid of the dtype stands for the engine's own: (framework, MoE dtype) -> (framework read,
#: kernel source its table must hold for the dtype, why). Applied on the systems whose other table holds the kernel;
#: index.yaml records the rule, and the engine's line names the table read
SHARED_KERNELS = {
    ("sglang", "w4a16_mxfp4"): (
        "vllm", "oaitritonmxfp4", (
            "SGLang serves MXFP4 experts on Hopper with OpenAI's triton_kernels (matmul_ogs): server_args "
            "_handle_model_specific_adjustments sets moe_runner_backend 'triton_kernel' for GptOssForCausalLM "
            "when it is 'auto', the chip is not SM100 and ep_size is 1 (sgl-project/sglang python/sglang/srt/"
            "server_args.py, 0.5 series). aiconfigurator's SGLang collector times MXFP4 with the generic "
            "fused_moe_triton kernel instead (sglang_fused_moe_triton, 2.1x the triton_kernels time at 64 tokens "
            "on h200_sxm); its vLLM collector times the triton_kernels one (vllm_gptossmxfp4moe_triton_"
            "oaitritonmxfp4experts...), so SGLang's MXFP4 grid is vLLM's")),
}
HUBER, IRLS_STEPS = 0.1, 4  # Huber threshold in ln t (10%) and reweighting rounds
PASSES = (0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
AXES = {  # log2 node positions per feature (FEATURES order); spacing chosen by held-out error vs size
    "gemm": [list(range(16)), [5, 6.5, 8, 9.5, 11, 12.5, 14, 16], [5, 6.5, 8, 9.5, 11, 12.5, 14, 16]],
    "mha_decode": [list(range(0, 17, 2)), list(range(1, 18, 2)), list(range(8)), [6, 7, 8]],
    "mha_prefill": [list(np.arange(0, 16, 1.5)), list(np.arange(0, 15, 1.5)), [0, 2, 4, 6], [6, 7, 8]],
    "mla_decode": [list(range(11)), list(range(1, 18, 2)), list(range(8))],
    "mla_prefill": [list(range(9)), list(np.arange(0, 16, 1.5)), list(range(8))],
    "moe": [list(np.arange(-9, 15, 1.5)), list(np.arange(0, 10, 1.5)), [11, 12, 13], list(range(9, 15))],
}
AXES["moe_balanced"] = AXES["moe"]
SOURCE_DIRS = {"gemm": ("gemm", "gemm_perf"), "mha_decode": ("attention", "generation_attention_perf"),
               "mha_prefill": ("attention", "context_attention_perf"), "mla_decode": ("mla", "generation_mla_perf"),
               "mla_prefill": ("mla", "context_mla_perf"), "moe": ("moe", "moe_perf"),
               "moe_balanced": ("moe", "moe_perf")}
GEMM_DT = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8", "nvfp4": "fp4"}
MOE_DT = {"bfloat16": "bf16", "fp8_block": "fp8", "fp8": "fp8", "nvfp4": "fp4", "w4a16_mxfp4": "w4a16"}
#: element bytes of the stored weights per table key, as chalk sizes them at run time (fp4: NVFP4, 4.5 bits; w4a16:
#: MXFP4 weights, 4 bits + an 8-bit scale per 32, run with 16-bit activations on chips without an FP4 rate)
KEY_BYTES = {"bf16": bytes_per_element("bf16"), "fp8": bytes_per_element("fp8"), "fp4": bytes_per_element("nvfp4"),
             "w4a16": bytes_per_element("mxfp4")}
KV_DT = {"bfloat16": "bf16", "fp8": "fp8"}
PREFER = {"gemm": ["fp8", "fp8_block"], "moe": ["fp8_block", "fp8"]}  # which table dtype stands for chalk's fp8
#: which rows of each table were used (recorded in index.yaml)
FILTERS = {
    "all": "latency (ms) -> seconds; where a shape was measured with several kernels (kernel_source), the fastest "
           "of those a default deployment runs (opt-in kernels dropped: opt_in_kernels)",
    "gemm": "gemm_dtype bfloat16 -> bf16, fp8 (per-tensor; fp8_block only where no fp8) -> fp8, nvfp4 -> fp4",
    "mha_decode": "generation_attention: window_size 0, head_dim <= 256, attn_dtype bfloat16 where present; "
                  "q = 1, L = isl + step; kv_cache_dtype bfloat16 / fp8",
    "mha_prefill": "context_attention: window_size 0, step 0, head_dim <= 256, attn_dtype bfloat16 where present; "
                   "q = L = isl",
    "mla_decode": "generation_mla: mla_dtype bfloat16; num_heads = heads per GPU; L = isl + step",
    "mla_prefill": "context_mla: mla_dtype bfloat16; num_heads = heads per GPU; q = L = isl",
    "moe": f"moe_perf: distribution {MOE_DISTRIBUTION}, moe_tp_size 1, gated kernels (not *nongated); bfloat16 -> bf16, "
           "fp8_block (else fp8) -> fp8, nvfp4 -> fp4, w4a16_mxfp4 -> w4a16; num_tokens = tokens entering the layer "
           "across the EP group",
    "moe_balanced": f"as moe, distribution {MOE_BALANCED}",
}


def data_root() -> Path:
    import aiconfigurator_core

    return Path(aiconfigurator_core.__file__).parent / "systems" / "data"


# --------------------------------------------------------------------------- reading tables
def _one_dtype_per_key(d, column: str, names: dict, prefer_fp8: list):
    """The rows of one table dtype per chalk dtype key (bf16, fp8, fp4, w4a16), tagged `dtype`: for fp8 the first of
    `prefer_fp8` present (per-tensor before block-scaled), else the first of the table's names mapping to the key."""
    keep = []
    for key in ("bf16", "fp8", "fp4", "w4a16"):
        present = [n for n, k in names.items() if k == key and n in set(d[column])]
        for n in prefer_fp8 if key == "fp8" else present:
            if n in present:
                keep.append(d[d[column] == n].assign(dtype=key))
                break
    return pd.concat(keep) if keep else d.iloc[:0].assign(dtype=[])


def standardise(family: str, d: pd.DataFrame) -> pd.DataFrame:
    """Rows of one table as chalk call arguments + `dtype` (table key) + `t` (seconds)."""
    if "kernel_source" in d:  # a kernel only a non-default switch selects is not what deployments run
        d = d[~d.kernel_source.isin(list(OPT_IN_KERNELS))]
    d = d.copy()
    d["t"] = d["latency"].astype(float) * 1e-3  # tables hold milliseconds
    if family == "gemm":
        d = _one_dtype_per_key(d, "gemm_dtype", GEMM_DT, PREFER["gemm"])
        return d.groupby(["dtype", "m", "n", "k"], as_index=False).t.min()
    if family in ("mha_decode", "mha_prefill"):
        d = d[(d.get("window_size", 0) == 0) & (d.head_dim <= 256) & d.kv_cache_dtype.isin(list(KV_DT))]
        if family == "mha_prefill" and "step" in d:
            d = d[d.step == 0]
        parts = []
        for kv, g in d.groupby("kv_cache_dtype"):
            if "attn_dtype" in g and (g.attn_dtype == "bfloat16").any():
                g = g[g.attn_dtype == "bfloat16"]
            parts.append(g.assign(dtype=KV_DT[kv]))
        d = pd.concat(parts)
        d = d.rename(columns={"batch_size": "batch", "num_heads": "heads", "num_key_value_heads": "kv_heads"})
        d["q"] = d.isl if family == "mha_prefill" else 1
        d["L"] = d.isl + (d.step if family == "mha_decode" else 0)
        return d.groupby(["dtype", "batch", "q", "L", "heads", "kv_heads", "head_dim"], as_index=False).t.min()
    if family in ("mla_decode", "mla_prefill"):
        d = d[d.kv_cache_dtype.isin(list(KV_DT)) & (d.get("mla_dtype", "bfloat16") == "bfloat16")]
        d = d.assign(dtype=d.kv_cache_dtype.map(KV_DT)).rename(columns={"batch_size": "batch", "num_heads": "heads"})
        d["q"] = d.isl if family == "mla_prefill" else 1
        d["L"] = d.isl + (d.step if family == "mla_decode" else 0)
        return d.groupby(["dtype", "batch", "q", "L", "heads"], as_index=False).t.min()
    dist = MOE_BALANCED if family == "moe_balanced" else MOE_DISTRIBUTION
    d = d[(d.distribution == dist) & (d.moe_tp_size == 1) & ~d.kernel_source.str.contains("nongated")]
    d = _one_dtype_per_key(d, "moe_dtype", MOE_DT, PREFER["moe"])
    d = d.rename(columns={"num_tokens": "tokens", "hidden_size": "hidden", "inter_size": "moe_inter",
                          "topk": "top_k", "moe_ep_size": "ep"})
    return d.groupby(["dtype", "tokens", "hidden", "moe_inter", "num_experts", "top_k", "ep"], as_index=False).t.min()


def shared_kernel_present(system: str, family: str, fw: str, moe_dtype: str, kernel: str) -> bool:
    """Whether `fw`'s table of `system` (any version) timed `moe_dtype` with a kernel source containing `kernel`."""
    sub, name = SOURCE_DIRS[family]
    for path in glob.glob(str(data_root() / system / sub / fw / "*" / f"{name}.parquet")):
        d = pd.read_parquet(path, columns=["moe_dtype", "kernel_source"])
        if d[d.moe_dtype == moe_dtype].kernel_source.str.contains(kernel).any():
            return True
    return False


def _held_tag(h) -> tuple:
    """(system, family, framework, dtype) of one table's held-out rows (all rows share them); () when empty."""
    return (h.system.iloc[0], h.family.iloc[0], h.framework.iloc[0], h.dtype.iloc[0]) if len(h) else ()


def share_kernels(system: str, family: str, lines: list, held: list) -> None:
    """Apply SHARED_KERNELS to one system's family in place: the engine's line of the dtype becomes a copy of the
    other framework's (its own framework and version kept, the table column naming the table read), and its
    held-out rows become the other's, relabelled, so the held-out report checks the grid it now reads."""
    if not family.startswith("moe"):
        return
    for (fw, moe_dtype), (other, kernel, _why) in SHARED_KERNELS.items():
        dt = MOE_DT[moe_dtype]
        mine = [i for i, ln in enumerate(lines) if ln[1] == fw and ln[3] == family and ln[4] == dt]
        theirs = [ln for ln in lines if ln[1] == other and ln[3] == family and ln[4] == dt]
        if not (mine and theirs and shared_kernel_present(system, family, other, moe_dtype, kernel)):
            continue
        lines[mine[0]] = lines[mine[0]][:3] + theirs[0][3:]
        keep = [h for h in held if _held_tag(h) != (system, family, fw, dt)]
        copied = [h.assign(framework=fw) for h in held if _held_tag(h) == (system, family, other, dt)]
        held[:] = keep + copied


def pick_table(system: str, family: str, fw: str):
    """(standardised rows, relative path, version, device) of the version with the most usable rows, or None."""
    sub, name = SOURCE_DIRS[family]
    best = None
    for path in sorted(glob.glob(str(data_root() / system / sub / fw / "*" / f"{name}.parquet"))):
        raw = pd.read_parquet(path)
        rows = standardise(family, raw)
        if len(rows) and (best is None or len(rows) > len(best[0])):
            rel = os.path.relpath(path, data_root())
            best = (rows, rel, rel.split(os.sep)[3], str(raw.device.iloc[0]))
    return best


# --------------------------------------------------------------------------- features and fit
def features(family: str, r: pd.DataFrame):
    """Linear shape features of rows (FEATURES order) and their element bytes."""
    eb = r.dtype.map(KEY_BYTES).to_numpy()
    g = lambda c: r[c].to_numpy(dtype=float)  # noqa: E731
    if family == "gemm":
        return (g("m"), g("n"), g("k")), eb
    if family == "mha_decode":
        return (g("batch") * g("kv_heads"), g("L"), g("heads") / g("kv_heads"), g("head_dim")), eb
    if family == "mha_prefill":
        return (g("batch") * g("heads"), g("q"), g("heads") / g("kv_heads"), g("head_dim")), eb
    if family in ("mla_decode", "mla_prefill"):
        return (g("batch"), g("q") if family == "mla_prefill" else g("L"), g("heads")), eb
    el = np.maximum(g("num_experts") / g("ep"), 1.0)
    return (g("tokens") * g("top_k") / g("ep") / el, el, g("hidden"), g("moe_inter")), eb


def reference(chip) -> dict:
    """Peaks the grids are normalised by: the chip's catalog figures (bf16, fp8, fp4 FLOP/s; HBM B/s)."""
    ref = {k: float(chip.flops_per_s[k]) for k in ("bf16", "fp8", "fp4") if k in chip.flops_per_s}
    ref["hbm"] = float(chip.hbm_bandwidth_bytes_per_s)
    return ref


def roof(family, f, dtype, eb, ref):
    peak = ref["bf16"] if family.startswith(("mha", "mla")) else ref.get(dtype, ref["bf16"])
    return KS.roof_features(family, f, peak, ref["hbm"], eb)


def smoothness(shape) -> np.ndarray:
    """Sum over axes of D^T D, D the second difference along the axis."""
    n = int(np.prod(shape))
    R = np.zeros((n, n))
    ids = np.arange(n).reshape(shape)
    for d, size in enumerate(shape):
        if size < 3:
            continue
        a = np.moveaxis(ids, d, 0)
        trip = [a[i:size - 2 + i].ravel() for i in range(3)]
        for u, cu in zip(trip, (1, -2, 1)):
            for v, cv in zip(trip, (1, -2, 1)):
                np.add.at(R, (u, v), cu * cv)
    return R


def fit_grid(ax, f, y):
    """Node values of ln t minimising sum rho(interp - y) + LAMBDA * roughness, rho the Huber loss at HUBER
    (iteratively reweighted least squares): isolated glitches in a table (a shape measured 20x slower than its
    neighbours) must not drag the surface around them."""
    shape = [len(a) for a in ax]
    cols, w = KS.corner_weights(ax, KS.clamp_log2(ax, f))
    n = int(np.prod(shape))
    R = LAMBDA * smoothness(shape) + 1e-9 * np.eye(n)
    rw = np.ones(len(y))
    for _ in range(IRLS_STEPS):
        AtA, Aty = np.zeros((n, n)), np.zeros(n)
        for i in range(cols.shape[1]):
            np.add.at(Aty, cols[:, i], rw * w[:, i] * y)
            for j in range(cols.shape[1]):
                np.add.at(AtA, (cols[:, i], cols[:, j]), rw * w[:, i] * w[:, j])
        g = np.linalg.solve(AtA + R, Aty)
        rw = np.minimum(1.0, HUBER / np.maximum(np.abs((g[cols] * w).sum(-1) - y), 1e-12))
    return g.reshape(shape)


def interp(ax, grid, f):
    cols, w = KS.corner_weights(ax, KS.clamp_log2(ax, f))
    return (grid.ravel()[cols] * w).sum(-1)


def distil_one(family, rows, ref, train):
    """ln eta node grid (x100, ints) and routing passes of one table's training rows."""
    ax = [np.asarray(a, dtype=float) for a in AXES[family]]
    f, eb = features(family, rows)
    dt = rows.dtype.iloc[0]
    floor = roof(family, f, dt, eb, ref)
    # past the grid the run time scales the edge node's time (`beyond_grid`): fit the time the edge shape takes
    edge = np.log(KS.beyond_grid(family, ax, f))
    t = rows.t.to_numpy()
    best = None
    for passes in PASSES if family.startswith("moe") else (0.0,):
        extra = 0.0
        if passes:
            extra = passes * rows.tokens.to_numpy() * rows.top_k.to_numpy() * rows.hidden.to_numpy() * 2 / ref["hbm"]
        y = np.log(np.maximum(t - extra, floor)) - edge
        grid = fit_grid(ax, [x[train] for x in f], y[train])
        pred = np.exp(interp(ax, grid, [x[train] for x in f]) + edge[train]) + (extra[train] if passes else 0.0)
        err = float(np.median(np.abs(pred / t[train] - 1)))
        if best is None or err < best[0]:
            best = (err, passes, grid)
    _, passes, grid = best
    mesh = np.meshgrid(*[2.0 ** a for a in ax], indexing="ij")
    ln_eta = np.minimum(np.log(roof(family, mesh, dt, eb[0], ref)) - grid, 0.0)
    return np.clip(np.round(ln_eta * 100), -1500, 0).astype(int), passes


# --------------------------------------------------------------------------- checking through chalk's own loader
def predict(kp, family, r: pd.DataFrame) -> np.ndarray:
    """Times of rows through the run-time API (`chalk.analyses.step.kernels.KernelProfile`)."""
    c = lambda n: r[n].to_numpy(dtype=float)  # noqa: E731
    out = np.empty(len(r))
    for dt, idx in r.groupby("dtype").indices.items():
        s = lambda n: c(n)[idx]  # noqa: E731
        if family == "gemm":
            out[idx] = kp.gemm_time_s(s("m"), s("n"), s("k"), dt)
        elif family.startswith("moe"):
            math_dt, w = ("bf16", "mxfp4") if dt == "w4a16" else (dt, None)
            out[idx] = kp.moe_time_s(s("tokens"), s("hidden"), s("moe_inter"), s("num_experts"), s("top_k"),
                                     s("ep"), math_dt, weight_precision=w, balanced=family == "moe_balanced")
        else:
            kind, phase = family.split("_")
            heads = s("heads")
            kvh = s("kv_heads") if kind == "mha" else heads
            hd = s("head_dim") if kind == "mha" else np.full(len(idx), 128.0)
            out[idx] = kp.attention_time_s(phase, kind, s("batch"), s("q"), s("L"), heads, kvh, hd, dt)
    return out


REPORT_FAMILY = {"gemm": "gemm", "mha_decode": "attention decode", "mla_decode": "attention decode",
                 "mha_prefill": "attention prefill", "mla_prefill": "attention prefill", "moe": "moe",
                 "moe_balanced": "moe balanced"}


def stats(e) -> dict:
    e = np.abs(np.asarray(e))
    return {"rows": int(len(e)), "median": round(float(np.median(e)), 4), "p90": round(float(np.quantile(e, 0.9)), 4)}


# --------------------------------------------------------------------------- all-reduce
AR_LOG2 = list(range(7, 30))  # message bytes 128 B .. 512 MiB, the tables' power-of-two sizes
AR_FILE = OUT / "allreduce.csv"


def pick_allreduce(system: str, fw: str):
    """(rows of n, message_size, t (s) with the fastest graph kernel per shape, relative path, version, device) of
    the installed version measuring the most GPU counts (then the most rows, then the newest), or None."""
    best = None
    for path in sorted(glob.glob(str(data_root() / system / "comm" / fw / "*" / "custom_allreduce_perf.parquet"))):
        raw = pd.read_parquet(path)
        d = raw[(raw.allreduce_dtype == "bfloat16") & ~raw.kernel_source.str.contains("eager")]
        if not len(d):
            continue
        d = d.assign(t=d.latency.astype(float) * 1e-3).groupby(["num_gpus", "message_size"], as_index=False).t.min()
        rel = os.path.relpath(path, data_root())
        key = (d.num_gpus.nunique(), len(d), pkg_tuple(rel.split(os.sep)[3]))
        if best is None or key >= best[0]:
            best = (key, d, rel, rel.split(os.sep)[3], str(raw.device.iloc[0]))
    return None if best is None else best[1:]


def pkg_tuple(v: str):
    """Version string -> sortable tuple ('1.3.0rc20' -> (1, 3, 0, 'rc', 20))."""
    return tuple(int(x) if x.isdigit() else x for x in re.findall(r"\d+|[a-z]+", v))


def distil_allreduce(systems) -> int:
    ver = pkg_version(PKG)
    lines, errs = [], []
    for system in systems:
        for fw in FRAMEWORKS:
            got = pick_allreduce(system, fw)
            if got is None:
                continue
            d, rel, fver, device = got
            for n, g in d.groupby("num_gpus"):
                t = g.set_index("message_size").t.reindex([2 ** e for e in AR_LOG2])
                if t.isna().any():
                    continue
                lt = np.log(t.to_numpy())
                # held-out: every fifth interior size predicted from its neighbours (linear in log-log)
                for i in range(2, len(lt) - 1, 5):
                    errs.append(np.exp((lt[i - 1] + lt[i + 1]) / 2 - lt[i]) - 1)
                lines.append([system, fw, fver, rel, device, int(n),
                              " ".join(f"{x * 1e6:.4g}" for x in t.to_numpy())])
                print(f"  {system:9s} {fw:6s} {fver:10s} all-reduce n={n:2d}  {t.iloc[0] * 1e6:6.2f} us at 128 B, "
                      f"{t.iloc[-1] * 1e3:7.2f} ms at 512 MiB", flush=True)
    df = pd.DataFrame(lines, columns=["system", "framework", "version", "table", "device", "num_gpus", "t_us"])
    with open(AR_FILE, "w") as fh:
        fh.write(f"# all-reduce times measured in {PKG} {ver} (Apache-2.0) custom_allreduce tables; figures only. "
                 f"t_us: microseconds for a bf16 all-reduce of 2^e bytes, e = {AR_LOG2[0]}..{AR_LOG2[-1]}, over "
                 "num_gpus GPUs (fastest CUDA-graph kernel). Written by scripts/distill_kernels.py.\n")
        df.to_csv(fh, index=False)
    e = np.abs(errs)
    print(f"\nall-reduce, held-out sizes from neighbours: {len(e)} rows, median |error| {np.median(e):.3f}, "
          f"p90 {np.quantile(e, 0.9):.3f}")
    idx = yaml.safe_load((OUT / "index.yaml").read_text()) if (OUT / "index.yaml").exists() else {}
    idx["allreduce"] = {"file": AR_FILE.name, "message_log2": AR_LOG2,
                        "source": f"{PKG} {ver}: aiconfigurator_core/systems/data/<system>/comm/<framework>/<version>/"
                                  "custom_allreduce_perf.parquet",
                        "filters": "allreduce_dtype bfloat16; CUDA-graph kernels (no *eager); fastest kernel per "
                                   "shape; the version measuring the most GPU counts",
                        "holdout_report": {"rows": int(len(e)), "median": round(float(np.median(e)), 4),
                                           "p90": round(float(np.quantile(e, 0.9)), 4)}}
    (OUT / "index.yaml").write_text(yaml.safe_dump(idx, sort_keys=False, width=120, default_flow_style=None))
    KS.clear_cache()
    return 0


VERSIONS_FILE = OUT / "versions.csv"


def table_versions(systems) -> dict:
    """{system: {framework: {family: version}}} of the main tables as written in <system>.csv: which framework
    version each table was measured under (recorded in index.yaml `table_versions`)."""
    out: dict = {}
    for system in systems:
        f = OUT / f"{system}.csv"
        if not f.exists():
            continue
        d = pd.read_csv(f, comment="#", usecols=["framework", "version", "family"]).drop_duplicates()
        for r in d.itertuples():
            out.setdefault(system, {}).setdefault(r.framework, {})[r.family] = str(r.version)
    return out


def write_table_versions(systems) -> None:
    idx = yaml.safe_load((OUT / "index.yaml").read_text())
    idx["table_versions"] = {"rule": "per system, framework and family: the installed version with the most usable "
                                     "rows (other versions: extra_versions)", **table_versions(systems)}
    (OUT / "index.yaml").write_text(yaml.safe_dump(idx, sort_keys=False, width=120, default_flow_style=None))


def distil_extra_versions(specs) -> int:
    """Tables of other framework versions than the main ones, kept side by side for `--engine NAME@VERSION`
    (versions.csv, same columns as <system>.csv; index.yaml `extra_versions`). `specs`: SYSTEM:FAMILY:FRAMEWORK:
    VERSION each. Same rows, holdout and fit as the main tables; the held-out error is reported per table."""
    ver = pkg_version(PKG)
    lines, report = [], {}
    for spec in specs:
        system, family, fw, fver = spec.split(":")
        sub, name = SOURCE_DIRS[family]
        path = data_root() / system / sub / fw / fver / f"{name}.parquet"
        raw = pd.read_parquet(path)
        rows_all = standardise(family, raw)
        rel, device = os.path.relpath(path, data_root()), str(raw.device.iloc[0])
        ref = reference(load_chip(SYSTEMS[system][0]))
        for dt, rows in rows_all.groupby("dtype", sort=True):
            rows = rows.reset_index(drop=True)
            test = np.random.default_rng(SEED).random(len(rows)) < HOLDOUT
            grid, passes = distil_one(family, rows, ref, ~test)
            lines.append([system, fw, fver, family, dt, rel, device, int((~test).sum()), int(test.sum()), passes,
                          " ".join(map(str, grid.ravel()))])
            print(f"  {system:9s} {fw:6s} {fver:12s} {family:11s} {dt:4s} {len(rows):6d} rows", flush=True)
            report[f"{system} {fw} {fver} {family} {dt}"] = rows[test]
    df = pd.DataFrame(lines, columns=["system", "framework", "version", "family", "dtype", "table", "device",
                                      "rows_fit", "rows_holdout", "routing_passes", "ln_eta_x100"])
    with open(VERSIONS_FILE, "w") as fh:
        fh.write(f"# kernel efficiency grids of other framework versions, distilled from {PKG} {ver} (Apache-2.0) "
                 "measured tables as <system>.csv are; figures only. Written by scripts/distill_kernels.py "
                 "--extra-versions.\n")
        df.to_csv(fh, index=False)
    idx = yaml.safe_load((OUT / "index.yaml").read_text())
    idx["extra_versions"] = {"file": VERSIONS_FILE.name, "package_version": ver, "tables": list(specs)}
    (OUT / "index.yaml").write_text(yaml.safe_dump(idx, sort_keys=False, width=120, default_flow_style=None))
    KS.clear_cache()
    held = {}
    for key, g in report.items():
        system, fw, fver, family, dt = key.split()
        kp = KS.KernelProfile(load_chip(SYSTEMS[system][0]), fw, system, version=fver)
        e = predict(kp, family, g.assign(dtype=dt)) / g.t.to_numpy() - 1
        held[key] = stats(e)
        print(f"  held-out {key}: {held[key]}")
    idx["extra_versions"]["holdout_report"] = held
    (OUT / "index.yaml").write_text(yaml.safe_dump(idx, sort_keys=False, width=120, default_flow_style=None))
    KS.clear_cache()
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", nargs="*", default=list(SYSTEMS))
    ap.add_argument("--sample-per-family", type=int, default=75)
    ap.add_argument("--only", choices=["allreduce", "table-versions"], help="redo only this part")
    ap.add_argument("--extra-versions", nargs="+", metavar="SYSTEM:FAMILY:FRAMEWORK:VERSION",
                    help="distil only these other-version tables into versions.csv (e.g. h100_sxm:gemm:sglang:0.5.6.post2)")
    a = ap.parse_args(argv)
    if a.only == "table-versions":  # from the written CSVs; needs no aiconfigurator-core
        write_table_versions(a.systems)
        print(f"wrote {write_compiled_catalog().relative_to(ROOT)} (index.yaml changed)")
        return 0
    if a.extra_versions:
        code = distil_extra_versions(a.extra_versions)
        print(f"wrote {write_compiled_catalog().relative_to(ROOT)} (index.yaml changed)")
        return code
    if a.only == "allreduce":
        code = distil_allreduce(a.systems)
        print(f"wrote {write_compiled_catalog().relative_to(ROOT)} (index.yaml changed)")
        return code
    ver = pkg_version(PKG)
    OUT.mkdir(parents=True, exist_ok=True)
    held: list[pd.DataFrame] = []
    refs = {}
    for system in a.systems:
        chip = load_chip(SYSTEMS[system][0])
        ref = refs[system] = reference(chip)
        lines = []
        for family in AXES:
            for fw in FRAMEWORKS:
                got = pick_table(system, family, fw)
                if got is None:
                    continue
                rows_all, rel, fver, device = got
                for dt, rows in rows_all.groupby("dtype", sort=True):
                    rows = rows.reset_index(drop=True)
                    test = np.random.default_rng(SEED).random(len(rows)) < HOLDOUT
                    grid, passes = distil_one(family, rows, ref, ~test)
                    src = f"{PKG} {ver} {rel}"
                    lines.append([system, fw, fver, family, dt, rel, device, int((~test).sum()), int(test.sum()),
                                  passes, " ".join(map(str, grid.ravel()))])
                    held.append(rows[test].assign(family=family, system=system, framework=fw, source=src))
                    print(f"  {system:9s} {fw:6s} {fver:10s} {family:11s} {dt:4s} {len(rows):6d} rows"
                          + (f"  routing passes {passes:g}" if family.startswith("moe") else ""), flush=True)
        for family in AXES:
            share_kernels(system, family, lines, held)
        df = pd.DataFrame(lines, columns=["system", "framework", "version", "family", "dtype", "table", "device",
                                          "rows_fit", "rows_holdout", "routing_passes", "ln_eta_x100"])
        with open(OUT / f"{system}.csv", "w") as fh:
            fh.write(f"# kernel efficiency grids distilled from {PKG} {ver} (Apache-2.0) measured tables of "
                     f"{system}; figures only. ln_eta_x100 = round(100 ln eta) per grid node in C order over the "
                     "family's axes (index.yaml). Written by scripts/distill_kernels.py.\n")
            df.to_csv(fh, index=False)
    # ---- index, then check through the run-time loader
    idx = {"package": PKG, "package_version": ver, "license": "Apache-2.0",
           "source": f"{PKG} {ver}: aiconfigurator_core/systems/data/<system>/<op>/<framework>/<version>/*.parquet",
           "generated_by": "scripts/distill_kernels.py",
           "quantity": "eta = roofline floor (chalk.equations.kernels) at the reference rates / fitted kernel time",
           "holdout": {"fraction": HOLDOUT, "seed": SEED,
                       "rule": "numpy default_rng(seed).random(n) < fraction per table, rows in sorted key order"},
           "filters": FILTERS,
           "opt_in_kernels": OPT_IN_KERNELS,
           "shared_kernels": {f"{fw} {dt}": {"grid_of": other, "kernel_source": k, "why": why}
                              for (fw, dt), (other, k, why) in SHARED_KERNELS.items()},
           "fit": {"lambda": LAMBDA, "huber_ln": HUBER, "irls_steps": IRLS_STEPS,
                   "routing_passes_candidates": list(PASSES)},
           "families": {f: {"features": list(KS.FEATURES[f]), "axes_log2": [[float(x) for x in ax] for ax in AXES[f]]}
                        for f in AXES},
           "curve_systems": [s for s in CURVE_SYSTEMS if s in a.systems],
           "systems": {s: {"chips": SYSTEMS[s], "reference": refs[s]} for s in a.systems}}
    prev = yaml.safe_load((OUT / "index.yaml").read_text()) if (OUT / "index.yaml").exists() else None
    if isinstance(prev, dict) and prev.get("extra_versions"):  # versions.csv stays: so does its record
        idx["extra_versions"] = prev["extra_versions"]
    (OUT / "index.yaml").write_text(yaml.safe_dump(idx, sort_keys=False, width=120, default_flow_style=None))
    KS.clear_cache()
    H = pd.concat(held, ignore_index=True)
    H["pred"] = np.nan
    for (system, fw, family), g in H.groupby(["system", "framework", "family"]):
        kp = KS.KernelProfile(load_chip(SYSTEMS[system][0]), fw, system)
        H.loc[g.index, "pred"] = predict(kp, family, g)
    H["err"] = H.pred / H.t - 1
    H["report"] = H.family.map(REPORT_FAMILY)
    report = {}
    print("\nheld-out |predicted/measured - 1| (measured profiles, all frameworks and dtypes):")
    print(f"  {'system':10s} {'family':18s} {'rows':>6s} {'median':>7s} {'p90':>7s}")
    for (system, fam), g in H.groupby(["system", "report"]):
        s = report.setdefault(system, {})[fam] = stats(g.err)
        print(f"  {system:10s} {fam:18s} {s['rows']:6d} {s['median']:7.3f} {s['p90']:7.3f}")
    for fam, g in H.groupby("report"):
        s = stats(g.err)
        print(f"  {'ALL':10s} {fam:18s} {s['rows']:6d} {s['median']:7.3f} {s['p90']:7.3f}")
    print("\nby framework:")
    for (fw, fam), g in H.groupby(["framework", "report"]):
        s = stats(g.err)
        print(f"  {fw:10s} {fam:18s} {s['rows']:6d} {s['median']:7.3f} {s['p90']:7.3f}")
    curve = {}
    print("\ncurve family, leave-one-system-out (chip peaks, no own tables):")
    for system in idx["curve_systems"] if len(idx["curve_systems"]) > 1 else []:
        g0 = H[H.system == system].copy()
        for (fw, family), g in g0.groupby(["framework", "family"]):
            kp = KS.KernelProfile(load_chip(SYSTEMS[system][0]), fw, None, exclude=(system,))
            g0.loc[g.index, "cpred"] = predict(kp, family, g)
        for fam, g in g0.groupby("report"):
            s = curve.setdefault(system, {})[fam] = stats(g.cpred / g.t - 1)
            print(f"  {system:10s} {fam:18s} {s['rows']:6d} {s['median']:7.3f} {s['p90']:7.3f}")
    idx["holdout_report"] = report
    idx["curve_leave_one_out_report"] = curve
    (OUT / "index.yaml").write_text(yaml.safe_dump(idx, sort_keys=False, width=120, default_flow_style=None))
    KS.clear_cache()
    write_table_versions(a.systems)
    distil_allreduce(a.systems)
    # ---- a sample of held-out rows for the test suite
    rng = np.random.default_rng(SEED)
    parts = []
    for fam, g in H.groupby("report"):
        parts.append(g.iloc[np.sort(rng.choice(len(g), min(a.sample_per_family, len(g)), replace=False))])
    S = pd.concat(parts)
    S = S.assign(chip=S.system.map(lambda s: SYSTEMS[s][0]), measured_s=S.t)
    cols = ["report", "family", "chip", "framework", "dtype", "m", "n", "k", "batch", "q", "L", "heads", "kv_heads",
            "head_dim", "tokens", "hidden", "moe_inter", "num_experts", "top_k", "ep", "measured_s", "source"]
    S = S.reindex(columns=cols)
    for c_ in cols[5:20]:
        S[c_] = S[c_].map(lambda v: "" if pd.isna(v) else f"{v:g}")
    S["measured_s"] = S.measured_s.map(lambda v: f"{v:.6g}")
    SAMPLE.parent.mkdir(parents=True, exist_ok=True)
    S.to_csv(SAMPLE, index=False)
    size = sum(p.stat().st_size for p in OUT.iterdir())
    print(f"\nwrote {OUT.relative_to(ROOT)} ({size / 1e6:.2f} MB) and {SAMPLE.relative_to(ROOT)} ({len(S)} rows)")
    print(f"wrote {write_compiled_catalog().relative_to(ROOT)} (index.yaml changed)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
