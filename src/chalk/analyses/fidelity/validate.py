"""Predicted vs measured for every row of the project's validation set (`chalk/validation/validation.csv`).

Row kinds:
  search   `chalk throughput` as a user would run it: GPUs, input/output lengths, precision, optional
           minimum per-user speed and disaggregation; chalk picks layout and batch.
  decode   a disaggregated decode pool at a stated layout, batch per GPU and KV length (batch empty: the
           largest that fits, capped per scheduler).
  fixed    aggregated serving at a stated layout and concurrency (an engine's measured operating point).
  prefill  a prefill pool at a stated layout and tokens per GPU per step.
The error of a row is predicted / measured - 1; its residual is log(measured / predicted).
Every row belongs to a source family (`family` column: the organisation or benchmark programme it comes from;
without the column, the first word of its `group`), the unit cross-validation leaves out and the calibration
objective weighs equally (`chalk.analyses.fidelity.calibrate`).
Rows whose id starts with `mlperf` (MLPerf Inference Offline results) were held out of the last refit of the
calibration constants; `validate()` reports them, and the dense and MoE rows, as separate groups.
"""

from __future__ import annotations

import csv
import dataclasses
import io
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from chalk.analyses.step.calibration import Calibration, calibration
from chalk.analyses.step.parallel import memory_per_chip, stage_step, step_costs
from chalk.analyses.traffic.serving import fixed_deployment, throughput
from chalk.errors import ChalkError, SpecError
from chalk.specs.catalog import load_model, package_path, read_yaml, resolve_hardware

#: Recorded bound on the median |error| of the calibrated model over the validation set; a test fails if
#: `chalk validate` regresses past it.
MEDIAN_ERROR_BOUND = 0.15

#: Most of the validation set one source family may hold (issue 24), over all rows and over the fitted-metric rows
#: `validate --cv` judges; scripts/balance_rows.py keeps it.
MAX_FAMILY_SHARE = 0.20

#: Bound on the fixed-deployment groups' median |error| (throughput per GPU, mean TPOT): issue 10's target. The
#: shipped fit reaches 0.094 and 0.115.
FIXED_ERROR_BOUND = 0.15

#: Metrics in the headline figures and in the calibration's objective; TTFT rows are reported as their own group.
FITTED_METRICS = ("output_tokens_per_s_per_gpu", "input_tokens_per_s_per_gpu", "tpot_s", "user_tokens_per_s")

#: Time-to-first-token metrics: the mean over the requests of the source's run and, where the source gives it, the
#: median (`ttft_p50_s`). The per-request latency (`request_latency_s`) and a cold engine's first-step delay
#: (`warmup_s`) are fitted on both (`calibrate._fit_latencies`): a run's mean carries its cold start's tail, its
#: median mostly the latency, so the two tell the parameters apart where the means alone cannot.
TTFT_METRICS = ("ttft_s", "ttft_p50_s")

#: Rows with this id prefix (MLPerf Inference Offline results) were held out of the last calibration refit.
HELD_OUT_PREFIX = "mlperf"


@dataclass(frozen=True)
class Row:
    id: str
    kind: str
    model: str
    hardware: str
    gpus: int
    precision: str | None
    kv_precision: str
    input_len: float | None
    output_len: float | None
    context: float | None
    batch: float | None
    tp: int | None
    attn_dp: int | None
    pp: int | None
    min_user_tps: float | None
    disaggregated: bool
    metric: str
    measured: float
    source: str
    notes: str
    group: str = ""
    engine: str | None = None
    concurrency: int | None = None
    ep: int | None = None
    mtp: int | None = None
    acceptance: float | None = None
    family: str = ""
    engine_version: str | None = None
    num_prompts: int | None = None   # a benchmark's whole run: requests sent in all (fixed rows; None: steady state)
    max_batch: int | None = None     # the deployment's own cap on sequences per scheduler (None: the engine's default)
    max_tokens: int | None = None    # the deployment's own prompt tokens per step per scheduler (None: the engine's;
                                     # WHOLE_PROMPTS: every admitted prompt whole in one step)
    lengths: str | None = None       # the benchmark dataset whose length distribution the run drew (lengths.yaml)
    tpot_p99: float | None = None    # a search row's p99 TPOT bound (s), met under Poisson arrivals
    ttft_p99: float | None = None    # a search row's p99 TTFT bound (s), met under Poisson arrivals
    warmed: bool = False             # the harness ran warm-up requests on the engine before its timed run
    client: str | None = None        # IN_PROCESS: the harness drives the engine in its own process (no HTTP client)


def family_of_group(group: str) -> str:
    """A row's source family when validation.csv carries no `family` column: its group's first word (groups are
    named `<organisation or programme>-<part>`, e.g. inferencex-2026q1, trtllm-perf-overview-03e27c7)."""
    return group.strip().split("-")[0]


#: `client` of a row whose harness drives the engine inside its own process on token ids (scripts/apply_client.py):
#: no HTTP server, request parsing or tokenisation between the engine and the clock, so none of the calibrated
#: per-request time outside the engine's steps (`Calibration.request_latency_s`, fitted on HTTP clients' runs).
IN_PROCESS = "in-process"
CLIENTS = (IN_PROCESS,)


def client_latency_applies(row) -> bool:
    """Whether the calibrated per-request latency outside the engine's steps is part of the row's figures: every
    row but those whose harness runs the engine in its own process (`IN_PROCESS`)."""
    return row.client != IN_PROCESS


#: `max_tokens` of a row whose engine prefills every prompt it admits whole, in one step (validation.csv `whole`):
#: a per-step budget no burst of prompts reaches.
WHOLE_PROMPTS = 2 ** 31 - 1


def _tokens(s: str) -> int | None:
    return WHOLE_PROMPTS if (s or "").strip() == "whole" else _num(s, int)


def _num(s: str, cast=float):
    s = (s or "").strip()
    return cast(float(s)) if s else None


@lru_cache(maxsize=1)
def load_rows() -> tuple[Row, ...]:
    """The validation set shipped with chalk (package data)."""
    return parse_rows(package_path("validation", "validation.csv").read_text())


def parse_rows(text: str) -> tuple[Row, ...]:
    """Rows in validation.csv's columns (README.md there), from CSV text."""
    rows = []
    for i, d in enumerate(csv.DictReader(io.StringIO(text)), start=2):
        try:
            rows.append(Row(
                id=d["id"], kind=d["kind"], model=d["model"], hardware=d["hardware"], gpus=_num(d["gpus"], int),
                precision=d["precision"] or None, kv_precision=d["kv_precision"] or "auto",
                input_len=_num(d["input_len"]), output_len=_num(d["output_len"]), context=_num(d["context"]),
                batch=_num(d["batch"]), tp=_num(d["tp"], int), attn_dp=_num(d["attn_dp"], int),
                pp=_num(d["pp"], int), min_user_tps=_num(d["min_user_tps"]),
                disaggregated=bool(_num(d["disaggregated"], int)), metric=d["metric"],
                measured=float(d["measured"]), source=d["source"], notes=d.get("notes") or "",
                group=d.get("group") or d["source"][:40], engine=(d.get("engine") or None),
                concurrency=_num(d.get("concurrency"), int), ep=_num(d.get("ep"), int), mtp=_num(d.get("mtp"), int),
                acceptance=_num(d.get("acceptance")),
                family=(d.get("family") or "").strip() or family_of_group(d.get("group") or d["source"][:40]),
                engine_version=(d.get("engine_version") or "").strip() or None,
                num_prompts=_num(d.get("num_prompts"), int), max_batch=_num(d.get("max_batch"), int),
                lengths=(d.get("lengths") or "").strip() or None, tpot_p99=_num(d.get("tpot_p99")),
                ttft_p99=_num(d.get("ttft_p99")), max_tokens=_tokens(d.get("max_tokens")),
                warmed=bool(_num(d.get("warmed"), int)), client=(d.get("client") or "").strip() or None))
            if rows[-1].client not in (None, *CLIENTS):
                raise ValueError(f"client {rows[-1].client!r} is not one of {', '.join(CLIENTS)} or empty")
        except (KeyError, ValueError) as e:
            raise SpecError(f"validation.csv line {i}: {e}") from None
    return tuple(rows)


#: Points of the quantile function a dataset's length distribution is replayed from (`dataset_lengths`).
DATASET_POINTS = 1000


@lru_cache(maxsize=1)
def _datasets() -> dict:
    return read_yaml(package_path("validation", "lengths.yaml"))


def _quantile_lengths(quantiles: dict, n: int) -> np.ndarray:
    """`n` lengths at the mid-points of n equal probability slices, from quantiles {percentile: tokens} interpolated
    linearly in log(length)."""
    q = np.array(sorted(float(k) for k in quantiles)) / 100.0
    v = np.log(np.array([float(quantiles[k]) for k in sorted(quantiles, key=float)]))
    return np.exp(np.interp((np.arange(n) + 0.5) / n, q, v))


@lru_cache(maxsize=64)
def dataset_lengths(name: str, input_mean: float, output_mean: float):
    """(input, output) length distributions of benchmark dataset `name` (validation/lengths.yaml: its quantiles, the
    shape) scaled to a row's own mean lengths (the level): empirical distributions of `DATASET_POINTS` lengths each,
    which the closed-loop replay samples per request; a `constant` entry: every request at the means."""
    from chalk.specs.lengths import constant, empirical

    d = _datasets().get(name)
    if not isinstance(d, dict):
        raise SpecError(f"validation.csv names length distribution {name!r}, which validation/lengths.yaml lacks")
    if d.get("constant"):
        return tuple(constant(float(mean), label=f"{name} {side} length {float(mean):g}")
                     for side, mean in (("input", input_mean), ("output", output_mean)))
    out = []
    for side, mean in (("input", input_mean), ("output", output_mean)):
        x = _quantile_lengths(d[f"{side}_quantiles"], DATASET_POINTS)
        out.append(empirical(np.maximum(x * (float(mean) / x.mean()), 1.0),
                             label=f"{name} {side} lengths scaled to mean {float(mean):g}"))
    return tuple(out)


def _row_lengths(row: Row):
    """A row's (input, output) lengths: its means, or its dataset's distributions scaled to them."""
    if row.lengths and row.input_len and row.output_len:
        return dataset_lengths(row.lengths, row.input_len, row.output_len)
    return row.input_len, row.output_len


def _pool(row: Row, cal: Calibration):
    m, system = load_model(row.model), resolve_hardware(row.hardware)
    costs = step_costs(m, system, row.precision, row.kv_precision)[2]
    tp, a, pp = row.tp or 1, row.attn_dp or 1, row.pp or 1
    ep = tp * a if m.is_moe else 1
    return m, system, costs, tp, a, pp, ep


#: Draft tokens assumed where a row ran MTP without saying how many: one per MTP module DeepSeek-V3/R1 ship (one).
DEFAULT_MTP_DRAFTS = 1


#: Engines named in the validation set, mapped onto chalk's engine profiles.
ENGINE_PROFILE = {"trtllm": "trtllm", "dynamo-trtllm": "trtllm", "sglang": "sglang", "dynamo-sglang": "sglang",
                  "vllm": "vllm"}


def _speculation(row: Row):
    """The speculation a row ran: its stated draft tokens (else `DEFAULT_MTP_DRAFTS`) at its stated acceptance, else
    at the model's own MTP layers' sourced rate and fall per further draft (`serving.mtp_speculation`, what
    `throughput --mtp K` assumes)."""
    from chalk.analyses.traffic.serving import mtp_speculation

    uses = row.mtp or "-mtp" in row.id or "mtp on" in row.notes.lower() or "speculative decoding on" in \
        row.notes.lower()
    if not uses:
        return None
    a = row.acceptance if row.acceptance and 0 < row.acceptance < 1 else None
    return mtp_speculation(row.model, int(row.mtp or DEFAULT_MTP_DRAFTS), a)


def _decode_gpus(row: Row) -> int | None:
    """Decode GPUs of a disaggregated fixed row, from its notes ('decode 4x(TP8 EP1) = 32 GPUs')."""
    import re

    m = re.search(r"decode (\d+)x\([^)]*\)\s*=\s*(\d+) GPUs", row.notes)
    return int(m.group(2)) if m else None


def _prefill_layout(row: Row) -> str | None:
    """The prefill workers' layout of a disaggregated fixed row, from its notes ('prefill 1x(TP4 EP4 DP-attn) =
    4 GPUs': attention data-parallel over 4 ranks with experts over 4; 'TP4 EP1': tensor-parallel 4)."""
    import re

    m = re.search(r"prefill \d+x\((TP(\d+))(?: EP(\d+))?( DP-attn)?\)\s*=\s*\d+ GPUs", row.notes)
    if not m:
        return None
    n, ep, dp = int(m.group(2)), int(m.group(3) or 1), bool(m.group(4))
    lay = f"tp=1,attn_dp={n}" if dp else f"tp={n}"
    return lay + (f",ep={ep}" if ep > 1 else "")


def _layout(row: Row) -> str | None:
    if not row.tp:
        return None
    return f"tp={row.tp},attn_dp={row.attn_dp or 1},pp={row.pp or 1}"


@lru_cache(maxsize=512)
def _fixed(model, hardware, layout, concurrency, I, O, gpus, precision, kv_precision, cal, spec, engine, decode_gpus,
           simulate=False, requests=None, max_batch=None, prefill_layout=None, max_tokens=None, warmed=False,
           in_process=False):
    """One fixed operating point (memoised: a point's throughput, TPOT and TTFT rows share it). `simulate`: replay
    the closed loop for its latencies (only TTFT rows need it; throughput and mean TPOT are the closed form's).
    `requests`: the benchmark run's prompts in all (its means, cold start and ramp-down included: always replayed).
    `max_batch`: the deployment's own cap on sequences per scheduler (`fixed_deployment`'s `max_seqs`);
    `max_tokens`: its own prompt tokens per step (the chunked-prefill budget its launch set, `max_tokens` there);
    `warmed`: its harness warmed the engine before the timed run (`warm_engine` there);
    `in_process`: its harness ran the engine in its own process: no per-request latency outside the steps;
    `prefill_layout`: a disaggregated row's prefill workers (`_prefill_layout`)."""
    if in_process:
        cal = dataclasses.replace(cal, request_latency_s=0.0)
    return fixed_deployment(model, hardware, layout=layout, concurrency=concurrency, input_len=I, output_len=O,
                            gpus=gpus, precision=precision, kv_precision=kv_precision, calibration_override=cal,
                            speculative=spec, engine=engine, decode_gpus=decode_gpus,
                            simulate=simulate or requests is not None, requests=requests, max_seqs=max_batch,
                            prefill_layout=prefill_layout, max_tokens=max_tokens, warm_engine=warmed,
                            cut_to_context=False)  # a measured run's engine ran the lengths it ran


def row_engine(row: Row) -> str | None:
    """The engine profile a row's deployment ran, as `--engine` names it: the row's engine mapped onto chalk's
    profiles (`ENGINE_PROFILE`), at the release its `engine_version` belongs to where the catalog holds that
    release's profile, matched as `--engine NAME@VERSION` matches ('0.4.3.post2' -> sglang@0.4; '0.7.3' -> the
    profile whose releases list 0.7), else the engine's newest profile; None for engines chalk has no profile of."""
    from chalk.errors import ChalkError
    from chalk.specs.engine import load_engine

    eng = ENGINE_PROFILE.get(row.engine or "")
    if eng is None or not row.engine_version:
        return eng
    try:
        prof = load_engine(f"{eng}@{row.engine_version.lstrip('vV')}")
    except ChalkError:
        return eng
    return eng if prof.newest else f"{eng}@{prof.release}"


def profile_release(profile: str | None) -> str | None:
    """'vllm@0.11' for a row's engine profile ('vllm': the newest release's; 'vllm@0.6' as it is); None for none."""
    if not profile:
        return None
    from chalk.specs.engine import load_engine

    prof = load_engine(profile)
    return f"{prof.id}@{prof.release}"


def point(row: Row, engines: bool = True) -> tuple:
    """The chalk question a row asks, without the calibration: rows with the same point are answered by one call
    (a fixed deployment's throughput and TPOT rows, several metrics of one search). `engines` (default): the row's engine
    profile applies."""
    eng = row_engine(row) if engines else None
    if row.kind == "fixed" and row.concurrency:
        return ("fixed", row.model, row.hardware, _layout(row) or "tp=1", row.concurrency, *_row_lengths(row),
                row.gpus, row.precision, row.kv_precision, _speculation(row), eng,
                _decode_gpus(row) if row.disaggregated else None, row.metric in TTFT_METRICS and not row.num_prompts,
                row.num_prompts, row.max_batch, _prefill_layout(row) if row.disaggregated else None, row.max_tokens,
                row.warmed, not client_latency_applies(row))
    if row.kind == "search":
        lay = _layout(row)
        return ("search", row.model, row.hardware, row.input_len, row.output_len, None if lay else (row.gpus or None),
                row.precision, row.kv_precision, row.min_user_tps, row.disaggregated, lay, _speculation(row), eng,
                row.max_batch, row.tpot_p99, row.ttft_p99, row.max_tokens, not client_latency_applies(row))
    return ("row", row.id)


def answer(row: Row, cal: Calibration, engines: bool = True, memo: bool = True):
    """chalk's answer to the row's question (`point`) under `cal`: a mapping holding at least the row's metric.
    `memo`: keep fixed operating points per calibration value (`_fixed`); without it nothing outside the call is
    asked of `cal` but its fields (`chalk.analyses.fidelity.fit_memo` tracks which fields an answer read)."""
    p = point(row, engines)
    if p[0] == "fixed":
        return (_fixed if memo else _fixed.__wrapped__)(*p[1:10], cal, *p[10:])
    if p[0] == "search":
        return (_searched if memo else _searched.__wrapped__)(*p[1:], cal)
    return {row.metric: _pool_answer(row, cal)}


@lru_cache(maxsize=512)
def _searched(model, hardware, I, O, gpus, precision, kvp, speed, disagg, lay, spec, eng, max_batch, tpot99, ttft99,
              max_tokens, in_process, cal):
    """A search row's answer (memoised: rows asking the same search, e.g. several submitters' results on one system,
    share it). The benchmark's own cap on sequences per scheduler where the row records it (`max_batch`), as fixed
    rows, and its own prompt tokens per step (`max_tokens`); p99 bounds (a server scenario's) are met under Poisson
    arrivals, `throughput`'s default. `in_process`: its harness ran the engine in its own process (no per-request
    latency outside the steps)."""
    if in_process:
        cal = dataclasses.replace(cal, request_latency_s=0.0)
    return throughput(model, hardware, input_len=I, output_len=O, gpus=gpus, precision=precision,
                      kv_precision=kvp, min_user_tps=speed, disaggregated=disagg, calibration_override=cal,
                      layout=lay, speculative=spec, engine=eng, max_seqs=max_batch, tpot_p99_s=tpot99,
                      ttft_p99_s=ttft99, max_tokens=max_tokens, cut_to_context=False,
                      replay_latency=False)  # (its rows are throughputs: no latency replay)


def predict(row: Row, cal: Calibration | None = None, engines: bool = True) -> float:
    """chalk's prediction of the row's metric. `engines`: apply the engine profile the row names."""
    return float(answer(row, cal or calibration(), engines)[row.metric])


def _pool_answer(row: Row, cal: Calibration) -> float:
    """A decode, prefill or fixed-batch row: one pool at the row's layout, timed by the step model directly."""
    m, system, costs, tp, a, pp, ep = _pool(row, cal)
    G = tp * a * pp
    if row.kind == "decode":
        L = row.context
        if row.batch:
            B = np.array([row.batch * G])
        else:
            B = np.unique(np.round(np.geomspace(1, cal.max_seqs_per_scheduler, 60))) * a * pp
        w, kv = memory_per_chip(costs, tp, a, pp, ep, B, L)
        fits = (w + kv) <= system.chip.hbm_bytes * (1 - cal.memory_reserve)
        if not row.batch:
            B = B[fits] if np.any(fits) else B[:1]
        t = stage_step(costs, system, tp, a, pp, ep, B, 0.0, L, 1.0, cal)["stage_time_s"]
        return float(np.max(B / (pp * t) / G))
    if row.kind == "fixed":
        I, O = row.input_len, row.output_len
        B = row.batch
        t = stage_step(costs, system, tp, a, pp, ep, B, B * I / O, I + O / 2, I, cal)["stage_time_s"]
        return float(B / (pp * t) / G)
    if row.kind == "prefill":
        chunk = row.batch * a
        t = stage_step(costs, system, tp, a, pp, ep, 0.0, chunk, row.input_len, row.input_len, cal)["stage_time_s"]
        return float(chunk / pp / t / G)
    raise SpecError(f"validation row {row.id}: unknown kind {row.kind!r}")


def weighted_quantile(x, w, q: float) -> float:
    """The `q` quantile of `x` under weights `w` (midpoint rule: an item sits at the middle of its weight in the
    cumulative distribution, interpolated linearly between items). Equal weights give np.median at 0.5.
    None when no weight is left after dropping non-finite values."""
    x, w = np.asarray(x, dtype=float), np.asarray(w, dtype=float)
    ok = np.isfinite(x) & (w > 0)
    if not np.any(ok):
        return None
    x, w = x[ok], w[ok]
    order = np.argsort(x, kind="stable")
    x, w = x[order], w[order]
    c = (np.cumsum(w) - w / 2) / w.sum()
    return float(np.interp(q, c, x))


def _family_weighted_median(errors, families) -> float | None:
    """The median of `errors` with each source family weighing 1 in all (a row 1 / its family's row count), as
    the calibration's objective and `validate --cv` weigh them (`weighted_quantile` at 0.5)."""
    if not len(errors):
        return None
    _, inv, counts = np.unique(np.asarray(families), return_inverse=True, return_counts=True)
    return weighted_quantile(errors, 1.0 / counts[inv], 0.5)


def validate(ideal: bool = False, cal: Calibration | None = None) -> dict:
    """Every row predicted, with its error. The headline median and p90 |error| and the residual percentiles are over
    the throughput and TPOT rows (the metrics the calibration fits); TTFT rows are their own group."""
    cal = cal or calibration(ideal)
    out = []
    for r in load_rows():
        try:
            p = predict(r, cal)
            err = p / r.measured - 1
        except ChalkError as e:
            p, err = None, None
            note = str(e)
        else:
            note = ""
        prof = None if ideal else row_engine(r)  # the profile the row was answered with: its version's, else the newest
        out.append({"id": r.id, "family": r.family, "kind": r.kind, "model": r.model, "hardware": r.hardware,
                    "gpus": r.gpus, "engine": r.engine, "engine_version": r.engine_version,
                    "engine_profile": prof, "engine_profile_release": profile_release(prof),
                    "group": r.group,
                    "precision": r.precision, "input_len": r.input_len, "output_len": r.output_len,
                    "min_user_tps": r.min_user_tps, "disaggregated": r.disaggregated, "metric": r.metric,
                    "measured": r.measured, "predicted": p, "error": err,
                    "abs_error": None if err is None else abs(err), "source": r.source, "error_note": note})
    moe = {r.model: load_model(r.model).is_moe for r in load_rows()}
    def headline(o):
        return o["metric"] in FITTED_METRICS

    groups = {"dense": lambda o: headline(o) and not moe[o["model"]], "moe": lambda o: headline(o) and moe[o["model"]],
              "held_out_mlperf": lambda o: o["id"].startswith(HELD_OUT_PREFIX),
              "fixed_throughput": lambda o: o["kind"] == "fixed" and o["metric"] == "output_tokens_per_s_per_gpu",
              "fixed_tpot": lambda o: o["kind"] == "fixed" and o["metric"] == "tpot_s",
              "ttft": lambda o: o["metric"] == "ttft_s",
              "ttft_p50": lambda o: o["metric"] == "ttft_p50_s",
              # issue 23's figure: the latencies of the rows that state a deployment's concurrency (mean TTFT and TPOT)
              "fixed_latency": lambda o: o["kind"] == "fixed" and o["metric"] in ("ttft_s", "tpot_s")}
    by_group = {}
    for g, pick in groups.items():
        sel = [o for o in out if o["abs_error"] is not None and pick(o)]
        e = np.array([o["abs_error"] for o in sel])
        by_group[g] = {"n": int(e.size), "median_abs_error": float(np.median(e)) if e.size else None,
                       "p90_abs_error": float(np.percentile(e, 90)) if e.size else None,
                       "family_weighted_median_abs_error": _family_weighted_median(e, [o["family"] for o in sel])}
    head = [o for o in out if headline(o)]
    errs = np.array([o["abs_error"] for o in head if o["abs_error"] is not None])
    families = {}  # per source family, over the headline rows (as `validate --cv` holds each out)
    for f in sorted({o["family"] for o in head}):
        e = np.array([o["error"] for o in head if o["family"] == f and o["error"] is not None])
        families[f] = {"n": int(e.size), "median_abs_error": float(np.median(np.abs(e))) if e.size else None,
                       "p90_abs_error": float(np.percentile(np.abs(e), 90)) if e.size else None,
                       "median_signed_error": float(np.median(e)) if e.size else None}
    res = np.array([np.log(o["measured"] / o["predicted"]) for o in head if o["predicted"]])
    failed = sum(o["predicted"] is None for o in out)
    from chalk.analyses.records.results import ValidationReport

    return ValidationReport({"efficiency": cal.label, "rows": out, "n": len(out), "n_headline": len(head),
            "failed": failed,
            "headline_metrics": list(FITTED_METRICS),
            "median_abs_error": float(np.median(errs)) if errs.size else None,
            "p90_abs_error": float(np.percentile(errs, 90)) if errs.size else None,
            "median_signed_error": float(np.median([o["error"] for o in head if o["error"] is not None]))
            if errs.size else None,
            "residual_p10": float(np.percentile(res, 10)) if res.size else None,
            "residual_p90": float(np.percentile(res, 90)) if res.size else None,
            "family_weighted_median_abs_error": _family_weighted_median(
                errs, [o["family"] for o in head if o["abs_error"] is not None]),
            "median_error_bound": MEDIAN_ERROR_BOUND, "groups": by_group, "families": families})
