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


def test_report_names_the_step_of_every_figure(page):
    """issue 27: the serving step detail (a step carrying a prefill chunk) was called 'per step' beside decode
    figures; every time now says whether it is prefill or decode."""
    serving = page[page.index("4. The serving answer"):page.index("5. The lecture")]
    assert "per step" not in serving.replace("per-step", "")
    assert "fetch the weights once per decode step" in page
    assert "T (decode step time)" in page and "decode step time" in page
    assert "time to first token (prefill)" in page
    assert "the step that carries a new prompt&#x27;s prefill chunk beside the decoding batch (prefill + decode)" \
        in page
    assert "One replica decoding, no prefill" in page
    assert "The serving answer (prefill and decode)" in page


def test_report_takes_the_request_and_the_layout():
    """issue 27: --input-len / --output-len / --layout reach the serving answer and the decode table."""
    from chalk import api
    from chalk.analyses.traffic.serving import throughput

    page = build_report("llama-3.1-8b", "hgx-h100", context=4096, ideal=True, input_len=2000, output_len=300,
                        layout="tp=2")
    assert "serving requests of 2000 tokens in, 300 out (section 4), layout tp=2" in page
    assert "2000 tokens in, 300 out per request on average" in page and "layout fixed at tp=2" in page
    res = throughput("llama-3.1-8b", "hgx-h100", input_len=2000.0, output_len=300.0, ideal=True, pareto=True,
                     layout="tp=2")
    assert f"layout {res['layout']} (TP 2, EP 1, PP 1, DP 1)" in page
    m = re.search(r"Cheapest batch that fits: batch ([\d,]+): ([\d.]+) (µs|ms) per decode step", page)
    assert m
    r = api.estimate("llama-3.1-8b", "hgx-h100", float(m.group(1).replace(",", "")), 4096, ideal=True, layout="tp=2")
    assert r.layout["label"] == "TP2"
    assert float(m.group(2)) == pytest.approx(r.step_time_s * (1e6 if m.group(3) == "µs" else 1e3), rel=0.01)
    dist = build_report("llama-3.1-8b", "hgx-h100", context=4096, ideal=True,
                        input_len="lognormal:mean=2000,p99=8000", output_len=300)
    assert "serving requests of lognormal:mean=2000,p99=8000 tokens in" in dist


def test_cli_report_refuses_a_bad_request_before_work(tmp_path):
    out = tmp_path / "r.html"
    for args, word in ((["--input-len", "lognormal:mean=x"], "mean"), (["--output-len", "0"], "output_len"),
                       (["--layout", "tp=x"], "layout")):
        p = subprocess.run([sys.executable, "-m", "chalk.faces.cli", "report", "--model", "llama-3.1-8b", "-H",
                            "hgx-h100", "-o", str(out), *args], capture_output=True, text=True, timeout=120)
        assert p.returncode == 2 and word in p.stderr and "Traceback" not in p.stderr, p.stderr
        assert not out.exists()
