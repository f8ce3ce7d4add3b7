"""Launch commands: every rendered flag is one the engine accepted at the recorded version."""

from __future__ import annotations

import itertools
import json
import re
import shlex

import pytest
import yaml

from chalk.errors import ChalkError, InputError, UnknownNameError
from chalk.specs.catalog import model_ids, model_meta
from chalk.specs.checkpoints import launch_rules
from chalk.specs.engine import ENGINES, load_engine
from chalk.specs.launch import (TRTLLM_OPTIONS_FILE, Deployment, Speculation, hf_repo, launch_commands,
                                render_launch, yaml_keys)

R1_WIDE_EP = Deployment("deepseek-r1", tp=1, ep=8, attn_dp=8, max_num_seqs=1024, max_model_len=32768,
                        kv_cache_dtype="fp8", speculative=Speculation("mtp", 3), cuda_graph_max_batch=128)

DEPLOYMENTS = [
    R1_WIDE_EP,
    Deployment("llama-3.1-70b"),
    Deployment("llama-3.1-70b", tp=4, dp=2, max_num_seqs=256, memory_fraction=0.85),
    Deployment("llama-3.1-405b", tp=8, pp=2, kv_cache_dtype="fp8", chunked_prefill_tokens=16384),
    Deployment("qwen3-235b-a22b", tp=4, ep=4, max_num_seqs=512,
               speculative=Speculation("eagle", 2, draft_model="org/some-eagle-draft")),
    Deployment("deepseek-v3", tp=8, ep=8, speculative=Speculation("mtp", 1), cuda_graph_max_batch=64),
    Deployment("gpt-oss-120b", tp=2, attn_dp=2, ep=4, max_model_len=8192),
    Deployment("deepseek-v3", tp=1, attn_dp=32, ep=32, eplb=True),
]


def _argmap(argv):
    """flag -> value (None for a bare flag)."""
    out, i = {}, 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            if nxt is not None and not nxt.startswith("--"):
                out[a], i = nxt, i + 2
                continue
            out[a] = None
        i += 1
    return out


def assert_launch_text_valid(engine: str, text: str) -> int:
    """Every command in a launch snippet (one or more commands, comments, TensorRT-LLM options files written by a
    heredoc) uses only flags and options-file keys the engine accepted at its recorded version. Returns the
    number of commands checked. Shared with tests/test_plan.py."""
    prof = load_engine(engine)
    router = (launch_rules().get("disaggregation", {}).get(prof.id) or {}).get("router") or {}
    commands, yaml_text, in_yaml, in_router = 0, [], False, False
    for line in text.splitlines():
        if in_yaml:
            if line.strip() == "EOF":
                in_yaml = False
                keys = router.get("accepted_yaml_keys", ()) if in_router else prof.accepted_yaml_keys
                bad = [k for k in yaml_keys("\n".join(yaml_text)) if k not in keys]
                assert not bad, f"{engine} {'router' if in_router else 'options'} file uses unknown keys {bad}"
                yaml_text = []
            else:
                yaml_text.append(line)
            continue
        if line.startswith("# router:"):  # the router/proxy of a disaggregated deployment: its own recorded flags
            in_router = True
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line.startswith("cat > ") and "<<'EOF'" in line:
            in_yaml = True
            continue
        argv = shlex.split(line)
        flags = [a.split("=", 1)[0] for i, a in enumerate(argv) if a.startswith("--")
                 or (in_router and i >= 2 and re.fullmatch(r"-[A-Za-z]", a))]  # `python -m x` is not a flag
        assert flags, f"no flags in {line!r}"
        accepted = router["accepted_flags"] if in_router else prof.accepted_flags
        unknown = [f for f in flags if f not in accepted]
        assert not unknown, f"{engine} {prof.version} {'router ' if in_router else ''}does not accept {unknown}"
        commands += 1
    assert not in_yaml, "unterminated options heredoc"
    return commands


@pytest.mark.parametrize("dep, engine", list(itertools.product(DEPLOYMENTS, ENGINES)))
def test_every_rendered_flag_is_accepted_by_the_engine(dep, engine):
    cmd = render_launch(engine, dep)
    prof = load_engine(engine)
    assert cmd.flags, "no flags rendered"
    unknown = [f for f in cmd.flags if f not in prof.accepted_flags]
    assert not unknown, f"{engine} {prof.version} does not accept {unknown}"
    # the shell text splits back into the same tokens
    last = cmd.text.strip().splitlines()[-1]
    assert shlex.split(last) == list(cmd.argv)
    if cmd.config_yaml is not None:
        bad = [k for k in yaml_keys(cmd.config_yaml) if k not in prof.accepted_yaml_keys]
        assert not bad, f"trtllm options file uses unknown keys {bad}"
        assert f"cat > {TRTLLM_OPTIONS_FILE}" in cmd.text
    assert assert_launch_text_valid(engine, cmd.text) == 1


@pytest.mark.parametrize("engine", ENGINES)
def test_profile_flag_map_is_inside_the_accepted_list(engine):
    prof = load_engine(engine)
    for concept, flag in prof.flags.items():
        if flag != "<positional>":
            assert flag in prof.accepted_flags, f"{engine}: {concept} -> {flag} not in the recorded list"


def test_vllm_golden_wide_ep_mtp():
    cmd = render_launch("vllm", R1_WIDE_EP)
    assert cmd.command == (
        "vllm serve deepseek-ai/DeepSeek-R1 --tensor-parallel-size 1 --data-parallel-size 8 "
        "--enable-expert-parallel --max-num-seqs 128 --max-model-len 32768 --kv-cache-dtype fp8 "
        "--gpu-memory-utilization 0.9 --max-cudagraph-capture-size 512 "
        "--speculative-config '{\"method\":\"deepseek_mtp\",\"num_speculative_tokens\":3}' --trust-remote-code")
    m = _argmap(cmd.argv)
    assert json.loads(m["--speculative-config"]) == {"method": "deepseek_mtp", "num_speculative_tokens": 3}
    assert any("per DP rank" in n for n in cmd.notes)


def test_sglang_golden_wide_ep_mtp():
    m = _argmap(render_launch("sglang", R1_WIDE_EP).argv)
    assert m["--model-path"] == "deepseek-ai/DeepSeek-R1"
    assert (m["--tp-size"], m["--dp-size"], m["--ep-size"]) == ("8", "8", "8")
    assert "--enable-dp-attention" in m and m["--enable-dp-attention"] is None
    assert m["--max-running-requests"] == "1024"          # SGLang counts in total
    assert m["--context-length"] == "32768"
    assert m["--kv-cache-dtype"] == "fp8_e4m3"
    assert m["--mem-fraction-static"] == "0.824"
    assert (m["--speculative-algorithm"], m["--speculative-num-steps"], m["--speculative-eagle-topk"],
            m["--speculative-num-draft-tokens"]) == ("NEXTN", "3", "1", "4")


def test_trtllm_golden_wide_ep_mtp():
    cmd = render_launch("trtllm", R1_WIDE_EP)
    m = _argmap(cmd.argv)
    assert cmd.argv[:2] == ("trtllm-serve", "deepseek-ai/DeepSeek-R1")
    assert (m["--tp_size"], m["--ep_size"], m["--max_batch_size"], m["--max_seq_len"]) == ("8", "8", "128", "32768")
    assert m["--kv_cache_free_gpu_memory_fraction"] == "0.9"
    assert m["--extra_llm_api_options"] == TRTLLM_OPTIONS_FILE
    opts = yaml.safe_load(cmd.config_yaml)
    assert opts == {"enable_attention_dp": True, "kv_cache_config": {"dtype": "fp8"},
                    "cuda_graph_config": {"enable_padding": True, "max_batch_size": 128},
                    "speculative_config": {"decoding_type": "MTP", "num_nextn_predict_layers": 3}}


def test_layout_numbers_carry_over():
    dep = Deployment("llama-3.1-405b", tp=8, pp=2, kv_cache_dtype="fp8", memory_fraction=0.8)
    v = _argmap(render_launch("vllm", dep).argv)
    s = _argmap(render_launch("sglang", dep).argv)
    t = _argmap(render_launch("trtllm", dep).argv)
    assert (v["--tensor-parallel-size"], v["--pipeline-parallel-size"]) == ("8", "2")
    assert (s["--tp-size"], s["--pp-size"]) == ("8", "2")
    assert (t["--tp_size"], t["--pp_size"]) == ("8", "2")
    assert v["--gpu-memory-utilization"] == s["--mem-fraction-static"] == t["--kv_cache_free_gpu_memory_fraction"] \
        == "0.8"
    assert "--trust-remote-code" not in v  # Llama needs no remote code
    assert dep.gpus == 16


def test_eagle_draft_and_vllm_ep_note():
    dep = DEPLOYMENTS[4]
    v = render_launch("vllm", dep)
    cfg = json.loads(_argmap(v.argv)["--speculative-config"])
    assert cfg == {"method": "eagle", "model": "org/some-eagle-draft", "num_speculative_tokens": 2}
    s = _argmap(render_launch("sglang", dep).argv)
    assert s["--speculative-algorithm"] == "EAGLE" and s["--speculative-draft-model-path"] == "org/some-eagle-draft"
    t = yaml.safe_load(render_launch("trtllm", dep).config_yaml)
    assert t["speculative_config"] == {"decoding_type": "Eagle", "max_draft_len": 2,
                                       "speculative_model_dir": "org/some-eagle-draft"}
    odd = Deployment("gpt-oss-120b", tp=2, attn_dp=2, ep=2)
    assert any("expert-parallel size" in n for n in render_launch("vllm", odd).notes)


def test_launch_commands_mapping_and_resolved_profile():
    out = launch_commands(R1_WIDE_EP)
    assert set(out) == set(ENGINES)
    assert out["vllm"].splitlines()[0] == "# vllm 0.11.x"
    h200 = load_engine("sglang").for_gpu(141e9, tp=8, dp=8, attn_dp=True, speculative=True)
    txt = launch_commands(R1_WIDE_EP, engines=("sglang",), profiles={"sglang": h200})["sglang"]
    assert f"--mem-fraction-static {h200.kv_cache_memory_fraction:g}" in txt
    assert load_engine("tensorrt-llm").id in launch_commands(R1_WIDE_EP, engines=("tensorrt-llm",))


def test_hf_repo_for_every_catalog_model():
    for mid in model_ids():
        assert hf_repo(mid) == model_meta(mid)["hf_repo"]
    assert hf_repo("some-org/not-in-catalog") == "some-org/not-in-catalog"
    assert hf_repo("deepseek-ai/DeepSeek-R1") == "deepseek-ai/DeepSeek-R1"


@pytest.mark.parametrize("kwargs, err", [
    (dict(tp=0), InputError),
    (dict(tp=1.5), InputError),
    (dict(tp=True), InputError),
    (dict(pp=-1), InputError),
    (dict(tp=2, ep=3), InputError),
    (dict(tp=2, ep=4), InputError),
    (dict(attn_dp=2, dp=2), InputError),
    (dict(max_num_seqs=0), InputError),
    (dict(max_model_len=-5), InputError),
    (dict(memory_fraction=0.0), InputError),
    (dict(memory_fraction=1.2), InputError),
    (dict(memory_fraction=float("nan")), InputError),
    (dict(kv_cache_dtype="fp7"), UnknownNameError),
])
def test_bad_deployments(kwargs, err):
    with pytest.raises(err) as e:
        Deployment("llama-3.1-70b", **kwargs)
    assert isinstance(e.value, ChalkError) and "\n" not in str(e.value)


@pytest.mark.parametrize("args", [("mtp", 0), ("mtp", -1), ("mtp", 2.5), ("medusa", 2), ("eagle", 2)])
def test_bad_speculation(args):
    with pytest.raises(InputError):
        Speculation(*args)


def test_unknown_engine_model_and_kv_dtype():
    with pytest.raises(UnknownNameError):
        render_launch("tgi", Deployment("llama-3.1-70b"))
    with pytest.raises(UnknownNameError):
        render_launch("vllm", Deployment("no-such-model"))
    with pytest.raises(InputError, match="KV-cache dtype"):
        render_launch("vllm", Deployment("llama-3.1-70b", kv_cache_dtype="fp4"))


def test_mtp_on_a_model_without_heads_is_noted():
    dep = Deployment("llama-3.1-70b", tp=8, speculative=Speculation("mtp", 2))
    for e in ENGINES:
        assert any("next-token heads" in n for n in render_launch(e, dep).notes)
    assert not any("next-token heads" in n for n in render_launch("vllm", R1_WIDE_EP).notes)


def test_local_checkpoint_is_served_from_its_folder(tmp_path):
    from chalk.specs.catalog import _catalog_dir
    cfg = (_catalog_dir("models") / "llama-3.1-8b" / "config.json").read_text()
    d = tmp_path / "my-llama"
    d.mkdir()
    (d / "config.json").write_text(cfg)
    assert hf_repo(str(d)) == str(d)
    assert hf_repo(str(d / "config.json")) == str(d)
    assert render_launch("vllm", Deployment(str(d))).argv[2] == str(d)


def test_a_local_config_named_like_a_catalog_model_launches_its_own_folder(tmp_path):
    """QA: a 70B config in a folder named llama-3.1-8b (a catalog id) launched the catalog's 8B checkpoints: the
    user's weights were silently replaced. A config read from a path is the user's checkpoint, at every precision."""
    from chalk.specs.catalog import _catalog_dir, load_model
    d = tmp_path / "llama-3.1-8b"
    d.mkdir()
    (d / "config.json").write_text((_catalog_dir("models") / "llama-3.1-70b" / "config.json").read_text())
    spec = load_model(str(d))
    assert spec.num_layers == 80 and hf_repo(spec) == str(d)
    for e in ENGINES:
        own = render_launch(e, Deployment(str(d), tp=4))
        assert own.checkpoint.repo == str(d) and own.checkpoint.how == "native"
        fp8 = render_launch(e, Deployment(str(d), tp=4, precision="fp8"))
        assert fp8.checkpoint.how in ("on_load", "placeholder"), fp8.checkpoint
        assert not any(a.startswith(("nvidia/", "meta-llama/")) for a in fp8.argv), fp8.argv
    assert render_launch("vllm", Deployment(str(d), tp=4, precision="fp8")).argv[2] == str(d)
    assert not spec.from_catalog and load_model("llama-3.1-8b").from_catalog


def test_an_expert_load_balancer_is_launched_where_the_sizing_assumed_one():
    """A wide-EP deployment timed with balanced expert loads (`--eplb`) launches with the engine's balancer:
    vLLM and SGLang `--enable-eplb` (both in their recorded flag lists); TensorRT-LLM sets it in its options file,
    which chalk does not render, and says so. Without expert parallelism there is nothing to balance."""
    wide = Deployment("deepseek-v3", tp=1, attn_dp=32, ep=32, eplb=True)
    assert "--enable-eplb" in render_launch("vllm", wide).flags
    assert "--enable-eplb" in render_launch("sglang", wide).flags
    trt = render_launch("trtllm", wide)
    assert "load_balancer" in " ".join(trt.notes) and "load_balancer" not in (trt.config_yaml or "")
    for e in ENGINES:
        assert "--enable-eplb" not in render_launch(e, Deployment("deepseek-v3", tp=8, eplb=True)).flags
        assert "--enable-eplb" not in render_launch(e, Deployment("deepseek-v3", tp=1, attn_dp=32, ep=32)).flags


def test_a_router_for_a_huge_fleet_lists_a_bounded_number_of_replicas():
    """QA sweep 2026-11-27: the router snippet listed every replica by placeholder, so a plan for 1e9 users rendered
    millions of addresses (6 minutes, 5 GB). It lists at most ROUTER_MAX_LISTED per pool and says how many more."""
    from chalk.specs.launch import ROUTER_MAX_LISTED, router_launch

    for e in ("vllm", "sglang", "trtllm"):
        txt = router_launch(e, 3, 1_000_000)
        assert "DECODE_HOST_256" in txt and "DECODE_HOST_257" not in txt and "PREFILL_HOST_3" in txt, e
        assert f"{ROUTER_MAX_LISTED:,} of 1,000,000 decode replicas" in txt and len(txt) < 40_000, e
        small = router_launch(e, 2, 3)
        assert "listed:" not in small and "DECODE_HOST_3" in small
