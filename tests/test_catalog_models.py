"""The model catalog: official Hugging Face config.json plus chalk's meta.yaml per model.

Plain json + yaml on purpose: these tests check the shipped package data itself, independent of
the loader in chalk.specs. Expected architecture numbers are transcribed from the project's
reference notes (shared/reference/models.csv, which cites the official source on every row; the
source is repeated in a comment on each entry below). If that file is present it is cross-checked
too; the tests skip that part cleanly when ../shared is absent.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
MODELS_DIR = REPO / "src" / "chalk" / "catalog" / "models"
UNSEEN_DIR = REPO / "tests" / "data" / "unseen"
REFERENCE_CSV = REPO.parent / "shared" / "reference" / "models.csv"

IDS = [
    "llama-3.1-8b", "llama-3.1-70b", "llama-3.3-70b", "llama-3.1-405b", "llama-2-70b",
    "deepseek-v3", "deepseek-r1", "deepseek-v3.2", "qwen3-235b-a22b", "qwen3-30b-a3b",
    "kimi-k2", "gpt-oss-120b", "gpt-oss-20b", "mixtral-8x7b",
]

MODEL_TYPES = {"llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "deepseek_v3",
               "deepseek_v32", "kimi_k2", "gpt_oss"}
MLA_TYPES = {"deepseek_v3", "deepseek_v32", "kimi_k2"}
PRECISIONS = {"bf16", "fp16", "fp8", "mxfp4", "fp4", "int8", "fp32"}
META_KEYS = {"id", "name", "hf_repo", "source", "reconstructed", "aliases", "card_total_params_b",
             "card_active_params_b", "card_source", "weights_precision", "notes"}

# --------------------------------------------------------------------------------------------
# Expected architecture numbers (reference models.csv, with the official source it cites).
# Keys: layers, hidden, heads, kv_heads (GQA only), head_dim, dense_ffn, moe_ffn, n_dense_layers,
# experts, top_k, shared, vocab, q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim,
# v_head_dim, sliding_window, index_*; kv_bytes_bf16 = KV cache bytes per token in BF16
# (models.csv kv_bytes_per_token_bf16; gpt-oss: full-attention layers only); params_b =
# models.csv params_check_computed_B (total parameters, both embedding matrices).
# --------------------------------------------------------------------------------------------
_DSV3 = dict(  # github deepseek-ai/DeepSeek-V3 inference/configs/config_671B.json @9b4e978 + README
    layers=61, hidden=7168, heads=128, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
    qk_rope_head_dim=64, v_head_dim=128, dense_ffn=18432, moe_ffn=2048, n_dense_layers=3,
    experts=256, top_k=8, shared=1, vocab=129280, kv_bytes_bf16=70272, params_b=671.0)
_L31_70 = dict(  # github meta-llama/llama-models models/sku_list.py @364ed4e (dim 8192, 80 layers)
    layers=80, hidden=8192, heads=64, kv_heads=8, head_dim=128, dense_ffn=28672, vocab=128256,
    kv_bytes_bf16=327680, params_b=70.55)

EXPECTED: dict[str, dict] = {
    # github meta-llama/llama-models models/sku_list.py @364ed4e; Llama 3 paper Table 3
    "llama-3.1-8b": dict(layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128, dense_ffn=14336,
                         vocab=128256, kv_bytes_bf16=131072, params_b=8.03),
    "llama-3.1-70b": _L31_70,
    # models.csv notes: "Llama-3.3-70B has the identical architecture" (to Llama-3.1-70B)
    "llama-3.3-70b": _L31_70,
    # github meta-llama/llama-models models/sku_list.py @364ed4e (dim 16384, 126 layers, ffn mult 1.2)
    "llama-3.1-405b": dict(layers=126, hidden=16384, heads=128, kv_heads=8, head_dim=128, dense_ffn=53248,
                           vocab=128256, kv_bytes_bf16=516096, params_b=405.85),
    # not in models.csv: meta-llama/Llama-2-70b-hf as given in the catalog brief, and
    # AI-Hypercomputer/maxtext src/MaxText/configs/models/llama2-70b.yml (8192, 64/8 heads, 28672, 80, 32000)
    "llama-2-70b": dict(layers=80, hidden=8192, heads=64, kv_heads=8, head_dim=128, dense_ffn=28672,
                        vocab=32000, max_position_embeddings=4096, kv_bytes_bf16=327680, params_b=68.98),
    "deepseek-v3": _DSV3,
    # models.csv row "DeepSeek-V3 / R1": same architecture
    "deepseek-r1": _DSV3,
    # github deepseek-ai/DeepSeek-V3.2-Exp inference/config_671B_v3.2.json and DeepSeek_V3_2.pdf (@3b99a53)
    "deepseek-v3.2": dict(_DSV3, index_n_heads=64, index_head_dim=128, index_topk=2048),
    # github QwenLM/Qwen3 Qwen3_Technical_Report.pdf Table 2; maxtext configs/models/qwen3-235b-a22b.yml
    "qwen3-235b-a22b": dict(layers=94, hidden=4096, heads=64, kv_heads=4, head_dim=128, moe_ffn=1536,
                            n_dense_layers=0, experts=128, top_k=8, shared=0, vocab=151936,
                            kv_bytes_bf16=192512, params_b=235.1),
    # github QwenLM/Qwen3 Qwen3_Technical_Report.pdf Table 2; maxtext configs/models/qwen3-30b-a3b.yml
    "qwen3-30b-a3b": dict(layers=48, hidden=2048, heads=32, kv_heads=4, head_dim=128, moe_ffn=768,
                          n_dense_layers=0, experts=128, top_k=8, shared=0, vocab=151936,
                          kv_bytes_bf16=98304, params_b=30.5),
    # github MoonshotAI/Kimi-K2 README Model Summary; maxtext configs/models/kimi-k2-1t.yml
    "kimi-k2": dict(layers=61, hidden=7168, heads=64, q_lora_rank=1536, kv_lora_rank=512,
                    qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, dense_ffn=18432,
                    moe_ffn=2048, n_dense_layers=1, experts=384, top_k=8, shared=1, vocab=163840,
                    kv_bytes_bf16=70272, params_b=1026),
    # github openai/gpt-oss gpt_oss/torch/model.py ModelConfig and README
    "gpt-oss-120b": dict(layers=36, hidden=2880, heads=64, kv_heads=8, head_dim=64, moe_ffn=2880,
                         n_dense_layers=0, experts=128, top_k=4, shared=0, vocab=201088, sliding_window=128,
                         kv_bytes_bf16=36864, params_b=116.8),
    # maxtext src/MaxText/configs/models/gpt-oss-20b.yml (from HF config); github openai/gpt-oss README
    "gpt-oss-20b": dict(layers=24, hidden=2880, heads=64, kv_heads=8, head_dim=64, moe_ffn=2880,
                        n_dense_layers=0, experts=32, top_k=4, shared=0, vocab=201088, sliding_window=128,
                        kv_bytes_bf16=24576, params_b=20.9),
    # maxtext src/MaxText/configs/models/mixtral-8x7b.yml; Mixtral paper arXiv 2401.04088
    "mixtral-8x7b": dict(layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128, moe_ffn=14336,
                         n_dense_layers=0, experts=8, top_k=2, shared=0, vocab=32000,
                         kv_bytes_bf16=131072, params_b=46.7),
}

# models.csv row name for each id (for the optional cross-check against the file itself)
CSV_ROW = {
    "llama-3.1-8b": "Llama-3.1-8B", "llama-3.1-70b": "Llama-3.1-70B", "llama-3.3-70b": "Llama-3.1-70B",
    "llama-3.1-405b": "Llama-3.1-405B", "deepseek-v3": "DeepSeek-V3 / R1", "deepseek-r1": "DeepSeek-V3 / R1",
    "deepseek-v3.2": "DeepSeek-V3.2-Exp / V3.2 (DSA)", "qwen3-235b-a22b": "Qwen3-235B-A22B",
    "qwen3-30b-a3b": "Qwen3-30B-A3B", "kimi-k2": "Kimi K2 (Instruct/Base)", "gpt-oss-120b": "gpt-oss-120b",
    "gpt-oss-20b": "gpt-oss-20b", "mixtral-8x7b": "Mixtral-8x7B",
}


def _config(mid: str) -> dict:
    return json.loads((MODELS_DIR / mid / "config.json").read_text())


def _meta(mid: str) -> dict:
    return yaml.safe_load((MODELS_DIR / mid / "meta.yaml").read_text())


def arch(cfg: dict) -> dict:
    """The architecture numbers of a config.json, under the EXPECTED key names."""
    mt = cfg["model_type"]
    a = dict(layers=cfg["num_hidden_layers"], hidden=cfg["hidden_size"], heads=cfg["num_attention_heads"],
             vocab=cfg["vocab_size"], max_position_embeddings=cfg.get("max_position_embeddings"))
    if mt in MLA_TYPES:
        for k in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            a[k] = cfg[k]
        a.update(dense_ffn=cfg["intermediate_size"], moe_ffn=cfg["moe_intermediate_size"],
                 n_dense_layers=cfg["first_k_dense_replace"], experts=cfg["n_routed_experts"],
                 top_k=cfg["num_experts_per_tok"], shared=cfg["n_shared_experts"])
        a["kv_bytes_bf16"] = a["layers"] * (cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"]) * 2
        for k in ("index_n_heads", "index_head_dim", "index_topk"):
            if k in cfg:
                a[k] = cfg[k]
        return a
    a["kv_heads"] = cfg.get("num_key_value_heads", a["heads"])
    a["head_dim"] = cfg.get("head_dim") or a["hidden"] // a["heads"]
    kv_layers = a["layers"]
    if mt == "qwen3_moe":
        a.update(moe_ffn=cfg["moe_intermediate_size"], experts=cfg["num_experts"], top_k=cfg["num_experts_per_tok"],
                 shared=0, n_dense_layers=len(cfg.get("mlp_only_layers") or []))
    elif mt == "mixtral":
        a.update(moe_ffn=cfg["intermediate_size"], experts=cfg["num_local_experts"],
                 top_k=cfg["num_experts_per_tok"], shared=0, n_dense_layers=0)
    elif mt == "gpt_oss":
        a.update(moe_ffn=cfg["intermediate_size"], experts=cfg["num_local_experts"],
                 top_k=cfg["num_experts_per_tok"], shared=0, n_dense_layers=0, sliding_window=cfg["sliding_window"])
        kv_layers = sum(1 for t in cfg["layer_types"] if t == "full_attention")
    else:
        a["dense_ffn"] = cfg["intermediate_size"]
    a["kv_bytes_bf16"] = 2 * kv_layers * a["kv_heads"] * a["head_dim"] * 2
    return a


def param_count(cfg: dict) -> float:
    """Total parameters (billions) of a config, both embedding matrices included; no MTP module."""
    mt, H, L, V = cfg["model_type"], cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    nh = cfg["num_attention_heads"]
    emb = V * H * (1 if cfg.get("tie_word_embeddings") else 2)
    total = emb + H  # final norm
    if mt in MLA_TYPES:
        ql, kl, nope, rope, v = (cfg[k] for k in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                                                  "qk_rope_head_dim", "v_head_dim"))
        attn = (H * ql + ql + ql * nh * (nope + rope) + H * (kl + rope) + kl + kl * nh * (nope + v)
                + nh * v * H)
        dense = 3 * H * cfg["intermediate_size"]
        E, S, I = cfg["n_routed_experts"], cfg["n_shared_experts"], cfg["moe_intermediate_size"]
        moe = (E + S) * 3 * H * I + H * E + E
        k = cfg["first_k_dense_replace"]
        return (total + L * (attn + 2 * H) + k * dense + (L - k) * moe) / 1e9
    nkv = cfg.get("num_key_value_heads", nh)
    hd = cfg.get("head_dim") or H // nh
    attn = H * nh * hd + 2 * H * nkv * hd + nh * hd * H
    if mt == "gpt_oss":
        attn += nh * hd + 2 * nkv * hd + H + nh  # q/k/v/o biases and sinks
        E, I = cfg["num_local_experts"], cfg["intermediate_size"]
        ffn = E * (H * 2 * I + 2 * I + I * H + H) + H * E + E
    elif mt == "qwen3_moe":
        attn += 2 * hd  # q/k norms
        E, I = cfg["num_experts"], cfg["moe_intermediate_size"]
        ffn = E * 3 * H * I + H * E
    elif mt == "mixtral":
        E, I = cfg["num_local_experts"], cfg["intermediate_size"]
        ffn = E * 3 * H * I + H * E
    else:
        ffn = 3 * H * cfg["intermediate_size"]
    return (total + L * (attn + ffn + 2 * H)) / 1e9


# --------------------------------------------------------------------------------------------
def test_catalog_holds_exactly_the_listed_ids():
    shipped = sorted(p.name for p in MODELS_DIR.iterdir() if p.is_dir())
    assert shipped == sorted(IDS)


@pytest.mark.parametrize("mid", IDS)
def test_files_present_and_parse(mid):
    d = MODELS_DIR / mid
    assert (d / "config.json").is_file() and (d / "meta.yaml").is_file()
    cfg = _config(mid)
    assert isinstance(cfg, dict)
    assert cfg["model_type"] in MODEL_TYPES
    assert isinstance(cfg.get("architectures"), list) and cfg["architectures"]
    assert cfg.get("torch_dtype") in ("bfloat16", "float16") or cfg["model_type"] == "gpt_oss"


@pytest.mark.parametrize("mid", IDS)
def test_meta_schema(mid):
    m = _meta(mid)
    assert META_KEYS <= set(m), META_KEYS - set(m)
    assert m["id"] == mid
    assert isinstance(m["name"], str) and m["name"]
    assert isinstance(m["hf_repo"], str) and m["hf_repo"].count("/") == 1
    assert isinstance(m["source"], str) and "huggingface.co/" + m["hf_repo"] in m["source"]
    assert isinstance(m["reconstructed"], bool)
    if m["reconstructed"]:
        assert "reconstruct" in m["notes"].lower()
    assert isinstance(m["aliases"], list) and m["aliases"]
    # lower-case, and no "/": the loader reads a name with a slash as a file path
    assert all(isinstance(a, str) and a and a == a.lower() and "/" not in a for a in m["aliases"])
    for k in ("card_total_params_b", "card_active_params_b"):
        assert isinstance(m[k], (int, float)) and not isinstance(m[k], bool) and m[k] > 0
    assert m["card_active_params_b"] <= m["card_total_params_b"]
    assert m["weights_precision"] in PRECISIONS
    assert isinstance(m["card_source"], str) and m["card_source"]


def test_aliases_unique_across_models():
    owner: dict[str, str] = {mid: mid for mid in IDS}
    for mid in IDS:
        for a in _meta(mid)["aliases"]:
            assert a not in owner or owner[a] == mid, f"alias {a!r} of {mid} collides with {owner[a]}"
            owner[a] = mid


@pytest.mark.parametrize("mid", IDS)
def test_architecture_matches_reference(mid):
    got = arch(_config(mid))
    want = EXPECTED[mid]
    for k, v in want.items():
        if k == "params_b":
            continue
        assert got.get(k) == v, f"{mid}: {k} = {got.get(k)!r}, reference says {v!r}"


@pytest.mark.parametrize("mid", IDS)
def test_parameter_count_matches_reference(mid):
    # models.csv params_check_computed_B (llama-2-70b: 68.98B = the 70B checkpoint's count)
    got, want = param_count(_config(mid)), EXPECTED[mid]["params_b"]
    assert abs(got - want) / want < 0.015, f"{mid}: {got:.2f}B computed vs {want}B"


def test_family_specific_fields():
    # deepseek-v3.2 keeps its DSA indexer keys under the deepseek_v32 model_type
    c = _config("deepseek-v3.2")
    assert c["model_type"] == "deepseek_v32" and c["architectures"] == ["DeepseekV32ForCausalLM"]
    assert (c["index_n_heads"], c["index_head_dim"], c["index_topk"]) == (64, 128, 2048)
    # DeepSeek-V3 and R1 share the architecture
    assert arch(_config("deepseek-v3")) == arch(_config("deepseek-r1"))
    for mid in ("deepseek-v3", "deepseek-r1", "deepseek-v3.2", "kimi-k2"):
        assert _config(mid)["quantization_config"]["quant_method"] == "fp8"
    k = _config("kimi-k2")
    assert k["model_type"] == "kimi_k2" and k["architectures"] == ["DeepseekV3ForCausalLM"]
    # gpt-oss: alternating sliding/full attention starting with sliding, MXFP4 experts
    for mid in ("gpt-oss-120b", "gpt-oss-20b"):
        g = _config(mid)
        assert g["layer_types"] == ["sliding_attention", "full_attention"] * (g["num_hidden_layers"] // 2)
        assert g["experts_per_token"] == g["num_experts_per_tok"] == 4
        assert g["quantization_config"]["quant_method"] == "mxfp4"
        assert _meta(mid)["weights_precision"] == "mxfp4"
    # qwen3 MoE: every layer sparse
    for mid in ("qwen3-235b-a22b", "qwen3-30b-a3b"):
        q = _config(mid)
        assert q["model_type"] == "qwen3_moe" and q["decoder_sparse_step"] == 1 and q["mlp_only_layers"] == []
    # mixtral has no sliding window (HF config sliding_window null)
    assert _config("mixtral-8x7b")["sliding_window"] is None
    assert _config("llama-2-70b")["max_position_embeddings"] == 4096


def test_reference_csv_agrees_when_present():
    if not REFERENCE_CSV.is_file():
        pytest.skip("shared/reference/models.csv not available")
    with REFERENCE_CSV.open(newline="") as f:
        rows = {r["model"]: r for r in csv.DictReader(f)}
    cols = dict(layers="layers", hidden="hidden", heads="n_heads", vocab="vocab", experts="experts_routed",
                top_k="experts_active", kv_lora_rank="kv_lora_rank", qk_rope_head_dim="qk_rope_head_dim",
                moe_ffn="moe_expert_intermediate", kv_heads="n_kv_heads")
    for mid, row_name in CSV_ROW.items():
        row = rows[row_name]
        got = arch(_config(mid))
        for key, col in cols.items():
            cell = (row.get(col) or "").strip()
            if key in got and cell.isdigit():
                assert got[key] == int(cell), f"{mid}: {key}={got[key]} but models.csv {col}={cell}"
        kv = (row.get("kv_bytes_per_token_bf16") or "").split()[0]
        if kv.isdigit():
            assert got["kv_bytes_bf16"] == int(kv), f"{mid}: KV bytes/token {got['kv_bytes_bf16']} vs {kv}"


def test_unseen_config_is_a_real_model_chalk_does_not_ship():
    cfg = json.loads((UNSEEN_DIR / "config.json").read_text())
    source = (UNSEEN_DIR / "SOURCE.txt").read_text().strip()
    assert source and "\n" not in source
    assert cfg["model_type"] in MODEL_TYPES
    repos = {_meta(mid)["hf_repo"].lower() for mid in IDS}
    assert not any(r in source.lower() for r in repos)
    assert arch(cfg)["layers"] > 0 and param_count(cfg) > 1
