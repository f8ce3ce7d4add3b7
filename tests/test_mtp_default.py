"""`--mtp K` without `--acceptance` runs at one rule through every door (issue 27): the model's own MTP layers'
sourced rate (catalog meta.yaml, else catalog/speculation.yaml: DeepSeek-V3 report, 85%), and a model without draft
layers is refused in one line instead of an unsourced 0.7 in the CLI only."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import chalk
from chalk.analyses.traffic.serving import model_speculation, mtp_acceptance
from chalk.errors import InputError


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "chalk.faces.cli", *args], capture_output=True, text=True, timeout=300)


def test_the_rule():
    own = model_speculation("deepseek-v3")
    assert own is not None and mtp_acceptance("deepseek-v3") == own.acceptance == pytest.approx(0.85)
    assert mtp_acceptance("llama-3.1-8b", 0.6) == 0.6
    with pytest.raises(InputError, match="no MTP draft layers"):
        mtp_acceptance("llama-3.1-8b")


def test_cli_and_api_answer_alike():
    q = ["-m", "deepseek-v3", "-H", "h200", "--chips", "8", "-b", "64", "-c", "4096", "--mtp", "1"]
    p = _cli("estimate", *q, "--json")
    assert p.returncode == 0, p.stderr
    cli = json.loads(p.stdout)
    api = chalk.estimate("deepseek-v3", "h200", batch=64, context=4096, chips=8, mtp=1)
    assert cli["speculative"]["acceptance"] == pytest.approx(api.speculative.acceptance) == pytest.approx(0.85)
    assert cli["speculative"]["tokens_per_s"] == pytest.approx(api.speculative.tokens_per_s, rel=1e-9)


def test_a_model_without_draft_layers_needs_the_rate():
    p = _cli("estimate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--mtp", "2")
    assert p.returncode == 2 and "no MTP draft layers" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert _cli("estimate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--mtp", "2", "--acceptance", "0.6").returncode == 0
