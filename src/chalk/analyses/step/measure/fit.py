"""`chalk measure`, stage 3: the efficiency fit (see `chalk.analyses.step.measure`).

`fit_efficiency` fits the calibrated roofline

    t = max(F / (P * e_c), B / (W * e_m)) + overhead

where F and B come from chalk's own `roofline.step(..., efficiency=IDEAL)` on the measured
system and P, W are the measured ceilings, by minimising the mean squared log error over a
training subset (`split_held_out`: alternate cases in (batch, context) order within each phase;
the rest are held out). The held-out cases are then predicted by `roofline.step` with the fitted
`Efficiency` (`_roofline_cases`).

This is the whole-step roofline of the one chip measured: the lecture's aggregate bound with one chip
(`estimate --aggregate`), not the step model's op-by-op time. It fits the chip's global fractions of
peak (written to its YAML's `efficiency:` block), which the step model then uses on that chip in place
of the kernel tables (`calibration.calibration(chip=...)`); `chalk measure` says so in its output.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from chalk.analyses.step import roofline as RL
from chalk.analyses.step.calibration import IDEAL, Efficiency
from chalk.equations import roofline as R
from chalk.errors import InputError
from chalk.specs.hardware import System
from chalk.specs.model import ModelSpec

#: What a `chalk measure` prediction is, said wherever one is shown.
PREDICTED_BY = ("the whole-step roofline of this one chip at the fitted efficiencies (the aggregate bound on one "
                "chip, as estimate --aggregate computes it; not the step model's op-by-op time)")

if TYPE_CHECKING:
    from chalk.analyses.step.measure.steps import StepTiming


# =========================================================================== 3. the fit
@dataclass(frozen=True)
class FitResult:
    """Global efficiencies of the calibrated roofline and the training loss (mean squared log error)."""

    compute: float
    memory: float
    overhead_s: float
    overhead_prefill_s: float
    msle_train: float
    n_train: int
    separate_overheads: bool

    def efficiency(self, phase: str = "decode", label: str = "measured") -> Efficiency:
        o = self.overhead_prefill_s if phase == "prefill" else self.overhead_s
        return Efficiency(compute=self.compute, memory=self.memory, overhead_s=o, label=label)


def _grid_losses(tc, tm, y, ec, em, o):
    """Sum over cases of squared log error for every (ec, em, o): shape (len(ec), len(em), len(o))."""
    t = R.step_time_s(tc[None, None, None, :] / ec[:, None, None, None],
                      tm[None, None, None, :] / em[None, :, None, None], o[None, None, :, None])
    r = np.log(t) - np.log(y)[None, None, None, :]
    return np.sum(r * r, axis=-1)


def fit_efficiency(compute_s, memory_s, measured_s, phases=None, *, separate_overheads: bool = False,
                   rounds: int = 12) -> FitResult:
    """Fit e_c, e_m in (0, 1] and overhead >= 0 (one, or one per phase) to measured step times.

    `compute_s`, `memory_s`: the ideal roofline times (efficiency 1) of each case; the model is
    t = max(compute_s / e_c, memory_s / e_m) + overhead. Minimises the mean squared log error by a
    dense grid search (log-spaced e_c, e_m in [1e-4, 1], overhead in [0, min measured]) zoomed in
    `rounds` times around the best point. The loss separates over phases for fixed (e_c, e_m), so
    per-phase overheads cost no more than one. Ties (an efficiency the training cases do not
    constrain) resolve to the highest efficiency and the smallest overhead. Pure numpy, deterministic.
    """
    tc = np.asarray(compute_s, dtype=float).ravel()
    tm = np.asarray(memory_s, dtype=float).ravel()
    y = np.asarray(measured_s, dtype=float).ravel()
    if not (tc.shape == tm.shape == y.shape) or y.size < 3:
        raise InputError("fit needs at least three cases with compute, memory and measured times")
    if np.any(~np.isfinite(y)) or np.any(y <= 0) or np.any(tc < 0) or np.any(tm < 0):
        raise InputError("fit needs positive finite measured times and non-negative roofline times")
    ph = np.asarray(phases if phases is not None else ["decode"] * y.size).ravel()
    groups = [ph == g for g in (("decode", "prefill") if separate_overheads else ())] or [np.ones(y.size, bool)]
    groups = [g for g in groups if g.any()]

    lec, hec = np.log(1e-4), 0.0
    lem, hem = np.log(1e-4), 0.0
    o_rng = [(0.0, float(np.min(y[g]))) for g in groups]
    n_e, n_o = 41, 41
    best = None
    for _ in range(rounds):
        ec = np.exp(np.linspace(hec, lec, n_e))  # descending: argmin's first tie is the highest efficiency
        em = np.exp(np.linspace(hem, lem, n_e))
        total = np.zeros((n_e, n_e))
        o_grids, o_best_idx = [], []
        for g, (olo, ohi) in zip(groups, o_rng):
            o = np.linspace(olo, ohi, n_o)
            L = _grid_losses(tc[g], tm[g], y[g], ec, em, o)
            idx = np.argmin(L, axis=2)
            total += np.take_along_axis(L, idx[..., None], axis=2)[..., 0]
            o_grids.append(o)
            o_best_idx.append(idx)
        i, j = np.unravel_index(np.argmin(total), total.shape)
        os_ = [og[ib[i, j]] for og, ib in zip(o_grids, o_best_idx)]
        best = (float(ec[i]), float(em[j]), [float(x) for x in os_], float(total[i, j]))
        # zoom: +-2 grid steps around the optimum, clipped to the feasible box
        dec = (hec - lec) / (n_e - 1) * 2
        dem = (hem - lem) / (n_e - 1) * 2
        lec, hec = max(np.log(1e-4), np.log(ec[i]) - dec), min(0.0, np.log(ec[i]) + dec)
        lem, hem = max(np.log(1e-4), np.log(em[j]) - dem), min(0.0, np.log(em[j]) + dem)
        new_rng = []
        for (olo, ohi), ov, g in zip(o_rng, os_, groups):
            step = (ohi - olo) / (n_o - 1) * 2
            new_rng.append((max(0.0, ov - step), min(float(np.min(y[g])), ov + step)))
        o_rng = new_rng
    ec_, em_, os_, loss = best
    od, op = (os_[0], os_[1]) if len(os_) == 2 else (os_[0], os_[0])
    return FitResult(compute=min(1.0, ec_), memory=min(1.0, em_), overhead_s=od, overhead_prefill_s=op,
                     msle_train=loss / y.size, n_train=int(y.size), separate_overheads=separate_overheads)


def split_held_out(decode_grid, prefill_grid) -> tuple[list[bool], list[bool]]:
    """Alternate cases held out, in (batch, context) order within each phase (a checkerboard on a full grid)."""
    def alternate(grid):
        order = sorted(range(len(grid)), key=lambda i: (grid[i][0], grid[i][1], i))
        held = [False] * len(grid)
        for rank, i in enumerate(order):
            held[i] = rank % 2 == 1
        return held

    return alternate(list(decode_grid)), alternate(list(prefill_grid))


def _roofline_cases(spec: ModelSpec, system: System, timings: Sequence[StepTiming], precision: str,
                    efficiency: Callable[[str], Efficiency] | None = None) -> list[RL.RooflineResult]:
    """chalk's whole-step roofline of the one measured chip (the aggregate bound on one chip) for every timed case
    (IDEAL efficiency unless given one per phase)."""
    return [RL.step(spec, system, t.batch, t.context, phase=t.phase, precision=precision, kv_precision=precision,
                    efficiency=efficiency(t.phase) if efficiency else IDEAL) for t in timings]


def predicted_decode_s(result, batches, context: float) -> np.ndarray:
    """Decode step times `chalk measure` predicts for `result` (a `MeasureResult`) at `batches` sequences of
    `context` tokens: its model on its one measured chip at the fitted decode efficiency (`PREDICTED_BY`)."""
    from chalk.specs.model import model_from_config

    model = model_from_config(result.model_config, id=result.model)
    system = System(id=result.chip.id, name=result.chip.name, chip=result.chip, chips=1, kind="chip")
    r = RL.step(model, system, np.asarray(batches, dtype=float), context, precision=result.precision,
                kv_precision=result.precision, efficiency=result.fit.efficiency("decode"))
    return np.asarray(r.step_time_s, dtype=float)
