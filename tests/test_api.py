"""The Python API is the first face (issue 12): every top-level function returns a typed, documented result with
`.to_dict()`, and `.to_frame()` where it is a table; a reused Session answers as `chalk.estimate` does."""

from __future__ import annotations

import json

import numpy as np
import pytest

import chalk

pd = pytest.importorskip("pandas")


def _json_ready(d):
    json.dumps(d, allow_nan=False)  # raises on NaN / inf / numpy scalars left behind


def test_top_level_names():
    for name in ("estimate", "Session", "sweep", "throughput", "layout", "simulate", "train", "pricing", "validate",
                 "plan"):
        assert name in chalk.__all__
        assert callable(getattr(chalk, name)), name


def test_estimate_and_session_agree():
    r = chalk.estimate("llama-3.1-8b", "h100-sxm", 64, 4096)
    assert type(r).__name__ == "RooflineResult"
    _json_ready(r.to_dict())
    s = chalk.Session("llama-3.1-8b", "h100-sxm")
    assert s.estimate(64, 4096).step_time_s == pytest.approx(r.step_time_s, rel=1e-12)
    assert s.estimate(64, 4096) is s.estimate(64, 4096)  # a repeated question is remembered
    # a grid is one vectorised call; at the same layout its points are the scalar answers
    one = s.estimate(64, 4096, layout="tp=2")
    grid = s.estimate(np.array([1.0, 64.0, 512.0]), 4096.0, layout="tp=2")
    assert np.asarray(grid.step_time_s)[1] == pytest.approx(one.step_time_s, rel=1e-9)


def test_a_session_keeps_its_latest_answers_only():
    """issue 12: a Session that kept every answer made the garbage collector walk them all on each new question
    (~10 us of a ~100 us estimate at a few thousand kept); it keeps the latest SESSION_MEMO."""
    from chalk.analyses.step.estimate import SESSION_MEMO

    s = chalk.Session("llama-3.1-8b", "h100-sxm")
    first = s.estimate(1, 1000)
    for i in range(SESSION_MEMO + 10):
        s.estimate(1 + i % 64, 2000 + i)
    assert len(s._memo) == SESSION_MEMO
    last = s.estimate(64, 2000 + SESSION_MEMO + 9)
    assert s.estimate(64, 2000 + SESSION_MEMO + 9) is last      # the latest are remembered
    again = s.estimate(1, 1000)
    assert again is not first and again.step_time_s == first.step_time_s  # the oldest was let go, then re-answered


def test_throughput_and_layout_are_typed():
    t = chalk.throughput("llama-3.1-8b", "h100-sxm", input_len=1000, output_len=200)
    assert type(t).__name__ == "ServingResult" and t.tpot_s == t["tpot_s"] > 0
    _json_ready(t.to_dict())
    lay = chalk.layout("llama-3.1-70b", "h100-sxm")
    assert type(lay).__name__ == "LayoutReport"
    _json_ready(lay.to_dict())


def test_tables_have_frames():
    sw = chalk.sweep("llama-3.1-8b", "h100-sxm", batches=[1, 8], contexts=[1024, 4096])
    assert sw.to_frame().shape[0] == 4
    v = chalk.validate()
    assert type(v).__name__ == "ValidationReport" and len(v.to_frame()) == v.n
    p = chalk.pricing()
    assert type(p).__name__ == "PricingReport" and len(p.to_frame()) == len(p["sheets"])
    s = chalk.simulate("llama-3.1-8b", "h100-sxm", rate=5, requests=200)
    df = s.to_frame()
    assert len(df) == 200 and {"ttft_s", "tpot_s"} <= set(df.columns)
    w = s.latency_window  # the summary's means are over the steady-state window; the frame holds every request
    assert df["ttft_s"].iloc[w["first_request"]:w["last_request"] + 1].mean() == pytest.approx(s.mean_ttft_s)
    tr = chalk.train("llama-3.1-8b")
    _json_ready(tr.to_dict())


def test_a_context_past_the_models_maximum_is_noted_in_both_views():
    """llama-3.1-8b's config states max_position_embeddings 131072: 200,000 tokens of context gets the note on a
    layout as in the aggregate view, and none at 100,000."""
    for kw in ({}, {"aggregate": True}):
        notes = chalk.estimate("llama-3.1-8b", "h100-sxm", 1, 200_000, **kw).notes
        assert any("beyond llama-3.1-8b's max_position_embeddings (131,072)" in n for n in notes), (kw, notes)
        assert not any("max_position_embeddings" in n for n in chalk.estimate("llama-3.1-8b", "h100-sxm", 1,
                                                                              100_000, **kw).notes)
