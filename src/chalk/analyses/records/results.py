"""Typed answers for the analyses that return records of named quantities (serving, layouts).

A result is a dict (so JSON, `r["key"]` and the faces keep working) with a name, attribute access to its fields
(`r.tpot_s`) and `.to_dict()`, like the record results (`RooflineResult`, `SimulationResult`).
"""

from __future__ import annotations

import numpy as np


class Result(dict):
    """A named record of quantities in SI units; keys are documented on each subclass."""

    def __getattr__(self, name: str):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no field {name!r}") from None

    def to_dict(self) -> dict:
        """A plain, JSON-ready dict (non-finite floats become None)."""
        return jsonable(dict(self))


class ServingResult(Result):
    """`chalk.throughput`: the best (or the fixed) deployment.

    Keys: output_tokens_per_s_per_gpu, input_tokens_per_s_per_gpu, user_tokens_per_s, ttft_s, tpot_s (s),
    concurrency, gpus, parallelism {tp, ep, pp, dp, attn_dp}, layout, mode ('aggregated' | 'disaggregated' |
    'fixed'), batch_per_replica, cost_per_mtok_output_usd (all GPU time), cost_per_mtok_output_decode_share_usd,
    cost_per_mtok_input_prefill_share_usd, range, step, modes, speculative, notes; fixed mode adds ttft_p99_s,
    tpot_p99_s, replicas, concurrency_per_replica, decoding_per_replica.
    """


class LayoutReport(Result):
    """`chalk.layout`: feasible layouts with memory per GPU, the MoE rack layout and the pipeline analysis."""


def _frame(records: list[dict]):
    """A pandas DataFrame of `records`; pandas is imported only here (an optional extra)."""
    try:
        import pandas as pd
    except ImportError:
        from chalk.errors import MissingExtraError

        raise MissingExtraError("to_frame() needs pandas: pip install 'chalk[frames]' (or pandas)") from None
    return pd.DataFrame(records)


class ValidationReport(Result):
    """`chalk.validate`: every validation row predicted (`rows`), the headline median / p90 |error| over the
    throughput and TPOT rows, residual percentiles and `groups` (dense, moe, fixed, ttft, ...).
    `.to_frame()`: one row per validation row."""

    def to_frame(self):
        return _frame(self["rows"])


class PricingReport(Result):
    """`chalk.pricing`: each price sheet read back into hardware facts (`sheets`) and the assumptions used.
    `.to_frame()`: one row per sheet."""

    def to_frame(self):
        return _frame([{k: v for k, v in s.items() if not isinstance(v, (dict, list))} for s in self["sheets"]])


class PlanResult(Result):
    """`chalk.plan`: the cheapest deployment per candidate chip and serving mode, cheapest first.

    Keys: options (each: hardware, chip, system, mode, gpus, replicas, layout, parallelism, prefill,
    concurrency_per_replica, max_concurrency_per_replica, capacity_per_replica, headroom, precision, kv_precision,
    speculative, usd_per_gpu_hour, usd_per_hour, usd_per_day, usd_per_mtok_output, predicted, simulated {ttft_p99_s,
    tpot_p99_s, ...}, targets, meets_targets, bumps, why, launch {engine: text}, diurnal), unavailable (hardware,
    mode, why), demand, targets, input_len, output_len, engine, efficiency, notes, curves.
    """

    FRAME_KEYS = ("hardware", "mode", "engine", "engine_version", "precision", "layout", "gpus", "replicas",
                  "concurrency_per_replica", "usd_per_gpu_hour", "usd_per_hour", "usd_per_day", "usd_per_mtok_output",
                  "headroom", "meets_targets", "why")

    def to_frame(self):
        """One row per option (the scalar columns, the price's source and date, and the simulated p99s); pandas
        is imported only here."""
        rows = [{**{k: o.get(k) for k in self.FRAME_KEYS},
                 "price_source": (o.get("price") or {}).get("source"), "price_date": (o.get("price") or {}).get("date"),
                 "price_given": (o.get("price") or {}).get("given"),
                 "simulated_ttft_p99_s": o["simulated"]["ttft_p99_s"],
                 "simulated_tpot_p99_s": o["simulated"]["tpot_p99_s"]} for o in self["options"]]
        df = _frame(rows)
        df.attrs.update({"model": self["model"], "demand": self["demand"], "targets": self["targets"]})
        return df


def jsonable(v):
    """A value JSON can hold: tuples and arrays become lists, numpy scalars plain numbers, non-finite floats None."""
    if isinstance(v, tuple):
        return list(v)
    if isinstance(v, np.ndarray):
        if v.ndim == 0:
            return jsonable(v.item())
        return [jsonable(x) for x in v.tolist()]
    if isinstance(v, (np.floating, float)):
        f = float(v)
        return None if not np.isfinite(f) else f
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.bool_,)):
        return bool(v)
    if isinstance(v, list):
        return [jsonable(x) for x in v]
    if isinstance(v, dict):
        return {k: jsonable(x) for k, x in v.items()}
    return v
