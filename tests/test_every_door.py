"""One question through every door (issue 27's done-when): `estimate`, `throughput --layout` (search and fixed
concurrency), `simulate --concurrency`, `plan`, the report, the web page and the Python API answer the quantities
they share within 2%, under the same unit-labelled names (`*_per_gpu`, `*_s`).

The question: Llama-3.1-70B on one 8 x H100 box (hgx-h100), BF16, a decode step of 64 sequences at 4,096 tokens of
context (the web page's defaults), and requests of 2,000 prompt / 500 output tokens on the layout that step uses.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import chalk

pytestmark = pytest.mark.slow

M, H, B, C, I, O = "llama-3.1-70b", "hgx-h100", 64, 4096, 2000, 500


def _cli(*args) -> dict:
    p = subprocess.run([sys.executable, "-m", "chalk.faces.cli", *args, "--json"], capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def _close(a, b, rel=0.02):
    return a == pytest.approx(b, rel=rel)


@pytest.fixture(scope="module")
def step():
    return chalk.estimate(M, H, B, C)


@pytest.fixture(scope="module")
def layout(step):
    p = step.layout
    return f"tp={p['tp']},ep={p['ep']},pp={p['pp']},attn_dp={p['attn_dp']}"


def test_the_decode_step_through_the_cli_the_api_and_the_web_page(step):
    cli = _cli("estimate", "-m", M, "-H", H, "-b", str(B), "-c", str(C))
    assert _close(cli["step_time_s"], step.step_time_s)
    assert _close(cli["tokens_per_s_per_gpu"], step.tokens_per_s_per_gpu)
    pytest.importorskip("streamlit")
    pytest.importorskip("plotly")
    from streamlit.testing.v1 import AppTest

    import chalk.faces.web_app as web_app

    at = AppTest.from_file(str(Path(web_app.__file__)), default_timeout=180).run()
    assert not at.exception
    table = next(m.value for m in at.markdown if m.value.startswith("| Decode step"))
    head, _, values = table.replace("\\", "").split("\n")
    cells = dict(zip([c.strip() for c in head.strip("|").split("|")],
                     [c.strip().strip("*") for c in values.strip("|").split("|")]))
    gpus = int(step.chips)
    ms = float(re.match(r"([\d.]+) ms", cells[f"Decode step (layout view, {gpus} GPUs)"]).group(1))
    assert _close(ms * 1e-3, step.step_time_s)  # shown to two or three figures
    assert _close(float(cells["Output tokens/s per GPU"].replace(",", "")), step.tokens_per_s_per_gpu)


def test_the_served_point_through_the_cli_the_api_and_the_report(layout):
    from chalk.faces.report import serving_answer

    api = chalk.throughput(M, H, input_len=I, output_len=O, layout=layout)
    cli = _cli("throughput", "-m", M, "-H", H, "--layout", layout, "--input-len", str(I), "--output-len", str(O))
    rep = serving_answer(M, H, context=I, chips=None, precision=None, kv_precision="auto", ideal=False,
                         input_len=I, output_len=O, layout=layout)["result"]
    for k in ("output_tokens_per_s_per_gpu", "tpot_s", "ttft_s"):
        assert _close(cli[k], api[k]) and _close(rep[k], api[k]), k


def test_one_deployment_through_throughput_simulate_the_api_and_plan(layout):
    api = chalk.throughput(M, H, input_len=I, output_len=O, layout=layout, concurrency=B)
    cli = _cli("throughput", "-m", M, "-H", H, "--layout", layout, "--concurrency", str(B), "--input-len", str(I),
               "--output-len", str(O))
    sim = _cli("simulate", "-m", M, "-H", H, "--layout", layout, "--concurrency", str(B), "--input-len", str(I),
               "--output-len", str(O))
    for k in ("output_tokens_per_s_per_gpu", "tpot_s", "ttft_s"):
        assert _close(cli[k], api[k]), k
    assert _close(sim["output_tokens_per_s_per_gpu"], api["output_tokens_per_s_per_gpu"])
    assert _close(sim["mean_tpot_s"], api["tpot_s"]) and _close(sim["mean_ttft_s"], api["ttft_s"])
    # plan sizes the same demand (64 users) on the same box: its option's predicted figures are the fixed
    # deployment's at that option's layout and concurrency, in closed form (the replay then checks its p99s)
    from chalk.analyses.traffic.serving import fixed_deployment

    plan = chalk.plan(M, H, users=B, input_len=I, output_len=O, precision=None, modes=("aggregated",),
                      sim_requests=2000, curves=False)
    o = plan["options"][0]
    p = o["parallelism"]
    fixed = fixed_deployment(M, H, layout=f"tp={p['tp']},ep={p['ep']},pp={p['pp']},attn_dp={p['attn_dp']}",
                             concurrency=int(round(o["concurrency_per_replica"])), input_len=I, output_len=O,
                             engine=o["engine"], precision=o["precision"], simulate=False)
    assert _close(o["predicted"]["tpot_s"], fixed["tpot_s"]) and _close(o["predicted"]["ttft_s"], fixed["ttft_s"])
