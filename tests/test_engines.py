"""Engine profiles: every default sourced, aliases, the GPU-dependent rules, and typed errors."""

from __future__ import annotations

import math

import pytest

import chalk
from chalk.equations import engine as EQ
from chalk.errors import ChalkError, InputError, UnknownNameError
from chalk.specs.catalog import load_chip
from chalk.specs.engine import ENGINES, EngineProfile, engine_defaults_table, load_engine

FIELDS = ("max_num_seqs", "cuda_graph_max_batch", "kv_cache_memory_fraction", "chunked_prefill_tokens",
          "step_overhead_s")


@pytest.mark.parametrize("eid", ENGINES)
def test_every_default_has_a_source_and_a_version(eid):
    p = load_engine(eid)
    assert isinstance(p, EngineProfile) and p.id == eid and p.kernel_framework == eid
    assert p.version and any(ch.isdigit() for ch in p.version)
    for f in FIELDS:
        src = p.sources.get(f, "")
        assert len(src) > 30, f"{eid}.{f} has no real source"
        # a source names the code (path or URL) it was read from, and its commit or version where code
        assert "/" in src
    assert p.kv_cache_memory_fraction_of in ("total", "free")
    assert 0 < p.kv_cache_memory_fraction <= 1
    assert p.max_num_seqs >= p.cuda_graph_max_batch >= 1 or eid == "vllm"
    if p.step_overhead_estimated:
        assert "ESTIMATE" in p.sources["step_overhead_s"]


def test_golden_defaults_as_read_from_the_engines():
    """Values read from the engines' code at the versions recorded in catalog/engines/*.yaml."""
    v, s, t = (load_engine(e) for e in ENGINES)
    # vLLM arg_utils._set_default_args (OPENAI_API_SERVER, >= 70 GiB non-A100), CacheConfig, _set_cudagraph_sizes
    assert (v.max_num_seqs, v.chunked_prefill_tokens, v.kv_cache_memory_fraction, v.cuda_graph_max_batch) == \
        (1024, 8192, 0.9, 512)
    assert v.kv_cache_memory_fraction_of == "total"
    # SGLang _handle_gpu_memory_settings on an 80 GB GPU at TP 1; request pool ceiling 4096
    assert (s.max_num_seqs, s.chunked_prefill_tokens, s.cuda_graph_max_batch) == (4096, 8192, 256)
    assert s.kv_cache_memory_fraction_of == "total"
    # TensorRT-LLM serve.py: kv_cache_free_gpu_memory_fraction 0.9 of FREE memory; CudaGraphConfig default 128
    assert (t.kv_cache_memory_fraction, t.kv_cache_memory_fraction_of, t.cuda_graph_max_batch) == (0.9, "free", 128)
    assert (t.max_num_seqs, t.chunked_prefill_tokens) == (2048, 8192)


def test_aliases_and_unknown():
    assert load_engine("tensorrt-llm").id == "trtllm"
    assert load_engine("trt-llm").id == "trtllm"
    assert load_engine("  VLLM ").id == "vllm"
    with pytest.raises(UnknownNameError) as e:
        load_engine("tgi")
    assert isinstance(e.value, ChalkError) and "vllm" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(UnknownNameError, match="did you mean"):
        load_engine("sglng")


def test_vllm_rule_depends_on_memory_and_a100():
    v = load_engine("vllm")
    h100 = v.for_gpu(80e9, chip="h100-sxm")
    a100 = v.for_gpu(80e9, chip="a100-sxm")
    small = v.for_gpu(48e9, chip="l40s")
    assert (h100.max_num_seqs, h100.chunked_prefill_tokens, h100.cuda_graph_max_batch) == (1024, 8192, 512)
    assert (a100.max_num_seqs, a100.chunked_prefill_tokens) == (256, 2048)
    assert (small.max_num_seqs, small.chunked_prefill_tokens, small.cuda_graph_max_batch) == (256, 2048, 512)
    # graph sizes count tokens: K = 3 speculative tokens leave 512 / 4 = 128 sequences in graphs
    assert v.decode_graph_batch(3) == 128 and v.decode_graph_batch(0) == 512
    assert "h100" in h100.resolved_for


def test_vllm_on_a_tpu_takes_the_small_defaults_whatever_its_memory():
    """QA 2026-11-28: TPU v5p (95 GB) and TPU7x (192 GB) took the >= 70 GiB GPU tier (1,024 sequences, 8,192 tokens),
    and throughput answered 590 in flight. vLLM reads a TPU's memory as 0 (TpuPlatform.get_device_total_memory
    raises, caught) and its TPU table never matches the device name: 256 sequences, 2,048 tokens on every TPU."""
    v = load_engine("vllm")
    for chip in ("tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu-v7"):
        p = v.for_gpu(load_chip(chip).hbm_bytes, chip=chip)
        assert (p.max_num_seqs, p.chunked_prefill_tokens) == (256, 2048), chip
    r = chalk.throughput("llama-3.1-8b", "tpu-v7", engine="vllm", input_len=1000, output_len=1000,
                         disaggregated=False)
    assert r["concurrency"] <= 256 * r["gpus"] + 8


@pytest.mark.parametrize("hbm, tp, chunk, graph, frac", [
    # hand-worked from _handle_gpu_memory_settings: reserved = 512 + 1.5 max(C,2048) + 2 G + 1024 tp/8 MiB
    (80e9, 1, 8192, 256, round((80e9 / 2**20 - (512 + 12288 + 512 + 128)) / (80e9 / 2**20), 3)),
    (80e9, 8, 8192, 512, round((80e9 / 2**20 - (512 + 12288 + 1024 + 1024)) / (80e9 / 2**20), 3)),
    (141e9, 8, 8192, 512, round((141e9 / 2**20 - 14848) / (141e9 / 2**20), 3)),
    (192e9, 8, 16384, 512, round((192e9 / 2**20 - (512 + 24576 + 1024 + 1024)) / (192e9 / 2**20), 3)),
    (40e9, 1, 4096, 32, round((40e9 / 2**20 - (512 + 6144 + 64 + 128)) / (40e9 / 2**20), 3)),
])
def test_sglang_memory_rule(hbm, tp, chunk, graph, frac):
    p = load_engine("sglang").for_gpu(hbm, tp=tp)
    assert (p.chunked_prefill_tokens, p.cuda_graph_max_batch) == (chunk, graph)
    assert p.kv_cache_memory_fraction == pytest.approx(frac, abs=1e-12)
    assert load_engine("sglang").kv_cache_memory_fraction == 0.824  # the catalog default is the 80e9 B, TP 1 case


def test_sglang_floor_dp_attention_and_speculation():
    s = load_engine("sglang")
    base = s.for_gpu(141e9, tp=8)
    dpa = s.for_gpu(141e9, tp=8, dp=8, attn_dp=True)
    spec = s.for_gpu(141e9, tp=8, speculative=True)
    assert dpa.kv_cache_memory_fraction < base.kv_cache_memory_fraction
    assert spec.kv_cache_memory_fraction < base.kv_cache_memory_fraction
    # on a >60 GiB GPU the reserve is floored at 10 GiB
    r = EQ.sglang_reserved_memory_mib(2048, 8, 1, 1, 70 * 1024)
    assert r == 10240.0


def test_sglang_request_pool():
    s = load_engine("sglang")
    assert s.scheduler_limit(kv_tokens=2_000_000, context_len=8192) == 4096      # capped
    assert s.scheduler_limit(kv_tokens=500_000, context_len=131072) == 2048      # floored
    assert s.scheduler_limit(kv_tokens=1000, context_len=131072) == 500          # KV // 2
    assert load_engine("vllm").scheduler_limit(kv_tokens=1000, context_len=8192) == 1024


def test_kv_cache_budget_total_vs_free():
    """80 GB, 40 GB weights, 2 GB other: vLLM 0.9 of total -> 72 - 42 = 30 GB; TRT-LLM 0.9 of free -> 34.2 GB."""
    v, t = load_engine("vllm"), load_engine("trtllm")
    assert v.kv_cache_bytes(80e9, 40e9, 2e9) == pytest.approx(30e9)
    assert t.kv_cache_bytes(80e9, 40e9, 2e9) == pytest.approx(34.2e9)
    assert v.kv_cache_bytes(80e9, 79e9, 0) == 0.0  # never negative


def test_kv_dtypes():
    assert load_engine("vllm").kv_dtype("fp8") == "fp8"
    assert load_engine("sglang").kv_dtype("fp8") == "fp8_e4m3"
    assert load_engine("trtllm").kv_dtype("bf16") == "auto"
    with pytest.raises(InputError):
        load_engine("vllm").kv_dtype("fp4")


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf, "80GB"])
def test_for_gpu_bad_memory(bad):
    with pytest.raises(InputError):
        load_engine("sglang").for_gpu(bad)


def test_for_gpu_bad_parallelism():
    with pytest.raises(InputError):
        load_engine("vllm").for_gpu(80e9, tp=0)
    with pytest.raises(InputError):
        load_engine("vllm").for_gpu(80e9, tp=1.5)


def test_profiles_are_immutable():
    p = load_engine("vllm")
    with pytest.raises(Exception):
        p.max_num_seqs = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        p.flags["tp"] = "--x"  # type: ignore[index]


def test_defaults_table_covers_engines_and_fields():
    rows = engine_defaults_table()
    assert {(r["engine"], r["field"]) for r in rows} == {(e, f) for e in ENGINES for f in FIELDS}
    assert all(r["source"] for r in rows)


def test_auto_kv_cache_is_the_engines_default():
    """A deployment that sets no KV dtype runs the engine's default: vLLM and SGLang store BF16 whatever the weights
    ('auto will use model data type'), TensorRT-LLM follows the checkpoint (chalk: an 8-bit cache beside 8-bit
    weights). The engine's answer says which, a named precision is kept, and the narrower cache is never slower."""
    from chalk.api import throughput

    assert {e: load_engine(e).kv_cache_dtype_auto for e in ENGINES} == \
        {"vllm": "activation", "sglang": "activation", "trtllm": "checkpoint"}
    assert all(load_engine(e).sources.get("kv_cache_dtype_auto") for e in ENGINES)
    kw = dict(layout="tp=1", concurrency=64, input_len=2000, output_len=500, precision="fp8")
    got = {e: throughput("llama-3.1-70b", "h200", engine=e, **kw) for e in ("vllm", "sglang", "trtllm")}
    assert {e: r["kv_precision"] for e, r in got.items()} == {"vllm": "bf16", "sglang": "bf16", "trtllm": "fp8"}
    assert throughput("llama-3.1-70b", "h200", **kw)["kv_precision"] == "fp8"  # no engine: chalk's reading
    named = throughput("llama-3.1-70b", "h200", engine="vllm", kv_precision="fp8", **kw)
    assert named["kv_precision"] == "fp8"
    assert named["output_tokens_per_s_per_gpu"] >= got["vllm"]["output_tokens_per_s_per_gpu"]
    assert load_engine("vllm@0.6").kv_precision("auto") == "bf16" and load_engine("vllm").kv_precision(None) == "bf16"


def test_a_release_sharing_a_profile_answers_as_the_one_asked():
    """trtllm's 1.1 and 1.2 share one profile, vLLM's 0.5-0.7 another: `--engine trtllm@1.1` said 'trtllm 1.2'."""
    from chalk.specs.engine import load_engine

    assert load_engine("trtllm@1.1").release == "1.1" and load_engine("trtllm@1.2").release == "1.2"
    assert load_engine("vllm@0.7").release == "0.7" and load_engine("vllm@0.6.3").release == "0.6"
    assert load_engine("trtllm").release == "1.2"  # the newest, unasked


@pytest.mark.parametrize("engine", ["vllm@0.6", "sglang@0.4"])
def test_estimate_names_the_kernel_tables_its_engine_ran(engine):
    """`estimate --engine` timed the step on the engine's tables but named chalk's default ones (trtllm) in `kernels`
    (QA 2026-11-27); it names what `throughput --engine` names."""
    from chalk.api import estimate
    from chalk.analyses.traffic.serving import throughput

    e = estimate("llama-3.1-8b", "h100", engine=engine)
    t = throughput("llama-3.1-8b", "h100", input_len=1000, output_len=200, engine=engine, replay_latency=False)
    assert e.kernels == t["kernels"] and e.kernels.startswith(engine.split("@")[0])


@pytest.mark.parametrize("engine", ["vllm@0.11", "vllm@0.6", "sglang@0.4"])
def test_every_door_names_the_kernel_tables_and_notes_alike(engine):
    """estimate, throughput, simulate and plan say which framework version their kernel tables come from, with the
    same note where the tables are another version's (estimate said nothing for vllm@0.11 on the vllm 0.24.0
    tables where throughput noted it; plan and simulate's text named no tables; QA 2026-11-28)."""
    import chalk
    from chalk.analyses.planning.plan import plan
    from chalk.api import estimate
    from chalk.analyses.traffic.serving import throughput

    e = estimate("llama-3.1-8b", "h100", engine=engine)
    t = throughput("llama-3.1-8b", "h100", input_len=1000, output_len=200, engine=engine, replay_latency=False)
    s = chalk.simulate("llama-3.1-8b", "h100", layout="tp=1", rate=2, requests=200, input_len=1000, output_len=200,
                       engine=engine)
    p = plan("llama-3.1-8b", "h100", rate=2, input_len=1000, output_len=200, engine=engine, modes=("aggregated",),
             sim_requests=500, curves=False, precision="bf16")
    o = p["options"][0]
    assert e.kernels == t["kernels"] == s.kernels == o["kernels"]
    kernel_notes = [n for n in t["notes"] if "kernel tables" in n]
    assert kernel_notes and all(n in e.notes and n in s.notes for n in kernel_notes)
    assert o["kernel_notes"] == kernel_notes


def test_tensorrt_llm_is_never_sized_on_layouts_it_cannot_launch():
    """TensorRT-LLM's enable_attention_dp makes every rank its own attention-DP rank (attention TP 1): plan sized
    DeepSeek-R1 on H200 as DP-attn2 x TP4 EP8 with a cap of 218 and launched --tp_size 8 with attention DP and
    --max_batch_size 109, 872 sequences (QA 2026-11-27). The search leaves such hybrids out for it; given one, it
    says why in one line; SGLang, whose DP ranks can be tensor-parallel, keeps them."""
    from chalk.analyses.traffic.serving import throughput

    r = throughput("deepseek-r1", "h200", input_len=2000, output_len=500, engine="trtllm", disaggregated=False,
                   replay_latency=False)
    p = r["parallelism"]
    assert p["attn_dp"] == 1 or p["tp"] == 1
    assert not load_engine("trtllm").attention_dp_with_tp and load_engine("sglang").attention_dp_with_tp
    with pytest.raises(InputError, match="attention TP 1"):
        throughput("deepseek-r1", "h200", layout="tp=4,attn_dp=2", concurrency=64, input_len=1000, output_len=200,
                   engine="trtllm")
    throughput("deepseek-r1", "h200", layout="tp=4,attn_dp=2", concurrency=64, input_len=1000, output_len=200,
               engine="sglang")
