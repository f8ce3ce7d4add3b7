"""`chalk pricing`: price sheets read through the roofline, margins, and the four pricing claims.

Golden values and where they come from:
- eq. 6 with N_active = 100B, L = 200K, ratio 300 -> 1,667 B ("~1.7 KB"): lecture flashcards
  (shared/lecture/003, "Deducing inference memory costs from API pricing").
- Gemini 2.5 Pro: cliff at 200K tokens, $1.25 / $10 (ratio 8): ai.google.dev pricing via the catalog sheet.
- Claude: $3 / $15 and $5 / $25 (ratio 5): platform.claude.com pricing via the catalog sheets.
- DeepSeek: 226.75 nodes * 8 * 24 h * $2 = $87,072 per day; $562,027 theoretical revenue; 545% margin:
  github deepseek-ai/open-infra-index 202502OpenSourceWeek day 6 (reference measurements-public.csv).
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from chalk.analyses.economics import pricing as AP
from chalk.equations import pricing as P
from chalk.errors import ChalkError, InputError, UnknownNameError
from chalk.faces.cli_economics_pricing import register
from chalk.specs.prices import PriceMode, load_price_sheets, load_storage_tiers

REQUIRED_KEYS = {"provider", "model", "date", "source", "output_input_ratio", "implied_decode_mfu_fraction",
                 "cache_read_discount", "cliff_context_tokens", "implied_kv_bytes_per_token"}
CLIFF_KEYS = ("cliff_context_tokens", "cliff_input_multiple", "cliff_output_multiple", "implied_kv_bytes_per_token",
              "implied_kv_bytes_per_token_refined_output", "implied_kv_bytes_per_token_refined_input")
REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference" / "measurements-public.csv"


def _app() -> typer.Typer:
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)

    @app.command()
    def version():  # a second command so `pricing` is a sub-group, as in chalk's real CLI
        pass

    register(app)
    return app


def _invoke(*args):
    res = CliRunner().invoke(_app(), list(args), env={"COLUMNS": "240"})
    assert res.exit_code == 0, (res.output, res.exception)
    return res


@pytest.fixture(scope="module")
def report() -> dict:
    return json.loads(_invoke("pricing", "--json").stdout)


@pytest.fixture(scope="module")
def by_id(report) -> dict:
    return {s["id"]: s for s in report["sheets"]}


# ----------------------------------------------------------------------------- golden values
def test_eq6_gives_the_lectures_1_7_kb():
    assert P.kv_bytes_per_token_at_cliff(100e9, 200e3, 300) == pytest.approx(1666.67, abs=0.01)
    # m = 2 (prices double above the cliff) is eq. 6 exactly under the no-overlap reading
    assert P.kv_bytes_per_token_from_price_multiple(100e9, 200e3, 2.0, 300) == pytest.approx(1666.67, abs=0.01)
    assert P.kv_bytes_per_token_from_price_multiple(100e9, 200e3, 1.5, 300) == pytest.approx(833.33, abs=0.01)
    assert P.kv_bytes_per_token_from_price_multiple(100e9, 200e3, 0.9, 300) == 0.0


def test_gemini_2_5_pro_cliff_and_ratio(by_id):
    g = by_id["gemini-2.5-pro"]
    assert g["cliff_context_tokens"] == 200_000
    assert g["implied_kv_bytes_per_token"] == pytest.approx(1666.67, abs=0.01)
    assert g["output_input_ratio"] == pytest.approx(8.0)
    assert g["implied_decode_mfu_fraction"] == pytest.approx(0.125)
    assert g["cliff_input_multiple"] == pytest.approx(2.0) and g["cliff_output_multiple"] == pytest.approx(1.5)
    assert g["cache_read_discount"] == pytest.approx(0.1)


@pytest.mark.parametrize("sid", ["claude-sonnet-4.5", "claude-opus-4.6", "claude-opus-4.1", "claude-sonnet-5"])
def test_claude_output_is_five_times_input(by_id, sid):
    assert by_id[sid]["output_input_ratio"] == pytest.approx(5.0)
    assert by_id[sid]["implied_decode_mfu_fraction"] == pytest.approx(0.2)


def test_deepseek_published_margin_is_545_percent():
    d = AP.deepseek_published_margin()
    assert d["cost_usd_per_day"] == pytest.approx(87_072, abs=0.5)          # 226.75 * 8 * 24 * $2
    assert d["revenue_usd_per_day"] == pytest.approx(562_027, rel=1e-3)     # rounded token counts: $561,975
    assert abs(d["margin"] - 5.45) <= 0.01
    assert abs(d["margin_from_published_revenue"] - 5.45) <= 0.01


def test_deepseek_figures_match_the_reference_csv():
    if not REFERENCE.is_file():
        pytest.skip("../shared reference data not present")
    rows = {r["metric"]: float(r["value"]) for r in csv.DictReader(REFERENCE.open())
            if r["model"] == "DeepSeek-V3/R1" and r["metric"].startswith(("daily", "theoretical"))}
    day = AP.DEEPSEEK
    assert rows["daily_input_tokens"] == day.input_tokens
    assert rows["daily_output_tokens"] == day.output_tokens
    assert rows["daily_cost_at_2usd_per_gpu_hr"] == day.published_cost_usd
    assert rows["theoretical_daily_revenue_at_R1_prices"] == day.published_revenue_usd


def test_hardware_ratio_for_eq6():
    a = AP.assumptions(hardware="h100-sxm")           # FP8: 1978.9e12 / 2 / 3.35e12
    assert a.multiplies_per_byte == pytest.approx(295.4, abs=0.1)
    assert AP.assumptions(hardware="h100-sxm", precision="bf16").multiplies_per_byte == pytest.approx(147.7, abs=0.1)
    assert AP.assumptions(multiplies_per_byte=600, hardware="h100-sxm").multiplies_per_byte == 600
    d = AP.analyze_sheet("gemini-2.5-pro", AP.assumptions(active_params=37e9, hardware="h100-sxm"))
    assert d["implied_kv_bytes_per_token"] == pytest.approx(37e9 / (295.4 * 200e3), rel=1e-3)


# ----------------------------------------------------------------------------- the JSON
def test_json_covers_a_dozen_sheets_with_the_required_keys(report):
    assert len(report["sheets"]) >= 12
    assert len(report["sheets"]) == len(load_price_sheets())
    for s in report["sheets"]:
        assert REQUIRED_KEYS <= set(s), s["id"]
        assert s["source"].strip() and s["date"]
        assert s["implied_decode_mfu_fraction"] == pytest.approx(1 / s["output_input_ratio"])


def test_sheets_without_a_cliff_have_null_cliff_fields(by_id):
    sheets = {s.id: s for s in load_price_sheets()}
    with_cliff = [i for i, s in sheets.items() if s.long_context_tier is not None]
    assert {"gemini-2.5-pro", "gemini-3-pro", "gpt-5.4", "claude-sonnet-4"} <= set(with_cliff)
    for sid, d in by_id.items():
        if sid in with_cliff:
            assert d["cliff_context_tokens"] > 0 and d["implied_kv_bytes_per_token"] > 0
        else:
            assert all(d[k] is None for k in CLIFF_KEYS), sid


def test_show_and_human_output():
    d = json.loads(_invoke("pricing", "show", "gemini-2.5-pro", "--json").stdout)["sheet"]
    assert d["cliff_context_tokens"] == 200_000
    d = json.loads(_invoke("pricing", "--active-params", "5e10", "show", "gemini-2.5-pro", "--json").stdout)
    assert d["sheet"]["implied_kv_bytes_per_token"] == pytest.approx(833.33, abs=0.01)   # parent option carries
    out = _invoke("pricing").stdout
    assert "gemini-2.5-pro" in out and "200,000" in out
    assert "Gemini 2.5 Pro" in _invoke("pricing", "show", "gemini-2.5-pro").stdout


def test_unknown_sheet_is_a_chalk_error():
    res = CliRunner().invoke(_app(), ["pricing", "show", "gemini-9"])
    assert res.exit_code != 0 and isinstance(res.exception, UnknownNameError)


# ----------------------------------------------------------------------------- cache tiers
def test_five_minutes_matches_flash():
    m = AP.match_storage_tier(300)
    assert m["kind"] == "flash"


def test_one_hour_matches_the_slowest_flash_not_the_lectures_disk():
    """The lecture says 1 h ~ disk; the catalog's 24-28 TB disks drain in ~1 day, so 1 h lands on flash.

    Kept as an honest divergence (recorded in the `cache_tier_drain_time` claim), not forced.
    """
    m = AP.match_storage_tier(3600)
    assert m["kind"] == "flash" and m["tier"] == "nvme-micron-9400"
    assert m["nearest_by_kind"]["disk"]["drain_over_window"] > 10
    assert AP.match_storage_tier(86_400)["kind"] == "disk"     # a day-long window does land on disk
    assert AP.match_storage_tier(0.02)["kind"] == "hbm"


@given(st.floats(min_value=1e-3, max_value=1e7))
@settings(max_examples=60, deadline=None)
def test_match_is_nearest_in_log_space(window):
    m = AP.match_storage_tier(window)
    best = min(abs(math.log(t.drain_time_s / window)) for t in load_storage_tiers())
    assert abs(math.log(m["drain_time_s"] / window)) == pytest.approx(best)


def test_retention_windows_on_sheets(by_id):
    son = {w["label"]: w for w in by_id["claude-sonnet-4.5"]["cache_retention"]}
    assert son["5 min"]["kind"] == "flash"
    # $3.75 - $3 for 5 min and $6 - $3 for 1 h, per M tokens per hour
    assert son["5 min"]["storage_usd_per_mtok_hour"] == pytest.approx(9.0)
    assert son["1 h"]["storage_usd_per_mtok_hour"] == pytest.approx(3.0)
    gem = by_id["gemini-2.5-pro"]["cache_retention"][0]
    assert gem["window_s"] == pytest.approx(900)          # ($1.25 - $0.125) / $4.50 per hour = 15 min
    assert gem["kind"] == "flash"


def test_load_versus_recompute():
    ce = AP.cache_economics()
    assert ce["kv_bytes_per_token"] == 70_272             # DeepSeek-V3 MLA, BF16 (README convention 4)
    assert ce["hbm_recompute_over_load"] > 100
    by = {t["id"]: t for t in ce["tiers"]}
    assert by["nvme-pm1743"]["load_over_recompute"] < 0.1  # flash: cheaper than the 10% cache-read price
    assert by["hdd-exos-x24"]["load_over_recompute"] > 1   # disk: slower than recomputing


# ----------------------------------------------------------------------------- modes
def test_fast_mode_read_on_the_hyperbola(by_id):
    fast = by_id["claude-opus-4.6"]["modes"][0]
    assert fast["speedup_claimed"] == 2.5 and fast["implied_speedup"] == pytest.approx(2.5, rel=1e-3)
    assert fast["implied_batch_reduction"] > 2.5          # cost per token rises: T/B with a smaller B
    assert 1 < fast["implied_cost_multiple"] < fast["price_multiple"]
    prio = by_id["gpt-5"]["modes"][0]
    assert prio["implied_cost_multiple"] == pytest.approx(prio["price_multiple"], rel=1e-3)
    assert prio["implied_speedup"] > 1
    off = by_id["deepseek-r1"]["modes"][0]
    assert off["implied_batch"] is None and off["note"]


@given(st.floats(min_value=1.05, max_value=3.0), st.floats(min_value=1.05, max_value=3.0))
@settings(max_examples=25, deadline=None)
def test_faster_costs_more(s1, s2):
    r1, r2 = (AP.read_mode(PriceMode(name="f", price_multiple=6, speedup=s, source="test")) for s in (s1, s2))
    if s1 < s2:
        assert r1["implied_batch_reduction"] <= r2["implied_batch_reduction"] + 1e-9
        assert r1["implied_cost_multiple"] <= r2["implied_cost_multiple"] + 1e-9


# ----------------------------------------------------------------------------- invariants
@given(st.floats(min_value=1e9, max_value=2e12), st.floats(min_value=1e3, max_value=1e7),
       st.floats(min_value=1.01, max_value=10), st.floats(min_value=50, max_value=2000))
def test_implied_kv_falls_as_the_cliff_grows(n, L, k, ratio):
    assert P.kv_bytes_per_token_at_cliff(n, L * k, ratio) < P.kv_bytes_per_token_at_cliff(n, L, ratio)
    assert P.kv_bytes_per_token_at_cliff(n, L, ratio) * L * ratio == pytest.approx(n)


@given(st.floats(min_value=0.0, max_value=1.0), st.floats(min_value=1e-8, max_value=1e-4),
       st.floats(min_value=0.0, max_value=1.0), st.floats(min_value=1e-8, max_value=1e-4), st.floats(0.1, 10))
def test_revenue_scales_with_prices(h, p_in, f_read, p_out, k):
    r1 = P.daily_revenue_usd(608e9, h, p_in, f_read * p_in, 168e9, p_out)
    r2 = P.daily_revenue_usd(608e9, h, k * p_in, k * f_read * p_in, 168e9, k * p_out)
    assert r2 == pytest.approx(k * r1)
    assert P.margin(r1, r1) == pytest.approx(0.0)


# ----------------------------------------------------------------------------- margin
def test_pricing_margin_and_its_cli():
    r = AP.pricing_margin("deepseek-v3", "h800", "deepseek-r1", ideal=True)
    assert r["chips"] == 8 and r["decode_batch"] == 1024 and r["efficiency"] == "ideal"
    assert r["revenue_usd"] == pytest.approx(AP.deepseek_published_margin()["revenue_usd_per_day"])
    assert r["cost_usd"] > 0 and r["margin"] == pytest.approx(r["revenue_usd"] / r["cost_usd"] - 1)
    per_req = AP.pricing_margin("deepseek-v3", "h800", input_len=3000, output_len=1000, cache_hit_fraction=0,
                                ideal=True)
    assert per_req["per"] == "request" and per_req["context"] == 3500 and per_req["prompt_len"] == 3000
    calibrated = AP.pricing_margin("deepseek-v3", "h800", "deepseek-r1")
    assert calibrated["cost_usd"] >= r["cost_usd"] * 0.999        # calibration never beats the ideal roofline
    out = json.loads(_invoke("pricing", "margin", "--model", "deepseek-v3", "--hardware", "h800", "--json").stdout)
    assert set(out) == {"margin", "deepseek_published", "deepseek_chalk"}
    own = out["deepseek_chalk"]
    assert own["chips"] == 144 and own["context"] == 4989
    assert 0.05 < own["cost_over_published"] < 2
    assert "545" in _invoke("pricing", "margin", "--model", "deepseek-v3", "--hardware", "h800").stdout


def test_margin_caps_the_default_batch_at_what_fits():
    r = AP.pricing_margin("llama-3.1-70b", "h100-sxm", "gpt-5", input_len=3000, output_len=1000, ideal=True)
    assert 1 <= r["decode_batch"] < 128 * 8 and any("capped" in n for n in r["notes"])
    forced = AP.pricing_margin("llama-3.1-70b", "h100-sxm", "gpt-5", batch=1024, input_len=3000, output_len=1000,
                               ideal=True)
    assert forced["decode_batch"] == 1024 and any("lower bound" in n for n in forced["notes"])


def test_margin_rejects_bad_input():
    with pytest.raises(InputError):
        AP.pricing_margin("deepseek-v3", "h800", cache_hit_fraction=1.5)
    with pytest.raises(InputError):
        AP.pricing_margin("deepseek-v3", "h800", input_len=100)
    with pytest.raises(ChalkError):
        AP.pricing_margin("deepseek-v3", "h800", sheet="nope")


# ----------------------------------------------------------------------------- claims
def test_the_four_pricing_claims():
    cl = {c.id: c for c in AP.claims()}
    assert set(cl) == {"decode_vs_prefill_mfu", "cache_tier_drain_time", "recompute_vs_load_kv",
                       "kv_bytes_per_token_at_cliff"}
    for c in cl.values():
        assert c.unit and c.assumptions and c.explanation and c.lecture_value is not None
        json.dumps(c.to_dict())
    assert cl["kv_bytes_per_token_at_cliff"].value == pytest.approx(1666.67, abs=0.01)
    assert cl["decode_vs_prefill_mfu"].value == pytest.approx(0.2)
    assert cl["recompute_vs_load_kv"].value > 100
    for k in ("kv_bytes_per_token_at_cliff", "decode_vs_prefill_mfu", "recompute_vs_load_kv"):
        assert cl[k].within_lecture_range, k
    assert cl["cache_tier_drain_time"].value.startswith("5 min ~ flash")


# ----------------------------------------------------------------------------- the README example (issue 12)
README_MARGIN = ("pricing", "margin", "--model", "deepseek-v3", "--hardware", "h800", "--sheet", "deepseek-r1",
                 "--chips", "144", "--kv-precision", "bf16")


def test_readme_margin_example_fits_and_its_tables_agree():
    """The README's margin example is a real one: it fits, and its question and its check are the same run."""
    r = AP.pricing_margin("deepseek-v3", "h800", "deepseek-r1", chips=144, kv_precision="bf16")
    own = AP.deepseek_chalk_margin()
    assert r["fits"] and not any("does not fit" in n for n in r["notes"])
    assert r["cost_usd"] == pytest.approx(own["cost_usd"]) and r["chips"] == own["chips"] == 144
    out = _invoke(*README_MARGIN).stdout
    assert "the same configuration as above" in out and "DOES NOT FIT" not in out
    assert "Your question" in out and "Check against DeepSeek's published day" in out
    readme = Path(__file__).resolve().parents[1] / "README.md"
    if readme.exists():
        assert " ".join(("chalk",) + README_MARGIN) in readme.read_text()


def test_margin_check_reproduces_or_flags_the_published_545_percent():
    """The check against DeepSeek's day says whether chalk lands within REPRODUCE_FACTOR of the published cost, and
    says by how much and why when it does not."""
    own = AP.deepseek_chalk_margin()
    ratio = own["cost_over_published"]
    assert own["reproduces"] is bool(1 / AP.REPRODUCE_FACTOR <= ratio <= AP.REPRODUCE_FACTOR)
    assert (own["gap"] is None) is own["reproduces"]
    # DeepSeek open-infra-index day 6: ~14.8K output tokens/s per H800 node (8 GPUs) at 128 sequences per GPU
    per_gpu = own["decode_user_tokens_per_s"] * 128
    assert per_gpu == pytest.approx(14_800 / 8, rel=0.25)
    # the pure roofline needs far fewer chip-hours than DeepSeek's fleet: the miss is flagged, with both fleets
    ideal = AP.deepseek_chalk_margin(ideal=True)
    assert ideal["cost_over_published"] < 1 / AP.REPRODUCE_FACTOR and ideal["reproduces"] is False
    assert "misses the published 545%" in ideal["gap"] and "1,814 GPUs" in ideal["gap"]
    out = _invoke(*README_MARGIN).stdout
    assert "reproduces the published margin?" in out
    assert ("yes" if own["reproduces"] else "NO") in out.split("reproduces the published")[1]


def test_margin_that_does_not_fit_says_so_in_the_title():
    out = _invoke("pricing", "margin", "--model", "deepseek-v3", "--hardware", "h800").stdout
    assert "DOES NOT FIT" in out and "a fixed configuration, not the one above" in out


def test_web_explorer_shows_margin_as_a_percent():
    src = (Path(__file__).resolve().parents[1] / "src" / "chalk" / "faces" / "web_tabs.py")  # the Pricing tab
    if not src.exists():
        pytest.skip("not a source checkout")
    line = next(ln for ln in src.read_text().splitlines() if "margin on the day" in ln)
    assert "pct(" in line and "×" not in line


def test_the_deepseek_check_is_called_the_same_configuration_only_when_it_is():
    """QA sweep 2026-11-27: the margin's DeepSeek check (BF16 KV, its fixed day) was called "the same configuration
    as above" beside a question answered on the FP8 KV cache 'auto' picks ($94,028 against $96,210 a day); the
    comparison now includes the weights' and the KV cache's precisions."""
    base = ("pricing", "margin", "--model", "deepseek-v3", "--hardware", "h800", "--sheet", "deepseek-r1", "--chips",
            "144")
    assert "a fixed configuration, not the one above" in _invoke(*base).output
    assert "the same configuration as above" in _invoke(*base, "--kv-precision", "bf16").output

