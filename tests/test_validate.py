"""The validation set: every row predicted, sourced, and the median error held under its recorded bound."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from chalk.analyses.step import calibration as cal
from chalk.analyses.fidelity.validate import MEDIAN_ERROR_BOUND, load_rows, parse_rows, validate
from chalk.analyses.traffic.serving import fixed_deployment
from chalk.errors import SpecError

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "reference" / "measurements-public.csv"


@pytest.fixture(scope="module")
def report():
    return validate()


def test_every_row_is_answered(report):
    assert report["failed"] == 0
    assert report["median_error_bound"] == MEDIAN_ERROR_BOUND  # stated beside the figure, not asserted in-sample


def _unseen(report):
    """The throughput and TPOT rows the shipped calibration was not fitted on (ids outside the record's
    `fit.row_ids`), with their speed residuals log(measured / predicted) (time metrics inverted)."""
    from chalk.analyses.fidelity.calibrate import FITTED_METRICS, speed_residuals
    from chalk.specs.catalog import package_path, read_yaml

    seen = set(read_yaml(package_path("catalog", "calibration.yaml"), "calibration.yaml")["fit"]["row_ids"])
    pred = {o["id"]: o["predicted"] for o in report["rows"]}
    rows = [r for r in load_rows() if r.metric in FITTED_METRICS and r.id not in seen and pred[r.id] is not None]
    return rows, speed_residuals(rows, np.array([pred[r.id] for r in rows], dtype=float))


def test_rows_the_shipped_fit_never_saw_fall_in_its_stated_range(report):
    """issue 29 item 5: the median error over the rows the constants were fitted on says nothing about a row they
    never saw (at the migration, 2026-11-26: 9.5% over the 279 fitted rows still in the set, 24.6% over the 381
    rows added since). What an answer claims for any row is its [low, high] range, sized on leave-one-family-out
    residuals to hold 80% of held-out values: checked here on the rows the shipped fit never saw (72.7% of the 381
    then, families of early-2025 engines far below it), allowing 0.10 for the few families they come from. With
    no unseen rows (a refit on every row), the slow leave-one-family-out test is the held-out check."""
    from chalk.analyses.fidelity.calibrate import RANGE_TARGET

    rows, resid = _unseen(report)
    if len(rows) < 30:
        pytest.skip(f"only {len(rows)} rows unseen by the shipped fit: see test_leave_one_family_out_cross_validation")
    inside = (resid >= cal.CALIBRATION.residual_low) & (resid <= cal.CALIBRATION.residual_high)
    assert np.isfinite(resid).all()
    assert inside.mean() >= RANGE_TARGET - 0.10, (len(rows), float(inside.mean()))


def test_rows_are_sourced_and_broad():
    rows = load_rows()
    assert len(rows) >= 40
    assert all(r.source.strip() for r in rows)
    assert len({r.model for r in rows}) >= 6 and len({r.hardware for r in rows}) >= 8
    assert {r.kind for r in rows} >= {"search", "decode", "prefill", "fixed"}
    assert len({r.id for r in rows}) == len(rows)


def test_no_source_family_dominates():
    """issue 24 item 1: at least 12 independent source families, none above MAX_FAMILY_SHARE (20%) of the rows, over
    all rows and over the fitted-metric rows `validate --cv` judges (scripts/balance_rows.py keeps it; at 2026-11-27:
    837 rows, 17 families, the largest trtllm-docs at 20.0% of the fitted-metric rows and inferencex at 20.0% of
    all). A row the balance moved out is kept in surplus.csv and is not read."""
    from collections import Counter

    from chalk.analyses.fidelity.validate import FITTED_METRICS, MAX_FAMILY_SHARE
    from chalk.specs.catalog import package_path

    rows = load_rows()
    fams = Counter(r.family for r in rows)
    fitted = Counter(r.family for r in rows if r.metric in FITTED_METRICS)
    assert len(fams) >= 12 and len(fitted) >= 12
    assert max(fams.values()) <= MAX_FAMILY_SHARE * len(rows), fams.most_common(2)
    assert max(fitted.values()) <= MAX_FAMILY_SHARE * sum(fitted.values()), fitted.most_common(2)
    text = package_path("validation", "surplus.csv").read_text()
    assert text.splitlines()[0] == package_path("validation", "validation.csv").read_text().splitlines()[0]
    surplus = {r.id for r in parse_rows(text)}  # validation.csv's columns, every row whole
    assert surplus and not surplus & {r.id for r in rows}


def test_moe_rows_of_the_trtllm_00f3768_table_ran_attention_dp():
    """That table's MoE columns ("TP8") ran `trtllm-bench --tp 8 --ep 8` with attention DP (the document's command
    for MoE models): recorded as DEP8, so chalk predicts the deployment that was measured."""
    from chalk.specs.catalog import load_model

    rows = [r for r in load_rows() if r.group == "trtllm-perf-overview-00f3768" and load_model(r.model).is_moe
            and (r.gpus or 1) > 1]
    assert len(rows) >= 10
    assert all(r.tp == 1 and r.attn_dp == r.gpus == 8 and "DEP8" in r.notes for r in rows)


def test_recorded_range_says_how_it_was_obtained():
    """The [low, high] range estimates carry (catalog/calibration.yaml `fitted.residual_low/high`) is the one its
    `range` block records: sized on leave-one-family-out residuals (`chalk calibrate`) to hold 80% of held-out
    measured values, each family judged on a range sized on the others (issue 24 item 7). The slow
    cross-validation test checks that the data still give it."""
    from chalk.analyses.fidelity.calibrate import RANGE_METHOD, RANGE_TARGET
    from chalk.specs.catalog import package_path, read_yaml

    d = read_yaml(package_path("catalog", "calibration.yaml"), "calibration.yaml")
    rng = d["range"]
    assert (rng["low"], rng["high"]) == (cal.CALIBRATION.residual_low, cal.CALIBRATION.residual_high)
    assert rng["low"] < 0 < rng["high"] and rng["method"] == RANGE_METHOD
    assert 0.75 <= rng["cv_range_coverage"] <= 0.85 and rng["cv_range_coverage"] >= RANGE_TARGET - 0.05
    lo_q, hi_q = rng["quantiles"]
    assert 0 < lo_q <= 0.2 and hi_q == pytest.approx(1 - lo_q) and rng["families"] >= 5


def test_headline_is_throughput_and_tpot_and_ttft_is_its_own_group(report):
    from chalk.analyses.fidelity.calibrate import FITTED_METRICS

    rows = report["rows"]
    head = [o["abs_error"] for o in rows if o["metric"] in FITTED_METRICS]
    assert report["n_headline"] == len(head) >= 200
    assert report["median_abs_error"] == pytest.approx(float(np.median([e for e in head if e is not None])))
    g = report["groups"]
    assert g["ttft"]["n"] == sum(o["metric"] == "ttft_s" for o in rows) >= 40
    assert g["fixed_throughput"]["n"] >= 30 and g["fixed_tpot"]["n"] >= 30
    # 37 since the balance of 2026-11-27 moved three InferenceX runs to surplus.csv (was 40)
    assert g["ttft_p50"]["n"] == sum(o["metric"] == "ttft_p50_s" for o in rows) >= 35


def test_median_ttft_rows_pair_a_mean_row_of_the_same_run(report):
    """Every median-TTFT row (InferenceX's median_ttft) sits beside the mean row of the same run object: the same
    deployment question (`point`), a median below the mean (a run's first wave, sent at once, is its slow tail),
    and chalk answers both from one replay, its own median at most its p99. Means and medians are not in the
    throughput objective: they fit the request latency and the cold-start delay (`calibrate._fit_latencies`)."""
    from chalk.analyses.fidelity.calibrate import in_objective
    from chalk.analyses.fidelity.validate import point

    rows = {r.id: r for r in load_rows()}
    med = [r for r in rows.values() if r.metric == "ttft_p50_s"]
    assert len(med) >= 35
    pred = {o["id"]: o["predicted"] for o in report["rows"]}
    for r in med:
        mean = rows[r.id.removesuffix("-p50")]
        assert mean.metric == "ttft_s" and point(mean) == point(r) and r.measured < mean.measured, r.id
        assert r.source == mean.source and not in_objective(r)
        assert 0 < pred[r.id] <= pred[mean.id] * 1.5, r.id


@pytest.mark.xfail(strict=True, reason="out of sample the shipped fit misses issue 10's targets: at the migration "
                   "(2026-11-26) the rows it never saw have median |error| 0.189 dense (268 rows), 0.234 fixed "
                   "throughput (164), 0.447 fixed TPOT (48), against 0.046, 0.134 and 0.088 on the rows it was "
                   "fitted on")
def test_rows_the_fit_never_saw_meet_the_issue_10_targets(report):
    """issue 10's targets (fixed deployments' throughput and mean TPOT within 15% at the median, dense rows within
    10%) were asserted on the rows the constants were fitted on, where they held; asked of the rows the shipped fit
    never saw, they do not yet (the reason above). Skips when a refit has seen every row (the slow
    leave-one-family-out test is then the held-out check)."""
    from chalk.analyses.fidelity.validate import FIXED_ERROR_BOUND
    from chalk.specs.catalog import load_model

    rows, _ = _unseen(report)
    if len(rows) < 30:
        pytest.skip(f"only {len(rows)} rows unseen by the shipped fit: see test_leave_one_family_out_cross_validation")
    err = {o["id"]: o["abs_error"] for o in report["rows"]}

    def median(keep):
        e = [err[r.id] for r in rows if keep(r) and err[r.id] is not None]
        return float(np.median(e)) if len(e) >= 10 else 0.0

    assert median(lambda r: r.kind == "fixed" and r.metric == "output_tokens_per_s_per_gpu") <= FIXED_ERROR_BOUND
    assert median(lambda r: r.kind == "fixed" and r.metric == "tpot_s") <= FIXED_ERROR_BOUND
    assert median(lambda r: not load_model(r.model).is_moe) <= 0.10


def test_calibration_beats_the_ideal_roofline(report):
    ideal = validate(ideal=True)
    assert ideal["median_abs_error"] > report["median_abs_error"]
    # the pure roofline is an upper bound: it over-predicts most rows
    assert ideal["median_signed_error"] > 0.3


def test_calibrated_efficiency_is_cheap_and_physical():
    e = cal.calibrated_efficiency()
    assert e.label == "calibrated" and 0.3 <= e.compute <= 0.7 and 0.6 <= e.memory <= 0.95
    assert 1e-3 <= e.overhead_s <= 5e-3 and 0 < e.memory_reserve < 0.2
    assert cal.calibrated_efficiency() is e


@pytest.mark.skipif(not SHARED.is_file(), reason="../shared is absent")
def test_copied_rows_match_the_shared_reference():
    ref = {(r["metric"], r["value"]) for r in csv.DictReader(SHARED.open())}
    per_node = {"dsv3-h100-decode-sglang": ("decode_throughput_per_node", 22282),
                "dsv3-h100-prefill-1k": ("prefill_throughput_per_node", 57674),
                "dsv3-h800-decode-prod": ("output_throughput_per_node", 14800)}
    rows = {r.id: r for r in load_rows()}
    for rid, (metric, value) in per_node.items():
        assert (metric, str(value)) in ref
        assert rows[rid].measured == pytest.approx(value / 8, rel=0.01)


def test_cli_validate_json():
    p = subprocess.run([sys.executable, "-m", "chalk.faces.cli", "validate", "--json"], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["n"] == len(d["rows"]) and d["median_error_bound"] == MEDIAN_ERROR_BOUND
    assert d["median_abs_error"] == pytest.approx(float(np.median(
        [r["abs_error"] for r in d["rows"] if r["metric"] in d["headline_metrics"] and r["abs_error"] is not None])))
    errs = [r["abs_error"] for r in d["rows"] if r["metric"] in d["headline_metrics"]]
    assert d["p90_abs_error"] == pytest.approx(float(np.percentile(errs, 90)))
    # every row names its family, engine, version and the profile it was answered with; per-family figures are in
    # the plain run too, not only under --cv (QA 2026-11-28)
    rows = {r.id: r for r in load_rows()}
    for o in d["rows"]:
        assert (o["family"], o["engine"], o["engine_version"]) == (rows[o["id"]].family, rows[o["id"]].engine,
                                                                  rows[o["id"]].engine_version)
    assert any((o["engine_profile"] or "").startswith("vllm@") for o in d["rows"])
    # ... and the release of that profile, the newest's included, and its source group (QA 2026-11-28)
    for o in d["rows"]:
        assert o["group"] == rows[o["id"]].group
        prof = o["engine_profile"]
        assert (o["engine_profile_release"] is None) == (prof is None)
        assert prof is None or (o["engine_profile_release"].split("@")[0] == prof.split("@")[0]
                                and ("@" not in prof or o["engine_profile_release"] == prof))
    assert {o["engine_profile_release"] for o in d["rows"]} >= {"vllm@0.11", "vllm@0.6", "sglang@0.4"}
    fams = {o["family"] for o in d["rows"] if o["metric"] in d["headline_metrics"]}
    assert set(d["families"]) == fams and sum(v["n"] for v in d["families"].values()) == d["n_headline"] - d["failed"]
    for f, v in d["families"].items():
        e = [abs(o["error"]) for o in d["rows"] if o["family"] == f and o["metric"] in d["headline_metrics"]]
        assert v["median_abs_error"] == pytest.approx(float(np.median(e)))
    assert 0 < d["family_weighted_median_abs_error"] < 1


def test_held_out_mlperf_rows_sourced_and_reported(report):
    from chalk.analyses.fidelity.validate import HELD_OUT_PREFIX
    rows = [r for r in load_rows() if r.id.startswith(HELD_OUT_PREFIX)]
    assert len(rows) >= 8
    assert {r.hardware for r in rows} >= {"h100", "h200", "b200", "mi300x", "mi325x"}
    for r in rows:
        assert r.source.startswith("https://github.com/mlcommons/inference_results_v")
        assert r.kind == "search" and r.metric == "output_tokens_per_s_per_gpu" and r.precision in ("fp8", "fp4")
        assert 250 < r.output_len < 320  # MLPerf Llama-2-70B reference: 294.45 tokens per sample
    g = report["groups"]
    assert g["held_out_mlperf"]["n"] == len(rows)
    assert g["dense"]["n"] + g["moe"]["n"] == report["n_headline"]
    # the `mlperf` ids the shipped fit never saw (the first eight were in it): still within the model's reach
    unseen = {r.id for r in _unseen(report)[0]}
    by_id = {o["id"]: o for o in report["rows"]}
    held = [r for r in rows if r.id in unseen]
    assert len(held) >= 8 or len(unseen) < 30
    assert all(0.5 < by_id[r.id]["predicted"] / r.measured < 2 for r in held)


def test_server_scenario_rows_ask_their_p99_bounds_and_are_judged_not_fitted(report):
    """MLPerf's Server and Interactive scenarios hold a run to p99 TTFT and p99 TPOT under Poisson arrivals: the rows
    ask those bounds (not a mean speed floor) and are answered by the Poisson replay; the fit does not read them
    (a bisection of replays is a step function of the parameters) but every report judges them."""
    from chalk.analyses.fidelity.calibrate import _fitted_mask, _objective_mask, in_objective

    rows = load_rows()
    server = [r for r in rows if r.tpot_p99 is not None]
    assert len(server) >= 25 and all(r.family == "mlperf" and r.min_user_tps is None for r in server)
    assert {(r.tpot_p99, r.ttft_p99) for r in server} == {(0.2, 2.0), (0.04, 0.45)}
    assert not any(in_objective(r) for r in server)
    assert _objective_mask(rows).sum() == _fitted_mask(rows).sum() - len(server)
    by_id = {o["id"]: o for o in report["rows"]}
    assert all(by_id[r.id]["predicted"] is not None for r in server)
    inter = [by_id[r.id]["predicted"] for r in server if r.tpot_p99 == 0.04 and r.hardware == "h200"]
    srv = [by_id[r.id]["predicted"] for r in server if r.tpot_p99 == 0.2 and r.hardware == "h200"]
    assert max(inter) < min(srv)  # 40 ms at p99 costs throughput against 200 ms


@pytest.mark.slow
def test_leave_one_family_out_cross_validation():
    """issue 24: each source family predicted by a fit that never saw it (about 260 CPU-s split over the usable
    cores, 2 min 17 s wall on 2 at load ~1: benchmarks/bench_cv.py), families weighed equally; the range sized on the
    held-out residuals holds about 80% of held-out measured values. Measured with each row answered on its own
    engine's profile and the refit that goes with it (730 rows, 14 families, 2026-11-26): held-out median 0.167, p90
    0.96, dense 0.137, MoE 0.306, coverage 0.831; with the AMD factors applied by what binds each kernel (b1026fa):
    0.171, 0.867, 0.114, 0.296, 0.812; with the opt-in TensorRT-LLM NVFP4 MoE kernel out of the tables and the refit
    that goes with it: 0.178, 0.657, 0.125, 0.259, 0.800, 1 min 58 s wall; with the GPUStack ShareGPT runs replayed
    with ShareGPT's length distribution (validation/lengths.yaml) and the range resized: 0.146, 0.657, 0.100, 0.248,
    0.804; with kernels held to the measured streaming ceiling: 0.143, 0.657, 0.099, 0.244, 0.805, 1 min 47 s wall;
    with MLPerf's Server/Interactive rows held to their p99 bounds under Poisson arrivals, judged and not fitted
    (2026-11-27): 0.139, 0.658, 0.087, 0.210, 0.810, 1 min 38 s wall; with vLLM and SGLang rows on their engines'
    BF16 KV cache where the run set none and the refit that goes with it (730 rows): 0.167, 0.625, 0.118, 0.189,
    0.825; with 22 Azure, Oracle and Google rows added (752 rows) and the range resized: 0.142, 0.556, 0.117, 0.190,
    0.802, 1 min 27 s wall; with three new families gathered after the shipped fit (LMDeploy, gpt-fast, llm-d: 837
    rows, 17 families, the balance applied) and the range resized (2026-11-27): 0.185, 0.585, 0.160, 0.258, 0.801,
    2 min 55 s wall on 2 workers (the new families are predicted worst: llm-d 0.43, LMDeploy 0.19)
    (one engine for every row, at 4cc5d59:
    0.207, 1.04, 0.178, 0.295, 0.816; at 40fd3ed, 410 rows and 13 families: 0.188, 0.86, 0.135, 0.188, 0.817); the
    bounds guard that, short of the issue's 0.10 / 0.30."""
    # one process (--workers 1): the slow tier runs beside it on the other core, where the browser tests' Streamlit
    # server starved behind a two-process cross-validation (a Layout chart past 240 s on 2 cores)
    p = subprocess.run([sys.executable, "-m", "chalk.faces.cli", "validate", "--cv", "--json", "--workers", "1"],
                       capture_output=True, text=True, timeout=3000)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["n"] >= 200 and d["n_families"] >= 5 and {"dense", "moe"} <= set(d["groups"])
    fams = d["families"]
    assert sum(v["n"] for v in fams.values()) == d["n"]
    assert all("fit" in v and v["median_signed_error"] is not None for v in fams.values() if v["n"])
    assert d["cv_median_abs_error"] <= 0.20 and d["cv_p90_abs_error"] <= 0.75
    assert d["groups"]["dense"]["median_abs_error"] <= 0.18 and d["groups"]["moe"]["median_abs_error"] <= 0.30
    assert 0.75 <= d["cv_range_coverage"] <= 0.85
    lo, hi = d["cv_range"]
    assert lo < 0 < hi
    # the shipped range is the one the data give now (chalk calibrate --range-only --write resizes it)
    assert (lo, hi) == pytest.approx((cal.CALIBRATION.residual_low, cal.CALIBRATION.residual_high), abs=0.05)
    assert d["in_sample"]["n"] >= d["n"] - 5 and d["in_sample"]["median_abs_error"] < d["cv_p90_abs_error"]


#: `chalk validate --cv ...` on every 12th validation row (every kind of row, most families) and three of the fitted
#: parameters: the same command, the same code path, in seconds rather than minutes.
_CV_CLI = """
import sys
from chalk.analyses.fidelity import calibrate as C, validate as V
sub = tuple(r for i, r in enumerate(V.load_rows()) if i % 12 == 0)
V.load_rows = lambda: sub
C.FIT_GRID = {k: C.FIT_GRID[k] for k in ("compute", "overhead_per_layer_s", "amd_compute")}
from chalk.faces.cli import main
main(sys.argv[1:])
"""


def _cv_cli(*args) -> dict:
    p = subprocess.run([sys.executable, "-c", _CV_CLI, "validate", "--cv", "--json", *args], capture_output=True,
                       text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout)


@pytest.mark.slow
def test_cli_cross_validation_same_on_ray_and_in_one_process():
    """issue 28: `validate --cv --ray` (Ray actors answering the row shards, a local Ray of the usable CPUs) gives
    the very figures `validate --cv --workers 1` gives in one process: every family's fit, error and range, and
    every row's held-out prediction, bit for bit."""
    pytest.importorskip("ray")
    one = _cv_cli("--workers", "1")
    ray = _cv_cli("--ray")
    assert one["n_families"] >= 5 and one["n"] >= 40 and len(one["rows"]) == len(ray["rows"])
    assert sum(o["predicted"] is not None for o in one["rows"]) >= 40
    assert json.dumps(one, sort_keys=True) == json.dumps(ray, sort_keys=True)


def test_dataset_lengths_keep_the_recorded_shape_at_the_rows_level():
    """validation/lengths.yaml's ShareGPT quantiles (vLLM's sampling rule, Qwen BPE) rebuilt as 1000 lengths: the
    unscaled mean is the recorded one (202.9 output to 1%; 219.6 input to 2%, from coarser quantiles); scaled to a
    row's means they keep the shape: the median about two thirds of the mean (135 / 203) and a longest output
    6-9x the mean (the recorded maximum is 1856 = 9.1x); an unknown name is one typed error."""
    from chalk.analyses.fidelity.validate import DATASET_POINTS, _datasets, _quantile_lengths, dataset_lengths

    d = _datasets()["sharegpt-vllm"]
    for side in ("input", "output"):
        x = _quantile_lengths(d[f"{side}_quantiles"], DATASET_POINTS)
        assert x.mean() == pytest.approx(d[f"{side}_mean"], rel=0.01 if side == "output" else 0.02)
        assert np.all(np.diff(x) >= 0)
    i, o = dataset_lengths("sharegpt-vllm", 215.312, 193.979)
    assert (i.mean, o.mean) == pytest.approx((215.312, 193.979), rel=1e-12)
    assert o.median / o.mean == pytest.approx(135 / 202.9, rel=0.05) and 6 < o.values.max() / o.mean < 9.2
    with pytest.raises(SpecError, match="lengths.yaml"):
        dataset_lengths("no-such-dataset", 100.0, 100.0)


def test_a_burst_of_varied_lengths_runs_longer_than_one_of_mean_lengths():
    """1000 prompts sent at once run until the longest output is done, the tail decoding at a small batch: with
    ShareGPT's lengths (the same means) Llama-3.1-8B on one H100 takes ~1.4x as long and gives ~0.7x the output
    per second of a replay where every request has the mean length (14.1 s and 14.4k tok/s -> 20.1 s and 10.4k
    tok/s at this stop); the rows that name the dataset are replayed with it."""
    from chalk.analyses.fidelity.validate import dataset_lengths, load_rows, point

    i, o = dataset_lengths("sharegpt-vllm", 220.0, 203.0)
    run = lambda I, O: fixed_deployment("llama-3.1-8b", "h100-sxm", layout="tp=1", concurrency=1000,  # noqa: E731
                                        input_len=I, output_len=O, requests=1000)
    flat, varied = run(220.0, 203.0), run(i, o)
    assert varied["latency_window"]["end_s"] > 1.25 * flat["latency_window"]["end_s"]
    assert varied["output_tokens_per_s_per_gpu"] < 0.8 * flat["output_tokens_per_s_per_gpu"]
    named = [r for r in load_rows() if r.lengths == "sharegpt-vllm"]
    assert len(named) == 23 and {r.family for r in named} == {"gpustack"}
    for r in named:
        p = point(r)
        assert p[5].kind == p[6].kind == "empirical" and p[6].mean == pytest.approx(r.output_len, rel=1e-12)


def test_fixed_length_harnesses_replay_every_request_at_the_means():
    """Rows whose harness sends one prompt length and forces one output length (`lengths` = fixed, lengths.yaml)
    replay every request at exactly the row's means: with a whole prefill per iteration the closed loop's requests
    then finish together and come back together, so a static benchmark's waves keep queueing behind each other's
    prompts (LMDeploy's profile_generation, 16 threads of 2048-token prompts on Llama-2-70B TP4 at the default chunk:
    3.5 s mean TTFT at this stop against 1.3 s with lengths spread over [8/9, 10/9] of the means; with TurboMind's
    whole-prompt prefill, the row's max_tokens, 5.4 s; measured 5.78 s); every such row's notes name a fixed-length
    harness."""
    from chalk.analyses.fidelity.validate import answer, dataset_lengths, load_rows, point

    i, o = dataset_lengths("fixed", 2048.0, 128.0)
    assert (i.kind, i.mean, o.kind, o.mean) == ("constant", 2048.0, "constant", 128.0)
    run = lambda I, O: fixed_deployment("llama-2-70b", "a100-sxm", layout="tp=4", concurrency=16,  # noqa: E731
                                        input_len=I, output_len=O, precision="fp16", requests=160)
    assert run(i, o)["ttft_s"] > 2.0 * run(2048.0, 128.0)["ttft_s"]
    row = next(r for r in load_rows() if r.id == "lmdeploy-a100-l2-70b-tp4-b16-i2048-o128-ttft")
    assert row.lengths == "fixed" and answer(row, cal.calibration())["ttft_s"] == pytest.approx(row.measured, rel=0.15)
    fixed = [r for r in load_rows() if r.lengths == "fixed"]
    assert len(fixed) >= 200 and len({r.family for r in fixed}) >= 6
    harness = ("benchmark_latency", "benchmark_throughput", "ignore-eos", "ignore_eos", "fixed", "every request",
               "no eos stop")  # gpt-fast's generate.py: --max_new_tokens, no EOS stop
    for r in fixed:
        assert r.kind == "fixed" and any(h in r.notes.lower() for h in harness), r.id
        assert point(r)[5].kind == "constant"


def test_launch_token_budgets_are_the_ones_the_notes_quote():
    """`max_tokens` is the chunked-prefill budget the row's launch command set (scripts/apply_max_tokens.py reads it
    from the notes): every value is one the notes quote as a flag, every quoted flag is recorded, and a fixed row's
    replay takes it in place of the engine profile's default (Google's v6e-8 recipe runs vLLM with
    --max-num-batched-tokens 512, where vLLM's default on a 32 GB chip is 2048: 0.25 s mean TTFT measured at 64 in
    flight; 0.49 s replayed with 512 and fixed lengths at this stop, 0.92 s with 2048)."""
    import re

    from chalk.analyses.fidelity.validate import WHOLE_PROMPTS, answer, load_rows, point

    flag = re.compile(r"(?:--max-num-batched-tokens|--max_num_tokens)[ =](\d+)")
    rows = load_rows()
    for r in rows:
        quoted = {int(v) for v in flag.findall(r.notes)}
        if "prefills every prompt it admits whole" in r.notes:
            quoted.add(WHOLE_PROMPTS)
        assert (r.max_tokens is None and not quoted) or quoted == {r.max_tokens}, r.id
    assert sum(r.max_tokens is not None for r in rows) >= 80
    tpu = next(r for r in rows if r.id == "gtpu-l33-70b-v6e8-vllm-1k1k-c64-ttft")
    assert tpu.max_tokens == 512 and point(tpu)[-3] == 512
    import dataclasses

    c = cal.calibration()
    assert answer(tpu, c)["ttft_s"] < 0.75 * answer(dataclasses.replace(tpu, max_tokens=None), c)["ttft_s"]


def test_a_warmed_run_pays_no_cold_start_and_a_cold_one_does():
    """`warmed` rows (scripts/apply_warmed.py) ran warm-up requests before their timed run, as their notes say
    (vLLM's benchmark_latency warm-up iterations, a harness's warm-up requests): their replay starts on a warm engine,
    so the calibrated first-step delay (`warmup_s`) leaves them as they were; a run measured whole from a cold engine
    (InferenceX's single-node runs: 10 x concurrency prompts) carries it on its first wave's TTFT."""
    import dataclasses
    import re

    from chalk.analyses.fidelity.validate import answer

    rows = load_rows()
    warmed = [r for r in rows if r.warmed]
    assert len(warmed) >= 100 and {r.family for r in warmed} >= {"amd", "oracle", "inferencex"}
    for r in warmed:
        assert "benchmark_latency" in r.notes or re.search(r"warm-?up (requests|iterations)", r.notes) \
            or (r.concurrency == 1 and "single test prompt" in r.notes) \
            or "warmed: profile_generation.py runs warmup()" in r.notes \
            or (r.concurrency <= 2 and "warmed: trtllm-bench throughput sends its --warmup" in r.notes), r.id
    c = cal.calibration()
    assert c.warmup_s > 0
    cold0 = dataclasses.replace(c, warmup_s=0.0)
    w = next(r for r in warmed if r.metric == "output_tokens_per_s_per_gpu" and r.num_prompts)
    assert answer(w, c, memo=False)[w.metric] == answer(w, cold0, memo=False)[w.metric]
    cold = next(r for r in rows if r.metric == "ttft_s" and r.num_prompts and not r.warmed
                and r.family == "inferencex")
    share = cold.concurrency / cold.num_prompts
    got, base = answer(cold, c, memo=False)["ttft_s"], answer(cold, cold0, memo=False)["ttft_s"]
    assert got == pytest.approx(base + c.warmup_s * share, rel=0.05)


def test_a_harness_that_runs_the_engine_in_its_own_process_pays_no_client_latency():
    """`client` = in-process (scripts/apply_client.py): the harness drives the engine in its own process on token ids
    (vLLM's benchmark_latency / benchmark_throughput, LMDeploy's profile_generation / profile_throughput,
    trtllm-bench, gpt-fast's generate.py), so the calibrated per-request time outside the engine's steps, fitted on
    HTTP clients' runs, is not in its figures: its answer is the answer at no request latency, and an HTTP row's is
    not. LMDeploy's one request of a 1-token prompt on Llama-2-70B TP4 A100 (FTL 31 ms measured) was predicted at
    209 ms with the latency and a cold start its warm-up had already paid; 29 ms now."""
    import dataclasses

    from chalk.analyses.fidelity.validate import IN_PROCESS, answer, client_latency_applies

    rows = load_rows()
    inproc = [r for r in rows if r.client == IN_PROCESS]
    assert {r.family for r in inproc} >= {"amd", "internlm", "trtllm-docs", "pytorch", "dstack"}
    assert all("; client: in-process (" in r.notes for r in inproc)
    assert not any(r.client == IN_PROCESS for r in rows if "bench_one_batch_server" in r.notes)
    c = cal.calibration()
    assert c.request_latency_s > 0
    none = dataclasses.replace(c, request_latency_s=0.0)
    r = next(r for r in inproc if r.id == "lmdeploy-a100-l2-70b-tp4-b1-i1-o128-ttft")
    assert not client_latency_applies(r) and r.warmed
    assert answer(r, c, memo=False)["ttft_s"] == answer(r, none, memo=False)["ttft_s"]
    assert answer(r, c, memo=False)["ttft_s"] == pytest.approx(r.measured, rel=0.15)
    http = next(r for r in rows if r.metric == "ttft_s" and r.family == "nvidia-nim" and r.concurrency == 1)
    assert client_latency_applies(http)
    assert answer(http, c, memo=False)["ttft_s"] == pytest.approx(
        answer(http, none, memo=False)["ttft_s"] + c.request_latency_s, rel=1e-6)


def test_an_unknown_client_is_refused():
    from chalk.analyses.fidelity.validate import parse_rows
    from chalk.errors import SpecError

    from chalk.specs.catalog import package_path

    text = package_path("validation", "validation.csv").read_text()
    head, first = text.splitlines()[:2]
    assert head.endswith(",client")
    bad = head + "\n" + first.rsplit(",", 1)[0] + ",browser\n"
    with pytest.raises(SpecError, match="client 'browser'"):
        parse_rows(bad)
