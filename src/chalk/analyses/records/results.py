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
    cost_per_mtok_input_prefill_share_usd, range, step, modes, speculative, notes; fixed mode adds ttft_p50_s,
    ttft_p99_s, tpot_p50_s, tpot_p99_s (the closed form's requests are alike: its p50s are its means), replicas,
    concurrency_per_replica, decoding_per_replica (sequences the engine runs per replica: decoding, and in a replay
    also prefilling; mean_step.decode_sequences counts the decoding ones). Through the API: energy
    (`chalk.analyses.economics.energy.Energy` as a dict: joules_per_token, power_w_per_gpu, power_w_per_fleet,
    kwh_per_day, electricity_usd_per_mtok, electricity_share_of_cost, ...).
    `.to_frame()`: one row, the scalar keys (parallelism and energy flattened); `attrs` hold model and hardware.
    """

    def to_frame(self):
        df = _frame([_flat(self)])
        df.attrs.update({"model": self.get("model"), "hardware": self.get("hardware")})
        return df


class LayoutReport(Result):
    """`chalk.layout`: feasible layouts with memory per GPU, the MoE rack layout and the pipeline analysis.
    `.to_frame()`: one row per layout (its scalar fields)."""

    def to_frame(self):
        df = _frame([_flat(row) for row in self["layouts"]])
        df.attrs.update({"model": self.get("model"), "hardware": self.get("hardware")})
        return df


class Catalog(Result):
    """`chalk.hardware()` (keys: kind 'chips', chips, systems) or `chalk.models()` (kind 'models', models): the
    catalog's entries. `.to_frame()`: one row per chip or model (its scalar fields)."""

    def to_frame(self):
        return _frame([_flat(e) for e in self[self["kind"]]])


class LectureResult(Result):
    """`chalk.lecture()`: `claims`, the lecture's deductions each computed by chalk. `.to_frame()`: one row per
    claim."""

    def to_frame(self):
        return _frame([_flat(c) for c in self["claims"]])


def _flat(d: dict) -> dict:
    """The scalar entries of `d`, with those of its `parallelism` and `energy` dicts as `parallelism_*` and
    `energy_*` columns (lists and other dicts left out)."""
    out = {}
    for k, v in d.items():
        if k in ("parallelism", "energy") and isinstance(v, dict):
            out.update({f"{k}_{q}": x for q, x in v.items() if not isinstance(x, (dict, list, tuple))})
        elif not isinstance(v, (dict, list, tuple, np.ndarray)):
            out[k] = v
    return out


def roofline_frame(r):
    """`RooflineResult.to_frame()`: one row per (batch, context) point of the result (one row for a scalar
    answer); array fields spread over the rows, the layout as its label, energy as `energy_*` columns."""
    skip = {"notes", "range", "layout", "ops", "energy", "speculative", "alternative"}
    shape = np.broadcast(np.asarray(r.batch), np.asarray(r.context)).shape
    n = int(np.prod(shape)) if shape else 1
    cols = {}

    def put(name, v):
        a = np.asarray(v)
        if a.dtype == object and a.ndim == 0:
            cols[name] = [v] * n
        elif a.ndim == 0 or a.shape == shape:
            cols[name] = np.broadcast_to(a, shape).ravel().tolist() if shape else [a.item()]

    for k in r.FIELDS:
        if k not in skip:
            put(k, getattr(r, k))
    cols["layout"] = [(r.layout or {}).get("label")] * n
    cols["alternative_layout"] = [((r.alternative or {}).get("layout") or {}).get("label")] * n
    e = r.energy.to_dict() if hasattr(r.energy, "to_dict") else (r.energy or {})
    for k, v in e.items():
        put(f"energy_{k}", v)
    return _frame(cols)


def _frame(records):
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
    concurrency_per_replica, max_concurrency_per_replica, capacity_per_replica, capacity_bound (what bounds it: the
    decode replica's seats or its share of the prefill pool), headroom, precision, kv_precision,
    speculative, usd_per_gpu_hour, usd_per_hour, usd_per_day, usd_per_mtok_output, predicted, simulated {ttft_p99_s,
    tpot_p99_s, ...}, targets, meets_targets, bumps, why, launch {engine: text}, launch_refused {engine: why it has
    no launch}, diurnal, energy (through the API
    and the CLI: `Energy` as a dict)), unavailable (hardware,
    mode, why), demand, targets, input_len, output_len, engine, efficiency, notes, curves.
    """

    FRAME_KEYS = ("hardware", "mode", "engine", "engine_version", "precision", "kv_precision", "layout", "gpus",
                  "replicas", "concurrency_per_replica", "output_tokens_per_s", "usd_per_gpu_hour", "usd_per_hour",
                  "usd_per_day", "usd_per_mtok_output", "headroom", "meets_targets", "why")

    def to_frame(self):
        """One row per option (the scalar columns, the price's source and date, and the simulated p99s); pandas
        is imported only here."""
        rows = [{**{k: o.get(k) for k in self.FRAME_KEYS},
                 "price_source": (o.get("price") or {}).get("source"), "price_date": (o.get("price") or {}).get("date"),
                 "price_given": (o.get("price") or {}).get("given"),
                 "output_tokens_per_s_per_gpu": o["output_tokens_per_s"] / o["gpus"] if o.get("gpus") else None,
                 "simulated_ttft_p99_s": o["simulated"]["ttft_p99_s"],
                 "simulated_tpot_p99_s": o["simulated"]["tpot_p99_s"],
                 **{f"energy_{k}": v for k, v in (o.get("energy") or {}).items()
                    if not isinstance(v, (dict, list))}} for o in self["options"]]
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
    if hasattr(v, "to_dict") and hasattr(v, "__dataclass_fields__"):  # a typed record (e.g. Energy)
        return jsonable(v.to_dict())
    return v
