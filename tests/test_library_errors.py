"""The library's contract on bad input (issue 11): every public function raises a `ChalkError` subclass, never a
bare ValueError / TypeError / KeyError / AttributeError, and never answers with NaN, inf or a silently accepted
0 / NaN / negative value. Hypothesis picks one argument of one public call at a time and gives it a bad value.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import chalk
from chalk.errors import ChalkError

BAD = [None, "abc", "", -1, 0, -0.5, math.nan, math.inf, -math.inf, 1e308, [1, 2], {"a": 1}, True, object()]

#: (callable, valid keyword arguments): each argument is fuzzed in turn.
CALLS = {
    "estimate": (chalk.estimate, dict(model="llama-3.1-8b", hardware="h100-sxm", batch=8, context=1024)),
    "estimate_aggregate": (chalk.estimate, dict(model="llama-3.1-8b", hardware="h100-sxm", batch=8, context=1024,
                                                aggregate=True, sparse_law="sqrt")),
    "sweep": (chalk.sweep, dict(model="llama-3.1-8b", hardware="h100-sxm", batches=[1, 8], contexts=[1024])),
    "throughput": (chalk.throughput, dict(model="llama-3.1-8b", hardware="h100-sxm", input_len=500, output_len=100,
                                          min_user_tps=20)),
    "fixed": (chalk.throughput, dict(model="llama-3.1-8b", hardware="h100-sxm", input_len=500, output_len=100,
                                     layout="tp=1", concurrency=16)),
    "layout": (chalk.layout, dict(model="qwen3-30b-a3b", hardware="h100-sxm", gpus=8)),
    "simulate": (chalk.simulate, dict(model="llama-3.1-8b", hardware="h100-sxm", rate=5.0, requests=50,
                                      input_len=256, output_len=32)),
    "train": (chalk.train, dict(model="llama-3.1-8b", hardware="h100-sxm", gpus=1024, tokens=1e12)),
}


def _margin(**kw):
    from chalk.analyses.economics.pricing import pricing_margin

    return pricing_margin(**kw)


def _rack(**kw):
    from chalk.analyses.step.parallel import moe_rack_layout
    from chalk.specs.catalog import as_model, as_system

    return moe_rack_layout(as_model(kw.pop("model")), as_system(kw.pop("hardware")), **kw)


def _pipeline(**kw):
    from chalk.analyses.step.parallel import pipeline_analysis
    from chalk.specs.catalog import as_model, as_system

    return pipeline_analysis(as_model(kw.pop("model")), as_system(kw.pop("hardware")), **kw)


CALLS.update({
    "pricing_margin": (_margin, dict(model="deepseek-v3", hardware="h800", sheet="deepseek-r1", chips=144)),
    "moe_rack_layout": (_rack, dict(model="deepseek-v3", hardware="gb200-nvl72", batch_per_gpu=64, context=4096)),
    "pipeline_analysis": (_pipeline, dict(model="llama-3.1-70b", hardware="h100-sxm", batch_per_stage=32,
                                          context=4096, microbatches=8)),
})


def _finite(obj, path="") -> list[str]:
    """Paths of non-finite floats in a result (its .to_dict() where it has one)."""
    if hasattr(obj, "to_dict") and not isinstance(obj, dict):
        obj = obj.to_dict()
    if isinstance(obj, dict):
        return [p for k, v in obj.items() for p in _finite(v, f"{path}.{k}")]
    if isinstance(obj, (list, tuple)):
        return [p for i, v in enumerate(obj[:500]) for p in _finite(v, f"{path}[{i}]")]
    if isinstance(obj, float) and not math.isfinite(obj):
        return [path]
    return []


CASES = [(name, arg) for name, (_, kw) in CALLS.items() for arg in kw]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(CASES), bad=st.sampled_from(BAD))
def test_public_functions_raise_only_chalk_errors(case, bad):
    name, arg = case
    fn, kw = CALLS[name]
    try:
        result = fn(**{**kw, arg: bad})
    except ChalkError as e:
        assert "\n" not in str(e).strip() and len(str(e)) < 400, (name, arg, bad, str(e)[:400])
        return
    except Exception as e:  # noqa: BLE001 - the point of the test
        pytest.fail(f"{name}({arg}={bad!r}) raised {type(e).__name__}: {str(e)[:200]}")
    assert _finite(result) == [], (name, arg, bad)
