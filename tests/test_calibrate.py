"""The cross-validation machinery on hand-made and small real cases (seconds): leave-one-family-out folds, family
weights, weighted quantiles, the range and its coverage, and the kept answers equal to plain predictions."""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chalk.analyses.fidelity import calibrate as C
from chalk.analyses.fidelity import fit_memo as M
from chalk.analyses.fidelity import work_memo as W
from chalk.analyses.step.calibration import CALIBRATION
from chalk.analyses.fidelity.validate import family_of_group, load_rows, predict


def _rows(families, metrics=None, measured=None):
    metrics = metrics or ["output_tokens_per_s_per_gpu"] * len(families)
    measured = measured or [1.0] * len(families)
    return [SimpleNamespace(family=f, metric=m, measured=v, id=f"r{i}")
            for i, (f, m, v) in enumerate(zip(families, metrics, measured))]


def test_family_folds_are_disjoint_and_cover_every_row():
    rows = load_rows()
    folds = C.family_folds(rows)
    stack = np.array(list(folds.values()))
    assert stack.sum(axis=0).tolist() == [1] * len(rows)  # each row held out exactly once
    assert list(folds) == sorted(folds) and len(folds) >= 5
    for f, m in folds.items():
        assert {rows[i].family for i in np.flatnonzero(m)} == {f}


def test_family_of_group_is_the_first_word():
    assert family_of_group("inferencex-2026q1") == "inferencex"
    assert family_of_group("trtllm-perf-overview-03e27c7") == "trtllm"
    assert family_of_group("mlperf-v5.0") == "mlperf"


def test_family_weights_sum_to_one_per_family():
    rows = _rows(["a", "a", "b", "c", "c", "c"])
    w = C.family_weights(rows)
    assert w.tolist() == pytest.approx([0.5, 0.5, 1.0, 1 / 3, 1 / 3, 1 / 3])
    mask = np.array([True, False, True, True, True, False])
    w = C.family_weights(rows, mask)
    assert w.tolist() == pytest.approx([1.0, 0.0, 1.0, 0.5, 0.5, 0.0])
    on = C.family_weights(load_rows())
    fam = np.array([r.family for r in load_rows()])
    for f in set(fam):
        assert on[fam == f].sum() == pytest.approx(1.0)


def test_weighted_quantile_balances_families():
    # three rows of one family at 0, one row of another at 1: unweighted median 0; families equal: the item
    # midpoints sit at 1/12, 3/12, 5/12 and 9/12 of the weight, so the median is 1/4 of the way from 0 to 1
    assert C.weighted_quantile([0, 0, 0, 1], [1 / 3, 1 / 3, 1 / 3, 1], 0.5) == pytest.approx(0.25)
    assert C.weighted_quantile([0, 0, 0, 1], [1, 1, 1, 1], 0.5) == 0.0
    assert C.weighted_quantile([math.nan, 2.0], [1, 1], 0.5) == 2.0
    assert C.weighted_quantile([math.nan], [1], 0.5) is None


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-5, 5, allow_nan=False), min_size=1, max_size=40))
def test_weighted_median_with_equal_weights_is_numpys(x):
    assert C.weighted_quantile(x, np.ones(len(x)), 0.5) == pytest.approx(float(np.median(x)), abs=1e-12)


def test_objective_with_equal_weights_is_the_plain_one():
    le = np.array([0.1, -0.2, math.nan, 0.05, 2.0])
    a = np.array([0.1, 0.2, math.log(3), 0.05, 2.0])
    plain = float(np.median(a) + 0.5 * np.mean(np.minimum(a, math.log(3))))
    assert C.objective(le) == pytest.approx(plain)
    assert C.objective(le, np.ones(5)) == pytest.approx(plain)


def test_speed_residuals_read_as_measured_over_predicted_speed():
    rows = _rows(["a", "a"], ["output_tokens_per_s_per_gpu", "tpot_s"], [110.0, 0.010])
    r = C.speed_residuals(rows, np.array([100.0, 0.011]))
    # measured 10% faster than predicted in both: more tokens per second, a shorter time per token
    assert r == pytest.approx([math.log(1.1), math.log(1.1)])


def test_range_coverage_on_a_hand_made_case():
    resid = np.array([-0.5, 0.0, 0.1, 0.3, math.nan])
    assert C.range_coverage(resid, -0.2, 0.2, np.ones(5)) == pytest.approx(0.5)
    # family weights: the lone row of family b (inside) counts as much as the three of family a (one inside)
    w = np.array([1 / 3, 1 / 3, 1 / 3, 1.0, 0.0])
    assert C.range_coverage(resid, -0.2, 0.35, w) == pytest.approx((2 / 3 + 1) / 2)
    # per-row ranges
    assert C.range_coverage(resid, np.array([-1, -1, 0.2, 0.2, 0]), 1.0, np.ones(5)) == pytest.approx(0.75)


def test_cv_range_sizes_each_family_on_the_others():
    rows = _rows(["a", "a", "b", "b", "c", "c"])
    resid = np.array([-0.4, -0.2, 0.0, 0.1, 0.3, 0.5])
    held = np.ones(6, dtype=bool)
    out = C.cv_range(resid, rows, held, tails=(0.10,))
    w = C.family_weights(rows)
    assert out["low"] == pytest.approx(C.weighted_quantile(resid, w, 0.1))
    assert out["high"] == pytest.approx(C.weighted_quantile(resid, w, 0.9))
    for f, (lo, hi) in out["per_family"].items():
        others = np.array([r.family != f for r in rows])
        assert lo == pytest.approx(C.weighted_quantile(resid[others], np.ones(4), 0.1))
        assert hi == pytest.approx(C.weighted_quantile(resid[others], np.ones(4), 0.9))
    # family a sized on b and c: [0.015, 0.485] holds neither -0.4 nor -0.2; b on a and c: [-0.37, 0.43] holds
    # both; c on a and b: [-0.37, 0.085] holds neither
    inside = {f: [lo <= x <= hi for x, r in zip(resid, rows) if r.family == f]
              for f, (lo, hi) in out["per_family"].items()}
    assert inside == {"a": [False, False], "b": [True, True], "c": [False, False]}
    assert out["coverage"] == pytest.approx(1 / 3) == out["coverage_at_10_90"]


def test_cv_range_keeps_the_narrowest_range_that_reaches_the_target():
    rows = _rows(["a", "a", "b", "b", "c", "c"])
    resid = np.array([-0.4, -0.2, 0.0, 0.1, 0.3, 0.5])
    held = np.ones(6, dtype=bool)
    # at tail 0.2 family b is sized on a and c: [-0.34, 0.44] holds it; a and c stay outside: 1/3 reached at once
    out = C.cv_range(resid, rows, held, tails=(0.2, 0.1, 0.05), target=0.3)
    assert out["tail"] == 0.2 and out["coverage"] == pytest.approx(1 / 3)
    assert out["per_family"]["b"] == pytest.approx((-0.34, 0.44))
    # a target no tail reaches: the widest range searched
    out = C.cv_range(resid, rows, held, tails=(0.2, 0.1, 0.05), target=0.9)
    assert out["tail"] == 0.05
    # six families of one row each, residuals 0..5: each judged on the other five
    rows = _rows(list("abcdef"))
    out = C.cv_range(np.arange(6.0), rows, np.ones(6, dtype=bool), tails=(0.1, 0.05), target=0.5)
    assert out["tail"] == 0.1 and out["coverage"] == pytest.approx(4 / 6)  # the lowest and highest fall outside


def test_tracked_calibration_records_what_is_read():
    t = M.tracked(CALIBRATION)
    fields, v = M.answer_tracked(lambda c: c.compute * c.vendor_factors("AMD")[0], CALIBRATION)
    assert set(fields) == {"compute", "amd_compute", "amd_memory"}
    assert v == CALIBRATION.compute * CALIBRATION.amd_compute
    assert t == CALIBRATION and CALIBRATION == t and hash(t) == hash(CALIBRATION)
    assert t != dataclasses.replace(CALIBRATION, compute=0.1)
    # a copy (an engine profile's scheduler cap over the fitted one) reads nothing by itself: the copy is tracked
    # too, and what is read from it counts, a replaced field as well as a copied one
    fields, copy = M.answer_tracked(lambda c: dataclasses.replace(c, compute=0.5), CALIBRATION)
    assert fields == () and isinstance(copy, M._Tracked) and copy == dataclasses.replace(CALIBRATION, compute=0.5)
    fields, v = M.answer_tracked(lambda c: dataclasses.replace(c, compute=0.5).memory * c.overlap, CALIBRATION)
    assert set(fields) == {"memory", "overlap"} and v == CALIBRATION.memory * CALIBRATION.overlap
    fields, _ = M.answer_tracked(lambda c: dataclasses.replace(c, compute=0.5).compute, CALIBRATION)
    assert set(fields) == {"compute"}
    fields, _ = M.answer_tracked(lambda c: hash(c), CALIBRATION)
    assert set(fields) >= {"memory", "overlap", "label"}  # a hash reads every field


def _sample():
    """One row of each kind of point, on a dense and an MoE model, NVIDIA and AMD."""
    rows, seen = [], set()
    for r in load_rows():
        from chalk.specs.catalog import load_model

        key = (r.kind, r.metric, load_model(r.model).is_moe, r.hardware.startswith("mi"))
        if key not in seen and r.metric in C.FITTED_METRICS:
            seen.add(key)
            rows.append(r)
    return tuple(rows[:10])


CALS = (CALIBRATION, dataclasses.replace(CALIBRATION, compute=0.5), dataclasses.replace(CALIBRATION, amd_compute=0.9),
        dataclasses.replace(CALIBRATION, compute=0.5, amd_compute=0.9, max_seqs_per_scheduler=2048),
        dataclasses.replace(CALIBRATION, eplb_min_ep=8.0, overlap=0.0))


def _plain(rows, cals):
    out = np.full((len(cals), len(rows)), math.nan)
    for k, c in enumerate(cals):
        for i, r in enumerate(rows):
            try:
                out[k, i] = predict(r, c)
            except Exception:  # noqa: BLE001 - an unanswered row is NaN in both
                pass
    return out


def test_kept_answers_equal_plain_predictions():
    rows = _sample()
    assert {r.kind for r in rows} >= {"search", "fixed"}
    a = M.Answers(rows)
    got = a.run(CALS)
    ref = _plain(rows, CALS)
    assert np.array_equal(got, ref, equal_nan=True)  # bit for bit
    # the AMD factors are read by the AMD rows only: a new AMD memory factor re-answers those and nothing else
    n = a.worked
    amd = sum(r.hardware.startswith("mi") for r in rows)
    assert amd >= 1
    again = a.run([dataclasses.replace(CALIBRATION, amd_memory=0.55)])
    assert a.worked - n == amd
    assert np.array_equal(again, _plain(rows, [dataclasses.replace(CALIBRATION, amd_memory=0.55)]), equal_nan=True)


def test_steps_kept_by_the_fields_they_read_equal_plain_predictions():
    """Calibrations that move only what no stage step reads (the KV reserve, the request latency, the scheduler cap
    where a fixed deployment's concurrency stays below it) reuse the kept steps; every answer is the plain one."""
    rows = _sample()
    cals = [dataclasses.replace(CALIBRATION, kv_reserve_output_fraction=f, request_latency_s=lat,
                                max_seqs_per_scheduler=n)
            for f, lat, n in ((0.0, 0.0, 512), (0.5, 0.0, 512), (1.0, 0.1, 512), (0.5, 0.2, 2048), (0.5, 0.0, 256))]
    n0 = W.STEPS_REUSED[0]
    got = M.Answers(rows).run(cals, ttft=True)
    assert W.STEPS_REUSED[0] - n0 >= len(rows)  # the memo is exercised
    assert np.array_equal(got, _plain(rows, cals), equal_nan=True)  # bit for bit


def test_fields_an_answer_sets_itself_are_not_its_reads():
    """An answer on an engine profile runs the engine's scheduler cap and per-step overhead: its serving code
    replaces the fitted cap (`fit_memo.own_replaced_fields` marks the field the copy's own), and the step model reads
    the fitted fixed overhead only where no engine gives one. So a fit moving the fitted cap or fixed overhead
    re-answers only the rows without an engine profile, and every answer is still the plain one, bit for bit."""
    from chalk.analyses.fidelity.validate import point, row_engine

    extra, kinds = [], set()
    for r in load_rows():  # a fixed deployment and a search without an engine profile, beside _sample's
        if r.kind in ("fixed", "search") and r.metric in C.FITTED_METRICS and row_engine(r) is None \
                and r.kind not in kinds:
            kinds.add(r.kind)
            extra.append(r)
    rows = _sample() + tuple(extra)
    a = M.Answers(rows)
    a.run([CALIBRATION])
    cals = [dataclasses.replace(CALIBRATION, max_seqs_per_scheduler=CALIBRATION.max_seqs_per_scheduler // 2),
            dataclasses.replace(CALIBRATION, overhead_fixed_s=CALIBRATION.overhead_fixed_s * 2)]
    assert np.array_equal(a.run(cals), _plain(rows, cals), equal_nan=True)
    engine, plain = 0, 0
    for p in a.points:
        rep = rows[a.groups[p][0]]
        if point(rep)[0] not in ("fixed", "search"):
            continue
        read = set().union(*a.kept[p].tables)
        if row_engine(rep) is None:  # the fitted cap and overhead are this answer's: read, and re-answered
            assert {"max_seqs_per_scheduler", "overhead_fixed_s"} <= read and len(a.kept[p].tables[
                next(iter(a.kept[p].tables))]) == 3
            plain += 1
        else:
            assert not {"max_seqs_per_scheduler", "overhead_fixed_s"} & read
            assert sum(len(t) for t in a.kept[p].tables.values()) == 1  # one answer for all three calibrations
            engine += 1
    assert engine >= 3 and plain == 2


def test_sharded_answers_equal_one_process():
    rows = _sample()
    one = M.Answers(rows).run(CALS[:3])
    pool = M.answers(rows, workers=2)
    try:
        assert np.array_equal(pool.run(CALS[:3]), one, equal_nan=True)
    finally:
        pool.close()


def _answers_in_a_pool_worker(n):
    rows = _sample()[:n]
    a = M.answers(rows)  # the default: the usable CPUs, where the process may start workers
    try:
        return type(a).__name__, a.run([CALIBRATION]).tolist()
    finally:
        a.close()


def test_answers_nested_in_a_daemonic_worker_stay_in_it():
    """Inside a multiprocessing pool's worker (daemonic: it may not start processes) the rows are answered in that
    process, with the same predictions, rather than failing to fork workers of their own."""
    import multiprocessing

    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork on this platform")
    with multiprocessing.get_context("fork").Pool(1) as pool:
        kind, got = pool.map(_answers_in_a_pool_worker, [3])[0]
    assert kind == "Answers"
    assert np.array_equal(np.array(got), M.Answers(_sample()[:3]).run([CALIBRATION]), equal_nan=True)


GRID = {"compute": (0.55, 0.65), "amd_compute": (0.7, 0.9), "overhead_fixed_s": (0.5e-3, 1e-3)}


def _reference_fit(rows, mask, start, grid):
    """The plain coordinate descent (one candidate at a time, plain predictions), families weighed equally."""
    fitted = np.array([r.metric in C.FITTED_METRICS for r in rows]) & mask
    w = C.family_weights(rows, fitted)[fitted]
    meas = np.array([r.measured for r in rows])

    def obj(cal):
        return C.objective(np.log(_plain(rows, [cal])[0] / meas)[fitted], w)

    best, best_obj = start, obj(start)
    for name, values in grid.items():
        for v in values:
            if getattr(best, name) != v:
                cand = dataclasses.replace(best, **{name: v})
                o = obj(cand)
                if o < best_obj - 1e-9:
                    best, best_obj = cand, o
    return best, best_obj


def test_lockstep_fits_equal_plain_coordinate_descent():
    rows = _sample()
    fams = sorted({r.family for r in rows})
    masks = [np.array([r.family != f for r in rows]) for f in fams]
    got = C.fit_many(masks, CALIBRATION, rounds=1, grid=GRID, rows=rows)
    for m, (cal, o) in zip(masks, got):
        ref, ref_obj = _reference_fit(rows, m, CALIBRATION, GRID)
        assert {k: getattr(cal, k) for k in GRID} == {k: getattr(ref, k) for k in GRID}
        assert o == pytest.approx(ref_obj, abs=1e-12)


def test_cross_validation_report_is_consistent():
    rows = _sample()
    d = C.cross_validate(rounds=1, grid={"compute": (0.55, 0.65)}, rows=rows, workers=1)
    fams = {r.family for r in rows}
    assert set(d["families"]) == fams and d["n_families"] == len(fams)
    assert sum(v["n"] for v in d["families"].values()) == d["n"]
    held = [o for o in d["rows"] if o["metric"] in C.FITTED_METRICS and o["error"] is not None]
    # the headline is the family-balanced median of the held-out errors
    w = C.family_weights([SimpleNamespace(family=o["family"]) for o in held])
    assert d["cv_median_abs_error"] == pytest.approx(C.weighted_quantile([abs(o["error"]) for o in held], w, 0.5))
    # coverage: each row against the range sized on the other families, families weighed equally
    inside = [o["range"][0] <= o["speed_residual"] <= o["range"][1] for o in held]
    assert d["cv_range_coverage"] == pytest.approx(float(np.sum(w * inside) / np.sum(w)))
    for o in held:
        assert o["error"] == pytest.approx(o["predicted"] / o["measured"] - 1)


def test_the_two_ttft_parameters_are_told_apart_by_means_and_medians():
    """`_fit_latencies` reads a candidate's TTFT as the answer at neither parameter plus the request latency plus
    the cold-start delay times the row's first-wave share (a median: only where the first wave is most of the run).
    Measured values made that way from the rows' own shares are fitted back exactly, which the means alone could
    not do where a latency and a delay trade off; first_wave_share is a whole run's first wave, 0 in steady state
    and for a run its harness warmed up first (`warmed`)."""
    from chalk.analyses.fidelity.validate import TTFT_METRICS

    rows = load_rows()
    share = np.array([C.first_wave_share(r) for r in rows])
    assert share.max() == 1.0 and (share == 0).any() and ((share > 0) & (share < 0.5)).any()
    for r, s in zip(rows, share):
        whole = r.num_prompts and r.concurrency and not r.warmed
        assert s == (min(r.concurrency, r.num_prompts) / r.num_prompts if whole else 0.0)
    pred = np.array([0.05 + 0.01 * (i % 7) for i in range(len(rows))])
    lat, warm = C.REQUEST_LATENCY_GRID[4], C.WARMUP_GRID[5]
    eff = np.array([s if r.metric == "ttft_s" else float(s > 0.5) for r, s in zip(rows, share)])
    fake = [dataclasses.replace(r, measured=float(p + lat + warm * e)) if r.metric in TTFT_METRICS else r
            for r, p, e in zip(rows, pred, eff)]

    class Pred:
        def many(self, cals, ttft=False, need=None):
            assert ttft and all(c.request_latency_s == 0 and c.warmup_s == 0 for c in cals)
            return [pred for _ in cals]

    got = C._fit_latencies([CALIBRATION], [np.ones(len(rows), dtype=bool)], tuple(fake), Pred())[0]
    assert (got.request_latency_s, got.warmup_s) == (lat, warm)
