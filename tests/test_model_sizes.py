"""Model sizes against published figures and against transformers models built on the meta device."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from chalk.analyses.step.model_sizes import ModelSizes
from chalk.specs.catalog import load_model, model_ids

# Golden figures copied from shared/reference/models.csv (sources named per row there):
# (total params B, active params B incl. embeddings, KV bytes/token BF16)
GOLDEN = {
    # github deepseek-ai/DeepSeek-V3 config_671B.json + README; KV 61*(512+64)*2 (DeepSeek ISCA'25 paper)
    "deepseek-v3": (671.0, 37.6, 70272),
    # meta-llama/llama-models sku_list.py @364ed4e; Llama 3 paper Table 3
    "llama-3.1-8b": (8.03, 8.03, 131072),
    "llama-3.1-70b": (70.55, 70.55, 327680),
    "llama-3.1-405b": (405.85, 405.85, 516096),
    # Qwen3 technical report Table 2; maxtext qwen3 configs
    "qwen3-235b-a22b": (235.1, 22.2, 192512),
    "qwen3-30b-a3b": (30.5, 3.35, 98304),
    # MoonshotAI/Kimi-K2 README; maxtext kimi-k2-1t.yml
    "kimi-k2": (1026.0, 32.9, 70272),
    # openai/gpt-oss model.py ModelConfig; 18 full-attention layers x 2048 B
    "gpt-oss-120b": (116.8, 5.71, 36864),
    "gpt-oss-20b": (20.9, 4.19, 24576),
    # maxtext mixtral-8x7b.yml; Mixtral paper arXiv 2401.04088
    "mixtral-8x7b": (46.7, 12.9, 131072),
}


@pytest.mark.parametrize("mid", sorted(GOLDEN))
def test_sizes_match_published(mid):
    total, active, kv = GOLDEN[mid]
    sz = ModelSizes(load_model(mid))
    assert sz.total_params / 1e9 == pytest.approx(total, rel=0.005)
    assert sz.active_params / 1e9 == pytest.approx(active, rel=0.02)
    assert sz.kv_bytes_per_token("bf16") == kv


def test_fp8_kv_layouts():
    # reference README convention 4: MLA = 61 * 576 elements per token; FlashMLA's packed FP8 layout (656 B/layer =
    # 40,016 B) is its sparse decoding kernel's, the cache DeepSeek-V3.2 runs (vLLM's fp8_ds_mla); a dense MLA cache
    # stores its 576 elements at the cache dtype (vLLM's dense MLA backends, TensorRT-LLM's and SGLang's MLA pools):
    # 61 * 576 = 35,136 B in FP8. V3.2 indexer 61*132 = 8,052 B
    assert ModelSizes(load_model("deepseek-v3")).kv_bytes_per_token("fp8") == 35136
    assert ModelSizes(load_model("kimi-k2")).kv_bytes_per_token("fp8") == 61 * 576
    assert ModelSizes(load_model("deepseek-v3.2")).kv_bytes_per_token("fp8") == 40016 + 8052
    assert ModelSizes(load_model("deepseek-v3.2")).kv_bytes_per_token("bf16") == 70272 + 15616
    assert ModelSizes(load_model("llama-3.1-70b")).kv_bytes_per_token("fp8") == 163840


def test_batch1_deepseek_reads_active_not_total():
    sz = ModelSizes(load_model("deepseek-v3"))
    read1 = float(sz.weight_bytes_read(1, "fp8"))
    assert 30e9 < read1 < 40e9  # ~37B parameters at 1 byte, not 671B
    # every weight but the embedding table (read a row per token), which the FP8 checkpoint keeps in bf16
    assert float(sz.weight_bytes_read(100_000, "fp8")) == pytest.approx(
        sz.weight_bytes("fp8") - 2 * sz.embedding_params, rel=1e-4)


def test_sliding_window_kv_is_bounded():
    sz = ModelSizes(load_model("gpt-oss-120b"))
    # 18 sliding layers hold 128 tokens each: 18 * 128 * 2048 B = 4.72 MB per sequence (models.csv)
    swa = float(sz.kv_bytes_per_sequence(100_000)) - 100_000 * sz.kv_bytes_per_token()
    assert swa == 18 * 128 * 2048


def test_dsa_reads_topk_plus_indexer():
    sz = ModelSizes(load_model("deepseek-v3.2"))
    L = 128_000
    read = float(sz.kv_read_bytes_per_sequence(L, "fp8"))
    assert read == pytest.approx(2048 * 40016 + L * 8052)
    assert read < 0.25 * float(sz.kv_bytes_per_sequence(L, "fp8"))


def _hf_param_count(cfg: dict) -> int:
    torch = pytest.importorskip("torch", reason="needs torch and transformers: pip install -e '.[measure]'")
    transformers = pytest.importorskip("transformers", reason="needs torch and transformers: pip install -e '.[measure]'")
    cfg = dict(cfg)
    cfg.pop("quantization_config", None)
    cfg.pop("auto_map", None)
    if cfg["model_type"] == "kimi_k2":  # Kimi K2 ships remote code for the DeepSeek-V3 architecture
        cfg["model_type"] = "deepseek_v3"
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(**cfg)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("mid", model_ids())
def test_param_count_equals_transformers(mid):
    path = resources.files("chalk") / "catalog" / "models" / mid / "config.json"
    cfg = json.loads(path.read_text())
    assert ModelSizes(load_model(mid)).total_params == _hf_param_count(cfg)


def test_unseen_config_equals_transformers():
    from pathlib import Path

    p = Path(__file__).parent / "data" / "unseen" / "config.json"
    assert ModelSizes(load_model(str(p))).total_params == _hf_param_count(json.loads(p.read_text()))
