"""Chip and system catalog: the YAML package data is complete, consistent and sourced.

Reads the YAML directly (yaml + pathlib only), independent of the loader in chalk.specs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

CATALOG = Path(__file__).resolve().parents[1] / "src" / "chalk" / "catalog"
CHIPS_DIR = CATALOG / "chips"
SYSTEMS_DIR = CATALOG / "systems"

REQUIRED_CHIPS = (
    "a100-sxm h100-sxm h800 h200 b200 gb200 b300 gb300 rubin "
    "mi300x mi325x mi355x tpu-v5e tpu-v5p tpu-v6e tpu-v7"
).split()

REQUIRED_SYSTEMS = {  # id -> (chip, chips in the scale-up domain)
    "dgx-a100": ("a100-sxm", 8),
    "hgx-h100": ("h100-sxm", 8),
    "hgx-h800": ("h800", 8),
    "hgx-h200": ("h200", 8),
    "hgx-b200": ("b200", 8),
    "gb200-nvl72": ("gb200", 72),
    "hgx-b300": ("b300", 8),
    "gb300-nvl72": ("gb300", 72),
    "vr200-nvl72": ("rubin", 72),
    "mi300x-8": ("mi300x", 8),
    "mi325x-8": ("mi325x", 8),
    "mi355x-8": ("mi355x", 8),
    "tpu-v5e-256": ("tpu-v5e", 256),
    "tpu-v5p-cube": ("tpu-v5p", 64),
    "tpu-v6e-256": ("tpu-v6e", 256),
    "tpu-v7-cube": ("tpu-v7", 64),
}

#: Every numeric chip field; each one present (and not null) needs a `sources` entry.
NUMERIC_FIELDS = ("dense_tflops", "hbm_gb", "hbm_tb_per_s", "scaleup_gb_per_s_bidir",
                  "scaleout_gbit_per_s", "tdp_w", "price_usd_per_hour")
#: Fields every chip must give a number for (tdp_w may be null where the vendor publishes none).
REQUIRED_NUMBERS = ("hbm_gb", "hbm_tb_per_s", "scaleup_gb_per_s_bidir", "scaleout_gbit_per_s",
                    "price_usd_per_hour")
#: Precision names the loader (chalk.specs.precision) accepts as dense_tflops keys.
KNOWN_PRECISIONS = {"fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4", "mxfp4"}
SYSTEM_KINDS = {"node", "rack", "pod", "chip"}


def _load_dir(folder: Path) -> dict[str, dict]:
    out = {}
    for path in sorted(folder.glob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert isinstance(data, dict), f"{path.name}: top level must be a mapping"
        out[path.stem] = data
    return out


CHIPS = _load_dir(CHIPS_DIR)
SYSTEMS = _load_dir(SYSTEMS_DIR)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# ---------------------------------------------------------------- presence and ids


@pytest.mark.parametrize("chip_id", REQUIRED_CHIPS)
def test_required_chip_file_exists(chip_id):
    assert (CHIPS_DIR / f"{chip_id}.yaml").is_file(), f"missing chips/{chip_id}.yaml"


@pytest.mark.parametrize("system_id", sorted(REQUIRED_SYSTEMS))
def test_required_system_file_exists(system_id):
    assert (SYSTEMS_DIR / f"{system_id}.yaml").is_file(), f"missing systems/{system_id}.yaml"


@pytest.mark.parametrize("system_id", sorted(REQUIRED_SYSTEMS))
def test_required_system_has_expected_chip_and_count(system_id):
    chip, count = REQUIRED_SYSTEMS[system_id]
    s = SYSTEMS[system_id]
    assert s["chip"] == chip
    assert s["chips"] == count


@pytest.mark.parametrize("name", sorted(CHIPS))
def test_chip_id_equals_file_name(name):
    assert CHIPS[name].get("id") == name


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_system_id_equals_file_name(name):
    assert SYSTEMS[name].get("id") == name


# ---------------------------------------------------------------- chip contents


@pytest.mark.parametrize("name", sorted(CHIPS))
def test_chip_has_dense_rates_with_bf16_or_fp4(name):
    rates = CHIPS[name].get("dense_tflops")
    assert isinstance(rates, dict) and rates, f"{name}: dense_tflops must be a non-empty mapping"
    assert "bf16" in rates or "fp4" in rates, f"{name}: dense_tflops needs bf16 or fp4"
    for precision, tflops in rates.items():
        assert precision in KNOWN_PRECISIONS, f"{name}: unknown precision {precision!r}"
        assert _is_number(tflops) and tflops > 0, f"{name}: dense_tflops.{precision} = {tflops!r}"


@pytest.mark.parametrize("name", sorted(CHIPS))
def test_chip_numbers_are_numbers(name):
    chip = CHIPS[name]
    for field in REQUIRED_NUMBERS:
        assert _is_number(chip.get(field)), f"{name}: {field} must be a number, got {chip.get(field)!r}"
    assert chip["hbm_gb"] > 0 and chip["hbm_tb_per_s"] > 0
    tdp = chip.get("tdp_w")
    assert tdp is None or (_is_number(tdp) and tdp > 0), f"{name}: tdp_w = {tdp!r}"


@pytest.mark.parametrize("name", sorted(CHIPS))
def test_every_numeric_field_has_a_source(name):
    chip = CHIPS[name]
    sources = chip.get("sources") or {}
    for field in NUMERIC_FIELDS:
        if field in chip and chip[field] is not None:
            text = sources.get(field)
            assert isinstance(text, str) and text.strip(), f"{name}: no sources entry for {field}"


@pytest.mark.parametrize("name", sorted(CHIPS))
def test_assumed_prices_explain_themselves(name):
    chip = CHIPS[name]
    assert isinstance(chip.get("price_is_assumption"), bool), f"{name}: price_is_assumption must be a bool"
    assert str(chip.get("price_date") or "").strip(), f"{name}: price_date missing"
    if chip["price_is_assumption"]:
        assert len(str(chip.get("price_note") or "")) > 20, f"{name}: an assumed price needs a reasoned price_note"


@pytest.mark.parametrize("name", sorted(CHIPS))
def test_chip_default_system_exists_and_uses_the_chip(name):
    default = CHIPS[name].get("default_system")
    assert default in SYSTEMS, f"{name}: default_system {default!r} has no systems/{default}.yaml"
    assert SYSTEMS[default]["chip"] == name, f"{name}: default_system {default} holds {SYSTEMS[default]['chip']}"


# ---------------------------------------------------------------- systems


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_system_chip_exists(name):
    chip = SYSTEMS[name].get("chip")
    assert chip in CHIPS, f"{name}: chip {chip!r} has no chips/{chip}.yaml"


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_system_shape(name):
    s = SYSTEMS[name]
    assert isinstance(s.get("chips"), int) and not isinstance(s["chips"], bool) and s["chips"] > 0
    assert s.get("kind") in SYSTEM_KINDS, f"{name}: kind {s.get('kind')!r}"
    assert str((s.get("sources") or {}).get("chips") or "").strip(), f"{name}: sources.chips missing"


# ---------------------------------------------------------------- names


def test_no_alias_collides_with_an_id_or_another_alias():
    owner: dict[str, str] = {}
    for kind, entries in (("chip", CHIPS), ("system", SYSTEMS)):
        for name in entries:
            assert name not in owner, f"id {name!r} used twice ({owner.get(name)} and {kind} {name})"
            owner[name] = f"{kind} {name}"
    for kind, entries in (("chip", CHIPS), ("system", SYSTEMS)):
        for name, data in entries.items():
            for alias in data.get("aliases") or []:
                assert isinstance(alias, str) and alias == alias.lower(), f"{kind} {name}: alias {alias!r} not lower-case"
                assert alias not in owner, f"{kind} {name}: alias {alias!r} collides with {owner[alias]}"
                owner[alias] = f"{kind} {name} (alias)"


# ---------------------------------------------------------------- golden values


def test_golden_h100_sxm():
    """NVIDIA H100 SXM5 datasheet via shared/reference/hardware.csv: 989.4 dense BF16, 3.35 TB/s."""
    h100 = CHIPS["h100-sxm"]
    assert h100["dense_tflops"]["bf16"] == pytest.approx(989.4)
    assert h100["hbm_tb_per_s"] == pytest.approx(3.35)
    # machine balance: FLOPs per HBM byte at BF16
    assert h100["dense_tflops"]["bf16"] / h100["hbm_tb_per_s"] == pytest.approx(295.3, abs=0.5)
