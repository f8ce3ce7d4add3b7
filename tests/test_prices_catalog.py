"""The price-sheet and storage-tier catalogs: every file loads, golden values, validation."""

from __future__ import annotations

import copy
import csv
import math
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from chalk.errors import ChalkError, SpecError, UnknownNameError
from chalk.specs.prices import (
    MTOK,
    PriceSheet,
    PriceTier,
    StorageTier,
    load_price_sheet,
    load_price_sheets,
    load_storage_tier,
    load_storage_tiers,
    parse_price_sheet,
)

SHEETS = load_price_sheets()
IDS = [s.id for s in SHEETS]


def per_mtok(usd_per_token: float | None) -> float | None:
    return None if usd_per_token is None else usd_per_token * MTOK


# ----------------------------------------------------------------------------- every sheet


def test_catalog_has_the_sheets_the_analyses_need():
    assert len(SHEETS) >= 14
    assert len(set(IDS)) == len(IDS)
    assert IDS == sorted(IDS)
    for needed in (
        "gemini-2.5-pro", "gemini-3-pro",
        "gpt-5", "gpt-5-mini", "gpt-5.4",
        "deepseek-v3", "deepseek-r1", "deepseek-v3.1", "deepseek-v3.2",
        "claude-sonnet-4", "claude-sonnet-4.5", "claude-sonnet-4.6",
        "claude-opus-4.5", "claude-opus-4.6", "claude-opus-4.6-fast", "claude-sonnet-5",
    ):
        assert needed in IDS


@pytest.mark.parametrize("sheet", SHEETS, ids=IDS)
def test_every_sheet_has_source_date_and_sane_tiers(sheet: PriceSheet):
    assert sheet.source.strip()
    assert re.fullmatch(r"\d{4}(-\d{2}(-\d{2})?)?", sheet.date)
    assert 2024 <= int(sheet.date[:4]) <= 2027
    assert sheet.confidence in ("high", "medium", "low")
    assert sheet.base_tier.min_context_tokens == 0
    thresholds = [t.min_context_tokens for t in sheet.tiers]
    assert thresholds == sorted(set(thresholds))
    for t in sheet.tiers:
        for v in (t.input_usd_per_token, t.output_usd_per_token):
            assert math.isfinite(v) and v > 0
            # catalog prices are between $0.01 and $1000 per million tokens
            assert 1e-8 < v < 1e-3
        # output never costs less than input on these sheets
        assert t.output_input_ratio >= 1.0
        if t.cache_read_usd_per_token is not None:
            assert t.cache_read_usd_per_token < t.input_usd_per_token
    # a long-context tier is dearer than the standard one
    lc = sheet.long_context_tier
    if lc is not None:
        assert lc.input_usd_per_token > sheet.base_tier.input_usd_per_token
        assert lc.output_usd_per_token >= sheet.base_tier.output_usd_per_token
    for m in sheet.modes:
        assert m.source.strip()
        assert m.price_multiple > 0


def test_load_price_sheet_by_id_and_unknown_id():
    assert load_price_sheet("gpt-5").provider == "OpenAI"
    with pytest.raises(UnknownNameError) as info:
        load_price_sheet("gemini-2.5-pr0")
    err = info.value
    assert isinstance(err, ChalkError)
    assert err.kind == "price sheet" and err.name == "gemini-2.5-pr0"
    assert "gemini-2.5-pro" in err.choices
    assert "gemini-2.5-pro" in str(err)  # suggestion


def test_models_are_frozen():
    s = load_price_sheet("gpt-5")
    with pytest.raises(ValidationError):
        s.date = "1999"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        s.base_tier.input_usd_per_token = 0.0  # type: ignore[misc]


# ----------------------------------------------------------------------------- golden values


def test_gemini_25_pro_long_context_cliff():
    # Source: ai.google.dev pricing as cited by deploybase.ai (Mar 2026) and the gemini-cost
    # crate tests: $1.25 in / $10 out up to 200K prompt tokens, $2.50 / $15 above.
    s = load_price_sheet("gemini-2.5-pro")
    assert per_mtok(s.base_tier.input_usd_per_token) == pytest.approx(1.25)
    assert per_mtok(s.base_tier.output_usd_per_token) == pytest.approx(10.0)
    assert per_mtok(s.base_tier.cache_read_usd_per_token) == pytest.approx(0.125)
    lc = s.long_context_tier
    assert lc is not None and lc.min_context_tokens == 200_000
    assert per_mtok(lc.input_usd_per_token) == pytest.approx(2.50)
    assert per_mtok(lc.output_usd_per_token) == pytest.approx(15.0)
    assert s.long_context_input_multiple == pytest.approx(2.0)
    assert s.long_context_output_multiple == pytest.approx(1.5)
    assert s.output_input_ratio == pytest.approx(8.0)
    # a tier applies to prompts with MORE than its threshold
    assert s.tier_for(0) is s.base_tier
    assert s.tier_for(200_000) is s.base_tier
    assert s.tier_for(200_001) is lc
    # context-cache storage $4.50 per 1M tokens per hour (discuss.ai.google.dev thread 107349)
    assert s.cache_storage_usd_per_token_hour == pytest.approx(4.5 / MTOK)
    assert s.cache_storage_usd_per_token_s == pytest.approx(4.5 / MTOK / 3600)
    # cache writes carry no separate price on Gemini
    assert s.base_tier.cache_write_5m_usd_per_token is None


def test_claude_sonnet_45_cache_multipliers():
    # Source: platform.claude.com pricing page: cache read 0.1x, 5-minute write 1.25x,
    # 1-hour write 2x of base input; $3 / $15; $6 / $22.50 above 200K (1M-context beta).
    s = load_price_sheet("claude-sonnet-4.5")
    for t in s.tiers:
        assert t.cache_read_fraction == pytest.approx(0.1)
        assert t.cache_write_5m_usd_per_token == pytest.approx(1.25 * t.input_usd_per_token)
        assert t.cache_write_1h_usd_per_token == pytest.approx(2.0 * t.input_usd_per_token)
    assert per_mtok(s.base_tier.input_usd_per_token) == pytest.approx(3.0)
    assert per_mtok(s.base_tier.output_usd_per_token) == pytest.approx(15.0)
    assert per_mtok(s.long_context_tier.input_usd_per_token) == pytest.approx(6.0)
    assert per_mtok(s.long_context_tier.output_usd_per_token) == pytest.approx(22.5)


def test_deepseek_r1_prices():
    # Source: api-docs.deepseek.com/quick_start/pricing (Jan-Sep 2025): $0.55 cache miss,
    # $0.14 cache hit, $2.19 out; the prices behind DeepSeek's 545% theoretical margin.
    s = load_price_sheet("deepseek-r1")
    assert per_mtok(s.base_tier.input_usd_per_token) == pytest.approx(0.55)
    assert per_mtok(s.base_tier.output_usd_per_token) == pytest.approx(2.19)
    assert per_mtok(s.base_tier.cache_read_usd_per_token) == pytest.approx(0.14)
    assert s.long_context_tier is None
    assert s.mode("off-peak").price_multiple == pytest.approx(0.135 / 0.55, rel=0.03)


def test_other_golden_prices():
    def io(sheet_id):
        t = load_price_sheet(sheet_id).base_tier
        return per_mtok(t.input_usd_per_token), per_mtok(t.output_usd_per_token)

    assert io("gpt-5") == pytest.approx((1.25, 10.0))
    assert io("gpt-5-mini") == pytest.approx((0.25, 2.0))
    assert io("deepseek-v3") == pytest.approx((0.27, 1.10))
    assert io("deepseek-v3.2") == pytest.approx((0.28, 0.42))
    assert io("claude-opus-4.6") == pytest.approx((5.0, 25.0))
    assert io("claude-sonnet-5") == pytest.approx((2.0, 10.0))
    assert load_price_sheet("gpt-5.4").long_context_threshold_tokens == 272_000
    # Sonnet 4.6 / Opus 4.6: full 1M context at standard rates
    assert load_price_sheet("claude-sonnet-4.6").long_context_tier is None
    assert load_price_sheet("claude-opus-4.6").long_context_tier is None


# ----------------------------------------------------------------------------- modes


def test_opus_46_fast_mode():
    # Source: platform.claude.com fast-mode doc: 6x standard Opus rates ($30 / $150),
    # 'up to 2.5x higher output tokens per second'.
    base = load_price_sheet("claude-opus-4.6")
    fast = base.mode("fast")
    assert fast.price_multiple == pytest.approx(6.0)
    assert fast.speedup == pytest.approx(2.5)
    assert fast.price_per_speedup == pytest.approx(2.4)
    assert fast.sheet == "claude-opus-4.6-fast"
    with pytest.raises(UnknownNameError):
        base.mode("turbo")


def test_gpt5_priority_mode_states_no_speedup():
    m = load_price_sheet("gpt-5").mode("priority")
    assert m.price_multiple == pytest.approx(2.0)
    assert m.speedup is None and m.price_per_speedup is None


@pytest.mark.parametrize(
    "sheet", [s for s in SHEETS if any(m.sheet for m in s.modes)], ids=lambda s: s.id
)
def test_mode_multiples_match_the_mode_sheets(sheet: PriceSheet):
    for m in sheet.modes:
        if m.sheet is None:
            continue
        mode_sheet = load_price_sheet(m.sheet)
        assert mode_sheet.mode_of == sheet.id
        a, b = sheet.base_tier, mode_sheet.base_tier
        assert b.input_usd_per_token == pytest.approx(m.price_multiple * a.input_usd_per_token)
        assert b.output_usd_per_token == pytest.approx(m.price_multiple * a.output_usd_per_token)


def test_mode_sheets_are_linked_and_can_be_left_out():
    mode_sheets = [s for s in SHEETS if s.mode_of is not None]
    assert {s.id for s in mode_sheets} >= {"claude-opus-4.6-fast", "gpt-5-priority"}
    for s in mode_sheets:
        assert s.is_mode_sheet
        base = load_price_sheet(s.mode_of)
        assert any(m.sheet == s.id for m in base.modes)
    plain = load_price_sheets(include_mode_sheets=False)
    assert len(plain) == len(SHEETS) - len(mode_sheets)
    assert all(s.mode_of is None for s in plain)


# ----------------------------------------------------------------------------- validation


def _good_sheet() -> dict:
    return {
        "id": "test-sheet",
        "provider": "Test",
        "model": "Test model",
        "date": "2026-03",
        "source": "https://example.invalid",
        "confidence": "high",
        "tiers": [
            {"name": "standard", "min_context_tokens": 0,
             "input_usd_per_mtok": 1.0, "output_usd_per_mtok": 4.0,
             "cache_read_usd_per_mtok": 0.1},
            {"name": "long-context", "min_context_tokens": 128000,
             "input_usd_per_mtok": 2.0, "output_usd_per_mtok": 6.0},
        ],
    }


def test_parse_good_sheet_converts_to_usd_per_token():
    s = parse_price_sheet(_good_sheet())
    assert s.base_tier.input_usd_per_token == pytest.approx(1e-6)
    assert s.base_tier.cache_read_usd_per_token == pytest.approx(1e-7)
    assert s.long_context_tier.output_usd_per_token == pytest.approx(6e-6)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize(
    "field", ["input_usd_per_mtok", "output_usd_per_mtok", "cache_read_usd_per_mtok"]
)
def test_negative_or_non_finite_prices_rejected(field, bad):
    data = _good_sheet()
    data["tiers"][0][field] = bad
    with pytest.raises(SpecError):
        parse_price_sheet(data)


@pytest.mark.parametrize("bad", [-1e-6, float("nan"), float("inf")])
def test_si_model_rejects_bad_prices(bad):
    with pytest.raises(ValidationError):
        PriceTier(name="x", min_context_tokens=0, input_usd_per_token=bad,
                  output_usd_per_token=1e-6)


def test_zero_price_allowed():
    data = _good_sheet()
    data["tiers"][0]["cache_read_usd_per_mtok"] = 0
    assert parse_price_sheet(data).base_tier.cache_read_usd_per_token == 0.0


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d["tiers"][0].update(min_context_tokens=1000),  # first tier not at 0
        lambda d: d["tiers"][1].update(min_context_tokens=0),  # thresholds not increasing
        lambda d: d["tiers"].clear(),  # no tiers
        lambda d: d.update(date="March 2026"),
        lambda d: d.update(confidence="certain"),
        lambda d: d.update(source="  "),
        lambda d: d.update(colour="blue"),  # unknown key (typo guard)
        lambda d: d["tiers"][0].update(input_usd_per_mtk=1.0),  # misspelt field
        lambda d: d.pop("source"),
        lambda d: d.update(modes=[{"name": "fast", "price_multiple": 0, "source": "s"}]),
        lambda d: d.update(modes=[{"name": "fast", "price_multiple": 2, "speedup": -1,
                                   "source": "s"}]),
    ],
)
def test_malformed_sheets_raise_spec_error(mutate):
    data = copy.deepcopy(_good_sheet())
    mutate(data)
    with pytest.raises(SpecError):
        parse_price_sheet(data)


def test_non_mapping_is_spec_error():
    with pytest.raises(SpecError):
        parse_price_sheet(["not", "a", "mapping"])


# ----------------------------------------------------------------------------- storage

STORAGE = load_storage_tiers()


def test_storage_tiers_cover_every_kind_with_sources():
    assert {t.kind for t in STORAGE} == {"hbm", "dram", "flash", "disk"}
    ids = [t.id for t in STORAGE]
    assert len(set(ids)) == len(ids)
    for t in STORAGE:
        assert t.source.strip()
        assert isinstance(t.assumption, bool)
        if t.assumption:
            assert t.notes.strip(), f"{t.id}: an assumption must say what was assumed"


def test_storage_drain_times_ordered_hbm_dram_flash_disk():
    order = ("hbm", "dram", "flash", "disk")
    by_kind = {k: [t.drain_time_s for t in STORAGE if t.kind == k] for k in order}
    for faster, slower in zip(order, order[1:]):
        assert max(by_kind[faster]) < min(by_kind[slower]), (faster, slower)
    # magnitudes: HBM ~20 ms, DRAM ~seconds, flash ~minutes to an hour, disk ~a day
    assert all(0.01 < d < 0.05 for d in by_kind["hbm"])
    assert all(1 < d < 30 for d in by_kind["dram"])
    assert all(100 < d < 2 * 3600 for d in by_kind["flash"])
    assert all(12 * 3600 < d < 3 * 86400 for d in by_kind["disk"])


def test_storage_golden_values():
    # H100 SXM5: 80 GB HBM3 at 3.35 TB/s (NVIDIA datasheet) -> ~23.9 ms.
    h100 = load_storage_tier("hbm-h100")
    assert h100.capacity_bytes == pytest.approx(80e9)
    assert h100.bandwidth_bytes_per_s == pytest.approx(3.35e12)
    assert h100.drain_time_s == pytest.approx(80 / 3350)
    # Seagate Exos X24: 24 TB at 285 MB/s sustained (data sheet) -> ~23.4 h.
    hdd = load_storage_tier("hdd-exos-x24")
    assert hdd.drain_time_s == pytest.approx(24e12 / 285e6)
    assert hdd.kind_rank == 3 and h100.kind_rank == 0
    # striping N identical drives leaves the drain time unchanged
    one = load_storage_tier("nvme-pm1743")
    node = load_storage_tier("nvme-node-8x-pm1743")
    assert node.drain_time_s == pytest.approx(one.drain_time_s)
    with pytest.raises(UnknownNameError):
        load_storage_tier("tape")


def test_storage_tier_rejects_bad_values():
    with pytest.raises(ValidationError):
        StorageTier(id="x", name="x", kind="dram", capacity_bytes=-1.0,
                    bandwidth_bytes_per_s=1.0, source="s", assumption=False)
    with pytest.raises(ValidationError):
        StorageTier(id="x", name="x", kind="tape", capacity_bytes=1.0,
                    bandwidth_bytes_per_s=1.0, source="s", assumption=False)


# ----------------------------------------------------------------------------- research notes

REFERENCE = Path(__file__).resolve().parents[1].parent / "shared" / "reference" / "prices.csv"

# (provider, model, start of tier_or_condition) -> (sheet id, tier name) for the rows that
# hold plain numbers; multi-model rows with text cells are checked by the golden tests above.
_ROWS = {
    ("Anthropic", "Claude Sonnet 4", "standard"): ("claude-sonnet-4", "standard"),
    ("Anthropic", "Claude Sonnet 4", "1M-context"): ("claude-sonnet-4", "long-context"),
    ("Anthropic", "Claude Sonnet 4.5", "standard"): ("claude-sonnet-4.5", "standard"),
    ("Anthropic", "Claude Sonnet 4.5", "1M-context"): ("claude-sonnet-4.5", "long-context"),
    ("Anthropic", "Claude Opus 4.5 / Opus 4.6", "standard"): ("claude-opus-4.5", "standard"),
    ("Anthropic", "Claude Sonnet 4.6", "standard"): ("claude-sonnet-4.6", "standard"),
    ("Anthropic", "Claude Opus 4.6 fast mode", "speed=fast, <=200K"):
        ("claude-opus-4.6-fast", "standard"),
    ("Anthropic", "Claude Opus 4.6 fast mode", "speed=fast, >200K"):
        ("claude-opus-4.6-fast", "long-context"),
    ("Google", "Gemini 2.5 Pro", "prompt <=200K"): ("gemini-2.5-pro", "standard"),
    ("Google", "Gemini 2.5 Pro", "prompt >200K"): ("gemini-2.5-pro", "long-context"),
    ("OpenAI", "GPT-5", "Standard"): ("gpt-5", "standard"),
    ("OpenAI", "GPT-5", "Priority"): ("gpt-5-priority", "standard"),
    ("OpenAI", "GPT-5 mini", "Priority"): ("gpt-5-mini-priority", "standard"),
    ("DeepSeek", "deepseek-reasoner (R1)", "standard"): ("deepseek-r1", "standard"),
    ("DeepSeek", "deepseek-chat (V3)", "standard"): ("deepseek-v3", "standard"),
}
_COLS = {
    "input_usd_per_mtok": "input_usd_per_token",
    "output_usd_per_mtok": "output_usd_per_token",
    "cache_read_usd_per_mtok": "cache_read_usd_per_token",
    "cache_write_5m_usd_per_mtok": "cache_write_5m_usd_per_token",
    "cache_write_1h_usd_per_mtok": "cache_write_1h_usd_per_token",
}


@pytest.mark.skipif(not REFERENCE.exists(), reason="research notes (../shared) not present")
def test_sheets_match_the_research_notes():
    checked = 0
    with REFERENCE.open(newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            key = next(
                (k for k in _ROWS if k[0] == row["provider"] and k[1] == row["model"]
                 and row["tier_or_condition"].startswith(k[2])),
                None,
            )
            if key is None:
                continue
            sheet_id, tier_name = _ROWS[key]
            tier = next(t for t in load_price_sheet(sheet_id).tiers if t.name == tier_name)
            for col, attr in _COLS.items():
                cell = row[col].strip()
                if not cell:
                    continue
                assert per_mtok(getattr(tier, attr)) == pytest.approx(float(cell)), (
                    sheet_id, tier_name, col)
            checked += 1
    assert checked == len(_ROWS)
