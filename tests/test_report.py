"""`chalk report`: one self-contained HTML page with the equations, embedded figures and every source."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from chalk.errors import ChalkError, InputError
from chalk.faces.report import build_report, write_report


@pytest.fixture(scope="module")
def page() -> str:
    return build_report("llama-3.1-8b", "hgx-h100", context=4096, ideal=True)


def test_report_has_every_equation_with_numbers(page):
    for eq in ("Eq. 1", "Eq. 2", "Eq. 3", "Eq. 4", "Eq. 5", "Balance context"):
        assert eq in page
    assert "T = max(T_compute, T_memory)" in page
    assert "B* = (FLOP/s" in page
    assert "cost per token = T" in page
    assert re.search(r"\d+(\.\d+)? (µs|ms)", page)  # times with units
    assert "$" in page and "per million" in page


def test_report_embeds_its_figures(page):
    imgs = re.findall(r"<img [^>]*src='data:image/png;base64,([A-Za-z0-9+/=]+)'", page)
    assert len(imgs) >= 3  # latency vs batch, cost vs batch, cost vs context
    assert all(len(b) > 20_000 for b in imgs)


def test_report_loads_nothing_from_the_network(page):
    low = page.lower()
    assert not re.search(r"""src\s*=\s*["']?(https?:)?//""", low)
    assert "<link" not in low and "<script" not in low and "@import" not in low
    assert not re.search(r"url\(\s*['\"]?(https?:)?//", low)


def test_report_has_serving_answer_claims_and_sources(page):
    assert "The serving answer" in page and "batch" in page
    assert "Every assumption and source" in page
    assert "glennklockwood.com" in page or "datasheet" in page.lower()  # the chip's sources
    assert "huggingface.co" in page  # the model's source
    assert "efficiency" in page and "ideal" in page
    assert "claims" in page.lower()


def test_write_report_checks_the_path(tmp_path):
    with pytest.raises(InputError, match=r"\.html"):
        write_report(tmp_path / "r.pdf", "llama-3.1-8b", "h100")
    with pytest.raises(InputError, match="does not exist"):
        write_report(tmp_path / "no" / "r.html", "llama-3.1-8b", "h100")
    with pytest.raises(ChalkError):
        write_report(tmp_path / "r.html", "llama-9", "h100")


def test_cli_report_writes_a_page(tmp_path):
    out = tmp_path / "report.html"
    p = subprocess.run([sys.executable, "-m", "chalk.faces.cli", "report", "--model", "deepseek-v3", "--hardware",
                        "gb200-nvl72", "-o", str(out)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    text = out.read_text(encoding="utf-8")
    assert text.startswith("<!doctype html>") and text.rstrip().endswith("</html>")
    assert "deepseek-v3" in text and "gb200-nvl72" in text
    p = subprocess.run([sys.executable, "-m", "chalk.faces.cli", "report", "--model", "deepseek-v3", "--hardware",
                        "nope-9", "-o", str(out)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stderr.startswith("chalk: error:")


def test_report_reconciles_serving_with_the_roofline_table(page):
    """issue 12: the serving answer and the roofline table sit side by side with the reasons they differ."""
    assert "Why the serving answer and the roofline table differ" in page
    for reason in ("Batch.", "Prefill.", "Layout and overheads.", "Context."):
        assert reason in page
    assert "sequences per scheduler" in page and "of its GPU time goes to prefill" in page


def test_claims_table_shows_the_range_it_checks(page):
    assert "accepted range" in page and "within range" in page
    assert re.search(r"<td[^>]*>100 – 600</td>", page)  # the dense critical batch's accepted range


def test_report_runs_no_experiment(monkeypatch):
    """The RevNet figures come from the closed form; measuring would take seconds (issue 12)."""
    from chalk.analyses.blackboard import reversible

    def boom(*a, **k):
        raise AssertionError("the report ran the RevNet experiment")

    monkeypatch.setattr(reversible, "measure_memory", boom)
    assert "revnet_memory_saving" in build_report("llama-3.1-8b", "hgx-h100", context=4096, ideal=True)
