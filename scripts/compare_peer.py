"""Differential check against NVIDIA's AIConfigurator (development-time only; issue 24 item 2).

Runs the peer's single-point estimator (`aiconfigurator.cli.api.cli_estimate`, aiconfigurator 0.12) on every NVIDIA
row of chalk's validation set it supports, next to chalk's own prediction of the row
(`chalk.analyses.fidelity.validate.predict`), and writes a table: measured, chalk, peer, both errors, source family. Where
chalk and the peer disagree by more than `--gap` (10%) on a throughput or TPOT row, both decode steps are taken apart
op by op at the same layout, batch and context (chalk: `chalk estimate ... --ops --json`; the peer: its
`per_ops_data["genonly_step"]`), grouped into op classes, and the class that carries most of the step-time gap is
named.

The peer is imported only inside this script and only when it runs; chalk never imports it, and no test needs it.
Install it apart from chalk's environment, e.g.:

    python -m venv /tmp/aic && /tmp/aic/bin/pip install aiconfigurator==0.12.0
    /tmp/aic/bin/pip install -e . --no-deps && /tmp/aic/bin/pip install typer rich matplotlib
    /tmp/aic/bin/python scripts/compare_peer.py --out /tmp/compare_peer.json

How a row becomes a peer question (the choices are this script's, stated in each output row's `peer_question`):
  fixed   `cli_estimate(mode="agg")` at the row's layout; the row's concurrency spread over its replicas and attention-DP
          ranks (the peer's batch_size is per attention-DP rank). Disaggregated rows are skipped (the peer's disagg
          estimate needs prefill worker counts the rows do not state).
  search  the row's layout (or, without one, every TP that fits the row's GPUs); batch per DP rank swept over a
          grid; the peer's answer is the largest throughput per GPU among points whose KV fits (no
          `kv_cache_warning`) and, with `min_user_tps`, whose TPOT <= 1/min_user_tps (with `tpot_p99`, the peer has no
          tail model: its TPOT <= that bound).
  context tokens per step: max(input_len, 8192) (TRT-LLM's default max_num_tokens; the peer's own agg search sweeps
          up to max(8192, 2 x isl)). MTP rows: `nextn` drafts, `nextn_accepted` = sum of acceptance^i.
  decode/prefill pool rows, AMD/TPU rows, chips or models the peer has no data for: skipped with the reason.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import statistics
import subprocess
import sys
import time

#: chalk model id -> the peer's HuggingFace id (a config it ships in aiconfigurator_core/model_configs).
#: Llama-3.3-70B has Llama-3.1-70B's architecture (same config but the weights), so it maps there.
PEER_MODEL = {
    "deepseek-r1": "deepseek-ai/DeepSeek-R1", "deepseek-v3": "deepseek-ai/DeepSeek-V3",
    "llama-3.3-70b": "meta-llama/Meta-Llama-3.1-70B", "llama-3.1-70b": "meta-llama/Meta-Llama-3.1-70B",
    "llama-3.1-405b": "meta-llama/Meta-Llama-3.1-405B", "llama-3.1-8b": "meta-llama/Meta-Llama-3.1-8B",
    "qwen3-235b-a22b": "Qwen/Qwen3-235B-A22B", "qwen3-30b-a3b": "Qwen/Qwen3-30B-A3B",
    "gpt-oss-120b": "openai/gpt-oss-120b", "gpt-oss-20b": "openai/gpt-oss-20b",
    "kimi-k2": "moonshotai/Kimi-K2-Instruct",
}

#: chalk hardware id -> the peer's system name (systems it ships data for).
PEER_SYSTEM = {
    "h100": "h100_sxm", "hgx-h100": "h100_sxm", "h200": "h200_sxm", "hgx-h200": "h200_sxm",
    "b200": "b200_sxm", "hgx-b200": "b200_sxm", "hgx-b300": "b300_sxm", "b300": "b300_sxm",
    "gb200": "gb200", "gb200-nvl72": "gb200", "gb300": "gb300", "gb300-nvl72": "gb300",
}

#: validation engine -> the peer's backend (rows without an engine are asked of TRT-LLM, the peer's default).
PEER_BACKEND = {"trtllm": "trtllm", "dynamo-trtllm": "trtllm", "sglang": "sglang", "dynamo-sglang": "sglang",
                "vllm": "vllm"}

#: models whose 8-bit checkpoints are block-scaled FP8 (DeepSeek's 128x128 scales; Qwen3-FP8 and Kimi-K2 the same).
BLOCK_FP8 = ("deepseek-r1", "deepseek-v3", "qwen3-235b-a22b", "qwen3-30b-a3b", "kimi-k2")

#: metric -> (key in the peer's raw result, factor to chalk's SI unit)
PEER_METRIC = {"output_tokens_per_s_per_gpu": ("tokens/s/gpu", 1.0), "tpot_s": ("tpot", 1e-3),
               "ttft_s": ("ttft", 1e-3)}

#: batch per attention-DP rank tried in a search row
BATCH_GRID = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048)

MOE = ("deepseek", "qwen3-235b", "qwen3-30b", "gpt-oss", "kimi")


def is_moe(model: str) -> bool:
    return model.startswith(MOE)


def quant_modes(model: str, precision: str | None, kv_precision: str) -> dict:
    """The peer's quantisation arguments for a row's precision (None: the peer infers from the checkpoint)."""
    p = (precision or "").lower()
    q = {}
    if p == "fp8":
        mode = "fp8_block" if model in BLOCK_FP8 else "fp8"
        q["gemm_quant_mode"] = mode
        if is_moe(model):
            q["moe_quant_mode"] = mode
    elif p in ("fp4", "nvfp4"):
        q["gemm_quant_mode"] = "nvfp4"
        if is_moe(model):
            q["moe_quant_mode"] = "nvfp4"
    elif p in ("bf16", "fp16"):
        q["gemm_quant_mode"] = "bfloat16"
        if is_moe(model):
            q["moe_quant_mode"] = "bfloat16"
    # mxfp4 (gpt-oss) and unknown: the checkpoint's own (gpt-oss ships MXFP4 experts)
    kv = (kv_precision or "auto").lower()
    if kv == "auto":
        kv = "fp8" if p in ("fp8", "fp4", "nvfp4", "mxfp4") else "bfloat16"
    q["kvcache_quant_mode"] = {"bf16": "bfloat16", "fp16": "bfloat16"}.get(kv, kv)
    return q


def accepted_per_step(k: int, a: float) -> float:
    """Mean accepted drafts per step when each of k drafts is accepted with probability a, in order."""
    return float(sum(a ** i for i in range(1, k + 1)))


def peer_question(row) -> tuple[dict | None, str]:
    """The peer question a validation row asks, or (None, why it is skipped). `row`: chalk's validate.Row (or any
    object with its fields). Returns (question, "") where question holds `kwargs` for cli_estimate (without
    batch_size for a search), `kind`, `layouts` (list of (tp, dp, pp, moe_tp, moe_ep)), `replicas` and
    `batch` (per DP rank, fixed rows)."""
    if row.hardware not in PEER_SYSTEM:
        return None, f"chip {row.hardware} not in the peer's systems"
    if row.model not in PEER_MODEL:
        return None, f"model {row.model} not shipped with the peer"
    if row.kind not in ("fixed", "search"):
        return None, f"{row.kind} pool row (not mapped)"
    if row.disaggregated:
        return None, "disaggregated (prefill workers not stated)"
    if row.metric not in PEER_METRIC:
        return None, f"metric {row.metric} not mapped"
    I, O = int(round(row.input_len)), int(round(row.output_len))
    moe = is_moe(row.model)
    kw = {"model_path": PEER_MODEL[row.model], "system_name": PEER_SYSTEM[row.hardware],
          "backend_name": PEER_BACKEND.get(row.engine or "", "trtllm"), "isl": I, "osl": O,
          "ctx_tokens": max(I, 8192), **quant_modes(row.model, row.precision, row.kv_precision)}
    spec = None
    if row.mtp or "-mtp" in row.id:
        k = row.mtp or 1
        a = row.acceptance if row.acceptance and 0 < row.acceptance < 1 else 0.85
        spec = (k, a)
        kw["nextn"], kw["nextn_accepted"] = int(k), accepted_per_step(int(k), a)

    def lay(tp, dp, pp):
        if not moe:
            return (tp, 1, pp, None, None)
        ep = row.ep or (tp * dp if dp > 1 else 1)
        return (tp, dp, pp, tp * dp // ep, ep)

    if row.tp:
        layouts = [lay(row.tp, row.attn_dp or 1, row.pp or 1)]
    elif row.kind == "search" and row.gpus:
        g = row.gpus
        layouts = [lay(t, 1, 1) for t in (1, 2, 4, 8) if t <= g and g % t == 0]
        if moe:
            layouts += [lay(1, t, 1) for t in (2, 4, 8) if t <= g and g % t == 0]
    else:
        return None, "no layout and no GPU count"
    q = {"kind": row.kind, "kwargs": kw, "layouts": layouts, "speculative": spec}
    if row.kind == "fixed":
        if not row.concurrency:
            return None, "fixed row without concurrency"
        tp, dp, pp = layouts[0][:3]
        replicas = max(1, (row.gpus or tp * dp * pp) // (tp * dp * pp))
        q["replicas"] = replicas
        q["batch"] = max(1, round(row.concurrency / (replicas * dp)))
    else:
        # a p99 bound (MLPerf's Server/Interactive rows) bounds the peer's TPOT as it is: the peer has no tail model
        q["max_tpot_ms"] = 1000.0 / row.min_user_tps if row.min_user_tps else \
            (1000.0 * row.tpot_p99 if getattr(row, "tpot_p99", None) else None)
    return q, ""


def op_class(name: str) -> str:
    """An op class both models can be compared in, from a chalk op name or a peer per-op key."""
    n = name.lower().replace("generation_", "").replace("context_", "")
    if "logits" in n or "lm_head" in n or "sampling" in n:
        return "logits"
    if "embedding_ar" in n or n in ("allreduce", "p2p", "ar_1", "ar_2") or n.startswith(("ar_", "allreduce", "p2p")):
        return "comm (allreduce/p2p)"
    if "moe" in n or "expert" in n or "ffn" in n or n in ("mlp", "router", "alltoall") or "gate" in n and "act" not in n:
        return "ffn/moe (incl. expert all-to-all)"
    if "attention" in n or "attn" in n or "qkv" in n or "proj" in n or "mla" in n or "dsa" in n:
        return "attention (incl. qkv/o proj)"
    if "norm" in n or "act" in n or "embedding" in n or "elementwise" in n:
        return "elementwise"
    if "overhead" in n:
        return "overhead"
    return "other"


def class_times(ops: dict[str, float]) -> dict[str, float]:
    """Op times (any unit) summed per op class."""
    out: dict[str, float] = {}
    for k, v in ops.items():
        c = op_class(k)
        out[c] = out.get(c, 0.0) + float(v)
    return out


def name_mechanism(chalk_ms: dict[str, float], peer_ms: dict[str, float]) -> dict:
    """The op class with the largest |chalk - peer| step time, its direction and its share of the total gap."""
    classes = sorted(set(chalk_ms) | set(peer_ms))
    diff = {c: chalk_ms.get(c, 0.0) - peer_ms.get(c, 0.0) for c in classes}
    total = sum(chalk_ms.values()) - sum(peer_ms.values())
    top = max(classes, key=lambda c: abs(diff[c]))
    return {"op_class": top, "chalk_ms": chalk_ms.get(top, 0.0), "peer_ms": peer_ms.get(top, 0.0),
            "diff_ms": diff[top], "direction": "chalk slower" if diff[top] > 0 else "chalk faster",
            "share_of_step_gap": diff[top] / total if total else None, "step_gap_ms": total, "by_class_diff_ms": diff}


# ---------------------------------------------------------------- the peer (imported only from here on)

def _peer():
    try:
        from aiconfigurator.cli.api import cli_estimate
    except ImportError:
        sys.exit("compare_peer: aiconfigurator is not installed in this Python; see the module docstring "
                 "(python -m venv /tmp/aic && /tmp/aic/bin/pip install aiconfigurator==0.12.0)")
    for name in ("aiconfigurator", "aiconfigurator_core", "aiconfigurator.sdk"):
        logging.getLogger(name).setLevel(logging.ERROR)
    return cli_estimate


_PEER_CACHE: dict = {}


def peer_point(kw: dict, layout, batch: int):
    """One peer estimate (memoised); None where it raises or OOMs."""
    key = (json.dumps(kw, sort_keys=True), layout, batch)
    if key not in _PEER_CACHE:
        tp, dp, pp, mtp_, mep = layout
        try:
            r = _peer()(**kw, tp_size=tp, attention_dp_size=dp, pp_size=pp, moe_tp_size=mtp_, moe_ep_size=mep,
                        batch_size=int(batch))
            _PEER_CACHE[key] = {"raw": {k: (float(v) if isinstance(v, (int, float)) else v)
                                        for k, v in r.raw.items()},
                                "ops": {k: float(v) for k, v in (r.per_ops_data or {}).get("genonly_step", {}).items()},
                                "kv_warning": r.kv_cache_warning, "error": None}
        except Exception as e:  # the peer's own errors: recorded, not fatal
            _PEER_CACHE[key] = {"raw": None, "ops": {}, "kv_warning": None, "error": f"{type(e).__name__}: {e}"[:300]}
    return _PEER_CACHE[key]


def peer_answer(q: dict) -> dict:
    """The peer's answer to a question: the point (raw result, layout, batch) or an error."""
    kw = q["kwargs"]
    if q["kind"] == "fixed":
        p = peer_point(kw, q["layouts"][0], q["batch"])
        return {**p, "layout": q["layouts"][0], "batch": q["batch"]}
    best = None
    cap = q.get("max_tpot_ms")
    for lay in q["layouts"]:
        def ok(b):
            p = peer_point(kw, lay, b)
            return p["raw"] is not None and not p["kv_warning"] and (cap is None or p["raw"]["tpot"] <= cap), p
        lo, hi = -1, len(BATCH_GRID)  # largest feasible index by bisection (feasibility falls with batch)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if ok(BATCH_GRID[mid])[0]:
                lo = mid
            else:
                hi = mid
        for i in (lo, lo - 1):
            if i < 0:
                continue
            good, p = ok(BATCH_GRID[i])
            if good and (best is None or p["raw"]["tokens/s/gpu"] > best["raw"]["tokens/s/gpu"]):
                best = {**p, "layout": lay, "batch": BATCH_GRID[i]}
    if best is None:
        errs = [p["error"] for p in _PEER_CACHE.values() if p["error"]]
        return {"raw": None, "error": errs[-1] if errs else "no feasible point", "layout": None, "batch": None,
                "ops": {}}
    return best


def peer_value(ans: dict, metric: str) -> float | None:
    if not ans.get("raw"):
        return None
    key, f = PEER_METRIC[metric]
    v = ans["raw"].get(key)
    return None if v is None else float(v) * f


# ---------------------------------------------------------------- chalk's side

def chalk_ops(row, layout, batch_per_rank: int) -> dict:
    """chalk's decode step op by op (ms) at the peer's layout and batch, through the CLI (`estimate --ops --json`)."""
    tp, dp, pp, mtp_, mep = layout
    lay = f"tp={tp},attn_dp={dp},pp={pp}"
    if mep:
        lay += f",ep={mep}" + (f",etp={mtp_}" if mtp_ and mtp_ > 1 else "")
    ctx = row.input_len + row.output_len / 2
    cmd = [sys.executable, "-m", "chalk", "estimate", "-m", row.model, "-H", row.hardware, "-b",
           str(int(batch_per_rank * dp)), "-c", str(ctx), "--layout", lay, "--ops", "--json"]
    if row.precision:
        cmd += ["-p", row.precision]
    if row.kv_precision and row.kv_precision != "auto":
        cmd += ["--kv-precision", row.kv_precision]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    try:
        d = json.loads(r.stdout)
    except json.JSONDecodeError:
        return {"error": (r.stderr or r.stdout).strip()[-300:], "cmd": " ".join(cmd)}
    if "error" in d:
        return {"error": d["error"], "cmd": " ".join(cmd)}
    return {"ops_ms": {o["name"]: o["time_s"] * 1e3 for o in d["ops"]}, "step_ms": d["step_time_s"] * 1e3,
            "cmd": " ".join(cmd)}


def _median(xs):
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    return statistics.median(xs) if xs else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="/tmp/compare_peer.json", help="JSON table to write (a .csv beside it too)")
    ap.add_argument("--gap", type=float, default=0.10, help="chalk/peer disagreement that triggers the op comparison")
    ap.add_argument("--kinds", default="fixed,search", help="row kinds to compare")
    ap.add_argument("--limit", type=int, default=0, help="at most this many rows (0: all)")
    ap.add_argument("--ids", default="", help="comma-separated row ids (default: every supported row)")
    ap.add_argument("--no-ops", action="store_true", help="skip the op-by-op comparison")
    a = ap.parse_args(argv)

    from chalk.analyses.step.calibration import calibration
    from chalk.analyses.fidelity.validate import load_rows, predict

    _peer()
    cal = calibration()
    kinds = set(a.kinds.split(","))
    ids = set(filter(None, a.ids.split(",")))
    rows = [r for r in load_rows() if (not ids or r.id in ids)]
    out, skipped = [], []
    t0 = time.time()
    for r in rows:
        q, why = peer_question(r)
        if q is None or r.kind not in kinds:
            skipped.append({"id": r.id, "hardware": r.hardware, "model": r.model,
                            "why": why or f"kind {r.kind} not requested"})
            continue
        if a.limit and len(out) >= a.limit:
            break
        ans = peer_answer(q)
        try:
            c = predict(r, cal)
        except Exception as e:  # chalk's typed errors: recorded
            c, cerr = None, f"{type(e).__name__}: {e}"
        else:
            cerr = ""
        pv = peer_value(ans, r.metric)
        rec = {"id": r.id, "family": r.family, "model": r.model, "moe": is_moe(r.model), "hardware": r.hardware,
               "kind": r.kind, "metric": r.metric, "engine": r.engine, "measured": r.measured, "chalk": c,
               "peer": pv, "chalk_error": None if c is None else c / r.measured - 1,
               "peer_error": None if pv is None else pv / r.measured - 1,
               "chalk_over_peer": c / pv if c and pv else None,
               "peer_layout": ans.get("layout"), "peer_batch_per_rank": ans.get("batch"),
               "peer_version": (ans.get("raw") or {}).get("version"), "peer_error_note": ans.get("error"),
               "chalk_error_note": cerr, "peer_question": {k: v for k, v in q["kwargs"].items()}}
        ratio = rec["chalk_over_peer"]
        # TPOT is a time (chalk slower = larger); throughput per GPU the reverse: compare the step either way
        if (not a.no_ops and ratio and abs(ratio - 1) > a.gap and r.metric in ("output_tokens_per_s_per_gpu", "tpot_s")
                and ans.get("ops")):
            co = chalk_ops(r, ans["layout"], ans["batch"])
            if "ops_ms" in co:
                cm, pm = class_times(co["ops_ms"]), class_times(ans["ops"])
                rec["ops"] = {"chalk_step_ms": co["step_ms"], "peer_step_ms": sum(ans["ops"].values()),
                              "chalk_by_class_ms": cm, "peer_by_class_ms": pm, "mechanism": name_mechanism(cm, pm),
                              "chalk_cmd": co["cmd"]}
            else:
                rec["ops"] = {"error": co["error"], "chalk_cmd": co["cmd"]}
        out.append(rec)
        print(f"[{len(out):3d} {time.time() - t0:6.0f}s] {r.id:45s} meas {r.measured:10.4g} chalk "
              f"{(c or float('nan')):10.4g} peer {(pv or float('nan')):10.4g}"
              + (f"  op gap: {rec['ops']['mechanism']['op_class']} {rec['ops']['mechanism']['direction']}"
                 if rec.get("ops", {}).get("mechanism") else ""), file=sys.stderr, flush=True)

    both = [o for o in out if o["chalk"] and o["peer"]]
    def grp(pick):
        s = [o for o in both if pick(o)]
        return {"n": len(s), "median_chalk_over_peer": _median([o["chalk_over_peer"] for o in s]),
                "chalk_median_abs_error": _median([abs(o["chalk_error"]) for o in s]),
                "peer_median_abs_error": _median([abs(o["peer_error"]) for o in s])}
    fams = sorted({o["family"] for o in both})
    mech: dict[str, dict] = {}
    for o in both:
        m = o.get("ops", {}).get("mechanism")
        if m:
            k = f"{m['op_class']}: {m['direction']}"
            d = mech.setdefault(k, {"rows": 0, "diff_ms": [], "share": []})
            d["rows"] += 1
            d["diff_ms"].append(m["diff_ms"])
            d["share"].append(m["share_of_step_gap"])
    for d in mech.values():
        d["median_diff_ms"] = _median(d.pop("diff_ms"))
        d["median_share_of_step_gap"] = _median(d.pop("share"))
    summary = {"rows_compared": len(both), "rows_attempted": len(out), "rows_skipped": len(skipped),
               "all": grp(lambda o: True), "dense": grp(lambda o: not o["moe"]), "moe": grp(lambda o: o["moe"]),
               "by_family": {f: grp(lambda o, f=f: o["family"] == f) for f in fams},
               "by_metric": {m: grp(lambda o, m=m: o["metric"] == m) for m in sorted({o["metric"] for o in both})},
               "disagree_over_gap": sum(1 for o in both if abs(o["chalk_over_peer"] - 1) > a.gap),
               "mechanisms": mech, "seconds": time.time() - t0,
               "skipped_why": {w: sum(1 for s in skipped if s["why"] == w) for w in sorted({s["why"] for s in skipped})}}
    os.makedirs(os.path.dirname(os.path.abspath(a.out)) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"summary": summary, "rows": out, "skipped": skipped}, f, indent=1, default=str)
    import csv

    cols = ["id", "family", "model", "moe", "hardware", "kind", "metric", "engine", "measured", "chalk", "peer",
            "chalk_error", "peer_error", "chalk_over_peer", "peer_layout", "peer_batch_per_rank", "mechanism"]
    with open(os.path.splitext(a.out)[0] + ".csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for o in out:
            m = o.get("ops", {}).get("mechanism")
            w.writerow({**o, "mechanism": f"{m['op_class']} {m['direction']} {m['diff_ms']:+.2f} ms" if m else ""})
    print(json.dumps(summary, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
