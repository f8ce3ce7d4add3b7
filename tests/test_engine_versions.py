"""Engine releases as a dimension (issue 24 item 3): --engine NAME@VERSION, per-release defaults and rules, the
kernel tables of the nearest measured framework version, and every answer naming where its kernels come from."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import chalk
from chalk.errors import ChalkError, InputError, UnknownNameError
from chalk.specs.catalog import load_chip
from chalk.specs.engine import ENGINES, engine_defaults_table, known_releases, load_engine, parse_engine
from chalk.analyses.step.kernels import kernel_profile, nearest_version

PKG = "aiconfigurator-core 0.12.0 tables"


def cli(*args):
    p = subprocess.run([sys.executable, "-m", "chalk.faces.cli", *args], capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


# --------------------------------------------------------------------------- parsing and selection
@pytest.mark.parametrize("text, want", [("vllm", ("vllm", None)), ("vllm@0.6", ("vllm", "0.6")),
                                        (" SGLang@v0.4 ", ("SGLang", "0.4")), ("trt-llm@1.2", ("trt-llm", "1.2"))])
def test_parse_engine(text, want):
    assert parse_engine(text) == want


@pytest.mark.parametrize("bad", ["vllm@", "@0.6", "vllm@0.6@1"])
def test_parse_engine_rejects_malformed(bad):
    with pytest.raises(InputError):
        load_engine(bad)


def test_name_alone_is_the_newest_release():
    for eid in ENGINES:
        p = load_engine(eid)
        assert p.newest and p.kernel_version is None
        assert p.release == known_releases(eid)[0]
        assert load_engine(f"{eid}@{p.release}") == p  # naming the newest release changes nothing
    assert known_releases("vllm") == ("0.11", "0.6")
    assert known_releases("sglang") == ("0.5", "0.4")


def test_release_prefix_matches():
    """A patch release answers to its series: vllm@0.6.3 -> the 0.6 profile, sglang@0.5.4 -> 0.5; 0.1 is not 0.11."""
    assert load_engine("vllm@0.6.3").release == "0.6"
    assert load_engine("sglang@0.5.4").release == "0.5"
    assert load_engine("trtllm@1.1").release == "1.1"  # one profile read from the 1.1/1.2 series, named as asked
    with pytest.raises(UnknownNameError):
        load_engine("vllm@0.1")


def test_every_v0_release_of_vllm_answers_to_the_v0_profile():
    """vLLM ran its V0 engine by default up to 0.7.x (V1 became the default in 0.8.0): 0.5, 0.6 and 0.7 releases take
    the V0 defaults (256 sequences, 512-token chunks), each named as itself; 0.8 has no profile of its own;
    validation rows map the same
    way (validate.row_engine), so a 0.7.3 run is answered with V0's limits, a 0.10.2 run with the newest profile's."""
    from chalk.analyses.fidelity.validate import Row, row_engine

    for v in ("0.5.4", "0.6.3.dev116", "0.7", "0.7.3.dev138+g21f6ca217"):
        p = load_engine(f"vllm@{v}")
        assert p.release == v[:3] and p.max_num_seqs == 256 and p.chunked_prefill_tokens == 512
    with pytest.raises(UnknownNameError):
        load_engine("vllm@0.8")

    def row(engine, version):
        return Row(id="r", kind="fixed", model="llama-3.1-8b", hardware="h100", gpus=1, precision="bf16",
                   kv_precision="auto", input_len=1, output_len=1, context=None, batch=None, tp=1, attn_dp=1, pp=1,
                   min_user_tps=None, disaggregated=False, metric="tpot_s", measured=1.0, source="s", notes="",
                   engine=engine, engine_version=version)

    assert row_engine(row("vllm", "0.7.3")) == "vllm@0.7"
    assert row_engine(row("vllm", "0.10.2")) == row_engine(row("vllm", "0.11.0")) == "vllm"
    assert row_engine(row("sglang", "0.4.3.post2")) == "sglang@0.4"
    assert row_engine(row("trtllm", "0.17.post1.dev")) == "trtllm"  # no profile of its own: the newest
    assert row_engine(row("other", "1.0")) is None


def test_unknown_version_is_one_typed_line_listing_the_known_ones():
    with pytest.raises(UnknownNameError) as e:
        load_engine("vllm@0.10")
    msg = str(e.value)
    assert isinstance(e.value, ChalkError) and "\n" not in msg
    assert "vllm version '0.10'" in msg and "known: 0.5, 0.6, 0.7, 0.11" in msg  # every release it accepts
    assert "did you mean 0.11, 0.7, 0.6?" in msg


def test_cli_unknown_version_exits_2_with_one_line():
    code, out, err = cli("throughput", "-m", "llama-3.1-8b", "--hardware", "h100-sxm", "--input-len", "1000",
                         "--output-len", "200", "--engine", "sglang@0.3")
    assert code == 2
    lines = [x for x in err.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and "sglang version '0.3'" in lines[0] and "0.4, 0.5" in lines[0], err
    assert "Traceback" not in err


# --------------------------------------------------------------------------- per-release defaults (sources in YAML)
@pytest.mark.parametrize("tp, frac", [(1, 0.88), (2, 0.87), (4, 0.85), (8, 0.81), (16, 0.79)])
def test_sglang_04_memory_fraction_by_tp(tp, frac):
    """0.4-series ServerArgs.__post_init__: mem_fraction_static by tp_size (see sglang.yaml's 0.4 sources); the
    0.5 rule computes it from the reserved MiB instead, so the two releases differ."""
    old = load_engine("sglang@0.4").for_gpu(80e9, tp=tp)
    assert old.kv_cache_memory_fraction == frac
    assert (old.chunked_prefill_tokens, old.cuda_graph_max_batch) == (8192, 160)
    assert load_engine("sglang").for_gpu(80e9, tp=tp).kv_cache_memory_fraction != frac


def test_sglang_04_small_gpu_tier():
    """Under 25,000 MiB: chunk 2048, graphs to 8 sequences (80 at TP >= 4)."""
    s = load_engine("sglang@0.4")
    assert (s.for_gpu(24e9, tp=1).chunked_prefill_tokens, s.for_gpu(24e9, tp=1).cuda_graph_max_batch) == (2048, 8)
    assert s.for_gpu(24e9, tp=4).cuda_graph_max_batch == 80


def test_vllm_06_defaults_and_graphs_count_sequences():
    """V0: 256 sequences on every GPU, 512-token chunks, CUDA graphs up to 256 sequences (not tokens: a K = 3
    speculative batch keeps all 256 in graphs, where V1 0.11 keeps 512 / 4 = 128)."""
    old = load_engine("vllm@0.6").for_gpu(80e9, chip="h100-sxm")
    assert (old.max_num_seqs, old.chunked_prefill_tokens, old.cuda_graph_max_batch) == (256, 512, 256)
    assert old.decode_graph_batch(3) == 256
    assert load_engine("vllm").for_gpu(80e9, chip="h100-sxm").decode_graph_batch(3) == 128
    assert old.flags == load_engine("vllm").flags  # fields a release does not state are the newest's


def test_every_release_default_has_a_source():
    rows = engine_defaults_table()
    assert {(r["engine"], r["release"]) for r in rows} >= {("vllm", "0.6"), ("sglang", "0.4"), ("trtllm", "1.2")}
    for r in rows:
        assert r["source"], r
    old = {r["field"]: r["source"] for r in rows if (r["engine"], r["release"]) == ("sglang", "0.4")}
    assert "0.4-series" in old["kv_cache_memory_fraction"] and "NOT re-read" in old["max_num_seqs"]


def test_engine_module_has_no_engine_name_conditionals():
    """issue 29: rules are data; specs/engine.py compares nothing with an engine's name or id."""
    src = Path(chalk.__file__).parent / "specs" / "engine.py"
    tree = ast.parse(src.read_text())
    names = set(ENGINES) | {"tensorrt-llm", "trt-llm", "sgl", "vllm-v1"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            parts = [node.left, *node.comparators]
            consts = {p.value for p in parts if isinstance(p, ast.Constant) and isinstance(p.value, str)}
            assert not consts & names, ast.unparse(node)
            assert not any(isinstance(p, ast.Attribute) and p.attr == "id" for p in parts), ast.unparse(node)
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            assert node.slice.value not in names, ast.unparse(node)


# --------------------------------------------------------------------------- kernel tables per version
@pytest.mark.parametrize("want, have, nearest", [
    ("0.5.6", ["0.5.14", "0.5.6.post2"], "0.5.6.post2"),   # same release, a post build
    ("0.4", ["0.5.14", "0.5.6.post2"], "0.5.6.post2"),     # older than any measured: the oldest
    ("0.5.12", ["0.5.10", "0.5.14"], "0.5.10"),            # between: the newest not newer
    ("0.11", ["0.14.0", "0.24.0"], "0.14.0"),
    ("1.3.0rc22", ["1.3.0rc20", "1.3.0rc23"], "1.3.0rc20"),
])
def test_nearest_version(want, have, nearest):
    assert nearest_version(want, have) == nearest


def test_older_release_uses_its_nearest_measured_tables_and_says_so():
    h100 = load_chip("h100-sxm")
    old = kernel_profile(h100, "sglang", "0.4").provenance(("gemm", "mha_decode", "moe"))
    assert old["versions"] == {"gemm": "sglang 0.5.6.post2", "mha_decode": "sglang 0.5.14", "moe": "sglang 0.5.10"}
    assert any("nearest measured version" in n and "0.5.6.post2" in n for n in old["notes"])
    new = kernel_profile(h100, "sglang").provenance(("gemm", "mha_decode", "moe"))
    assert new == {"kernels": f"sglang 0.5.14 ({PKG})", "versions": dict.fromkeys(("gemm", "mha_decode", "moe"),
                                                                                   "sglang 0.5.14"), "notes": []}


def test_versions_time_the_same_gemm_differently():
    """h100_sxm SGLang 0.5.6.post2 and 0.5.14 GEMM tables are distinct measurements: the same bf16 shape
    (Llama-3.1-8B's MLP up-projection at 64 rows) gets a different time from each, both within 2x."""
    h100 = load_chip("h100-sxm")
    t_old = kernel_profile(h100, "sglang", "0.4").gemm_time_s(64.0, 28672.0, 4096.0, "bf16")
    t_new = kernel_profile(h100, "sglang").gemm_time_s(64.0, 28672.0, 4096.0, "bf16")
    assert t_old != t_new and 0.5 < t_old / t_new < 2.0


# --------------------------------------------------------------------------- answers name their kernels
def test_throughput_names_engine_release_and_kernels():
    kw = dict(input_len=1000, output_len=200)
    new = chalk.throughput("llama-3.1-8b", "h100-sxm", engine="sglang", **kw)
    old = chalk.throughput("llama-3.1-8b", "h100-sxm", engine="sglang@0.4", **kw)
    assert new["kernels"] == f"sglang 0.5.14 ({PKG})" and new["engine_release"] == "0.5"
    assert old["engine_release"] == "0.4" and "sglang 0.5.6.post2 (gemm)" in old["kernels"]
    assert any("no sglang 0.4 kernel tables" in n for n in old["notes"])
    plain = chalk.throughput("llama-3.1-8b", "h100-sxm", **kw)
    assert plain["kernels"] == f"trtllm 1.3.0rc20 ({PKG})" and plain["engine_release"] is None


def test_plan_sizes_and_launches_the_release_asked_for():
    """`plan --engine sglang@0.4` sizes on SGLang 0.4's profile and says so (QA 2026-11-28: the release was dropped,
    every option answered as 0.5); without a release, the newest."""
    kw = dict(users=32, input_len=2000, output_len=300, modes=("aggregated",))
    old = chalk.plan("llama-3.1-70b", ["h100"], engine="sglang@0.4", **kw)
    new = chalk.plan("llama-3.1-70b", ["h100"], engine="sglang", **kw)
    o, n = old["options"][0], new["options"][0]
    assert (o["engine"], o["engine_release"]) == ("sglang", "0.4") and o["engine_version"].startswith("0.4")
    assert (n["engine"], n["engine_release"]) == ("sglang", "0.5")
    assert "sglang" in o["launch"] and "sglang.launch_server" in o["launch"]["sglang"]


def test_a_release_without_the_pools_connector_is_not_planned_or_launched_disaggregated():
    """QA: `--engine vllm@0.6` (the V0 releases 0.5-0.7.x) rendered disaggregated pools with
    `--kv-transfer-config '{"kv_connector":"NixlConnector",...}'`, a V1-engine connector. That release profile now
    says it has none (vllm.yaml `disaggregated_serving: false`, sourced): plan leaves its disaggregated mode out with
    the reason, refuses it in one line when it is the only mode asked, and a pool is not rendered for it."""
    from chalk.specs.launch import Deployment, render_launch

    args = ("plan", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--rate", "20", "--input-len", "8000", "--output-len",
            "200", "--ttft-p99", "1.0", "--tpot-p99", "0.02", "--engine", "vllm@0.6")
    rc, out, err = cli(*args, "--mode", "disaggregated")
    assert "NixlConnector" not in out and rc == 2 and len(err.strip().splitlines()) == 1, (rc, err)
    why = "vLLM 0.6 has no KV connector for the disaggregated prefill/decode pools chalk launches"
    assert why in err, err
    rc, out, err = cli(*args, "--json")
    assert rc == 0, err
    r = json.loads(out)
    assert {o["mode"] for o in r["options"]} == {"aggregated"} and "NixlConnector" not in out
    assert any(u["mode"] == "disaggregated" and u["why"].startswith(why) for u in r["unavailable"]), r["unavailable"]
    old, new = load_engine("vllm@0.6"), load_engine("vllm")
    with pytest.raises(InputError, match=why):
        render_launch("vllm", Deployment("llama-3.1-8b", role="prefill"), old)
    assert "NixlConnector" in render_launch("vllm", Deployment("llama-3.1-8b", role="prefill"), new).command
    assert not old.disaggregated_serving and "NixlConnector" in old.sources["disaggregated_serving"]
    assert all(load_engine(e).refuses_disaggregation() is None for e in ENGINES)


def test_throughput_sizes_no_disaggregated_pools_for_a_release_without_their_connector():
    """The V0 vLLM releases run no disaggregated pools (the plan test above): `throughput --mode disaggregated` sized
    them anyway (its launch only was refused). It now refuses in one line, and the mode search answers aggregated,
    saying why."""
    args = ("throughput", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--input-len", "1000", "--output-len", "200",
            "--engine", "vllm@0.6")
    why = "vLLM 0.6 has no KV connector for the disaggregated prefill/decode pools chalk launches"
    rc, out, err = cli(*args, "--mode", "disaggregated")
    assert rc == 2 and why in err and len(err.strip().splitlines()) == 1, (rc, err)
    rc, out, err = cli(*args, "--json")
    assert rc == 0, err
    r = json.loads(out)
    assert r["mode_search"]["chosen"] == "aggregated" and why in r["mode_search"]["disaggregated"]["error"]


def test_a_release_lacking_a_launch_flag_gets_no_launch_that_needs_it():
    """QA 2026-11-28: `--engine vllm@0.6` launched DeepSeek-R1 as DP-attention x EP16 with --data-parallel-size,
    --enable-expert-parallel and --speculative-config, flags the V0 releases do not have (0.11's were printed for
    every release). The release lists the flags it lacks (vllm.yaml `absent_flags`, sourced); a launch using one is
    not rendered, with the reason, and one that needs none is rendered as before."""
    from chalk.specs.launch import Deployment, render_launch

    old = load_engine("vllm@0.6")
    assert "--enable-expert-parallel" in old.absent_flags and "absent_flags" in old.sources
    assert load_engine("vllm").absent_flags == ()
    with pytest.raises(InputError, match="vLLM 0.6 has no --data-parallel-size"):
        render_launch("vllm", Deployment("deepseek-r1", tp=1, dp=8, ep=8), old)
    plain = render_launch("vllm", Deployment("llama-3.1-8b", tp=2), old)
    assert not old.lacks(plain.argv) and "--tensor-parallel-size" in plain.argv
    rc, out, err = cli("plan", "-m", "deepseek-r1", "-H", "h100-sxm", "--engine", "vllm@0.6", "--rate", "5",
                       "--input-len", "2000", "--output-len", "500", "--mode", "aggregated", "--sim-requests", "2000",
                       "--json")
    assert rc == 0, err
    o = json.loads(out)["options"][0]
    assert "vllm" not in o["launch"] and "vllm serve" not in out
    assert any("vLLM 0.6 has no --data-parallel-size" in n for n in o["launch_notes"]), o["launch_notes"]


def test_estimate_names_kernels():
    r = chalk.estimate("llama-3.1-70b", "h100-sxm", batch=16)
    assert r.kernels == f"trtllm 1.3.0rc20 ({PKG})"
    mi = chalk.estimate("llama-3.1-8b", "mi300x", batch=16)
    assert "(curve)" in mi.kernels and any("no measured kernel tables" in n for n in mi.notes)
    assert chalk.estimate("llama-3.1-8b", "h100-sxm", batch=16, ideal=True).kernels == "roofline (no kernel tables)"


def test_cli_json_and_text_name_kernels():
    args = ("-m", "llama-3.1-8b", "--hardware", "h100-sxm", "--input-len", "1000", "--output-len", "200",
            "--engine", "vllm@0.6")
    code, out, err = cli("throughput", *args, "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["engine_release"] == "0.6" and d["kernels"].startswith("vllm 0.24.0")
    code, out, err = cli("throughput", *args)
    assert code == 0 and "kernel tables" in out and "vllm 0.6 defaults" in out.replace("\n", " "), out
    code, out, err = cli("estimate", "-m", "llama-3.1-8b", "--hardware", "h100-sxm", "--batch", "8", "--json")
    assert code == 0 and json.loads(out)["kernels"] == f"trtllm 1.3.0rc20 ({PKG})"


@pytest.mark.parametrize("chip, engine", [("tpu-v6e", "trtllm"), ("mi300x", "trtllm@1.1"), ("tpu-v6e", "sglang")])
def test_an_engine_is_refused_on_chips_it_does_not_run_on(chip, engine):
    """The chips an engine runs on are profile data (`vendors`, sourced): TensorRT-LLM on an MI300X or a TPU was
    answered as if it ran there (QA 2026-11-28). estimate, throughput and fixed deployments refuse in one line;
    plan sizes only the engines that run on each chip."""
    from chalk.analyses.planning.plan import engines_for_vendor

    with pytest.raises(InputError, match="does not run on"):
        chalk.estimate("llama-3.1-70b", chip, batch=8, engine=engine)
    with pytest.raises(InputError, match="does not run on"):
        chalk.throughput("llama-3.1-70b", chip, input_len=1000, output_len=100, engine=engine)
    rc, out, err = cli("estimate", "-m", "llama-3.1-70b", "-H", chip, "--engine", engine)
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    vendor = load_chip(chip).vendor
    assert load_engine(engine).id not in engines_for_vendor(vendor)
    assert engines_for_vendor("NVIDIA") == ("vllm", "sglang", "trtllm") and "vllm" in engines_for_vendor(vendor)
    assert all(load_engine(e).sources.get("vendors") for e in ENGINES)


def test_answers_say_when_a_profiles_defaults_and_its_kernel_tables_are_different_versions():
    """vLLM's newest profile holds 0.11's defaults while its kernels time from the newest measured vLLM tables (0.24.0):
    throughput says so (QA 2026-11-28: no word of it), and simulate names its kernel tables as throughput does."""
    kw = dict(input_len=1000, output_len=200)
    r = chalk.throughput("llama-3.1-8b", "h100-sxm", engine="vllm", **kw)
    assert any("vLLM 0.11's defaults" in n and "vllm 0.24.0" in n for n in r["notes"])
    same = chalk.throughput("llama-3.1-8b", "h100-sxm", engine="sglang", **kw)
    assert not any("'s defaults (scheduler cap" in n for n in same["notes"])
    s = chalk.simulate("llama-3.1-8b", "h100", layout="tp=1", rate=5, requests=300, engine="vllm")
    assert s.setup["kernels"] == r["kernels"]


def test_a_sweep_names_its_kernel_tables():
    """`chalk sweep` (and its JSON meta) names the kernel tables its steps are timed from, as estimate does (QA
    2026-11-28: it never did)."""
    s = chalk.sweep("llama-3.1-8b", "h100-sxm", batches=[1, 64])
    assert s.meta["kernels"] == chalk.estimate("llama-3.1-8b", "h100-sxm", batch=64).kernels
    rc, out, _ = cli("sweep", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--json")
    assert rc == 0 and json.loads(out)["meta"]["kernels"].startswith("trtllm ")


def test_simulate_names_its_engine_as_throughput_and_plan_do():
    """engine (id), engine_release and engine_version in simulate's answer as in throughput's and plan's (QA
    2026-11-28: simulate alone put the version text in `engine`)."""
    from chalk.analyses.traffic.serving import throughput
    from chalk.analyses.traffic.simulate_run import simulate_requests

    run = simulate_requests("llama-3.1-8b", "h200", layout="tp=1", requests=300, rate=2.0, engine="vllm@0.6")
    thr = throughput("llama-3.1-8b", "h200", layout="tp=1", concurrency=8, input_len=1000, output_len=200,
                     engine="vllm@0.6")
    assert (run.setup["engine"], run.setup["engine_release"]) == (thr["engine"], thr["engine_release"]) == \
        ("vllm", "0.6")
    assert run.setup["engine_version"].startswith("0.5-0.7")
    from chalk.api import estimate

    assert estimate("llama-3.1-8b", "h200", layout="tp=1", engine="vllm@0.6").to_dict()["engine_release"] == "0.6"


def test_sglang_splits_its_prefill_budget_over_attention_dp_ranks():
    """QA 2026-11-28: DeepSeek-R1 on 16 H100s with SGLang's DP attention was simulated with prefill chunks of 131,072
    tokens (8,192 per rank x 16), where SGLang divides its chunked_prefill_size by the DP size (each rank 512, the
    replica 8,192). An engine that splits its budget (`chunk_split_over_attention_dp`, sourced) gives each rank its
    share; vLLM's ranks each take the whole budget."""
    from chalk.analyses.traffic.serving import _fixed_setup, rank_chunk_tokens, replica_chunk_tokens

    kw = dict(layout="attn_dp=16,ep=16", input_len=2000, output_len=300)
    sg = _fixed_setup("deepseek-r1", "h100-sxm", engine="sglang", **kw)
    vl = _fixed_setup("deepseek-r1", "h100-sxm", engine="vllm", **kw)
    budget = load_engine("sglang").for_gpu(80e9).chunked_prefill_tokens
    assert sg.chunk == budget // 16 and replica_chunk_tokens(sg) == budget
    assert vl.chunk == load_engine("vllm").for_gpu(80e9, chip="h100-sxm").chunked_prefill_tokens
    assert replica_chunk_tokens(vl) == vl.chunk * 16
    assert load_engine("sglang").chunk_split_over_attention_dp and "chunk_split_over_attention_dp" in \
        load_engine("sglang").sources
    assert list(rank_chunk_tokens(load_engine("sglang"), 8192, np.array([1.0, 8.0, 16.0]))) == [8192, 1024, 512]
    assert rank_chunk_tokens(load_engine("vllm"), 8192, 16.0) == 8192
