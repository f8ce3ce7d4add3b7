"""A grid of questions (a column of batches by a row of contexts) answers what each question asked alone answers.

issue 28 item 5: the array path of the step model keeps a batch column's quantities one column wide, interpolates the
kernel grids as a column by a row (`kernels.interpolate_outer`) and views the parts that vary along fewer dimensions
over the grid (`step_model._over`). The reference is the step model asked one point at a time (numbers: the kernel
grids looked up with `bisect` and `math`, no numpy), which shares none of that code.
"""

from __future__ import annotations

import numpy as np
import pytest

from chalk.analyses.step.estimate import Session
from chalk.analyses.step.parallel import stage_step

#: more batches than the kernel grids have nodes along batch (the column-by-row path takes no fewer), past their edges
B = np.concatenate([[0.5], np.geomspace(1.0, 3000.0, 30), [9e4]])[:, None]
L = np.array([[1.0, 100.0, 2048.0, 9000.0, 32768.0, 131072.0, 4e6]])
#: (model, hardware, options): dense GQA on measured tables, MLA + MoE under attention-DP (the two-micro-batch
#: overlap), MoE on the curve family (a chip without tables), two pipeline stages (the bubble), the ideal roofline
CASES = (("llama-3.1-70b", "h100-sxm", {"layout": "tp=4"}),
         ("deepseek-v3", "b200", {"layout": "tp=1,ep=8,attn_dp=8"}),
         ("qwen3-30b-a3b", "mi300x", {"layout": "tp=2,ep=2"}),
         ("llama-3.1-8b", "h200", {"layout": "tp=1,pp=2"}),
         ("mixtral-8x7b", "h100-sxm", {"layout": "tp=2", "ideal": True}))
FIELDS = ("stage_time_s", "gemm_time_s", "attention_time_s", "allreduce_time_s", "alltoall_time_s",
          "pp_transfer_time_s", "comm_time_s", "overhead_s", "weight_read_bytes", "kv_read_bytes", "flops")


def _close(grid, points, what):
    grid, points = np.asarray(grid, dtype=float), np.asarray(points, dtype=float)
    assert grid.shape == points.shape, what
    assert np.all(np.abs(grid - points) <= 1e-12 * np.abs(points)), what


@pytest.mark.parametrize("model,hardware,opts", CASES)
def test_a_grid_answers_what_each_point_answers(model, hardware, opts):
    s = Session(model, hardware, **opts)
    r = s.estimate(B, L)
    one = [[s.estimate(float(b), float(x)) for x in L[0]] for b in B[:, 0]]
    for f in ("step_time_s", "tokens_per_s", "user_tokens_per_s"):
        _close(getattr(r, f), [[getattr(o, f) for o in row] for row in one], f)


@pytest.mark.parametrize("model,hardware,opts", CASES)
def test_every_part_of_a_grid_step_equals_the_point_by_point_step(model, hardware, opts):
    """Every field of `stage_step` (the one step model) over the grid, against the same step asked point by point:
    times, bytes and FLOPs to 1e-12, what binds and the overlap mode exactly, each op's time too."""
    s = Session(model, hardware, **opts)
    from chalk.analyses.step.estimate import _setup, calibration, make_layout

    cal = calibration(opts.get("ideal", False), s.system.chip)
    su = _setup(s.model, s.system, cal, None, "auto", None)
    lay = make_layout(s.model, opts["layout"])
    args = (su.costs, s.system, lay.tp, lay.attn_dp, lay.pp, lay.ep)
    grid = stage_step(*args, B, 0.0, L, 1.0, cal)
    for i, b in enumerate(B[:, 0]):
        for j, x in enumerate(L[0]):
            p = stage_step(*args, float(b), 0.0, float(x), 1.0, cal)
            for f in FIELDS:
                _close(np.broadcast_to(grid[f], (len(B), L.shape[1]))[i, j], p[f], f)
            assert str(np.broadcast_to(grid["gemm_bound"], (len(B), L.shape[1]))[i, j]) == str(p["gemm_bound"])
            assert str(np.broadcast_to(grid["overlap"], (len(B), L.shape[1]))[i, j]) == str(p["overlap"])
            for name, o in p["ops"].items():
                g = grid["ops"][name]
                _close(np.broadcast_to(g.time_s, (len(B), L.shape[1]))[i, j], o.time_s, name)
                assert str(np.broadcast_to(g.bound, (len(B), L.shape[1]))[i, j]) == str(o.bound), name


def test_grid_parts_are_read_only_views_of_the_grid_shape():
    """The parts of a grid step that vary along fewer dimensions come back over the whole grid (as the step) as
    read-only views: they cannot be changed by mistake, and cost no memory per point."""
    s = Session("llama-3.1-70b", "h100-sxm", layout="tp=4")
    from chalk.analyses.step.estimate import _setup, calibration, make_layout

    cal = calibration(False, s.system.chip)
    su = _setup(s.model, s.system, cal, None, "auto", None)
    lay = make_layout(s.model, "tp=4")
    g = stage_step(su.costs, s.system, lay.tp, lay.attn_dp, lay.pp, lay.ep, B, 0.0, L, 1.0, cal)
    shape = (len(B), L.shape[1])
    for f in FIELDS + ("gemm_bound", "overlap"):
        assert np.shape(g[f]) == shape, f
    assert not g["gemm_time_s"].flags.writeable and g["gemm_time_s"].base is not None
    with pytest.raises(ValueError):
        g["gemm_time_s"][0, 0] = 1.0


def test_a_public_session_keeps_no_grid_answer():
    """`chalk.Session` keeps an answer with its energy so a repeated question gets the same object; a grid's answer
    (its energy works out every deferred field over the grid: a few hundred bytes per point) is never asked again
    as the same object and is not kept: a sweep in blocks holds one block's arrays at a time, not every block's."""
    import chalk

    s = chalk.Session("llama-3.1-8b", "h100-sxm")
    for r0 in range(0, 32, 8):
        s.estimate(B[r0:r0 + 8], L)
    assert not s.__dict__.get("_with_energy")
    one = s.estimate(8, 1024)
    assert s.estimate(8, 1024) is one and len(s.__dict__["_with_energy"]) == 1


def test_bound_names_over_a_grid_are_numpys_string_where():
    """`_bound_names` (what binds each point of a grid op, copied as rows of code units) is `np.where(compute,
    'compute', 'memory')`: the same '<U7' array, for any shape."""
    from chalk.analyses.step.step_model import _bound_names

    rng = np.random.default_rng(5)
    for shape in ((7,), (3, 1), (2, 4, 5), (0,), (1, 0)):
        c = rng.random(shape) > 0.5
        got, ref = _bound_names(c), np.where(c, "compute", "memory")
        assert got.dtype == ref.dtype and got.shape == ref.shape and np.array_equal(got, ref)
        assert all(str(x) in ("compute", "memory") for x in got.ravel())
