"""The calibration records itself (issue 29 item 4): catalog/calibration.yaml holds, per parameter, the value, its grid
and whether it sits on the grid's edge, with the objective, the rows and source families fitted on and a hash of the
validation data; the README's table is generated from it, and the comments of analyses/step/calibration.py and the
README quote no value the record does not hold.
"""

from __future__ import annotations

import importlib.util
import math
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

import chalk
from chalk.analyses.fidelity import calibrate as C
from chalk.analyses.step import calibration as K
from chalk.specs.catalog import package_path

ROOT = Path(chalk.__file__).resolve().parent.parent.parent
DOC = yaml.safe_load(package_path("catalog", "calibration.yaml").read_text())
VALUES = K.recorded(DOC)


def _script():
    path = ROOT / "scripts" / "calibration_table.py"
    if not path.exists():
        pytest.skip("not a source checkout")
    spec = importlib.util.spec_from_file_location("calibration_table", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ----------------------------------------------------------------------------------------------- the record
def test_the_record_holds_every_parameter_with_its_grid_and_edge():
    assert DOC["format"] == C.RECORD_FORMAT == 2
    assert set(DOC["parameters"]) == set(C.FIT_GRID) | set(C.NOT_SEARCHED)
    for name, p in DOC["parameters"].items():
        if name in C.GRIDS:
            grid = C.GRIDS[name]
            assert p["grid"] == [float(g) if isinstance(g, float) else g for g in grid], name
            assert any(math.isclose(float(p["value"]), float(g)) for g in grid), (name, p["value"])
            assert p["edge"] == C.grid_edge(p["value"], grid) and p["near_edge"] == C.near_edge(p["value"], grid)
        else:
            assert p["grid"] is None and p["edge"] is None and p["how"] == C.NOT_SEARCHED[name]


def test_the_edges_the_record_states():
    """Where the shipped fit sits on its grids (the refit of 2026-11-27 on 837 rows from 17 families, each row
    answered with its own engine's profile): five values on an edge and five one step in. `memory` came down to 0.65
    from 0.9 (every leave-one-family-out fold had chosen 0.6-0.7), `overlap` and `max_seqs_per_scheduler` went to the
    tops of their grids (a profile's own max_num_seqs caps every deployment with an engine profile), the AMD factors
    came in one step from their ends (0.6 compute, 0.9 memory). `compute` sits on its floor because the objective is
    flat in it (every NVIDIA GEMM, attention and MoE op has a measured table; AMD's compute-bound kernels take
    `amd_compute`). A refit that moves them updates this test and says so."""
    on = {k: p["edge"] for k, p in DOC["parameters"].items() if p["edge"]}
    near = {k: p["near_edge"] for k, p in DOC["parameters"].items() if p["near_edge"]}
    assert on == {"compute": "low", "overlap": "high", "max_seqs_per_scheduler": "high",
                  "kv_reserve_output_fraction": "high", "dp_prefill_alignment": "low"}
    assert near == {"memory": "low", "overhead_fixed_s": "high", "moe_shuffle_passes": "high", "amd_compute": "low",
                    "amd_memory": "high"}


def test_the_package_runs_on_the_recorded_values():
    for name, v in VALUES.items():
        assert getattr(K.CALIBRATION, name) == v, name


def test_the_refit_is_the_record():
    """The 2026-11-27 refit over 837 rows from 17 source families (chalk calibrate --rounds 2, families weighed
    equally, each row with its engine's profile; objective 0.2383 over 672 rows in the objective, 5m33s) is what the
    package runs on, and its record says what it saw. The fit it replaced was made on 730 rows from 14 families; on
    today's rows every leave-one-family-out fold had already moved away from it (memory 0.6-0.7, 1-4 ms fixed and
    20-30 us per layer overhead, overlap 0.75, 2048 sequences per scheduler). Held out (chalk validate --cv, families
    equal), the refit from the new start reached 16.65% median and 55.6% p90 against 18.55% and 58.5% from the old
    one; in sample 14.0% and 52.9% against 15.0% and 56.7%. Its range (from the same cross-validation): x0.62 to
    x1.31 of an estimate, holding 80.3% of held-out measured values. Earlier refits not shipped: one over 752 rows
    (fixed overhead 0.1 ms, pulled by TPU decode loops XLA compiles whole; measured H200 steps 24% slower than
    estimated), one after the MTP change (15.05% against 13.68% held out), one before the NVFP4 change (p90 57.2%
    against 53.4%); and on today's rows one held under the device steps' overhead ceiling (19.3% held out).
    2026-11-28: the rows gained fixed lengths, launch token budgets and warmed harnesses; a refit of the searched
    parameters on them (memory 0.85, 1 ms fixed overhead, AMD 0.5 / 1.0) held out at 16.7% median and 52.1% p90
    against 16.1% and 57.3% for this fit, so it was not shipped; only the two TTFT parameters were refitted (request
    latency 180 -> 80 ms, now with a cold engine's first-step delay of 1 s, fitted on TTFT means and medians) and
    the range resized (x0.63 to x1.36, holding 80.1% of held-out values). Later that day the rows gained their
    harnesses' clients (in-process harnesses carry no request latency) and the replay its burst pricing; a refit of
    the two TTFT parameters on them (60 ms, 1.5 s) held out at 17.3% median against 16.2% for these (the searched
    parameters of every fold moved with their start), so only the range was resized (x0.67 to x1.35, holding 80.6% of
    held-out values). On 2026-11-28 a what-if quantisation began keeping its embedding and LM head at 16 bits, and
    the range was resized again (x0.64 to x1.38, holding 80.6%)."""
    assert VALUES == {
        "compute": 0.35, "memory": 0.65, "overhead_fixed_s": 0.002, "overhead_per_layer_s": 3.0e-05,
        "moe_shuffle_passes": 16.0, "overlap": 0.75, "max_seqs_per_scheduler": 2048, "kv_reserve_output_fraction": 1.0,
        "amd_compute": 0.6, "amd_memory": 0.9, "dp_prefill_alignment": 0.0, "overhead_per_seq_s": 4.0e-06,
        "eplb_min_ep": 32.0, "residual_low": -0.449, "residual_high": 0.319, "use_kernel_tables": True,
        "request_latency_s": 0.08, "warmup_s": 1.0}
    assert DOC["fit"]["rows_in_objective"] == 672 and len(DOC["fit"]["families"]) == 17


def test_the_record_names_the_data_it_was_fitted_on():
    for block in (DOC["fit"], DOC["range"]):
        assert re.fullmatch(r"[0-9a-f]{64}", block["validation_sha256"])
    fit = DOC["fit"]
    assert sum(fit["families"].values()) == fit["rows_in_objective"] <= fit["rows"]
    assert len(fit["row_ids"]) == len(set(fit["row_ids"])) == fit["rows_in_objective"] == 672
    assert fit["metrics"] == list(C.FITTED_METRICS) and "formula" in fit["objective"]
    assert len(DOC["range"]["families_rows"]) == DOC["range"]["families"]


def test_validation_hash_is_the_files_sha256():
    import hashlib

    text = "id,model\nx,llama\n"
    assert C.validation_sha256(text) == hashlib.sha256(text.encode()).hexdigest()
    assert C.validation_sha256(text) != C.validation_sha256(text + " ")
    shipped = package_path("validation", "validation.csv").read_bytes()
    assert C.validation_sha256() == hashlib.sha256(shipped).hexdigest()


def test_grid_edges():
    g = (0.0, 0.25, 0.5, 0.75)
    assert [C.grid_edge(v, g) for v in g] == ["low", None, None, "high"]
    assert [C.near_edge(v, g) for v in g] == [None, "low", "high", None]
    assert C.grid_edge(32.0, C.FIT_GRID["eplb_min_ep"]) is None and C.grid_edge(math.inf, (8.0, math.inf)) == "high"


# ----------------------------------------------------------------------------------------------- the writer
class _Row:
    def __init__(self, id, family, metric, tpot_p99=None):
        self.id, self.family, self.metric = id, family, metric
        self.tpot_p99 = self.ttft_p99 = tpot_p99


ROWS = [_Row("r1", "a", "tpot_s"), _Row("r2", "a", "ttft_s"), _Row("r3", "b", "output_tokens_per_s_per_gpu"),
        _Row("r4", "b", "output_tokens_per_s_per_gpu", tpot_p99=0.04)]
CV = {"cv_range": (-0.5, 0.3), "range_quantiles": [0.1, 0.9], "cv_range_coverage": 0.8, "n_families": 2, "n": 2}


def test_record_round_trips_through_its_yaml():
    doc = C.record(K.CALIBRATION, 0.2, CV, rows=ROWS, date="2030-01-01")
    back = yaml.safe_load(C.dump_record(doc))
    assert back == doc
    vals = K.recorded(back)
    assert vals["residual_low"] == -0.5 and vals["residual_high"] == 0.3
    for k in C.FIT_GRID:
        assert vals[k] == getattr(K.CALIBRATION, k), k
    assert back["fit"]["families"] == {"a": 1, "b": 1} and back["fit"]["rows"] == 4
    assert back["fit"]["rows_in_objective"] == 2 and back["fit"]["objective"]["value"] == 0.2
    # the TTFT row fits the request latency only; the search held to p99 targets is judged, not fitted
    assert back["fit"]["row_ids"] == ["r1", "r3"]
    assert K._apply_fitted(K.IDEAL_CALIBRATION, vals).compute == K.CALIBRATION.compute


def test_range_only_keeps_the_fit_and_resizes_the_range():
    new = C.record(K.CALIBRATION, None, CV, rows=ROWS, date="2030-01-01", old=DOC)
    assert new["fit"] == DOC["fit"]
    assert {k: v for k, v in new["parameters"].items() if not k.startswith("residual_")} == \
           {k: v for k, v in DOC["parameters"].items() if not k.startswith("residual_")}
    assert (new["parameters"]["residual_low"]["value"], new["parameters"]["residual_high"]["value"]) == (-0.5, 0.3)
    assert new["range"]["date"] == "2030-01-01" and DOC["range"]["date"] != "2030-01-01"


def test_an_older_file_keeps_its_format_under_range_only():
    old = {"fitted": {"compute": 0.5, "residual_low": 0.1}, "rows": 3}
    new = C.record(K.CALIBRATION, None, CV, rows=ROWS, old=old)
    assert new["fitted"] == {"compute": 0.5, "residual_low": -0.5, "residual_high": 0.3} and new["rows"] == 3
    assert K.recorded(new)["compute"] == 0.5


# ----------------------------------------------------------------------------------------------- documents
def test_readme_table_is_generated_from_the_record():
    mod = _script()
    text = (ROOT / "README.md").read_text()
    assert mod.readme_block(text) == mod.generated(), "run python scripts/calibration_table.py --write"
    assert "| `memory` | 0.65 |" in mod.generated() and "**on the high edge**" in mod.generated()


#: The literals of analyses/step/calibration.py that `chalk calibrate` refits, and the recorded parameters each
#: one's comment speaks for, in the order its "shipped:" phrase quotes them.
SHIPPED_IN_COMMENT = {
    "COMPUTE": ["compute"], "MEMORY": ["memory"], "OVERHEAD_FIXED_S": ["overhead_fixed_s", "overhead_per_layer_s"],
    "OVERLAP": ["overlap"], "MOE_SHUFFLE_PASSES": ["moe_shuffle_passes"], "VENDOR": ["amd_compute", "amd_memory"],
    "MAX_SEQS_PER_SCHEDULER": ["max_seqs_per_scheduler"], "RESIDUAL_LOW": ["residual_low", "residual_high"],
}
_NUMBER = re.compile(r"(?<![\w.])(-?\d+(?:\.\d+)?(?:e-?\d+)?)\s*(ms|us)?\b")


def _numbers(phrase: str) -> list[float]:
    return [float(n) * {"ms": 1e-3, "us": 1e-6}.get(u or "", 1.0) for n, u in _NUMBER.findall(phrase)]


def _comment_blocks(source: str) -> dict[str, str]:
    """{CONSTANT: the `#:` comment block right above its assignment (or the one above a run of assignments)}."""
    out, block, assigned = {}, [], False
    for line in source.splitlines():
        if line.startswith("#:"):
            block = [] if assigned else block
            assigned = False
            block.append(line[2:].strip())
            continue
        m = re.match(r"([A-Z][A-Z_]+) = ", line)
        if m:
            out[m.group(1)] = " ".join(block)
            assigned = True
            continue
        block, assigned = [], False
    return out


def shipped_quotes(source: str) -> dict[str, list[float]]:
    """{CONSTANT: the numbers its comment quotes after 'shipped:' (up to the first '(', ';' or sentence end)}."""
    out = {}
    for name, text in _comment_blocks(source).items():
        m = re.search(r"[Ss]hipped:\s*(.*?)(?:\(|;|\.\s|$)", text)
        if m:
            out[name] = _numbers(m.group(1))
    return out


def test_comment_check_reads_what_it_checks():
    src = ("#: Fitted long ago. Shipped: 1 ms fixed and 10 us per layer (see there).\nA_S = 1e-4\nB_S = 4e-5\n"
           "#: shipped: 0.65, near the top (catalog)\nCOMPUTE = 0.475\n")
    q = shipped_quotes(src)
    assert sorted(q) == ["A_S", "B_S", "COMPUTE"] and q["A_S"] == q["B_S"]
    assert np.allclose(q["A_S"], [1e-3, 1e-5], rtol=1e-12, atol=0) and q["COMPUTE"] == [0.65]


def test_calibration_comments_quote_the_recorded_values():
    """issue 29: the comments of analyses/step/calibration.py documented an older fit (compute 0.475 vs 0.65 in use,
    memory 0.82 vs 0.90, ...). Each refitted literal's comment now quotes the shipped value as 'shipped: X', and it
    must be the record's."""
    src = Path(K.__file__).read_text()
    quotes = shipped_quotes(src)
    for const, params in SHIPPED_IN_COMMENT.items():
        assert const in quotes, f"{const}'s comment does not say what is shipped"
        want = [float(VALUES[p]) for p in params]
        assert np.allclose(quotes[const], want, rtol=1e-9, atol=0), (const, quotes[const], want)
    stale = re.findall(r"#:.*(?<![Nn]ot )\b[Ff]itted:?\s+-?\d", src)  # 'Not fitted: 0.75 from ...' says what it is
    assert stale == [], "say 'first fit' or 'shipped:' — a bare 'fitted N' does not say which fit"


def test_readme_quotes_the_recorded_values():
    text = (ROOT / "README.md").read_text()
    found = re.findall(r"`(\w+)`[^`\n]{0,40}?\((-?[\d.]+)\s*(ms|us)? in the current fit\)", text)
    assert found, "the README quotes at least eplb_min_ep's current value"
    for name, n, unit in found:
        assert math.isclose(float(n) * {"ms": 1e-3, "us": 1e-6}.get(unit, 1.0), float(VALUES[name])), (name, n)


def test_a_range_only_record_renders_its_table():
    """`chalk calibrate --range-only --write NEW.yaml` (no record there to keep) writes a fit block whose objective
    is a sentence, not a number; the README table generator says it instead of failing on it."""
    import copy

    doc = copy.deepcopy(DOC)
    doc["fit"]["objective"]["value"] = "unchanged (--range-only: the shipped fit, its range resized)"
    text = _script().table(doc)
    assert "objective unchanged (--range-only" in text and "| `compute` |" in text
