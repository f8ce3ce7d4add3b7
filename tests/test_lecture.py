"""`chalk lecture`: every claim built so far, computed, within the lecture's range where it has one."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from chalk.analyses.blackboard.lecture import all_claims
from chalk.specs.catalog import chip_ids

ISSUE2_IDS = ["critical_batch_deepseek_lecture", "critical_batch_deepseek_v3", "nvl72_hbm_tb", "batch1_cost_penalty",
              "slow_mode_saving"]


@pytest.fixture(scope="module")
def claims():
    return {c.id: c for c in all_claims()}


def test_issue2_claims_present(claims):
    for cid in ISSUE2_IDS:
        assert cid in claims
    for chip in chip_ids():
        assert f"dense_critical_batch.{chip}" in claims
        assert f"hbm_drain_time_ms.{chip}" in claims


def test_golden_claim_values(claims):
    # claims.md: H100 BF16 295; DeepSeek lecture 2400; real spec ~5,300; NVL72 13.5 TB; Rubin ~15 ms
    assert claims["dense_critical_batch.h100-sxm"].value == pytest.approx(295.4, abs=0.5)
    assert claims["critical_batch_deepseek_lecture"].value == 2400
    assert claims["critical_batch_deepseek_v3"].value == pytest.approx(5300, rel=0.05)
    assert claims["nvl72_hbm_tb"].value == pytest.approx(13.4, abs=0.1)
    assert claims["hbm_drain_time_ms.rubin"].value == pytest.approx(13.1, abs=0.5)


def test_claims_within_lecture_range(claims):
    outside = [c.id for c in claims.values() if c.within_lecture_range is False]
    assert outside == []


def test_lecture_json_shape():
    p = subprocess.run([sys.executable, "-m", "chalk.faces.cli", "lecture", "--json"], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    for c in d["claims"]:
        assert set(c) >= {"id", "value", "unit", "lecture_value", "assumptions", "explanation"}
        assert c["value"] is not None


def test_lecture_prose_mentions_numbers():
    p = subprocess.run([sys.executable, "-m", "chalk.faces.cli", "lecture"], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0 and "2400" in p.stdout and "critical batch" in p.stdout.lower()
    # a unit in brackets is text, not a rich style tag that swallows it (QA 2026-11-28)
    assert "[reversible/standard activation" in " ".join(p.stdout.split())
