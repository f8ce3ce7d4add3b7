"""A benchmark's whole run (`fixed_deployment(requests=...)`, validation rows with `num_prompts`) and the prefill
budget engines default to (issue 23: the request layer answers as benchmarks measure)."""

from __future__ import annotations

import pytest

from chalk.analyses.fidelity.validate import load_rows, parse_rows
from chalk.analyses.traffic.serving import default_chunk_tokens, fixed_deployment
from chalk.errors import InputError
from chalk.specs.engine import ENGINES, load_engine

Q = dict(layout="tp=8", concurrency=64, input_len=1000, output_len=200)


def test_default_prefill_budget_is_the_engines_median():
    """catalog/engines: vLLM (>= 70 GiB), SGLang (80-160 GB) and TensorRT-LLM all default to 8192 prompt tokens
    per step; with no engine named chalk prefills in chunks of that budget, never a burst in one step."""
    assert default_chunk_tokens() == 8192
    assert sorted(load_engine(e).chunked_prefill_tokens for e in ENGINES)[1] == 8192


def test_a_long_run_approaches_the_steady_state():
    steady = fixed_deployment("llama-3.1-70b", "h100", **Q)
    run = fixed_deployment("llama-3.1-70b", "h100", requests=64 * 40, **Q)
    assert run["output_tokens_per_s_per_gpu"] == pytest.approx(steady["output_tokens_per_s_per_gpu"], rel=0.08)
    assert "benchmark run" in run["latency_source"]


def test_a_short_run_pays_its_cold_start_and_ramp_down():
    """One wave of 64 prompts sent at once: each waits for the prefill of those ahead of it (mean TTFT above the
    steady state's) and the run ends with the last request alone (throughput below it)."""
    steady = fixed_deployment("llama-3.1-70b", "h100", **Q)
    burst = fixed_deployment("llama-3.1-70b", "h100", requests=64, **Q)
    assert burst["ttft_s"] > steady["ttft_s"]
    assert burst["output_tokens_per_s_per_gpu"] < steady["output_tokens_per_s_per_gpu"]
    ten = fixed_deployment("llama-3.1-70b", "h100", requests=640, **Q)
    assert burst["ttft_s"] > ten["ttft_s"]  # the first wave is 1/10 of a ten-round run's requests


def test_a_run_needs_at_least_its_seats():
    with pytest.raises(InputError, match="requests must be >= concurrency"):
        fixed_deployment("llama-3.1-70b", "h100", requests=10, **Q)
    for bad in (0, -5, 2.5, float("nan")):
        with pytest.raises(InputError):
            fixed_deployment("llama-3.1-70b", "h100", requests=bad, **Q)


def test_validation_rows_state_their_runs():
    """InferenceX's single-node runs send 10 x concurrency prompts (`--num-prompts $(( $CONC * 10 ))` in its
    benchmark scripts); dstack's bursts send N prompts at once; every stated run keeps its seats."""
    rows = load_rows()
    runs = [r for r in rows if r.num_prompts]
    assert len(runs) >= 200
    assert all(r.kind == "fixed" and r.num_prompts >= r.concurrency for r in runs)
    ix = [r for r in runs if r.family == "inferencex"]
    assert ix and all(r.num_prompts == 10 * r.concurrency for r in ix)
    head = "id,kind,model,hardware,gpus,precision,kv_precision,input_len,output_len,context,batch,tp,attn_dp,pp," \
           "min_user_tps,disaggregated,metric,measured,source,notes,group,engine,concurrency,ep,mtp,acceptance," \
           "engine_version,family,num_prompts\n"
    row = parse_rows(head + "x-out,fixed,llama-3.1-70b,h100,8,bf16,auto,1000,200,,,8,1,1,,,"
                     "output_tokens_per_s_per_gpu,100,s,n,g,vllm,64,,,,,f,640\n")[0]
    assert row.num_prompts == 640
