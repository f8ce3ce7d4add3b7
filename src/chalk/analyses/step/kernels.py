"""Measured kernel efficiency: how long one GEMM, one layer's attention or one MoE layer's experts take on a GPU.

The data (`chalk/catalog/kernels/`, written by `scripts/distill_kernels.py`) are distilled from the measured kernel
tables of aiconfigurator-core (Apache-2.0; the figures only). Each table became a coarse grid of the achieved
efficiency eta = (roofline floor at the reference chip's peaks) / (fitted kernel time), over a few shape features
on a log2 scale (`FEATURES`): GEMM (m, n, k); MHA/GQA decode (batch x KV heads, context, query group, head dim);
MHA prefill (batch x heads, prompt, group, head dim); MLA decode (batch, context, heads) and prefill (batch,
prompt, heads); routed experts (tokens per expert, experts per GPU, hidden, intermediate). eta is a fraction of the
chip's own ceilings, so it carries wave and tile quantisation, launch latency, occupancy and the bandwidth a kernel
really reaches, and the same curve can be scaled to another chip by that chip's peaks.

Why this form: a fitted time surface in log-shape space reproduces the held-out measured rows to a few percent
(median) where a handful of global constants cannot (GEMMs alone range from 0.1% to 90% of peak), while
normalising by the roofline keeps the numbers physical (eta <= 1) and transferable. Between grid nodes the log of
the time is interpolated multilinearly; past the last node a problem runs as several grid-sized ones (time grows
with the work, `beyond_grid`), below the first it is padded up to it. Node times are made non-decreasing in the size
axes (m; batch and context; tokens), so predicted times never fall when work grows (a smaller problem is capped by a
larger one's time: it could be padded), and never drop below the chip's roofline floor. A layer's shape on a GPU (a
GEMM's n and k, attention heads, expert sizes) is fixed for a model on a layout, so each grid is cut there once
(`_Slice`: exact, interpolation being separable) and one question looks its time up in 1 or 2 dimensions without
numpy.

Chips with their own tables (H100/H800, H200, B200, GB200, B300, GB300, A100) use them ("measured"); any other chip
(AMD, TPU, Rubin, a user's YAML) gets the curve family of the modern NVIDIA systems scaled by its own peaks
("curve"; `curve_log_time`: per node, the part of the time that scales with the peaks and the part that does not).
Pure numpy + PyYAML at run time.
"""

from __future__ import annotations

import csv
import itertools
import math
from bisect import bisect_right
from functools import lru_cache

import numpy as np

from chalk.equations import kernels as K
from chalk.equations import parallel as P
from chalk.equations.num import maximum, minimum, where
from chalk.errors import InputError
from chalk.specs.precision import bytes_per_element, canonical, weight_only

FRAMEWORKS = ("trtllm", "sglang", "vllm")
DEFAULT_FRAMEWORK = "trtllm"
#: shape features of each grid, in the order of its axes (all on a log2 scale)
FEATURES = {
    "gemm": ("m", "n", "k"),
    "mha_decode": ("batch*kv_heads", "context", "heads/kv_heads", "head_dim"),
    "mha_prefill": ("batch*heads", "prompt", "heads/kv_heads", "head_dim"),
    "mla_decode": ("batch", "context", "heads"),
    "mla_prefill": ("batch", "prompt", "heads"),
    "moe": ("tokens*top_k/experts", "experts/ep", "hidden", "moe_inter"),
}
#: the MoE kernels timed twice: under served traffic's power-law expert loads (`moe`) and with every expert given
#: the same tokens (`moe_balanced`: what an expert-load balancer approaches); one grid layout for both
FEATURES["moe_balanced"] = FEATURES["moe"]
#: Largest fraction of a chip's catalog HBM bandwidth a kernel streams at: the measured decode-attention kernels of
#: aiconfigurator-core 0.12.0's TensorRT-LLM tables reach at most 0.92-0.96 of it, their 99th percentile 0.88-0.92
#: (H100 0.90, H200 0.88, B200 0.89, GB200 0.92, B300 0.88), their small-m GEMMs (weight streams) at most 0.86-0.91;
#: FlashMLA 3000 / 3350 GB/s = 0.90 on H800 and Azure's GB200 7.35 / 8 TB/s = 0.92 (calibration.MEMORY). A fitted
#: grid carried past its measured shapes (decode attention at large batch x context: 0.97-1.00 of peak before) is
#: held to it: no kernel time is shorter than its bytes at this fraction of the chip's bandwidth.
STREAM_CEILING = 0.92
#: axes along which the time must not fall (more rows, sequences, context or tokens)
MONOTONE = {"gemm": (0,), "mha_decode": (0, 1), "mha_prefill": (0, 1), "mla_decode": (0, 1), "mla_prefill": (0, 1),
            "moe": (0,)}
#: axes that vary from one question to the next for a model on a layout (rows, batch, context, tokens: always the
#: first ones); the other axes (the layer's shape on one GPU) are fixed there, so the grid reduces exactly to these
#: (`_Slice`)
VARYING = {"gemm": (0,), "mha_decode": (0, 1), "mha_prefill": (0, 1), "mla_decode": (0, 1), "mla_prefill": (0, 1),
           "moe": (0,)}
#: how the work grows with each feature past the grid's last node (time scales as (x / x_max)^p: a bigger problem
#: is run as several grid-sized ones; causal prefill length enters squared; group size is intensive)
EXPONENTS = {"gemm": (1, 1, 1), "mha_decode": (1, 1, 0, 1), "mha_prefill": (1, 2, 0, 1), "mla_decode": (1, 1, 1),
             "mla_prefill": (1, 2, 1), "moe": (1, 1, 1, 1)}
for _d in (MONOTONE, VARYING, EXPONENTS):
    _d["moe_balanced"] = _d["moe"]
#: Most a mixed-input MoE layer (4-bit MXFP4 weights under 16-bit math, table key w4a16) may take over the same layer
#: with 16-bit weights. The distilled mixed-input tables, on the expert shapes they were measured on (MXFP4 checkpoints:
#: hidden and intermediate 2,880), run 4.1x (H100) to 7.2x (B200) the 16-bit time at 64K tokens, where dequantising
#: every loaded weight dominates; read at other expert shapes the table went to 45-1,000x (a 7,168-wide, 256-expert
#: layer on H100), which no kernel does. 8 bounds the measured ratios.
MIXED_INPUT_MAX_SLOWDOWN = 8.0
#: The (hidden, intermediate) expert shape the mixed-input tables were measured on (gpt-oss's MXFP4 experts): read at
#: another shape, a layer takes the 16-bit time there times the slowdown measured on this shape at the same tokens
#: per expert (a 4-bit Qwen3-235B expert layer read straight from the table took 40.7 ms for 0.47 GB at one token on
#: H100, 8x its 16-bit time, where on the measured shape mixed input costs about what its narrow read saves)
MIXED_INPUT_MEASURED_SHAPE = (2880.0, 2880.0)
#: table dtype keys tried for a precision, nearest first
_CHAIN = {"fp4": ("fp4", "fp8", "bf16"), "fp8": ("fp8", "bf16"), "bf16": ("bf16", "fp8"), "w4a16": ("w4a16", "bf16")}


@lru_cache(maxsize=256)
def _precision(dtype: str, weight_precision: str | None) -> tuple[str, float]:
    """(canonical math precision, bytes per stored weight element)."""
    p = canonical(dtype)
    return p, bytes_per_element(weight_precision or p)


def dtype_key(precision: str) -> str:
    """The table key a chalk precision is timed with: 'bf16' (16 bits and wider), 'fp8' (8 bits), 'fp4'."""
    b = bytes_per_element(canonical(precision))
    return "bf16" if b >= 2 else ("fp8" if b >= 1 else "fp4")


# --------------------------------------------------------------------------- roofline in feature space
def roof_features(family: str, f, peak: float, bw: float, elem_bytes: float):
    """Roofline floor (s) of a kernel described by its linear features `f` (tuple of arrays, `FEATURES` order)."""
    if family == "gemm":
        m, n, k = f
        fl, by = K.gemm_kernel_flops(m, n, k), K.gemm_kernel_bytes(m, n, k, elem_bytes)
    elif family == "mha_decode":
        bk, L, g, hd = f  # batch*kv_heads sequences-heads, each serving g query heads
        fl, by = K.decode_attention_flops(bk, 1.0, L, g, hd), K.decode_attention_bytes(bk, L, 1.0, hd, elem_bytes)
    elif family == "mha_prefill":
        bh, q, g, hd = f
        fl = K.prefill_attention_flops(bh, q, q, 1.0, hd)
        by = K.prefill_attention_bytes(bh, q, q, 1.0, 1.0 / g, hd, elem_bytes)
    elif family == "mla_decode":
        b, L, h = f
        fl, by = K.mla_decode_flops(b, 1.0, L, h), K.mla_decode_bytes(b, L, elem_bytes)
    elif family == "mla_prefill":
        b, q, h = f
        fl, by = K.mla_prefill_flops(b, q, q, h), K.mla_prefill_bytes(b, q, q, h)
    elif family in ("moe", "moe_balanced"):
        me, el, h, i = f
        c = np.asarray(me, dtype=float) * el
        fl, by = K.moe_flops(c, h, i), K.moe_bytes(c, K.moe_experts_touched(c, el), h, i, elem_bytes)
    else:
        raise InputError(f"unknown kernel family {family!r}")
    return K.roofline_time_s(fl, by, peak, bw)


def corner_weights(axes, x_log2):
    """Multilinear interpolation on a grid: for points `x_log2` (list of 1-D arrays, one per axis, clamped to the
    axes) the flat node index and weight of each of the 2^d cell corners, as two (points x 2^d) arrays."""
    shape = [len(a) for a in axes]
    strides = np.cumprod([1] + shape[::-1][:-1])[::-1]
    # corner k takes the upper node on axis j where _corner_bits(d)[k, j]: the first axis is the slowest bit, so each
    # axis splits every corner weight so far into (lower, upper); one whole-length product per corner and axis
    base, ws = 0, [1.0]
    for j, (a, x) in enumerate(zip(axes, x_log2)):
        x = np.asarray(x, dtype=float)
        i = np.asarray(np.clip(np.searchsorted(a, x, side="right") - 1, 0, len(a) - 2))
        f = np.clip((x - a[i]) / (a[i + 1] - a[i]), 0.0, 1.0)
        base = base + i * strides[j]
        lower = 1.0 - f
        ws = [w * v for w in ws for v in (lower, f)]
    cols = np.asarray(base, dtype=np.int64)[..., None] + _corner_bits(len(axes)) @ strides
    return cols, np.stack(np.broadcast_arrays(*ws), axis=-1)


#: points interpolated at a time by `interpolate`: its temporaries (a cell index, a weight, a gathered value per
#: point) stay a few MB, whatever the grid
CHUNK_POINTS = 1 << 15


def interpolate(axes, x_log2, values) -> np.ndarray:
    """`(values[cols] * w).sum(-1)` for `cols, w = corner_weights(axes, x_log2)`, without building the points x 2^d
    corner arrays: each corner's node value times its weight is added in place, over chunks of `CHUNK_POINTS`.

    `values`: the grid's values flat in C order over `axes`; `x_log2`: one array per axis, clamped to it,
    broadcast together (each axis's cell and fraction are found on the array as given, before broadcasting). The
    corners' weights are the same products as `corner_weights`' and are summed in the same order, so the answer is
    the same to rounding (a few ulp). Memory: the answer plus O(`CHUNK_POINTS` x d) bytes."""
    values = np.asarray(values, dtype=float).ravel()
    xs = [x if type(x) is np.ndarray and x.dtype == np.float64 else np.asarray(x, dtype=float) for x in x_log2]
    strides, st = [], 1
    for a in reversed(axes):
        strides.append(st)
        st *= len(a)
    strides.reverse()
    shape = xs[0].shape if len(xs) == 1 else np.broadcast_shapes(*(x.shape for x in xs))
    if math.prod(shape) <= CHUNK_POINTS:
        return _corners_added(axes, xs, values, strides, shape, None)
    out = np.empty(shape)
    _interpolate_into(out, axes, xs, values, strides)
    return out


def _interpolate_into(out, axes, xs, values, strides) -> None:
    """`interpolate` into `out` (the points' broadcast shape): split along the first axis until a piece holds at
    most `CHUNK_POINTS` points (or one row), then add the corners."""
    if out.ndim and out.size > CHUNK_POINTS:
        rows = out.shape[0]
        step = max(1, CHUNK_POINTS // max(1, out.size // rows))
        full = [x.ndim == out.ndim and x.shape[0] == rows for x in xs]  # arrays that vary along the first axis
        for r0 in range(0, rows, step):
            piece = out[r0:r0 + step]
            sub = [x[r0:r0 + step] if f else (x if x.ndim < out.ndim else x[:1]) for x, f in zip(xs, full)]
            if piece.shape[0] == 1 and piece.size > CHUNK_POINTS and piece.ndim > 1:
                _interpolate_into(piece[0], axes, [x[0] if x.ndim == out.ndim else x for x in sub], values,
                                  strides)
            else:
                _corners_added(axes, sub, values, strides, piece.shape, piece)
        return
    _corners_added(axes, xs, values, strides, out.shape, out)


def _corners_added(axes, xs, values, strides, shape, out):
    """The interpolation of one piece of points (at most `CHUNK_POINTS`), into `out` (or a new array)."""
    base, lowers, uppers = 0, [], []
    for a, x, st in zip(axes, xs, strides):
        # the cell: interior nodes at or below x (= clip(searchsorted(a, x, 'right') - 1, 0, len(a) - 2))
        i = np.searchsorted(a[1:-1], x, side="right")
        lo = a[i]
        f = np.minimum(np.maximum((x - lo) / (a[i + 1] - lo), 0.0), 1.0)
        base = base + i * st if st != 1 else base + i
        lowers.append(1.0 - f)
        uppers.append(f)
    # corner k (bits from the first axis, the slowest) weighs the product of its axes' lower or upper fractions,
    # multiplied from the first axis on (as `corner_weights`); products shared by corners are made once
    ws = [(0, lowers[0]), (strides[0], uppers[0])]
    for j in range(1, len(axes)):
        st = strides[j]
        ws = [(o + b * st, w * v) for o, w in ws for b, v in ((0, lowers[j]), (1, uppers[j]))]
    if out is None:
        acc = None
        for off, w in ws:
            term = values[base + off if off else base] * w
            acc = term if acc is None else acc + term
        return acc if acc.shape == shape else np.broadcast_to(acc, shape).copy()
    if np.ndim(base) != len(shape) or np.shape(base) != shape:
        base = np.broadcast_to(base, shape)
    term = np.empty(shape)
    for k, (off, w) in enumerate(ws):
        np.take(values, base + off if off else base, out=term)
        if k == 0:
            np.multiply(term, w, out=out)
        else:
            np.multiply(term, w, out=term)
            out += term
    return out


def interpolate_outer(axes, x_log2, grid):
    """2-D `interpolate` at points that are an outer product: `x_log2` = (x0, x1), clamped to the two `axes`,
    varying along different dimensions, x0's before x1's (a column of batches and a row of contexts); `grid`: the
    node values, shape (len(axes[0]), len(axes[1])). None when the points are not of that form, or x0 holds fewer
    points than axis 0 has nodes (the point-by-point `interpolate` answers then).

    Interpolation is separable: the grid is first interpolated along axis 1 at x1's points for every node of axis
    0 (a small table, nodes x |x1|), then each row of the answer is two of that table's rows, weighed by x0's
    fraction: two contiguous row copies, two products and a sum per point, in chunks of `CHUNK_POINTS` (no index
    or weight arrays over the whole grid). Equal to `interpolate` to rounding (a few ulp of the values: the same
    products, summed in another order)."""
    x0, x1 = x_log2
    s0, s1 = np.shape(x0), np.shape(x1)
    nd = max(len(s0), len(s1))
    p0, p1 = (1,) * (nd - len(s0)) + s0, (1,) * (nd - len(s1)) + s1
    d0 = [k for k in range(nd) if p0[k] != 1]
    d1 = [k for k in range(nd) if p1[k] != 1]
    if d0 and d1 and max(d0) >= min(d1):  # shared or interleaved dimensions: not an outer product in C order
        return None
    r0, r1 = np.ravel(x0), np.ravel(x1)
    if r0.size < len(axes[0]):
        return None
    i, u = _cell_fraction(axes[0], r0)
    j, w = _cell_fraction(axes[1], r1)
    # axis 0's nodes x x1's points, in C order (`grid[:, j]` would be in Fortran order: rows copied point by point)
    table = np.take(grid, j, axis=1) * (1.0 - w) + np.take(grid, j + 1, axis=1) * w
    lu = 1.0 - u
    out = np.empty((r0.size, r1.size))
    rows = max(1, CHUNK_POINTS // max(1, r1.size))
    tmp = np.empty((min(rows, r0.size), r1.size))
    for r in range(0, r0.size, rows):
        o = out[r:r + rows]
        t = tmp[:o.shape[0]]
        np.take(table, i[r:r + rows], axis=0, out=o, mode="clip")  # in range: clip skips a buffer
        o *= lu[r:r + rows, None]
        np.take(table, i[r:r + rows] + 1, axis=0, out=t, mode="clip")
        t *= u[r:r + rows, None]
        o += t
    return out.reshape(tuple(a if a != 1 else b for a, b in zip(p0, p1)))


def _cell_fraction(a, x):
    """The cell of nodes `a` holding each of the points `x` (clamped to them) and the fraction across it, as
    `corner_weights` finds them."""
    i = np.searchsorted(a[1:-1], x, side="right")
    lo = a[i]
    return i, np.minimum(np.maximum((x - lo) / (a[i + 1] - lo), 0.0), 1.0)


@lru_cache(maxsize=None)
def _corner_bits(d: int) -> np.ndarray:
    return np.array(list(itertools.product((0, 1), repeat=d)), dtype=np.int64).reshape(-1, d)


def clamp_log2(axes, f):
    """log2 of linear features `f`, clamped to the grid's axes."""
    return [np.clip(np.log2(np.maximum(np.asarray(x, dtype=float), 1e-30)), a[0], a[-1]) for a, x in zip(axes, f)]


def beyond_grid(family: str, axes, f):
    """Factor on the time of the grid's edge for features past the last node: (x / x_max)^p per axis (`EXPONENTS`);
    1 inside the grid and below it (a smaller problem takes the smallest node's time: it could be padded)."""
    out = 1.0
    for a, x, p in zip(axes, f, EXPONENTS[family]):
        if p:
            out = out * np.maximum(np.asarray(x, dtype=float) / 2.0 ** a[-1], 1.0) ** p
    return out


# --------------------------------------------------------------------------- data
def _data_dir():
    from chalk.specs.catalog import package_path

    return package_path("catalog", "kernels")


@lru_cache(maxsize=1)
def index() -> dict:
    """The distillation's index: provenance, grid axes, reference peaks, chips of each measured system."""
    from chalk.specs.catalog import read_yaml

    f = _data_dir() / "index.yaml"
    return read_yaml(f, "catalog kernels/index.yaml") if f.is_file() else {}


@lru_cache(maxsize=None)
def axes(family: str) -> tuple:
    return tuple(np.asarray(a, dtype=float) for a in index()["families"][family]["axes_log2"])


@lru_cache(maxsize=None)
def tables(system: str) -> dict:
    """{(framework, family, dtype): row dict with `passes` and, once `_ln_eta(row)` has read it, `ln_eta`} of one
    measured system."""
    out = {}
    try:
        text = (_data_dir() / f"{system}.csv").read_text()
    except (FileNotFoundError, OSError):
        return out
    for r in csv.DictReader(line for line in text.splitlines() if not line.startswith("#")):
        r["passes"] = float(r.get("routing_passes") or 0.0)
        out[(r["framework"], r["family"], r["dtype"])] = r
    return out


def _version_key(v: str) -> tuple:
    """'0.5.6.post2' -> (0, 5, 6, 2): a version's numbers, for nearest-version matching."""
    import re

    return tuple(int(x) for x in re.findall(r"\d+", str(v)))


@lru_cache(maxsize=None)
def versioned_tables(system: str) -> dict:
    """{(framework, family, dtype): {framework version: row}} of one measured system: the main tables (`tables`)
    and the other versions distilled for comparison (`versions.csv`, index.yaml `extra_versions`)."""
    out: dict = {}
    for k, r in tables(system).items():
        out.setdefault(k, {})[r["version"]] = r
    meta = index().get("extra_versions") or {}
    try:
        text = (_data_dir() / meta.get("file", "versions.csv")).read_text()
    except (FileNotFoundError, OSError):
        return out
    for r in csv.DictReader(line for line in text.splitlines() if not line.startswith("#")):
        if r["system"] == system:
            r["passes"] = float(r.get("routing_passes") or 0.0)
            out.setdefault((r["framework"], r["family"], r["dtype"]), {}).setdefault(r["version"], r)
    return out


def nearest_version(want: str, have) -> str:
    """The measured version nearest an engine release: one whose numbers start with the release's ('0.5.6' ->
    '0.5.6.post2'), else the newest not newer than it, else the oldest."""
    w = _version_key(want)
    keyed = sorted(have, key=_version_key)
    same = [v for v in keyed if _version_key(v)[:len(w)] == w]
    if same:
        return same[-1]
    older = [v for v in keyed if _version_key(v) <= w]
    return older[-1] if older else keyed[0]


@lru_cache(maxsize=1)
def allreduce_tables() -> dict:
    """{(system, framework): (GPU counts, ln seconds [counts x message sizes], provenance row)} of the measured
    all-reduce times (`allreduce.csv`); message sizes 2^e bytes, e over index()['allreduce']['message_log2']."""
    meta = index().get("allreduce") or {}
    try:
        text = (_data_dir() / meta.get("file", "allreduce.csv")).read_text()
    except (FileNotFoundError, OSError):
        return {}
    rows: dict = {}
    for r in csv.DictReader(line for line in text.splitlines() if not line.startswith("#")):
        rows.setdefault((r["system"], r["framework"]), []).append(r)
    out = {}
    for key, rs in rows.items():
        rs.sort(key=lambda r: int(r["num_gpus"]))
        n = np.array([float(r["num_gpus"]) for r in rs])
        lt = np.log(np.array([r["t_us"].split() for r in rs], dtype=float) * 1e-6)
        # a smaller message can always be padded to a larger one: times never fall as messages grow
        out[key] = (n, np.maximum.accumulate(lt, axis=1), rs[0])
    return out


def _ln_eta(row: dict) -> np.ndarray:
    """A table row's ln eta grid, parsed from its text on first use: one estimate reads a few of a system's ~30
    grids, and parsing all ~44,000 figures cost `chalk estimate` ~3 ms of start-up (issue 12)."""
    if "ln_eta" not in row:
        shape = [len(a) for a in axes(row["family"])]
        row["ln_eta"] = (np.array(row["ln_eta_x100"].split(), dtype=float) / 100.0).reshape(shape)
    return row["ln_eta"]


def clear_cache() -> None:
    """Forget loaded data and profiles (after `scripts/distill_kernels.py` rewrote them)."""
    allreduce_tables.cache_clear()
    index.cache_clear()
    axes.cache_clear()
    tables.cache_clear()
    versioned_tables.cache_clear()
    _curve.cache_clear()
    _PROFILES.clear()


def system_for_chip(chip) -> str | None:
    """The measured system whose tables time `chip`, or None (the chip gets the curve)."""
    for name, s in (index().get("systems") or {}).items():
        if chip.id in (s.get("chips") or []):
            return name
    return None


@lru_cache(maxsize=None)
def _curve(framework: str, family: str, dtype: str, exclude: tuple = ()):
    """The curve systems' tables of this kind ((system, ln eta grid, reference rates) each), their mean routing
    passes and a descriptor; None when no curve system has one."""
    idx = index()
    for fw in dict.fromkeys((framework, DEFAULT_FRAMEWORK)):
        rows = [tables(s)[(fw, family, dtype)] for s in idx.get("curve_systems", [])
                if s not in exclude and (fw, family, dtype) in tables(s)]
        if rows:
            members = tuple((r["system"], _ln_eta(r), idx["systems"][r["system"]]["reference"]) for r in rows)
            return (members, float(np.mean([r["passes"] for r in rows])),
                    {"kind": "curve", "framework": fw, "systems": [m[0] for m in members]})
    return None


def curve_log_time(members, family, precision, elem_bytes, mesh, roof_chip, fit_bytes=None):
    """ln of a chip's node times from the curve systems' measured ones.

    At each node, ln t_s = a + alpha * ln r_s is fitted over the curve systems s (r_s: the node's roofline at s's
    peaks, t_s = r_s / eta_s) and evaluated at the chip's roofline: alpha = 1 where kernels run at a fixed fraction
    of peak (throughput-bound), alpha = 0 where they take a fixed time whatever the chip (launch-latency-bound), and
    in between where both matter. alpha is clipped to [0, 1]; a single system (or systems with equal peaks) gives
    alpha = 1, i.e. its efficiency scaled by the chip's peaks. `fit_bytes`: the element bytes the tables were
    measured at, when the weights are stored narrower (weight-only quantisation): alpha is fitted there, a
    property of the kernel at the node, and the narrow read moves only the rooflines, so that a node's time never
    grows as the bytes shrink."""
    key = "bf16" if family.startswith(("mha", "mla")) else dtype_key(precision)  # attention math runs at 16 bits

    def ln_roofs(b):
        return np.stack([np.log(roof_features(family, mesh, float(ref.get(key) or ref["bf16"]), float(ref["hbm"]),
                                              b)) for _, _, ref in members])
    ln_etas = np.stack([ln_eta for _, ln_eta, _ in members])
    x = ln_roofs(elem_bytes)
    y = x - ln_etas
    xm, ym = x.mean(0), y.mean(0)
    xf = x if fit_bytes is None or fit_bytes == elem_bytes else ln_roofs(fit_bytes)
    yf = xf - ln_etas
    xfm = xf.mean(0)
    var = ((xf - xfm) ** 2).mean(0)
    alpha = np.where(var > 1e-6, ((xf - xfm) * (yf - yf.mean(0))).mean(0) / np.maximum(var, 1e-12), 1.0)
    alpha = np.clip(alpha, 0.0, 1.0)
    return ym + alpha * (np.log(roof_chip) - xm)


def _check(name, x, positive=False):
    """`x` validated: finite and >= 0 (> 0 with `positive`); a float for one number (or a 0-d array), else an
    array."""
    if type(x) is float or type(x) is int or isinstance(x, (np.floating, np.integer)):  # one number: no array
        v = float(x)
        if math.isfinite(v) and (v > 0 if positive else v >= 0):
            return v
    try:
        a = np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a number or an array of numbers, got {x!r}") from None
    bad = ~np.isfinite(a) | ((a <= 0) if positive else (a < 0))
    if np.any(bad):
        v = a[bad].ravel()[0] if a.ndim else a
        raise InputError(f"{name} must be finite and {'> 0' if positive else '>= 0'}, got {float(v)!r}")
    return float(a) if a.ndim == 0 else a


def _broadcast(*xs):
    """`np.broadcast_arrays` of checked inputs; floats stay floats when every input is one number."""
    if all(isinstance(x, float) for x in xs):
        return xs
    return np.broadcast_arrays(*xs)


def _cut(ln_n, lt, y):
    """Rows `lt` (one per log GPU count `ln_n`) interpolated linearly to log count `y`."""
    j = min(max(bisect_right(ln_n.tolist(), y) - 1, 0), len(ln_n) - 2)
    f = (y - ln_n[j]) / (ln_n[j + 1] - ln_n[j])
    return lt[j] + f * (lt[j + 1] - lt[j])


class _Slice:
    """A kernel grid cut at one fixed layer shape: ln time over the `VARYING` axes only.

    Multilinear interpolation is separable, so interpolating the grid first along its fixed axes (at the layer's
    shape) and then along the varying ones gives exactly the full interpolation (up to rounding): a GEMM of fixed
    (n, k) is a 1-D table over m, attention of fixed heads a 2-D one over batch x context, experts of fixed size a
    1-D one over tokens. One number is looked up with `bisect` and `math`, arrays with `corner_weights`."""

    def __init__(self, family: str, ln_t, fixed: tuple):
        ax = axes(family)
        var = VARYING[family]
        rest = [j for j in range(len(ax)) if j not in var]
        grid = np.transpose(ln_t.reshape([len(a) for a in ax]), list(var) + rest)
        grid = grid.reshape(int(np.prod([len(ax[j]) for j in var])), -1)
        fax = [ax[j] for j in rest]
        cols, w = corner_weights(fax, clamp_log2(fax, [np.asarray(v, dtype=float) for v in fixed]))
        self.axes = [ax[j] for j in var]
        self.ln_t = (grid[:, cols] * w).sum(-1)
        # past the grid's edge the time scales with the work (`beyond_grid`): the fixed axes' part is one factor
        self.edge = float(np.prod([max(v / 2.0 ** ax[j][-1], 1.0) ** EXPONENTS[family][j]
                                   for j, v in zip(rest, fixed) if EXPONENTS[family][j]]))
        self.exps = tuple(EXPONENTS[family][j] for j in var)
        self.tops = tuple(2.0 ** float(a[-1]) for a in self.axes)
        #: (axis, exponent, top node) of the varying axes whose time grows past the grid's edge
        self.grows = tuple((j, p, top) for j, (p, top) in enumerate(zip(self.exps, self.tops)) if p)
        self.lists = tuple([float(v) for v in a] for a in self.axes)
        self.grid = self.ln_t.reshape([len(a) for a in self.axes])
        self.values = self.grid.tolist()

    def time(self, f):
        """Seconds at the varying features `f` (floats or arrays, in `VARYING` order). Two arrays that vary along
        different dimensions, the first's before the second's (a batch column and a context row), are taken as
        their outer product (`interpolate_outer`); any other arrays point by point (`interpolate`)."""
        if _floats(f):
            return self._one(f)
        xs = clamp_log2(self.axes, f)
        out = interpolate_outer(self.axes, xs, self.grid) if len(xs) == 2 else None
        if out is None:
            out = interpolate(self.axes, xs, self.ln_t)
        if type(out) is not np.ndarray or out.ndim == 0:  # one point given as 0-d arrays
            out = np.exp(out) * self.edge
            for x, p, top in zip(f, self.exps, self.tops):
                if p:
                    out = out * np.maximum(np.asarray(x, dtype=float) / top, 1.0) ** p
            return out
        # `out` is this call's own array: exp and the factors past the grid's edge are applied in place (the same
        # products in the same order; a factor of 1 everywhere, the points inside the grid, is skipped)
        np.exp(out, out=out)
        if self.edge != 1.0:
            out *= self.edge
        for x, p, top in zip(f, self.exps, self.tops):
            if p:
                g = np.maximum(np.asarray(x, dtype=float) / top, 1.0) ** p
                if np.broadcast_shapes(g.shape, out.shape) != out.shape:
                    out = out * g
                elif np.any(g != 1.0):
                    out *= g
        return out

    def _one(self, f):
        v = self.values
        if len(f) == 1:
            i, u = _cell(self.lists[0], f[0])
            ln = v[i] * (1.0 - u) + v[i + 1] * u
        else:
            i, u = _cell(self.lists[0], f[0])
            j, w = _cell(self.lists[1], f[1])
            lo, hi = v[i], v[i + 1]
            ln = (lo[j] * ((1.0 - u) * (1.0 - w)) + lo[j + 1] * ((1.0 - u) * w)
                  + hi[j] * (u * (1.0 - w)) + hi[j + 1] * (u * w))
        t = math.exp(ln) * self.edge
        for j, p, top in self.grows:
            x = f[j]
            if x > top:
                t *= (x / top) ** p
        return t


def _at_least(t, floor):
    """`maximum(t, floor)`, into `t` itself where it is an array that already has the answer's shape (a time this
    module has just made and holds alone: a kernel's looked-up time), else a new one."""
    if type(t) is np.ndarray and t.ndim and np.shape(floor) == t.shape:
        return np.maximum(t, floor, out=t)
    return maximum(t, floor)


def _cell(a: list, x: float) -> tuple[int, float]:
    """The cell of the sorted nodes `a` that holds log2(x) clamped to them, and the fraction across it (as
    `corner_weights` finds them: the first cell at or below the first node, the last one at or past the last)."""
    y = math.log2(x) if x > 1e-30 else math.log2(1e-30)
    if y <= a[0]:
        return 0, 0.0
    if y >= a[-1]:
        return len(a) - 2, 1.0
    i = bisect_right(a, y) - 1
    return i, (y - a[i]) / (a[i + 1] - a[i])


_INF = math.inf

#: One number's types (a numpy float64 is a float): a memo key of them equals the checked float's.
_SCALAR = (float, int, np.float64)


def _numbers(xs) -> bool:
    """Every one of `xs` is one number (not an array)."""
    for x in xs:
        if not isinstance(x, (int, float, np.integer, np.floating)):
            return False
    return True


def _floats(xs) -> bool:
    for x in xs:
        if not isinstance(x, float):
            return False
    return True


def _attention_kind(phase: str, kind: str) -> None:
    if phase not in ("decode", "prefill"):
        raise InputError(f"attention phase must be 'decode' or 'prefill', got {phase!r}")
    if kind not in ("mha", "mla"):
        raise InputError(f"attention kind must be 'mha' or 'mla', got {kind!r}")


#: Sizes a fixed-shape kernel remembers its time at (`GemmShape`, `AttentionShape`), forgotten all at once past it.
MEMO_SIZE = 4096


class _Shape:
    """A kernel of fixed layer shape on one GPU, timed for many sizes: where the fixed axes are numbers the grid
    is cut there once (`_Slice`) and one size (numbers) is a 1-D or 2-D lookup; otherwise (arrays) the whole grid
    is interpolated (`KernelProfile._time`)."""

    family = ""

    def _lookup(self, f, key):
        """Log-interpolated grid time at linear features `f` (all numbers or all arrays, `FEATURES` order). The
        fixed features are the shape's own, so once the grid is cut at them only the varying ones need checking."""
        nv = len(VARYING[self.family])
        cut = self._cut
        if cut is not None:
            head = f[:nv]
            if _floats(head):
                return cut._one(head)
        if not _floats(f):
            return self.profile._time(*key[:3], f, *key[3:])[0]
        if cut is None:
            cut = self._cut = self.profile._slice(key, tuple(f[nv:]))[0]
        return cut._one(f[:nv])


class GemmShape(_Shape):
    """`KernelProfile.gemm_time_s` of one weight shape [k x n] at one precision (a layer's GEMM on a layout),
    for any number of rows m: `shape(m)`."""

    family = "gemm"

    def __init__(self, profile, n, k, dtype, weight_precision=None):
        self.profile, self.n, self.k, self.dtype, self.weight_precision = profile, n, k, dtype, weight_precision
        self.precision, self.elem_bytes = _precision(dtype, weight_precision)
        self._key = ("gemm", self.precision, self.elem_bytes, self.precision, None)
        self._cut = None
        self._memo: dict = {}
        # the same GEMM at the next wider math the chip runs no faster (fp8 -> bf16, fp4 -> fp8): its time bounds
        # this one's (`KernelProfile.wider_math`)
        w = profile.wider_math(self.precision)
        self._wider = None if w is None else (profile.gemm_shape(n, k, w) if _numbers((n, k))
                                               else GemmShape(profile, n, k, w))
        # weights stored narrower than the math (weight-only, or FP4 weights under FP8 math): never slower than the
        # same GEMM with full-width weights at that math, which reads more (issue 24: fewer bytes never slower)
        self._full = None if weight_precision is None or self.elem_bytes >= bytes_per_element(self.precision) \
            else (profile.gemm_shape(n, k, dtype) if _numbers((n, k)) else GemmShape(profile, n, k, dtype))
        # ... nor than the same GEMM at a narrower math that reads more bytes at a rate no faster (4-bit weights under
        # 16-bit math against FP8 on a chip whose FP8 peak is its BF16 peak: TPU v5p, v6e)
        q = profile.no_faster_narrow_math(self.precision, self.elem_bytes) if self._full is not None else None
        self._narrow = None if q is None else (profile.gemm_shape(n, k, q) if _numbers((n, k))
                                               else GemmShape(profile, n, k, q))

    def __call__(self, m):
        """Seconds for one GEMM of `m` rows (a number or an array). One number is remembered (the shape is fixed,
        the tables immutable): a notebook sweeping context at a batch looks each GEMM up once."""
        if isinstance(m, float) and isinstance(self.n, float):
            t = self._memo.get(m)
            if t is None:
                if len(self._memo) >= MEMO_SIZE:
                    self._memo.clear()
                t = self._memo[m] = self.time(_check("m", m))
            return t
        return self.profile.gemm_time_s(m, self.n, self.k, self.dtype, self.weight_precision)

    def time(self, m):
        """Seconds at `m` rows, checked (and broadcast with n and k)."""
        n, k, p = self.n, self.k, self.precision
        t = self._lookup((m, n, k), self._key)
        t = self.profile._floor(t, K.gemm_kernel_flops(m, n, k), K.gemm_kernel_bytes(m, n, k, self.elem_bytes), p)
        t = t if self._wider is None else minimum(t, self._wider.time(m))
        t = t if self._narrow is None else minimum(t, self._narrow.time(m))
        return t if self._full is None else minimum(t, self._full.time(m))


class AttentionShape(_Shape):
    """`KernelProfile.attention_time_s` of one layer's heads on one GPU (`phase`, `kind`, heads, KV heads, head
    dim, KV precision), for any batch, query tokens and context: `shape(batch, q, L)`."""

    def __init__(self, profile, phase, kind, heads, kv_heads, head_dim, kv_precision):
        self.profile, self.phase, self.kind, self.kv_precision = profile, phase, kind, kv_precision
        self.h, self.kvh, self.hd = heads, kv_heads, head_dim
        self.family = f"{kind}_{phase}"
        _, self.eb = _precision(kv_precision, None)
        self.table = "bf16" if self.eb >= 2 else "fp8"
        self._key = (self.family, self.table, self.eb, "bf16", None)
        self._cut = None
        self._eta_c = None
        self._peak = None  # the tables' bf16 peak (`KernelProfile._rates`), read on first use
        self._memo: dict = {}
        self._wide = None  # the same heads over a 16-bit cache (`time`'s bound for a narrower one), made on first use

    def __call__(self, batch, q, L):
        """Seconds for one layer's attention (numbers or arrays; numbers remembered, as `GemmShape`'s)."""
        if isinstance(batch, float) and isinstance(q, float) and isinstance(L, float) and isinstance(self.h, float):
            key = (batch, q, L)
            t = self._memo.get(key)
            if t is None:
                if len(self._memo) >= MEMO_SIZE:
                    self._memo.clear()
                b, qq, LL = float(batch), float(q), float(L)
                if not (0.0 <= b < _INF and 0.0 <= qq < _INF and 0.0 <= LL < _INF):  # `_check`'s test, inline
                    b, qq, LL = _check("batch", batch), _check("q", q), _check("L", L)  # its one-line error
                t = self._memo[key] = self.time(b, qq, LL)
            return t
        return self.profile.attention_time_s(self.phase, self.kind, batch, q, L, self.h, self.kvh, self.hd,
                                             self.kv_precision)

    def time(self, b, q, L):
        """Seconds at checked `b`, `q`, `L` (broadcast with the heads). A cache narrower than 16 bits is never slower
        than the same heads over a 16-bit one (issue 24: fewer bytes never slower): its math runs at the 16-bit
        rate either way, and an FP8 prefill table's dequantisation can cost more than the bytes it saves (QA
        2026-11-28: Llama-3.1-70B TP8 on H100, 512-token prefill attention 1.74 ms over an FP8 cache, 1.68 ms over
        BF16)."""
        t = self._time(b, q, L)
        if self.eb >= 2:
            return t
        if self._wide is None:
            self._wide = AttentionShape(self.profile, self.phase, self.kind, self.h, self.kvh, self.hd, "bf16")
        return minimum(t, self._wide._time(b, q, L))

    def _time(self, b, q, L):
        h, kvh, hd, eb, prof = self.h, self.kvh, self.hd, self.eb, self.profile
        peak = self._peak
        if peak is None:
            peak = self._peak = prof._rates("bf16")[0]
        if self.phase == "decode":
            if self.kind == "mha":
                f = (b * kvh, L, h / kvh, hd)
                by = K.decode_attention_bytes(b, L, kvh, hd, eb)
                fq = K.decode_attention_flops(b, q, L, h, hd)
            else:
                f = (b, L, h)
                by = K.mla_decode_bytes(b, L, eb)
                fq = K.mla_decode_flops(b, q, L, h)
            # q > 1 (speculative verification): one KV read, q times the math at the prefill kernel's best rate
            if self._eta_c is None:
                self._eta_c = prof._grid(f"{self.kind}_prefill", self.table, eb, "bf16")[3]
            t = self._lookup(f, self._key)
            t = _at_least(t, fq / (peak * max(self._eta_c, 1e-3)))
            return prof._floor(t, fq, by, "bf16")
        bb = maximum(b, 1.0)  # a fraction of a prompt (a chunk) takes that fraction of the whole prompt's time
        if self.kind == "mha":
            f = (bb * h, q, h / kvh, hd)
            fl = K.prefill_attention_flops(bb, q, L, h, hd)
            by = K.prefill_attention_bytes(bb, q, L, h, kvh, hd, eb)
        else:
            f = (bb, q, h)
            fl, by = K.mla_prefill_flops(bb, q, L, h), K.mla_prefill_bytes(bb, q, L, h)
        t = self._lookup(f, self._key)
        # new tokens after a cached prefix (q < L): the grid's prompt of q tokens, times the causal pairs' ratio
        t = t * K.causal_pairs(q, L) / maximum(K.causal_pairs(q, q), 1e-30)
        frac = where(b < 1.0, b, 1.0)
        return prof._floor(t * frac, fl * frac, by * frac, "bf16")


# --------------------------------------------------------------------------- the profile
class KernelProfile:
    """Kernel times of one chip under one serving framework (see the module docstring).

    `system`: the measured system whose tables apply (None: the curve family scaled by the chip's peaks);
    `exclude`: systems left out of the curve family (the distillation's leave-one-system-out check);
    `version`: the engine release whose tables to prefer (None: the main tables; else, per table, the measured
    version nearest it, `nearest_version`)."""

    def __init__(self, chip, framework: str = DEFAULT_FRAMEWORK, system: str | None = None, exclude=(),
                 version: str | None = None):
        self.chip, self.framework, self.system, self.version = chip, framework, system, version
        self.exclude = tuple(exclude)
        ref = (index().get("systems") or {}).get(system, {}).get("reference") if system else None
        self._ref = ref or None  # rates the measured grids were normalised by
        self._grids: dict = {}
        self._slices: dict = {}
        self._shapes: dict = {}
        self._sources: dict = {}
        self._balanced: dict = {}
        self._allreduce_rows: dict = {}
        self._allreduce_memo: dict = {}
        self._rate_memo: dict = {}
        self._wider_memo: dict = {}

    # ---- rates
    def _rates(self, precision: str, own: bool = False):
        """(peak FLOP/s at `precision`, HBM B/s): the measured system's reference rates, else the chip's."""
        r = self._rate_memo.get((precision, own))
        if r is None:
            r = self._rate_memo[(precision, own)] = self._rates_of(precision, own)
        return r

    def _rates_of(self, precision: str, own: bool):
        if self._ref and not own:
            peak = self._ref.get(dtype_key(precision)) or self.chip.peak_flops_per_s(precision)
            return float(peak), float(self._ref["hbm"])
        return self.chip.peak_flops_per_s(precision), self.chip.hbm_bandwidth_bytes_per_s

    def no_faster_narrow_math(self, precision: str, weight_bytes: float) -> str | None:
        """For weights stored at `weight_bytes` per element under `precision` math (weight-only quantisation): the
        narrower math (FP8) whose kernel reads at least those bytes per weight at a peak no faster than
        `precision`'s on this chip, or None. Such a kernel bounds the weight-only one: the same shape reading more
        bytes at no higher rate (issue 24: fewer bytes never slower)."""
        if dtype_key(precision) != "bf16" or weight_bytes > bytes_per_element("fp8"):
            return None
        return "fp8" if self.chip.peak_flops_per_s("fp8") <= self.chip.peak_flops_per_s(precision) else None

    def wider_math(self, precision: str) -> str | None:
        """The next wider math precision (fp4 -> fp8 -> bf16) whose kernel bounds the time of a `precision` GEMM
        or MoE layer of the same shape on this chip, or None (16-bit math, or a chip that runs the wider math
        faster).

        A narrow kernel reads fewer bytes; where the chip's own peak at `precision` is at least its peak at the
        wider math, it is never slower than the wider kernel of the same shape (an engine holding narrow weights
        can run them through the wider datapath, weights up-cast on chip: W8A16 / W4A8 mixed-input kernels).
        The tables and the curve can say otherwise: the curve's FP8 efficiencies were measured at twice the
        16-bit rate (every curve system has that ratio), so on a chip whose FP8 peak equals its BF16 peak (TPU
        v5p, v6e) they made compute-bound FP8 GEMMs slower than BF16 ones; and a few small measured FP8 shapes
        carry a fixed overhead. The wider time caps them (issue 24)."""
        hit = self._wider_memo.get(precision, 0)
        if hit != 0:
            return hit
        key = dtype_key(precision)
        w = {"fp4": "fp8", "fp8": "bf16"}.get(key)
        if w is not None and self.chip.peak_flops_per_s(precision) < self.chip.peak_flops_per_s(w):
            w = None
        self._wider_memo[precision] = w
        return w

    # ---- which table
    def _lookup(self, family: str, dtype: str):
        """(ln eta grid or curve members, routing passes, descriptor) for a family and table dtype, nearest dtype
        first: this system's framework, then its other frameworks, then the curve family."""
        chain = _CHAIN[dtype]
        if self.system:
            t = tables(self.system)
            for d in chain:
                for fw in dict.fromkeys((self.framework, DEFAULT_FRAMEWORK, *FRAMEWORKS)):
                    r = t.get((fw, family, d))
                    if r is not None and self.version is not None and fw == self.framework:
                        vs = versioned_tables(self.system).get((fw, family, d), {})
                        r = vs.get(nearest_version(self.version, vs), r)
                    if r is not None:
                        return _ln_eta(r), r["passes"], {"kind": "measured", **r}
        for d in chain:
            c = _curve(self.framework, family, d, self.exclude)
            if c is not None:
                return c
        return None

    def _balanced_moe(self, dtype: str) -> bool:
        """Whether balanced-load MoE tables time this chip at table dtype `dtype` as the power-law ones do: from the
        same framework (or both from the curve family). Elsewhere (A100 under TensorRT-LLM 1.0 or vLLM 0.14, which
        were measured under power-law loads only) another framework's balanced kernels would swap the engine as
        well as the load, so the power-law tables answer."""
        if dtype not in self._balanced:
            a, b = self._lookup("moe", dtype), self._lookup("moe_balanced", dtype)
            self._balanced[dtype] = a is not None and b is not None and \
                (a[2]["kind"], a[2].get("framework")) == (b[2]["kind"], b[2].get("framework"))
        return self._balanced[dtype]

    def _grid(self, family: str, precision: str, elem_bytes: float, peak_precision: str, table_key=None):
        """ln of the node times on this chip, made non-decreasing along the family's size axes."""
        key = (family, precision, elem_bytes, peak_precision, table_key)
        if key not in self._grids:
            found = self._lookup(family, table_key or dtype_key(precision))
            if found is None:
                raise InputError(f"no kernel data for {family} on {self.chip.id}")
            data, passes, desc = found
            ax = axes(family)
            mesh = np.meshgrid(*[2.0 ** a for a in ax], indexing="ij")
            peak, bw = self._rates(peak_precision)
            r = roof_features(family, mesh, peak, bw, elem_bytes)
            if desc["kind"] == "measured":
                t = r / np.exp(data)
            else:
                # weights narrower than the GEMM table's elements (W4A16): the curve's alpha where it was measured
                fit = max(elem_bytes, bytes_per_element(dtype_key(precision))) \
                    if family in ("gemm", "moe", "moe_balanced") and table_key is None else None
                t = np.maximum(np.exp(curve_log_time(data, family, precision, elem_bytes, mesh, r, fit)), r)
            # a smaller problem can always be padded to a larger one: cap each node by every larger node
            for a in MONOTONE[family]:
                t = np.flip(np.minimum.accumulate(np.flip(t, a), axis=a), a)
            self._grids[key] = (np.log(t).ravel(), passes, desc, float((r / t).max()))
        return self._grids[key]

    def _slice(self, key: tuple, fixed: tuple):
        """(the grid of `key` = (family, precision, elem_bytes, peak_precision, table_key) cut at the fixed axes'
        values `fixed` (floats), its routing passes), kept per cut."""
        hit = self._slices.get((key, fixed))
        if hit is None:
            if len(self._slices) >= 4096:
                self._slices.clear()
            ln_t, passes, _, _ = self._grid(*key)
            hit = self._slices[(key, fixed)] = (_Slice(key[0], ln_t, fixed), passes)
        return hit

    def _time(self, family, precision, elem_bytes, f, peak_precision=None, table_key=None):
        """Kernel time for linear features `f`: the grid interpolated in log time, scaled past its edges.
        Where the layer's shape (the axes not in `VARYING`) is one number each, the grid cut there (`_Slice`,
        kept per shape) answers."""
        key = (family, precision, elem_bytes, peak_precision or precision, table_key)
        nv = len(VARYING[family])  # the varying axes come first
        fixed = tuple(f[nv:])
        if not _floats(fixed) and all(np.ndim(x) == 0 for x in fixed):
            fixed = tuple(float(x) for x in fixed)  # 0-d arrays
        if _floats(fixed):
            cut, passes = self._slice(key, fixed)
            return cut.time(tuple(f[:nv])), passes
        ln_t, passes, _, _ = self._grid(*key)
        ax = axes(family)
        return np.exp(interpolate(ax, clamp_log2(ax, f), ln_t)) * beyond_grid(family, ax, f), passes

    # ---- public
    def gemm_time_s(self, m, n, k, dtype, weight_precision: str | None = None):
        """Seconds for one [m x k] @ [k x n] GEMM at `dtype` (a chip compute precision: bf16, fp8, fp4, ...).
        `weight_precision`: the stored weights' precision when narrower than the math (weight-only quantisation,
        e.g. mxfp4 weights on a chip without an FP4 rate); default `dtype`."""
        m, n, k = _check("m", m), _check("n", n), _check("k", k)
        if _floats((n, k)):  # one weight shape (rows a number or an array): its grid is cut there once (`_Slice`)
            return self.gemm_shape(n, k, dtype, weight_precision).time(m)
        m, n, k = _broadcast(m, n, k)
        return GemmShape(self, n, k, dtype, weight_precision).time(m)

    def gemm_shape(self, n, k, dtype, weight_precision: str | None = None) -> GemmShape:
        """`gemm_time_s` for one weight shape (n, k), asked for many row counts (`GemmShape`); kept per shape."""
        if not _numbers((n, k)):
            return GemmShape(self, n, k, dtype, weight_precision)
        key = ("gemm", n, k, dtype, weight_precision)
        hit = self._shapes.get(key)
        if hit is None:
            if len(self._shapes) >= 4096:
                self._shapes.clear()
            hit = self._shapes[key] = GemmShape(self, _check("n", n), _check("k", k), dtype, weight_precision)
        return hit

    def attention_time_s(self, phase, kind, batch, q, L, heads, kv_heads, head_dim, kv_precision):
        """Seconds for one layer's attention on one GPU (see `chalk.analyses.step.step_model` for the arguments)."""
        _attention_kind(phase, kind)
        b, q, L = _check("batch", batch), _check("q", q), _check("L", L)
        h, kvh, hd = (_check(n, v, positive=True) for n, v in (("heads", heads), ("kv_heads", kv_heads),
                                                                 ("head_dim", head_dim)))
        if _floats((h, kvh, hd)):  # one layer's heads (sizes numbers or arrays): the grid cut there (`_Slice`)
            # sizes kept in their own shapes (a batch column and a context row stay one row and one column: the
            # cut grid is interpolated as their outer product, `_Slice.time`); the time has their broadcast shape
            return self.attention_shape(phase, kind, h, kvh, hd, kv_precision).time(b, q, L)
        b, q, L, h, kvh, hd = _broadcast(b, q, L, h, kvh, hd)
        return AttentionShape(self, phase, kind, h, kvh, hd, kv_precision).time(b, q, L)

    def attention_shape(self, phase, kind, heads, kv_heads, head_dim, kv_precision) -> AttentionShape:
        """`attention_time_s` for one layer's heads on one GPU, asked for many batches and contexts
        (`AttentionShape`); kept per shape."""
        if not _numbers((heads, kv_heads, head_dim)):
            return AttentionShape(self, phase, kind, heads, kv_heads, head_dim, kv_precision)
        key = (phase, kind, heads, kv_heads, head_dim, kv_precision)
        hit = self._shapes.get(key)
        if hit is None:
            _attention_kind(phase, kind)
            h, kvh, hd = (_check(n, v, positive=True) for n, v in (("heads", heads), ("kv_heads", kv_heads),
                                                                     ("head_dim", head_dim)))
            if len(self._shapes) >= 4096:
                self._shapes.clear()
            hit = self._shapes[key] = AttentionShape(self, phase, kind, h, kvh, hd, kv_precision)
        return hit

    def moe_time_s(self, tokens, hidden, moe_inter, num_experts, top_k, ep, dtype, weight_precision: str | None = None,
                   balanced: bool = False):
        """Seconds for one MoE layer's routed-expert GEMMs on one GPU: `tokens` enter the layer across the EP
        group, the experts are split over `ep` GPUs. Routed as the tables were measured: by default under
        power-law expert loads (alpha 1.01, the distiller's MOE_DISTRIBUTION: the uneven load of served traffic
        is in the time); `balanced`: every expert given the same tokens (the `moe_balanced` tables), what an
        expert-load balancer (EPLB) approaches. `weight_precision` as in `gemm_time_s`; 4-bit weights under
        16-bit math (MXFP4 on a chip without an FP4 rate) take the measured mixed-input kernels' table (key
        w4a16) where there is one."""
        T = _check("tokens", tokens)
        h, i, E, k, ep = (_check(n, v, positive=True) for n, v in (("hidden", hidden), ("moe_inter", moe_inter),
                                                                    ("num_experts", num_experts),
                                                                    ("top_k", top_k), ("ep", ep)))
        if not _floats((h, i, E, k, ep)):  # else one layer's experts: the grid is cut at their shape (`_Slice`)
            T, h, i, E, k, ep = _broadcast(T, h, i, E, k, ep)
        p, eb = _precision(dtype, weight_precision)
        _, bw = self._rates(p)
        el = maximum(E / ep, 1.0)
        c = K.moe_local_copies(T, k, ep)
        fl, by = K.moe_flops(c, h, i), K.moe_bytes(c, K.moe_experts_touched(c, el), h, i, eb)
        # tokens per local expert: an EP group wider than the expert count replicates experts (one per GPU)
        key = self._moe_table_key(p, eb, weight_precision)
        fam = "moe_balanced" if balanced and self._balanced_moe(key or dtype_key(p)) else "moe"
        t, passes = self._time(fam, p, eb, (c / el, el, h, i), table_key=key)
        t = self._floor(t + K.moe_routing_bytes(T, k, h, passes) / bw, fl, by, p)
        w = self.wider_math(p)  # never slower than the wider math's experts (`wider_math`)
        t = t if w is None else minimum(t, self.moe_time_s(T, h, i, E, k, ep, w, balanced=balanced))
        if weight_precision is None or eb >= bytes_per_element(p):
            return t
        # experts stored narrower than the math (issue 24: fewer bytes never slower): an integer weight-only format
        # (the 16-bit table at its narrow read) never takes longer than at full width, nor, under 16-bit math and no
        # wider than MXFP4, than the same layer with MXFP4 weights; the mixed-input kernels themselves dequantise
        # every weight they load, and their measured table is slower than 16-bit experts at many tokens, so it keeps
        # that, bounded by MIXED_INPUT_MAX_SLOWDOWN where it is read far from the shapes it was measured on
        full = self.moe_time_s(T, h, i, E, k, ep, p, balanced=balanced)
        q = self.no_faster_narrow_math(p, eb)  # an FP8 layer reading more bytes at a rate no faster bounds it
        t8 = None if q is None else self.moe_time_s(T, h, i, E, k, ep, q, balanced=balanced)
        if key is not None:
            h0, i0 = MIXED_INPUT_MEASURED_SHAPE
            same = np.isclose(h, h0) & np.isclose(i, i0)
            t = minimum(t, MIXED_INPUT_MAX_SLOWDOWN * full)  # on the measured shape: the table, bounded
            if not np.all(same):  # elsewhere: the slowdown measured on that shape at these tokens per expert
                f16 = "moe_balanced" if balanced and self._balanced_moe(dtype_key(p)) else "moe"
                mixed = self._time(fam, p, eb, (c / el, el, h0, i0), table_key=key)[0]
                wide = self._time(f16, p, bytes_per_element(p), (c / el, el, h0, i0))[0]
                t = where(same, t, minimum(t, np.clip(mixed / wide, 1e-3, MIXED_INPUT_MAX_SLOWDOWN) * full))
            return t if t8 is None else minimum(t, t8)
        t = minimum(t, full)
        if t8 is not None:
            t = minimum(t, t8)
        if dtype_key(p) == "bf16" and eb <= bytes_per_element("mxfp4"):  # the MXFP4 layer reads no fewer bytes
            t = minimum(t, self.moe_time_s(T, h, i, E, k, ep, p, weight_precision="mxfp4", balanced=balanced))
        return t

    @staticmethod
    def _moe_table_key(p: str, eb: float, weight_precision) -> str | None:
        """'w4a16' where 4-bit weights run under 16-bit math (the mixed-input kernels' table), else None. The table
        was measured on MXFP4 experts (gpt-oss shapes) only: integer weight-only formats (GPTQ, AWQ, ...) take the
        16-bit table at their narrow read instead (dequantisation hidden under the math, as their GEMMs)."""
        return "w4a16" if weight_precision is not None and eb < 1 and dtype_key(p) == "bf16" \
            and not weight_only(weight_precision) else None

    def moe_balanced_tables(self, dtype, weight_precision: str | None = None) -> bool:
        """Whether `moe_time_s(..., balanced=True)` at `dtype` takes balanced-load tables (else the power-law
        ones answer: see `_balanced_moe`)."""
        p, eb = _precision(dtype, weight_precision)
        key = self._moe_table_key(p, eb, weight_precision)
        return self._balanced_moe(key or dtype_key(p))

    def _allreduce_table(self):
        """(GPU counts, ln t grid, provenance) of this system's measured all-reduce under the framework (else the
        system's other frameworks), or None."""
        if not self.system:
            return None
        t = allreduce_tables()
        for fw in dict.fromkeys((self.framework, DEFAULT_FRAMEWORK, *FRAMEWORKS)):
            if (self.system, fw) in t:
                return t[(self.system, fw)]
        return None

    def allreduce_time_s(self, message_bytes, n):
        """Seconds for one bf16 all-reduce of `message_bytes` over `n` GPUs of this system, from its measured table
        (log time interpolated linearly in log message size and log GPU count; past the largest message the time
        grows with the bytes; past the largest measured group by the ring's bytes per link, 2 (n - 1) / n); 0 for
        n <= 1. None when the system has no all-reduce table (the caller uses the alpha-beta model)."""
        if type(message_bytes) in _SCALAR and type(n) in _SCALAR:  # one message, asked before: remembered
            hit = self._allreduce_memo.get((message_bytes, n))
            if hit is not None:
                return hit
        tab = self._allreduce_table()
        if tab is None:
            return None
        ns, lt, _ = tab
        M = _check("message_bytes", message_bytes)
        n = _check("n", n)
        ring = lambda k: P.allreduce_bytes_per_link(1.0, k)  # noqa: E731  (bytes per link per message byte)
        if isinstance(n, float) and not isinstance(M, float):  # messages over one group: its row, then 1-D in size
            if n <= 1:
                return np.zeros_like(M)
            es, ys, grow = self._allreduce_row(n, ns, lt)
            x = np.clip(np.log2(np.maximum(M, 1.0)), es[0], es[-1])
            return np.exp(np.interp(x, es, ys)) * np.maximum(M / 2.0 ** es[-1], 1.0) * grow
        M, n = _broadcast(M, n)
        if isinstance(M, float):  # one message over one group: the group's row (cut once per n), then 1-D in size
            if n <= 1:
                return 0.0
            if len(self._allreduce_memo) >= MEMO_SIZE:  # remembered, as a GemmShape remembers its row counts
                self._allreduce_memo.clear()
            es, ys, grow = self._allreduce_row(n, ns, lt)
            x = min(max(math.log2(max(M, 1.0)), es[0]), es[-1])
            i = min(max(bisect_right(es, x) - 1, 0), len(es) - 2)
            ln_t = ys[i] + (x - es[i]) / (es[i + 1] - es[i]) * (ys[i + 1] - ys[i])
            t = self._allreduce_memo[(M, n)] = math.exp(ln_t) * max(M / 2.0 ** es[-1], 1.0) * grow
            return t
        e = np.asarray(index()["allreduce"]["message_log2"], dtype=float)
        x = np.clip(np.log2(np.maximum(M, 1.0)), e[0], e[-1])
        ln_n = np.log2(ns)
        y = np.clip(np.log2(np.maximum(n, 2.0)), ln_n[0], ln_n[-1])
        per_n = np.stack([np.interp(x, e, row) for row in lt])  # [counts, ...]
        if len(ns) == 1:
            ln_t = per_n[0]
        else:
            j = np.clip(np.searchsorted(ln_n, y, side="right") - 1, 0, len(ns) - 2)
            f = (y - ln_n[j]) / (ln_n[j + 1] - ln_n[j])
            lo = np.take_along_axis(per_n, j[None, ...], 0)[0]
            hi = np.take_along_axis(per_n, (j + 1)[None, ...], 0)[0]
            ln_t = lo + f * (hi - lo)
        t = np.exp(ln_t) * np.maximum(M / 2.0 ** e[-1], 1.0) * np.where(n > ns[-1], ring(n) / ring(ns[-1]), 1.0)
        return np.where(n > 1, t, 0.0)

    def _allreduce_row(self, n: float, ns, lt) -> tuple:
        """(message sizes' log2, ln t, growth past the largest measured group) of the all-reduce table cut at a group
        of `n` GPUs (linear in log GPU count), kept per `n`."""
        row = self._allreduce_rows.get(n)
        if row is None:
            ring = P.allreduce_bytes_per_link
            e = np.asarray(index()["allreduce"]["message_log2"], dtype=float)
            y = min(max(math.log2(max(n, 2.0)), float(np.log2(ns[0]))), float(np.log2(ns[-1])))
            cut = lt[0] if len(ns) == 1 else _cut(np.log2(ns), lt, y)
            grow = float(ring(1.0, n) / ring(1.0, ns[-1])) if n > ns[-1] else 1.0
            row = self._allreduce_rows[n] = (e.tolist(), cut.tolist(), grow)
        return row

    def allreduce_source(self) -> str:
        tab = self._allreduce_table()
        if tab is None:
            return "roofline"
        r = tab[2]
        idx = index()
        return (f"measured: {idx.get('package', 'aiconfigurator-core')} {idx.get('package_version', '?')}, "
                f"{r['system']} {r['framework']} {r['version']} custom all-reduce table")

    def _floor(self, t, flops, bytes_, precision):
        """Never faster than the chip's own roofline, its bytes streamed at no more than `STREAM_CEILING` of its
        bandwidth; finite, >= 0."""
        peak, bw = self._rates(precision, own=True)
        t = _at_least(t, K.roofline_time_s(flops, bytes_, peak, bw * STREAM_CEILING))
        if isinstance(t, float):
            return t if math.isfinite(t) else 0.0
        finite = np.isfinite(t)
        return t if finite.all() else np.where(finite, t, 0.0)

    def source(self, kind: str) -> str:
        """Where the times of `kind` ('gemm', 'attention', 'moe', or one attention family: 'mha_decode',
        'mla_prefill', ...) come from: 'measured: ...' or 'curve: ...'."""
        if kind not in self._sources:
            self._sources[kind] = self._source(kind)
        return self._sources[kind][0]

    def source_kind(self, kind: str) -> str:
        """The category of `source(kind)`, set where the source is found: 'measured table' (the chip's own tables),
        'fitted curve' (the curve family scaled by its peaks) or 'roofline' (no table applies)."""
        self.source(kind)
        return self._sources[kind][1]

    def provenance(self, families=None) -> dict:
        """Which engine and version the kernel tables come from: {'kernels': one line, 'versions': {family:
        'framework version'}, 'notes': [...]} (a note where a table is another framework's or another version's
        than asked, or where the chip has no tables of its own)."""
        idx = index()
        pkg = f"{idx.get('package', 'aiconfigurator-core')} {idx.get('package_version', '?')}"
        used: dict = {}
        curve = None
        for fam in families or ("gemm", "mha_decode", "mla_decode", "moe"):
            found = self._lookup(fam, "bf16")
            if found is None:
                continue
            d = found[2]
            if d["kind"] == "measured":
                used[fam] = f"{d['framework']} {d['version']}"
            else:
                curve = d
                used[fam] = f"{d['framework']} (curve)"
        notes = []
        if curve is not None:
            notes.append(f"{self.chip.id} has no measured kernel tables: times from the {curve['framework']} curve "
                         f"family fitted on {'/'.join(curve['systems'])}, scaled by its peaks")
        distinct = list(dict.fromkeys(used.values()))
        label = ", ".join(distinct) if len(distinct) == 1 else \
            "; ".join(f"{v} ({', '.join(f.replace('_', ' ') for f, x in used.items() if x == v)})" for v in distinct)
        if self.version is not None:
            off = sorted({v.split(" ", 1)[1] for v in distinct if v.startswith(self.framework + " ")
                          and not v.endswith("(curve)")
                          and _version_key(v.split(" ", 1)[1])[:len(_version_key(self.version))]
                          != _version_key(self.version)})
            if off:
                notes.append(f"no {self.framework} {self.version} kernel tables for {self.system or self.chip.id}: "
                             f"the nearest measured version ({', '.join(off)}) answers")
        others = sorted({v.split(" ")[0] for v in distinct} - {self.framework})
        if others:
            notes.append(f"no {self.framework} tables for some kernels on {self.system or self.chip.id}: "
                         f"{', '.join(others)}'s answer")
        return {"kernels": f"{label} ({pkg} tables)" if used else "roofline", "versions": used, "notes": notes}

    def _source(self, kind: str) -> str:
        fams = {"gemm": ("gemm",), "attention": ("mha_decode", "mla_decode"), "moe": ("moe",),
                **{f"{a}_{p}": (f"{a}_{p}",) for a in ("mha", "mla") for p in ("decode", "prefill")}}.get(kind)
        if fams is None:
            raise InputError(f"kernel kind must be 'gemm', 'attention', 'moe' or an attention family such as "
                             f"'mha_prefill', got {kind!r}")
        idx = index()
        pkg = f"{idx.get('package', 'aiconfigurator-core')} {idx.get('package_version', '?')}"
        parts, category = [], "roofline"
        for fam in fams:
            found = self._lookup(fam, "bf16")
            if found is None:
                continue
            d = found[2]
            if not parts:  # the first table found names the category
                category = "measured table" if d["kind"] == "measured" else "fitted curve"
            if d["kind"] == "measured":
                sysname = d["system"] + ("" if self.chip.id in idx["systems"][d["system"]]["chips"][:1]
                                         else f" (for {self.chip.id})")
                what = f"{d['framework']} {d['version']}, {fam.replace('_', ' ')} fit"
                parts.append(what if parts else f"measured: {pkg}, {sysname}, {what}")
            else:
                parts.append(f"curve: {fam.replace('_', ' ')} family fitted on {'/'.join(d['systems'])} ({pkg}, "
                             f"{d['framework']}), scaled by {self.chip.id} peaks")
        return ("; ".join(parts) if parts else "roofline"), category


_PROFILES: dict = {}


def kernel_profile(chip, framework: str | None = None, version: str | None = None) -> KernelProfile | None:
    """The kernel profile of `chip` under `framework` (None: TensorRT-LLM's tables): measured tables when chalk has
    them for the chip, else the curve family scaled by the chip's peaks; None when no data applies (no distilled
    data installed, or a framework chalk has no tables for)."""
    fw = (framework or DEFAULT_FRAMEWORK).lower()
    if fw not in FRAMEWORKS or not index().get("systems"):
        return None
    key = (chip.id, tuple(sorted(chip.flops_per_s.items())), chip.hbm_bandwidth_bytes_per_s, fw, version)
    if key not in _PROFILES:
        _PROFILES[key] = KernelProfile(chip, fw, system_for_chip(chip), version=version)
    return _PROFILES[key]
