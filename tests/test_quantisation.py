"""Quantisation as it is deployed (issue 24, item 4): `quantization_config` read into a stored weight format, weights
sized at their stored bits, weight-only GEMMs timed at 16-bit math with the narrow read."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chalk.analyses.step.estimate import estimate
from chalk.specs.catalog import package_path
from chalk.analyses.step.model_sizes import sizes
from chalk.analyses.step.parallel import model_costs, resolve_kv_precision
from chalk.errors import SpecError, UnknownNameError
from chalk.specs.catalog import chip_ids, load_chip, load_model
from chalk.analyses.step.kernels import kernel_profile
from chalk.specs.model import model_from_config
from chalk.specs.precision import WeightOnly, bytes_per_element, canonical, weight_only

DATA = Path(__file__).parent / "data"
GPTQ_70B = DATA / "llama-3.1-70b-gptq-int4"
CATALOG = Path(__file__).parent.parent / "src" / "chalk" / "catalog" / "models"


def _cfg(model_id: str, q: dict | None = None) -> dict:
    cfg = json.loads((CATALOG / model_id / "config.json").read_text())
    if q is not None:
        cfg["quantization_config"] = q
    return cfg


def _fmt(q: dict, model_id: str = "llama-3.1-8b"):
    return model_from_config(_cfg(model_id, q), id="q").weight_format


# --------------------------------------------------------------------------- the formats, bit by bit
@pytest.mark.parametrize("q, precision, bits", [
    # GPTQ: 4-bit qweight + fp16 scale + 4-bit packed qzero per 128 weights = 4 + 20/128
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True}, "w4a16-gptq-g128-zp", 4 + 20 / 128),
    ({"quant_method": "gptq", "bits": 8, "group_size": -1}, "w8a16-gptq-ch-zp", 8.0),
    # AWQ: zero points unless zero_point is false
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"},
     "w4a16-awq-g128-zp", 4 + 20 / 128),
    ({"quant_method": "awq", "bits": 4, "group_size": 64, "zero_point": False}, "w4a16-awq-g64", 4 + 16 / 64),
    # bitsandbytes NF4: fp32 absmax per 64 weights (0.5 bit), or 0.127 bit with double quantisation (QLoRA sec. 3)
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}, "w4a16-nf4-g64", 4.5),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
      "bnb_4bit_use_double_quant": True}, "w4a16-nf4dq-g64", 4 + 8 / 64 + 32 / (64 * 256)),
    ({"load_in_8bit": True}, "w8a16-bnb8-ch", 8.0),  # older configs carry no quant_method
    # compressed-tensors W4A16 (symmetric: scales only), W8A8 FP8 and INT8 (per-channel scales: not counted)
    ({"quant_method": "compressed-tensors", "format": "pack-quantized", "ignore": ["lm_head"],
      "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": None,
                                    "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128,
                                                "symmetric": True}}}}, "w4a16-ct-g128", 4 + 16 / 128),
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
        "input_activations": {"num_bits": 8, "type": "float", "dynamic": True}}}}, "fp8", 8.0),
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "weights": {"num_bits": 8, "type": "int", "strategy": "channel"},
        "input_activations": {"num_bits": 8, "type": "int"}}}}, "int8", 8.0),
    ({"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128], "activation_scheme": "dynamic"},
     "fp8", 8.0),
])
def test_schemes_are_read_at_their_stored_bits(q, precision, bits):
    fmt = _fmt(q)
    assert fmt.precision == precision
    assert fmt.bits_per_weight == pytest.approx(bits, rel=1e-12)
    assert fmt.weight_only == precision.startswith("w")
    assert fmt.compute == ("bf16" if fmt.weight_only else precision)  # llama-3.1-8b: torch_dtype bfloat16


def test_unquantised_modules_count_where_the_config_says_so():
    gptq = {"quant_method": "gptq", "bits": 4, "group_size": 128}
    assert dict(_fmt(gptq).unquantised) == {"embedding": 1.0, "lm_head": 1.0, "norms": 1.0}  # a dense model
    assert "lm_head" not in dict(_fmt({**gptq, "lm_head": True}).unquantised)
    # compressed-tensors quantises every Linear it does not ignore: lm_head included unless listed
    ct = {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int",
                                                                                     "group_size": 128}}}}
    assert "lm_head" not in dict(_fmt(ct).unquantised)
    assert dict(_fmt({**ct, "ignore": ["lm_head", "re:.*self_attn.*"]}).unquantised)["attention"] == 1.0
    # one layer named: that layer's share of its group (llama-3.1-8b: 32 layers)
    awq = {"quant_method": "awq", "bits": 4, "group_size": 128, "modules_to_not_convert": ["model.layers.3.mlp"]}
    assert dict(_fmt(awq).unquantised)["mlp"] == pytest.approx(1 / 32)
    # gpt-oss: its own list (attention, router, embeddings, lm_head) around MXFP4 experts
    gpt = load_model("gpt-oss-120b").weight_format
    assert gpt.precision == "mxfp4" and {"attention", "router", "embedding", "lm_head"} <= set(dict(gpt.unquantised))
    assert load_model("deepseek-v3").weight_format.precision == "fp8"


def test_each_unquantised_group_is_sized_at_the_16_bit_dtype():
    """Golden: the 4-bit 70B's bytes by hand. Linear weights at 4 + 20/128 bits; the embedding, LM head and norms
    (1.051 G + 1.051 G + 1.3 M parameters) at fp16 (torch_dtype float16)."""
    sz = sizes(load_model(str(GPTQ_70B)))
    kept = sz.embedding_params + sz.lm_head_params + sz.norm_params
    linear = sz.total_params - kept
    assert sz.weight_bytes() == pytest.approx(linear * (4 + 20 / 128) / 8 + kept * 2, rel=1e-12)
    assert sz.weight_bytes() / 1e9 == pytest.approx(39.77, abs=0.01)  # was 141.1 GB read as fp16
    assert sz.weight_bytes("bf16") == pytest.approx(2 * sz.total_params)
    # a decode step reads everything but the embedding lookup
    assert float(sz.weight_bytes_read(1.0)) == pytest.approx(sz.weight_bytes() - sz.embedding_params * 2)
    # lm_head quantised too: its 1.05 G parameters move from 16 to 4.156 bits
    cfg = json.loads((GPTQ_70B / "config.json").read_text())
    cfg["quantization_config"]["lm_head"] = True
    with_head = sizes(model_from_config(cfg, id="q"))
    assert sz.weight_bytes() - with_head.weight_bytes() == pytest.approx(
        sz.lm_head_params * (2 - (4 + 20 / 128) / 8), rel=1e-9)


def test_checkpoints_chalk_already_sized_are_unchanged():
    """gpt-oss (MXFP4 experts, the rest bf16) and DeepSeek-V3 (FP8 blocks) size as before: non-expert weights at the
    main precision, routed experts at theirs; DeepSeek-V3's embeddings and LM head (2 x 129,280 x 7,168, untied) stay
    bf16 as its checkpoint stores them (+1.85 GB over counting them at FP8)."""
    for mid, main, expert in (("gpt-oss-120b", 2.0, 4.25 / 8), ("deepseek-v3", 1.0, 1.0)):
        m = load_model(mid)
        sz = sizes(m)
        kept = 0.0 if main == 2.0 else 2 * m.vocab_size * m.hidden_size * (2.0 - main)
        # (and its norms, 0.9 MB, bf16 too: within rel 2e-6)
        assert sz.weight_bytes() == pytest.approx(sz.dense_params * main + sz.routed_expert_params * expert + kept,
                                                  rel=2e-6 if kept else 1e-12)


@pytest.mark.parametrize("q, says", [
    ({"quant_method": "hqq", "bits": 4}, "quant_method 'hqq' is not one chalk sizes"),
    ({"bits": 4}, "quant_method None"),
    ({"quant_method": "gptq", "bits": 0, "group_size": 128}, "bits must be one of 2, 3, 4, 8"),
    ({"quant_method": "gptq", "bits": 1e9, "group_size": 128}, "bits must be one of"),
    ({"quant_method": "gptq", "bits": "four", "group_size": 128}, "bits must be one of"),
    ({"quant_method": "gptq", "bits": 4, "group_size": -5}, "group_size must be a positive whole number"),
    # QA sweep 2026-11-27: 0 was read as per channel and 5-bit compressed-tensors weights as w5a16
    ({"quant_method": "gptq", "bits": 4, "group_size": 0}, "group_size must be a positive whole number"),
    # QA sweep 2026-11-27: a dense model's MXFP4 config was sized at BF16 yet labelled mxfp4 (4.25 bits per weight)
    ({"quant_method": "mxfp4"}, "quantises routed experts only"),
    ({"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 5, "type": "int"}}}},
     "num_bits must be one of 2, 3, 4, 8"),
    ({"quant_method": "awq", "bits": 4, "group_size": 1.5}, "group_size must be a positive whole number"),
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": "yes"}, "zero_point must be true or false"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "load_in_8bit": True}, "exactly one of"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf5"}, "'nf4' or 'fp4'"),
    ({"quant_method": "compressed-tensors", "config_groups": {}}, "non-empty config_groups"),
    ({"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int"},
                                                                    "input_activations": {"num_bits": 8}}}},
     "W4 (int) A8 (int) is not one chalk sizes"),
    ({"quant_method": "compressed-tensors", "config_groups": {
        "a": {"weights": {"num_bits": 4, "type": "int", "group_size": 128}},
        "b": {"weights": {"num_bits": 8, "type": "int", "group_size": 128}}}}, "mix schemes"),
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "modules_to_not_convert": "lm_head, gate"}, None),
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "modules_to_not_convert": [1, 2]}, "list of module names"),
    ({"quant_method": "fp8", "weight_block_size": [128, 0]}, "weight_block_size"),
    (["gptq"], "quantization_config must be a mapping"),
])
def test_unknown_schemes_and_malformed_configs_are_refused_in_one_line(q, says):
    if says is None:  # a single name where a list is expected reads as that one name
        assert _fmt(q) is not None
        return
    with pytest.raises(SpecError) as e:
        _fmt(q)
    assert says in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("key, value", [("num_key_value_heads", 0), ("max_position_embeddings", 0)])
def test_a_zero_count_in_config_json_is_refused(key, value):
    """QA sweep 2026-11-27: num_key_value_heads 0 was read as multi-head attention (KV per token 8x Llama-3.1-70B's)
    and max_position_embeddings 0 as no context limit; both are refused in one line, and absent keys keep their
    defaults (one KV head per head; no limit)."""
    cfg = _cfg("llama-3.1-70b")
    cfg[key] = value
    with pytest.raises(SpecError) as e:
        model_from_config(cfg, id="bad")
    assert key in str(e.value) and "\n" not in str(e.value)
    del cfg[key]
    m = model_from_config(cfg, id="plain")
    assert (m.num_kv_heads == m.num_heads) if key == "num_key_value_heads" else m.max_context is None


def test_the_cli_refuses_an_unknown_scheme_with_one_line(tmp_path):
    cfg = _cfg("llama-3.1-8b", {"quant_method": "exl2", "bits": 4.65})
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    p = subprocess.run([sys.executable, "-m", "chalk.faces.cli", "estimate", "-m", str(tmp_path), "-H", "h100-sxm"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert len(p.stderr.strip().splitlines()) == 1 and "quant_method 'exl2'" in p.stderr


def test_weight_only_names_spell_their_size():
    assert canonical("W4A16-GPTQ-G128-ZP") == "w4a16-gptq-g128-zp"
    assert canonical("w4a16") == "w4a16-int-g128" and bytes_per_element("w8a16") == pytest.approx((8 + 16 / 128) / 8)
    assert bytes_per_element("w4a16-int-g32") == pytest.approx((4 + 16 / 32) / 8)
    assert weight_only("w4a16-awq-g128-zp") and not weight_only("fp8") and not weight_only("mxfp4")
    assert WeightOnly.parse("w4a16-gptq-g128-zp") == WeightOnly(4, "gptq", 128, True)
    for bad in ("w4a16-foo-g128", "w0a16-gptq-g128", "w4a8-gptq-g128", "w9a16-int-ch"):
        with pytest.raises(UnknownNameError):
            canonical(bad)


def test_block_scaled_fp4_counts_its_scales():
    """NVFP4 stores one FP8 (E4M3) scale per 16 four-bit elements (4.5 bits), MXFP4 one 8-bit scale per 32 (4.25
    bits): a DeepSeek-R1 FP4 checkpoint's 671e9 parameters weigh 377 GB at NVFP4, not the 335 GB of bare 4-bit,
    plus 2.82 GB for the 1.961e9 it keeps at 16 bits (embeddings, LM head, routers, norms: 1.4375 bytes more each,
    `model_sizes.NARROWED_KEEPS`). Its own FP8 checkpoint: 671.03 GB at one byte each, plus 1.85 GB for the bf16
    embeddings and LM head it keeps."""
    assert bytes_per_element("fp4") == bytes_per_element("nvfp4") == pytest.approx((4 + 8 / 16) / 8)
    assert bytes_per_element("mxfp4") == pytest.approx((4 + 8 / 32) / 8)
    fp4, fp8 = (estimate("deepseek-r1", "b200", precision=p, layout="tp=8", batch=1, context=1000).weight_bytes
                for p in ("fp4", "fp8"))
    assert fp4 == pytest.approx(377.45e9 + 1.9607e9 * 1.4375, rel=1e-4)
    assert fp8 == pytest.approx(671.03e9 + 1.853e9, rel=1e-4)


@pytest.mark.parametrize("precision", ["fp8", "fp4", "w4a16"])
def test_a_what_if_precision_keeps_what_a_checkpoint_of_it_keeps(tmp_path, precision):
    """`--precision fp8` (fp4, w4a16) sizes the embedding and LM head at 16 bits, as vLLM's fp8 quantisation,
    ModelOpt's recipes and GPTQ checkpoints keep them. QA 2026-11-28: at 8 bits a what-if FP8 Llama-3.1-70B fitted one
    H100 (70.6 GB) that the same model's FP8 block checkpoint (72.7 GB) does not, and plan launched it there."""
    from chalk.analyses.step.model_sizes import sizes
    from chalk.specs.catalog import as_model

    sz = sizes(as_model("llama-3.1-70b"))
    g = sz.group_params
    kept = g["embedding"] + g["lm_head"] + g["norms"]
    want = (sz.total_params - kept) * bytes_per_element(precision) + kept * 2.0
    got = estimate("llama-3.1-70b", "h100-sxm", precision=precision, layout="tp=8", batch=1, context=1000)
    assert got.weight_bytes == pytest.approx(want, rel=1e-9)
    if precision == "fp8":  # 72.7 GB, as the FP8 block checkpoint: one H100 does not hold it
        assert got.weight_bytes > 72e9
        assert not estimate("llama-3.1-70b", "h100-sxm", precision="fp8", layout="tp=1", batch=1, context=1000).fits


# --------------------------------------------------------------------------- what it is sized and timed as
def test_a_4_bit_70b_fits_one_h100_and_says_what_it_sized():
    r = estimate(str(GPTQ_70B), "h100-sxm")
    assert r.layout["tp"] == 1 and r.chips == 1 and r.fits
    assert r.precision == "w4a16-gptq-g128-zp" and r.compute_precision == "fp16"  # the checkpoint's torch_dtype
    assert r.kv_precision == "bf16"  # weight-only: 16-bit activations, no FP8 KV cache by default
    assert r.weight_bytes == pytest.approx(sizes(load_model(str(GPTQ_70B))).weight_bytes())
    assert any(n.startswith("weights as stored: gptq w4a16-gptq-g128-zp: 4.16 bits per weight") for n in r.notes)
    bf16 = estimate("llama-3.1-70b", "h100-sxm")
    assert bf16.layout["tp"] == 2  # the same model in bf16 needs two


def test_the_cli_answers_carry_the_weight_format():
    def run(*args):
        p = subprocess.run([sys.executable, "-m", "chalk.faces.cli", *args, "-m", str(GPTQ_70B), "-H", "h100-sxm"],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        return p.stdout

    d = json.loads(run("estimate", "--json"))
    assert d["precision"] == "w4a16-gptq-g128-zp" and d["layout"]["gpus"] == 1
    text = run("estimate")
    assert "w4a16-gptq-g128-zp (fp16 compute) weights" in " ".join(text.split())  # its math: the checkpoint's fp16
    t = json.loads(run("throughput", "--input-len", "1000", "--output-len", "200", "--json"))
    assert t["precision"] == "w4a16-gptq-g128-zp" and t["weight_bytes_per_gpu"] < 40e9


def test_plan_sizes_the_4_bit_70b_as_4_bit():
    from chalk.analyses.planning.plan import plan

    r = plan(str(GPTQ_70B), "h100-sxm", input_len=1000, output_len=200, users=50, modes=("aggregated",),
             sim_requests=2000)
    best = r["options"][0]
    assert best["precision"] == "w4a16-gptq-g128-zp" and best["replica_gpus"] == 1


@pytest.mark.parametrize("model", ["gpt-oss-120b", "gpt-oss-20b"])
def test_naming_the_checkpoints_own_precision_sizes_the_checkpoint_as_stored(model):
    """gpt-oss stores MXFP4 experts beside BF16 attention and embeddings: --precision mxfp4 is that checkpoint (65.19
    GB for the 120b), not every weight re-quantised to MXFP4 (62.07 GB), and times the same step."""
    own, named = (estimate(model, "b200", precision=p, layout="tp=1", batch=8, context=1000) for p in (None, "mxfp4"))
    assert named.weight_bytes == own.weight_bytes and named.step_time_s == own.step_time_s
    assert model != "gpt-oss-120b" or own.weight_bytes == pytest.approx(65.19e9, rel=1e-3)


BNB4 = {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
        "bnb_4bit_use_double_quant": True}


def test_engines_that_cannot_load_the_checkpoint_are_neither_sized_nor_launched(tmp_path):
    """TensorRT-LLM documents no bitsandbytes recipe, and vLLM's supported-hardware table marks bitsandbytes (and
    GPTQ, AWQ) unsupported on AMD GPUs (catalog engines' `unsupported_checkpoints`): a bitsandbytes 8B is planned
    with vLLM and SGLang on an H100 and with SGLang alone on an MI300X, and asking for TensorRT-LLM is one line."""
    from chalk.analyses.planning.plan import plan
    from chalk.specs.engine import load_engine

    (tmp_path / "config.json").write_text(json.dumps(_cfg("llama-3.1-8b", BNB4)))
    r = plan(str(tmp_path), "h100-sxm,mi300x", users=16, input_len=1000, output_len=200, modes=("aggregated",),
             sim_requests=1000, curves=False)
    got = {(o["hardware"], o["engine"]) for o in r["options"]}
    assert got == {("h100-sxm", "vllm"), ("h100-sxm", "sglang"), ("mi300x", "sglang")}
    for o in r["options"]:
        assert "trtllm" not in o["launch"] and (o["hardware"] != "mi300x" or "vllm" not in o["launch"])
    assert load_engine("vllm").refuses("gptq", "AMD") and load_engine("vllm").refuses("gptq", "NVIDIA") is None
    # the user's own checkpoint folder is what the launch loads: its method counts too; a chip where no engine can
    # load the checkpoint says so instead of blaming the targets
    from chalk.errors import FitError

    with pytest.raises(FitError, match="TensorRT-LLM .* does not load bitsandbytes checkpoints"):
        plan("llama-3.1-8b", "h100-sxm", users=16, input_len=1000, output_len=200, engine="trtllm",
             checkpoint=str(tmp_path), curves=False, sim_requests=1000)
    gptq = tmp_path / "gptq"
    gptq.mkdir()
    (gptq / "config.json").write_text(json.dumps(_cfg("llama-3.1-8b", {"quant_method": "gptq", "bits": 4,
                                                                       "group_size": 128})))
    with pytest.raises(FitError, match="no candidate can serve .* does not load gptq checkpoints on Google chips"):
        plan(str(gptq), "tpu-v6e", users=16, input_len=1000, output_len=200, curves=False, sim_requests=1000)
    for cmd in (["throughput", "--input-len", "1000", "--output-len", "200"],
                ["plan", "--users", "16", "--input-len", "1000", "--output-len", "200"],
                ["estimate"]):  # estimate --engine timed it as if TensorRT-LLM loaded it (QA 2026-11-28)
        p = subprocess.run([sys.executable, "-m", "chalk.faces.cli", *cmd, "-m", str(tmp_path), "-H", "h100-sxm",
                            "--engine", "trtllm"], capture_output=True, text=True, timeout=300)
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert "does not load bitsandbytes checkpoints" in p.stderr


@pytest.mark.parametrize("q", [
    {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": True, "sym": True},
    {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"},
    {"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0, "modules_to_not_convert": ["lm_head"]}],
    ids=["gptq", "awq", "fbgemm_fp8"])
def test_tensorrt_llm_is_not_launched_for_checkpoints_its_loader_refuses(tmp_path, q):
    """QA: TensorRT-LLM was sized and launched for Hugging Face GPTQ, AWQ and FBGEMM-FP8 checkpoints, which its
    PyTorch backend's loader refuses (llm_utils.py ModelLoader._update_from_hf_quant_config: quant_method fp8,
    mxfp4, mxfp8, compressed-tensors, nvfp4 or ModelOpt, else NotImplementedError). The plan says it cannot load
    them, as for bitsandbytes, and leaves it out; the methods it loads stay open to it."""
    from chalk.analyses.planning.plan import plan
    from chalk.specs.engine import load_engine

    method = q["quant_method"]
    (tmp_path / "config.json").write_text(json.dumps(_cfg("llama-3.1-70b", q)))
    p = subprocess.run([sys.executable, "-m", "chalk", "plan", "-m", str(tmp_path), "-H", "h100-sxm", "--users",
                        "50", "--input-len", "1000", "--output-len", "200", "--engine", "trtllm"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert f"TensorRT-LLM 1.2 does not load {method} checkpoints" in p.stderr and "trtllm-serve" not in p.stdout
    r = plan(str(tmp_path), "h100-sxm", users=50, input_len=1000, output_len=200, modes=("aggregated",),
             sim_requests=1000, curves=False)
    assert {o["engine"] for o in r["options"]} == {"vllm", "sglang"}
    trt = load_engine("trtllm")
    assert trt.refuses(method, "NVIDIA") and trt.refuses("bitsandbytes", "NVIDIA")
    for ok in ("fp8", "mxfp4", "compressed-tensors", "modelopt"):
        assert trt.refuses(ok, "NVIDIA") is None


def test_the_kv_cache_follows_the_math_not_the_stored_bits():
    from chalk.specs.catalog import resolve_hardware

    sys_ = resolve_hardware("h100-sxm")
    assert resolve_kv_precision("auto", canonical("w4a16-gptq-g128-zp"), sys_) == "bf16"
    assert resolve_kv_precision("auto", "fp8", sys_) == "fp8"


FP8_CT = {"quant_method": "compressed-tensors", "config_groups": {"group_0": {
    "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
    "input_activations": {"num_bits": 8, "type": "float", "dynamic": True}}}}


@pytest.mark.parametrize("extra, kv", [
    ({}, None),  # no declaration: the engine stores the activation dtype
    ({"kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor"}}, "fp8"),  # compressed-tensors
    ({"kv_cache_quant_algo": "FP8"}, "fp8"),  # ModelOpt's hf_quant_config spelling
    ({"kv_cache_quant_algo": None}, None),
    ({"kv_cache_quant_algo": "NVFP4"}, "fp4"),  # ModelOpt's NVFP4 KV cache (TensorRT-LLM quantization docs)
])
def test_a_checkpoint_declares_its_kv_cache(extra, kv):
    assert _fmt({**FP8_CT, **extra}).kv_cache == kv


@pytest.mark.parametrize("extra", [{"kv_cache_quant_algo": "NVFP4X"},
                                   {"kv_cache_scheme": {"num_bits": 4, "type": "int"}}, {"kv_cache_scheme": "fp8"}])
def test_an_unknown_kv_cache_declaration_is_refused_in_one_line(extra):
    with pytest.raises(SpecError) as e:
        _fmt({**FP8_CT, **extra})
    assert "\n" not in str(e.value) and "kv_cache" in str(e.value)


def test_an_engine_that_follows_the_checkpoint_stores_what_it_declares():
    """TensorRT-LLM's KV cache dtype 'auto' follows the checkpoint it loads: the model's own quantised checkpoint
    declares no KV quantisation for gpt-oss (MXFP4) or DeepSeek-R1 (FP8 blocks), so their KV cache stays BF16 (the
    TensorRT-LLM perf overview's gpt-oss llm_options: 'kv_cache_config: dtype: fp8  # Hopper: use auto', commit
    03e27c7); chalk's reading, 8-bit KV beside 8-bit weights, stays for another checkpoint loaded at a narrower
    precision (NVIDIA's FP8 Llama); vLLM's 'auto' is BF16 whatever the checkpoint."""
    from chalk.analyses.traffic.serving import engine_kv_precision
    from chalk.specs.checkpoints import native_kv_cache

    oss, r1, llama = load_model("gpt-oss-20b"), load_model("deepseek-r1"), load_model("llama-3.1-70b")
    assert engine_kv_precision("trtllm", "auto", oss, None) == "bf16"
    assert engine_kv_precision("trtllm", "auto", r1, "fp8") == "bf16"
    assert native_kv_cache(r1, "fp4") is None and engine_kv_precision("trtllm", "auto", r1, "fp4") == "auto"
    assert engine_kv_precision("trtllm", "auto", llama, "fp8") == "auto"  # then resolve_kv_precision: fp8
    assert engine_kv_precision("trtllm", "fp8", oss, None) == "fp8"  # asked for: kept
    assert engine_kv_precision("vllm", "auto", oss, None) == "bf16"
    declared = model_from_config(_cfg("llama-3.1-8b", {**FP8_CT, "kv_cache_scheme": {"num_bits": 8, "type": "float"}}),
                                 id="q")
    assert engine_kv_precision("trtllm", "auto", declared, None) == "fp8"
    assert engine_kv_precision("trtllm", "auto", model_from_config(_cfg("llama-3.1-8b", FP8_CT), id="q"),
                               None) == "bf16"


def test_the_lm_head_a_checkpoint_keeps_in_16_bits_is_read_at_16_bits():
    costs = model_costs(load_model(str(GPTQ_70B)), None, "bf16")
    assert costs.stored_precision("lm_head") == "fp16"
    assert costs.stored_precision("mlp") == "w4a16-gptq-g128-zp"
    asked = model_costs(load_model(str(GPTQ_70B)), "bf16", "bf16")
    assert asked.stored_precision("mlp") == asked.stored_precision("lm_head") == "bf16"


# --------------------------------------------------------------------------- invariants over every chip
NARROW = [canonical(n) for n in ("w8a16-gptq-g128-zp", "w4a16-gptq-g128-zp", "w4a16-nf4dq-g64", "w3a16-gptq-g128-zp",
                                 "w2a16-int-ch")]
NARROW.sort(key=bytes_per_element, reverse=True)  # widest first: each reads fewer bytes than the one before


@settings(max_examples=60, deadline=None)
@given(chip=st.sampled_from(chip_ids()), seed=st.integers(0, 2**31))
def test_no_gemm_gets_slower_when_it_reads_fewer_weight_bytes(chip, seed):
    """Every catalog chip, random GEMM shapes and row counts (batch sizes): at the same 16-bit math, a narrower
    stored weight never takes longer (bf16 >= w8a16 >= w4a16 >= ... >= w2a16), measured tables and fitted curve
    alike; and routed-expert layers the same."""
    kp = kernel_profile(load_chip(chip))
    assert kp is not None
    rng = np.random.default_rng(seed)
    m, n, k = (np.round(2.0 ** rng.uniform(lo, 16, 64)) for lo in (0, 6, 6))
    prev = kp.gemm_time_s(m, n, k, "bf16")
    for w in NARROW:
        t = kp.gemm_time_s(m, n, k, "bf16", w)
        assert np.all(t <= prev * (1 + 1e-9)), (chip, w, float(np.max(t / prev)))
        prev = t
    tokens = np.round(2.0 ** rng.uniform(0, 15, 32))
    h, i = float(2 ** rng.integers(10, 14)), float(2 ** rng.integers(9, 13))
    prev = kp.moe_time_s(tokens, h, i, 128.0, 8.0, 8.0, "bf16")
    for w in NARROW:
        t = kp.moe_time_s(tokens, h, i, 128.0, 8.0, 8.0, "bf16", weight_precision=w)
        assert np.all(t <= prev * (1 + 1e-9)), (chip, w, "moe", float(np.max(t / prev)))
        prev = t


@settings(max_examples=40, deadline=None)
@given(chip=st.sampled_from(chip_ids()), seed=st.integers(0, 2**31))
def test_narrow_weights_under_wider_math_stay_bounded_by_full_width(chip, seed):
    """QA sweep 2026-11-27: MXFP4 experts under 16-bit math (the mixed-input table, measured on 2,880-wide experts)
    took 4.1 s for a DeepSeek-V3 step on H100 against 9.8 ms at BF16, the table read ~1,000x past the 16-bit time at
    shapes it never measured. A mixed-input MoE layer stays within MIXED_INPUT_MAX_SLOWDOWN of the 16-bit one;
    an integer weight-only layer, and a GEMM whose weights are narrower than its math (FP4 weights under FP8 math on
    a chip without an FP4 rate), never above the full-width time at that math."""
    from chalk.analyses.step.kernels import MIXED_INPUT_MAX_SLOWDOWN

    kp = kernel_profile(load_chip(chip))
    rng = np.random.default_rng(seed)
    tokens = np.round(2.0 ** rng.uniform(0, 15, 32))
    h, i = float(2 ** rng.integers(10, 14)), float(2 ** rng.integers(9, 13))
    E, k, ep = float(2 ** rng.integers(5, 9)), float(2 ** rng.integers(1, 4)), float(2 ** rng.integers(0, 4))
    full = kp.moe_time_s(tokens, h, i, E, k, ep, "bf16")
    mixed = kp.moe_time_s(tokens, h, i, E, k, ep, "bf16", weight_precision="mxfp4")
    assert np.all(mixed <= MIXED_INPUT_MAX_SLOWDOWN * full * (1 + 1e-9)), (chip, float(np.max(mixed / full)))
    gptq = kp.moe_time_s(tokens, h, i, E, k, ep, "bf16", weight_precision=canonical("w4a16-gptq-g128-zp"))
    assert np.all(gptq <= np.minimum(full, mixed) * (1 + 1e-9))
    m, n, kk = (np.round(2.0 ** rng.uniform(lo, 16, 64)) for lo in (0, 6, 6))
    for math_p, w in (("fp8", "fp4"), ("bf16", "fp8"), ("bf16", "fp4")):
        assert np.all(kp.gemm_time_s(m, n, kk, math_p, w) <= kp.gemm_time_s(m, n, kk, math_p) * (1 + 1e-9)), (chip, w)


def _qwen3_moe(q: dict | None):
    return model_from_config(_cfg("qwen3-30b-a3b", q), id="qwen3-30b-a3b" + ("-q" if q else ""))


GPTQ = {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True}


@settings(max_examples=40, deadline=None)
@given(chip=st.sampled_from(chip_ids()), moe=st.booleans(), tp=st.sampled_from([1, 2, 4, 8]),
       pp=st.sampled_from([1, 2]), batch=st.floats(1, 1024), context=st.floats(128, 32768),
       phase=st.sampled_from(["decode", "prefill"]))
def test_the_4_bit_step_is_never_slower_than_the_bf16_one(chip, moe, tp, pp, batch, context, phase):
    """`estimate` on the same layout and batch: the 4-bit GPTQ checkpoint's step never takes longer than the same
    architecture's BF16 one (dense: Llama-3.1-70B; MoE: Qwen3-30B-A3B)."""
    if moe:
        quant, plain = _qwen3_moe(GPTQ), _qwen3_moe(None)
    else:
        quant, plain = load_model(str(GPTQ_70B)), load_model("llama-3.1-70b")
    lay = f"tp={tp},pp={pp}"
    rq = estimate(quant, chip, batch, context, layout=lay, phase=phase)
    rb = estimate(plain, chip, batch, context, layout=lay, phase=phase, kv_precision=rq.kv_precision)
    assert rq.step_time_s <= rb.step_time_s * (1 + 1e-9)
    assert rq.weight_bytes < rb.weight_bytes / 3


def test_weight_only_decode_reads_the_narrow_bytes():
    """Golden order of magnitude: a batch-1 decode of the 70B on TP4 H100 is memory-bound, so the 4-bit step's
    weight GEMMs take about their byte ratio of the BF16 ones (within kernel efficiency and the 16-bit head)."""
    rq = estimate(str(GPTQ_70B), "h100-sxm", 1, 2048, layout="tp=4")
    rb = estimate("llama-3.1-70b", "h100-sxm", 1, 2048, layout="tp=4")
    gq = sum(o["time_s"] for o in rq.ops if o["kind"] == "gemm")
    gb = sum(o["time_s"] for o in rb.ops if o["kind"] == "gemm")
    assert 0.2 < gq / gb < 0.45  # bytes: 39.8 / 141.1 = 0.28
    mlp = next(o for o in rq.ops if o["name"] == "mlp")
    assert mlp["bytes"] == pytest.approx(next(o for o in rb.ops if o["name"] == "mlp")["bytes"] * (4 + 20 / 128) / 16,
                                         rel=1e-3)


@pytest.mark.parametrize("model", ["gpt-oss-120b", "gpt-oss-20b"])
def test_a_checkpoints_own_mix_reads_its_experts_at_their_stored_bits(model):
    """A checkpoint that keeps its experts narrower than the rest (gpt-oss: MXFP4 experts, BF16 attention) reads
    expert bytes at the experts' precision: positive, growing with the batch, at most every expert once, and the
    same as with every weight at that precision (the dense part was read at BF16 while the experts were counted at
    MXFP4, which left 2.3 GB less than nothing: -370 MB at batch 1 on gpt-oss-120b)."""
    from chalk.analyses.step.parallel import model_costs
    from chalk.specs.catalog import load_model

    m = load_model(model)
    own, narrow = model_costs(m, None, "fp8"), model_costs(m, "mxfp4", "fp8")
    b = own.expert_read_bytes(np.array([1.0, 2.0, 8.0, 64.0, 1e6]))
    assert np.all(b > 0) and np.all(np.diff(b) > 0) and b[-1] <= own.expert_weight_bytes * (1 + 1e-9)
    assert b == pytest.approx(narrow.expert_read_bytes(np.array([1.0, 2.0, 8.0, 64.0, 1e6])), rel=1e-9)
    one = estimate(model, "h100-sxm", batch=1, context=2000, layout="tp=1", ideal=True)
    all_narrow = estimate(model, "h100-sxm", batch=1, context=2000, layout="tp=1", ideal=True, precision="mxfp4")
    assert one.step_time_s >= all_narrow.step_time_s  # more bytes (BF16 attention) never faster


def test_an_fp8_block_checkpoint_keeps_its_embeddings_and_lm_head_at_16_bits():
    """FP8 block scaling quantises the blocks' Linear layers: a Llama-3.1-70B FP8-block config sizes as its W8A8
    compressed-tensors twin that ignores lm_head does (embeddings, norms and LM head bf16), not 2 GB lighter
    (QA 2026-11-28: 70.6 GB, 'fits' one H100, where the twin needed TP2)."""
    block = model_from_config(_cfg("llama-3.1-70b", {"quant_method": "fp8", "weight_block_size": [128, 128]}),
                              id="fp8-block")
    ct = model_from_config(_cfg("llama-3.1-70b", {
        "quant_method": "compressed-tensors", "ignore": ["lm_head"],
        "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float"}}}}), id="w8a8")
    wb, wc = sizes(block).weight_bytes(), sizes(ct).weight_bytes()
    assert wb == pytest.approx(wc, rel=1e-3) and wb > 72e9
    assert dict(block.weight_format.unquantised).get("lm_head") == 1.0


def test_a_precision_asked_over_a_quantised_checkpoint_says_it_replaces_the_stored_one():
    """`-p fp8` over a GPTQ checkpoint sizes every weight at FP8 and says so, naming what the checkpoint stores
    (QA 2026-11-28: the quantization_config was dropped without a word); the checkpoint's own precision, or none
    asked, sizes it as stored."""
    asked = estimate(str(GPTQ_70B), "h100-sxm", precision="fp8", layout="tp=2")
    assert any("weights sized at fp8 as asked" in n and "gptq" in n for n in asked.notes)
    stored = estimate(str(GPTQ_70B), "h100-sxm")
    assert not any("as asked" in n for n in stored.notes) and any("weights as stored" in n for n in stored.notes)
    assert asked.weight_bytes > 1.7 * stored.weight_bytes  # 8 bits a weight against 4.16


@pytest.mark.parametrize("dtype, want", [("float16", "fp16"), ("bfloat16", "bf16")])
def test_the_header_names_the_math_a_weight_only_checkpoint_runs(dtype, want):
    """A weight-only checkpoint's math runs at its own 16-bit dtype; the answer's compute precision says so, as its
    quantisation note does (QA 2026-11-28: an fp16 bitsandbytes checkpoint said 'bf16 compute' and 'fp16 math')."""
    from chalk.api import estimate

    cfg = _cfg("llama-3.1-8b", {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"})
    cfg["torch_dtype"] = dtype
    m = model_from_config(cfg, id="bnb")
    r = estimate(m, "h100-sxm", layout="tp=1")
    assert r.compute_precision == want == m.weight_format.compute


@pytest.mark.parametrize("chip", ["h100-sxm", "h200"])
@pytest.mark.parametrize("batch", [1, 4, 16])
def test_mxfp4_experts_are_never_slower_than_bf16_where_the_read_binds(chip, batch):
    """A QA sweep: gpt-oss-120b on H200 TP2 at batch 1 stepped in 6.00 ms with its MXFP4 experts against 5.37 ms
    with BF16 ones: the measured mixed-input MoE kernel read 952 MB in 2.59 ms where the BF16 kernel reads 3.58 GB
    in 1.96 ms. Where the 16-bit experts would be memory-bound, the narrower read is now never slower (issue 24:
    fewer bytes at the same compute rate); where the math binds, the mixed-input kernel's measured time stands."""
    import chalk

    t = {p: chalk.estimate("gpt-oss-120b", chip, layout="tp=2", batch=batch, context=2048, precision=p,
                           engine="vllm").to_dict()["step_time_s"] for p in ("bf16", "mxfp4")}
    assert t["mxfp4"] <= t["bf16"] * (1 + 1e-9), t


@pytest.mark.parametrize("kv", ["w4a16", "w1a16-int-ch", "w8a16-int-ch"])
def test_a_weight_only_format_is_no_kv_cache_dtype(kv):
    """QA 2026-11-28: --kv-precision w4a16 sized a 'w4a16-int-g128 KV'. A weight-only GEMM format stores weights
    narrow for 16-bit math; no engine stores a KV cache so: refused in one line, as every door reads it."""
    from chalk.errors import InputError

    with pytest.raises(InputError, match="weight-only GEMM format .* not a KV-cache dtype"):
        estimate("llama-3.1-8b", "h100-sxm", kv_precision=kv, batch=1, context=1000)
    assert estimate("llama-3.1-8b", "h100-sxm", kv_precision="fp8", batch=1, context=1000).fits
    assert estimate("llama-3.1-8b", "h100-sxm", kv_precision="bf16", batch=1, context=1000).fits


def test_only_registered_weight_only_formats_are_weight_only():
    """`weight_only` is membership of the registered formats: it compared the fallback tuple by identity, and Python
    folds equal constant tuples into one object, so bf16 (fallback ('bf16', 'fp16')) read as weight-only."""
    from chalk.specs.precision import weight_only

    assert [p for p in ("bf16", "fp16", "fp32", "fp8", "fp4", "mxfp4", "int8") if weight_only(p)] == []
    assert weight_only("w4a16") and weight_only("w8a16-int-ch")


@pytest.mark.parametrize("q, precision", [
    ({"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0, "modules_to_not_convert": ["lm_head"]}, "fp8"),
    ({"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "FP8", "exclude_modules": ["lm_head"]},
     "fp8"),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4", "exclude_modules": ["lm_head"]}, "fp4"),
])
def test_fbgemm_and_modelopt_checkpoints_size_as_their_precision(tmp_path, q, precision):
    """Meta's FP8 checkpoints (fbgemm_fp8) and NVIDIA's ModelOpt ones (quant_method modelopt, the checkpoints plan
    launches on TensorRT-LLM) were refused as unknown schemes (QA 2026-11-28). They size as the what-if precision
    of the same scheme: quantised Linear layers, embedding and LM head at 16 bits."""
    cfg = json.loads(package_path("catalog", "models", "llama-3.1-70b", "config.json").read_text())
    cfg["quantization_config"] = q
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    got = estimate(str(tmp_path / "config.json"), "h100-sxm", layout="tp=2", batch=1, context=1000)
    want = estimate("llama-3.1-70b", "h100-sxm", precision=precision, layout="tp=2", batch=1, context=1000)
    assert got.weight_bytes == pytest.approx(want.weight_bytes, rel=1e-9)


def test_an_unknown_modelopt_scheme_is_refused_in_one_line(tmp_path):
    from chalk.errors import SpecError
    from chalk.specs.catalog import as_model

    cfg = json.loads(package_path("catalog", "models", "llama-3.1-70b", "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "modelopt", "quant_algo": "W4A8_AWQ"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(SpecError, match="quant_algo 'W4A8_AWQ' is not a ModelOpt scheme chalk sizes"):
        as_model(str(tmp_path / "config.json"))


def test_a_float32_quantised_config_runs_and_keeps_at_16_bits(tmp_path):
    """QA 2026-11-28: a GPTQ config with torch_dtype float32 said 'fp32 math; embedding, lm_head, norms in fp32'
    beside a bf16 compute precision. Engines load a float32 checkpoint at 16 bits (vLLM's --dtype auto: FP16 for
    FP32 models), so its kept groups and its math are fp16, in the note and the answer alike."""
    cfg = json.loads(package_path("catalog", "models", "llama-3.1-70b", "config.json").read_text())
    cfg["torch_dtype"] = "float32"
    cfg["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False,
                                  "sym": True}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    r = estimate(str(tmp_path / "config.json"), "h100-sxm", layout="tp=1", batch=1, context=1000).to_dict()
    note = next(n for n in r["notes"] if n.startswith("weights as stored: gptq"))
    assert "fp16 math" in note and "in fp16" in note and "fp32" not in note
    assert r["compute_precision"] == "fp16" and r["weight_bytes"] < 40e9


def test_a_float32_config_is_sized_and_timed_at_16_bits(tmp_path):
    """QA 2026-11-28: a plain float32 Llama-3.1-70B config (no quantization_config) was sized at 282 GB of FP32
    weights and timed with FP32 math: 2x the GPUs and ~6x slower than engines serve it (vLLM's --dtype auto loads an
    FP32 checkpoint at FP16). It is sized and timed as its float16 twin."""
    cfg = json.loads(package_path("catalog", "models", "llama-3.1-70b", "config.json").read_text())
    for dtype in ("float32", "float16"):
        cfg["torch_dtype"] = dtype
        (tmp_path / dtype).mkdir()
        (tmp_path / dtype / "config.json").write_text(json.dumps(cfg))
    f32, f16 = (estimate(str(tmp_path / d / "config.json"), "h100-sxm", layout="tp=4", batch=8, context=1000)
                .to_dict() for d in ("float32", "float16"))
    assert f32["weight_bytes"] == pytest.approx(141.1e9, rel=0.01) == f16["weight_bytes"]
    assert f32["compute_precision"] == "fp16" and f32["step_time_s"] == pytest.approx(f16["step_time_s"], rel=1e-12)
