"""The Python API is the first face (issue 12): every top-level function returns a typed, documented result with
`.to_dict()`, and `.to_frame()` where it is a table; a reused Session answers as `chalk.estimate` does."""

from __future__ import annotations

import json

import numpy as np
import pytest

import chalk
import chalk.errors

pd = pytest.importorskip("pandas")


def _json_ready(d):
    json.dumps(d, allow_nan=False)  # raises on NaN / inf / numpy scalars left behind


def test_top_level_names():
    for name in ("estimate", "Session", "sweep", "throughput", "layout", "simulate", "train", "pricing", "validate",
                 "plan", "hardware", "models", "lecture", "report", "plot"):
        assert name in chalk.__all__
        assert name in dir(chalk)  # notebook completion on `chalk.` offers the API
        assert callable(getattr(chalk, name)), name
    assert not [n for n in dir(chalk) if not n.startswith("__") and n not in chalk.__all__]


def _cli_params(command: str) -> set[str]:
    import typer

    from chalk.faces.cli import app

    group = typer.main.get_group(app)
    return {p.name for p in group.commands[command].params}


def test_estimate_takes_every_option_of_the_command_and_of_the_analysis():
    """issue 26 / 27 item 8: the API's estimate names every option `chalk estimate` takes (its display switches
    aside) and every option of the analysis it calls, explicitly (no **kwargs hiding them)."""
    import inspect

    from chalk.analyses.step.estimate import estimate as analysis

    api = inspect.signature(chalk.estimate).parameters
    assert not [p for p in api.values() if p.kind is p.VAR_KEYWORD]
    display = {"show_ops", "as_json", "plot"}  # how the command prints, not what it asks
    assert _cli_params("estimate") - display - set(api) == set()
    assert set(inspect.signature(analysis).parameters) - set(api) == set()


def test_no_public_function_hides_its_options():
    """issue 27 item 8: every public function names its keywords (no **kwargs), so a notebook shows them; the
    Session alone passes its options on to `estimate`'s (documented there)."""
    import inspect

    for name in chalk.__all__:
        fn = getattr(chalk, name)
        if name in ("__version__", "Session"):
            continue
        kinds = [p.kind for p in inspect.signature(fn).parameters.values()]
        assert inspect.Parameter.VAR_KEYWORD not in kinds, name


@pytest.mark.parametrize("name", ["estimate", "sweep", "layout", "throughput", "plan", "pricing", "report", "plot"])
def test_every_parameter_is_documented(name):
    import inspect

    fn = getattr(chalk, name)
    doc = inspect.getdoc(fn)
    missing = [p for p in inspect.signature(fn).parameters if p not in ("model", "hardware", "kind", "output")
               and p not in doc]
    assert not missing, f"chalk.{name}: {missing} not in its docstring"


def test_mtp_through_the_api_is_the_cli_speculative_answer():
    r = chalk.estimate("llama-3.1-8b", "h100-sxm", 8, 4096, mtp=2, acceptance=0.8)
    s = r.speculative
    assert s.draft_tokens == 2 and s.acceptance == 0.8
    assert s.tokens_per_step == pytest.approx(1 + 0.8 + 0.8 ** 2)  # 1 + a + a^2 tokens per verify step
    assert s.plain_step_time_s == pytest.approx(r.step_time_s)
    _json_ready(r.to_dict())
    with pytest.raises(chalk.errors.InputError):
        chalk.estimate("llama-3.1-8b", "h100-sxm", acceptance=0.8)
    with pytest.raises(chalk.errors.InputError, match="no MTP draft layers"):  # no sourced rate to assume
        chalk.estimate("llama-3.1-8b", "h100-sxm", mtp=2)
    # a model with its own MTP layers: their sourced rate (DeepSeek-V3 report: 85-90%, the low end)
    assert chalk.estimate("deepseek-v3", "gb200-nvl72", 64, 4096, mtp=1).speculative.acceptance == 0.85
    with pytest.raises(chalk.errors.InputError):
        chalk.estimate("llama-3.1-8b", "h100-sxm", lecture_weights=True, refined=True)


def test_frames_of_every_result():
    r = chalk.estimate("llama-3.1-8b", "h100-sxm", np.array([1.0, 8.0, 64.0]), 4096.0, layout="tp=1")
    df = r.to_frame()
    assert len(df) == 3 and list(df["batch"]) == [1.0, 8.0, 64.0]
    assert list(df["step_time_s"]) == pytest.approx(list(np.asarray(r.step_time_s)))
    assert list(df["energy_joules_per_token"]) == pytest.approx(list(np.asarray(r.energy.joules_per_token)))
    t = chalk.throughput("llama-3.1-8b", "h100-sxm", input_len=1000, output_len=200)
    tf = t.to_frame()
    assert len(tf) == 1 and tf["output_tokens_per_s_per_gpu"].iloc[0] == t.output_tokens_per_s_per_gpu
    assert tf["energy_joules_per_token"].iloc[0] == t.energy["joules_per_token"]
    assert tf["parallelism_tp"].iloc[0] == t.parallelism["tp"]
    hw = chalk.hardware()
    assert len(hw.to_frame()) == len(hw.chips) and "h100-sxm" in set(hw.to_frame()["id"])
    assert hw.to_frame().set_index("id").loc["h100-sxm", "tdp_w"] == 700
    ms = chalk.models()
    assert len(ms.to_frame()) == len(ms.models) and "llama-3.1-8b" in set(ms.to_frame()["id"])
    lec = chalk.lecture()
    assert len(lec.to_frame()) == len(lec.claims) > 10
    _json_ready(hw.to_dict()), _json_ready(ms.to_dict()), _json_ready(lec.to_dict())


def test_report_and_plot_through_the_api(tmp_path):
    html = chalk.report("llama-3.1-8b", "h100-sxm", batch=8)
    assert html.startswith("<!doctype html>") and "llama-3.1-8b" in html.lower()
    out = chalk.report("llama-3.1-8b", "h100-sxm", tmp_path / "r.html", batch=8)
    assert out.read_text(encoding="utf-8") == html
    fig = chalk.plot("latency-vs-batch", model="llama-3.1-8b", hardware="h100-sxm")
    assert type(fig).__name__ == "Figure"
    png = chalk.plot("latency-vs-batch", tmp_path / "l.png", model="llama-3.1-8b", hardware="h100-sxm")
    assert png.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(chalk.errors.InputError, match="pipeline"):
        chalk.plot("latency-vs-batch", model="llama-3.1-8b", hardware="h100-sxm", stages=4)


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


def test_pricing_takes_the_commands_options():
    """`chalk pricing --hardware h100-sxm` as `chalk.pricing(hardware="h100-sxm")`: eq. 6's ratio from the chip,
    (1979 TFLOP/s dense fp8 / 2) / 3.35 TB/s = 295.4 multiplies per byte (the H100 SXM datasheet figures)."""
    p = chalk.pricing(hardware="h100-sxm")
    assert p["assumptions"]["multiplies_per_byte"] == pytest.approx(1979e12 / 2 / 3.35e12, rel=1e-3)
    assert chalk.pricing(ratio=250.0)["assumptions"]["ratio_source"] == "given"
    from chalk.analyses.economics.pricing import Assumptions

    with pytest.raises(chalk.errors.InputError):
        chalk.pricing(Assumptions(), ratio=250.0)
    with pytest.raises(chalk.errors.InputError):
        chalk.pricing(precision="fp8")  # a precision for no chip's ratio
