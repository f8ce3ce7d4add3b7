"""A disaggregated deployment's prefill workers run their own layout (issue 23: deployments as engines run them)."""

import pytest

from chalk.analyses.fidelity.validate import Row, _prefill_layout
from chalk.analyses.traffic.serving import fixed_deployment, throughput
from chalk.errors import InputError

KW = dict(layout="tp=8", concurrency=64, input_len=4000, output_len=500, gpus=16, decode_gpus=8)


def test_default_prefill_layout_is_the_decode_layout():
    a = fixed_deployment("llama-3.3-70b", "h100", **KW)
    b = fixed_deployment("llama-3.3-70b", "h100", prefill_layout="tp=8", **KW)
    assert a["prefill_layout"] == b["prefill_layout"] == "TP8"
    assert a["prefill_pool_requests_per_s"] == pytest.approx(b["prefill_pool_requests_per_s"], rel=1e-12)
    assert a["ttft_s"] == pytest.approx(b["ttft_s"], rel=1e-12)


def test_prefill_pool_is_timed_on_its_own_layout():
    # eight prefill GPUs as two TP4 workers instead of one TP8 worker: less all-reduce per token, so the pool admits
    # more prompts per second, and the 64 requests in flight wait less for their prompt (here the TP8 pool is what
    # binds: ~5.6 requests/s, its queue ~2.5 s of TTFT)
    one = fixed_deployment("llama-3.3-70b", "h100", **KW)
    two = fixed_deployment("llama-3.3-70b", "h100", prefill_layout="tp=4", **KW)
    assert two["prefill_layout"] == "TP4"
    assert two["prefill_pool_requests_per_s"] > 1.2 * one["prefill_pool_requests_per_s"]
    assert two["ttft_s"] < 0.5 * one["ttft_s"]
    # Little's law holds either way: in flight = throughput x time per request (TTFT + output x TPOT)
    for r in (one, two):
        x = r["output_tokens_per_s_per_gpu"] * r["gpus"] / r["output_len"]
        assert x * (r["ttft_s"] + r["output_len"] * r["tpot_s"]) == pytest.approx(64, rel=0.03)


def test_prefill_layout_needs_a_disaggregated_deployment():
    with pytest.raises(InputError, match="prefill workers"):
        fixed_deployment("llama-3.3-70b", "h100", prefill_layout="tp=8", **{**KW, "gpus": 12})
    with pytest.raises(InputError, match="prefill"):
        fixed_deployment("llama-3.3-70b", "h100", layout="tp=8", concurrency=64, input_len=4000, output_len=500,
                         prefill_layout="tp=4")
    with pytest.raises(InputError, match="--prefill-layout"):
        throughput("llama-3.3-70b", "h100", layout="tp=8", concurrency=64, input_len=4000, output_len=500,
                   prefill_layout="tp=4")


def _row(notes):
    return Row(id="x", kind="fixed", model="deepseek-r1", hardware="b200", gpus=12, precision="fp8",
               kv_precision="auto", input_len=1000.0, output_len=1000.0, context=None, batch=None, tp=8, attn_dp=1,
               pp=1, min_user_tps=None, disaggregated=True, metric="ttft_s", measured=1.0, source="s", notes=notes)


@pytest.mark.parametrize("notes, layout", [
    ("prefill 1x(TP4 EP4 DP-attn) = 4 GPUs, decode 1x(TP8 EP8) = 8 GPUs", "tp=1,attn_dp=4,ep=4"),
    ("prefill 2x(TP4 EP1) = 8 GPUs, decode 4x(TP8 EP1) = 32 GPUs", "tp=4"),
    ("prefill 1x(TP8 EP8) = 8 GPUs, decode 1x(TP8 EP8) = 8 GPUs", "tp=8,ep=8"),
    ("prefill 1x(TP2) = 2 GPUs, decode 3x(TP2) = 6 GPUs", "tp=2"),
    ("decode 3x(TP2) = 6 GPUs", None),
])
def test_validation_rows_name_their_prefill_workers(notes, layout):
    assert _prefill_layout(_row(notes)) == layout
