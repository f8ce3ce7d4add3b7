"""Derived facts of a chip: arithmetic intensity, dense critical batch, HBM drain time."""

from __future__ import annotations

from chalk.equations import roofline as R
from chalk.specs.hardware import Chip
from chalk.specs.precision import bytes_per_element


def chip_facts(chip: Chip, precision: str | None = None) -> dict:
    """The lecture's hardware numbers for one chip at its native (or a given) precision."""
    p = precision or chip.native_precision()
    rate = chip.peak_flops_per_s(p)
    bw = chip.hbm_bandwidth_bytes_per_s
    return {
        "native_precision": p,
        "flops_per_byte": rate / bw,
        "dense_critical_batch": float(R.hardware_ratio(rate, bw, bytes_per_element(p))),
        "hbm_drain_time_s": float(R.hbm_drain_time_s(chip.hbm_bytes, bw)),
        "scaleup_bandwidth_bytes_per_s_one_way": chip.scaleup_bandwidth_bytes_per_s,
    }
