"""Model architectures read from Hugging Face `config.json` (plus chalk's optional meta.yaml).

`ModelSpec` holds the dimensions only; sizes, FLOPs and KV bytes are derived in
`chalk.analyses.step.model_sizes` from the pure functions in `chalk.equations`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from chalk.errors import SpecError, UnknownNameError, UnsupportedArchitectureError
from chalk.specs.precision import canonical
from chalk.specs.quantisation import WeightFormat, weight_format_from_config
from chalk.specs.validate import MAX_DIM, field_choice, field_number, spec_int, spec_number, spec_str, spec_str_list
from chalk.specs.workload import short

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "deepseek_v2", "deepseek_v3",
                         "deepseek_v32", "kimi_k2", "gpt_oss")


#: ModelSpec's dimensions that are positive whole numbers, and those that may be 0 (absent)
_SIZES = ("vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim")
_COUNTS = ("intermediate_size", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
           "index_n_heads", "index_head_dim", "index_topk", "num_experts", "experts_per_token",
           "moe_intermediate_size", "num_shared_experts", "mtp_layers")
#: Most decoder layers a config may hold: chalk keeps per-layer flags, and no checkpoint comes near it (the
#: deepest in the catalog, Llama 3.1 405B, has 126). A million still loads, so a fit check can refuse it in one line.
MAX_LAYERS = 1_000_000
#: config.json keys that count the multi-token-prediction (draft) layers a checkpoint ships beyond its decoder
#: layers: DeepSeek-V3/R1/V3.2, GLM-4.5 and MiMo write num_nextn_predict_layers, Qwen3-Next and Qwen3.5
#: mtp_num_hidden_layers
MTP_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers")


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """A decoder-only transformer's dimensions, per layer where layers differ."""

    id: str
    name: str
    model_type: str
    source: str = ""
    # the catalog's own entry (its meta.yaml's hf_repo and known checkpoints apply); False for a config.json loaded
    # from a path, which is the user's checkpoint even where its folder is named like a catalog model
    from_catalog: bool = False
    aliases: tuple[str, ...] = ()
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    tie_word_embeddings: bool = False
    max_context: int | None = None
    attention: str = "gqa"  # "gqa" or "mla"
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    attention_sinks: bool = False
    # MLA (DeepSeek-V2/V3, Kimi K2)
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # DeepSeek Sparse Attention (V3.2)
    index_n_heads: int = 0
    index_head_dim: int = 0
    index_topk: int = 0
    # attention window per layer: True = sliding-window layer
    sliding_layers: tuple[bool, ...] = ()
    sliding_window: int | None = None
    # mixture of experts
    moe_layers: tuple[bool, ...] = ()
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    num_shared_experts: int = 0
    router_bias: bool = False
    expert_bias: bool = False
    # defaults and card figures (from meta.yaml where shipped)
    native_precision: str = "bf16"
    expert_precision: str | None = None
    # the checkpoint's quantised storage (quantization_config), None for plain torch_dtype weights
    weight_format: WeightFormat | None = None
    card_total_params: float | None = None
    card_active_params: float | None = None
    notes: str = ""
    # multi-token-prediction (draft) layers shipped beyond num_layers (`MTP_KEYS`), the per-token acceptance of
    # their first draft and the factor it falls by per further draft (a head reused autoregressively), each with its
    # source (meta.yaml mtp_acceptance / mtp_acceptance_decay, else the catalog's speculation.yaml defaults)
    mtp_layers: int = 0
    mtp_acceptance: float | None = None
    mtp_acceptance_source: str = ""
    mtp_acceptance_decay: float | None = None
    mtp_acceptance_decay_source: str = ""

    def __post_init__(self) -> None:
        for name in _SIZES:
            field_number(self, name, gt=0, whole=True)
        for name in _COUNTS:
            field_number(self, name, ge=0, whole=True)
        for name in ("max_context", "sliding_window"):
            field_number(self, name, gt=0, whole=True, optional=True)
        for name in ("card_total_params", "card_active_params"):
            field_number(self, name, ge=0, optional=True)
        field_number(self, "mtp_acceptance", gt=0, lt=1, optional=True)
        field_number(self, "mtp_acceptance_decay", gt=0, le=1, optional=True)
        for name in ("aliases", "sliding_layers", "moe_layers"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        field_choice(self, "attention", ("gqa", "mla"))

    # counts over the per-layer flags are cached: the step model asks for them on every layout and batch, and a
    # config may hold up to MAX_LAYERS layers (a fields-only copy, `dataclasses.replace`, computes them afresh)
    @cached_property
    def is_moe(self) -> bool:
        return self.num_experts > 0 and any(self.moe_layers)

    @cached_property
    def n_moe_layers(self) -> int:
        return sum(self.moe_layers)

    @cached_property
    def n_sliding_layers(self) -> int:
        return sum(self.sliding_layers)

    @property
    def n_full_layers(self) -> int:
        return self.num_layers - self.n_sliding_layers

    @property
    def is_dsa(self) -> bool:
        return self.index_topk > 0


def _get(cfg: dict, *keys, default=None, required=False, where="config.json"):
    for k in keys:
        if k in cfg and cfg[k] is not None:
            return cfg[k]
    if required:
        raise SpecError(f"{where}: missing field {keys[0]!r} needed to size the model")
    return default


def _int(cfg: dict, *keys, default=None, required=True, where="config.json", minimum: int = 0,
         maximum: int = MAX_DIM) -> int:
    v = _get(cfg, *keys, default=default, required=required, where=where)
    if v is None:
        return 0
    return spec_int(v, f"{where}: {keys[0]}", minimum=minimum, maximum=maximum)


def _int_list(cfg: dict, key: str, where: str) -> list[int]:
    """A list of layer indices (e.g. `mlp_only_layers`); None is empty."""
    v = cfg.get(key)
    if v is None:
        return []
    if not isinstance(v, list):
        raise SpecError(f"{where}: {key} must be a list of layer indices, got {short(v)}")
    return [spec_int(i, f"{where}: {key}[]") for i in v]


def _layer_types(cfg: dict, L: int, where: str) -> list[bool] | None:
    """`layer_types` as per-layer sliding flags, or None when absent."""
    types = cfg.get("layer_types")
    if not types:
        return None
    if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
        raise SpecError(f"{where}: layer_types must be a list of strings, got {short(types)}")
    if len(types) != L:
        raise SpecError(f"{where}: layer_types has {len(types)} entries for {L} layers")
    return [t.startswith("sliding") for t in types]


def _precision_from_config(cfg: dict, fmt: WeightFormat | None) -> str:
    """The weights' precision as served: the quantised format's, else `torch_dtype`'s, a float32 checkpoint's at 16
    bits: serving engines load it so (vLLM's --dtype auto "will use FP16 precision for FP32 and FP16 models", its
    engine-arguments docs; SGLang's and TensorRT-LLM's 16-bit kernels likewise). QA 2026-11-28: a float32 Llama-3.1-70B
    config was sized at 282 GB and timed with FP32 math, 2x the GPUs and ~6x slower than it serves."""
    if fmt is not None:
        return fmt.precision
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16").lower()
    return {"float32": "fp16", "float16": "fp16"}.get(dtype, "bf16")


def _precision_name(name: str, where: str) -> str:
    try:
        return canonical(name)
    except UnknownNameError as e:
        raise SpecError(f"{where}: weights precision: {e}") from None


#: Most draft (MTP) layers a config may ship: the most draft tokens chalk times per step (`--mtp` 1..64).
MAX_MTP_LAYERS = 64


def _mtp(cfg: dict, meta: dict, where: str) -> dict:
    """The draft layers a config ships (`MTP_KEYS`), their first draft's acceptance (meta.yaml's `mtp_acceptance`
    with `mtp_acceptance_source`) and its fall per further draft (`mtp_acceptance_decay` with
    `mtp_acceptance_decay_source`), each None where meta.yaml states none (the search applies the catalog default,
    speculation.yaml); nothing for a config without them."""
    n = _int(cfg, *MTP_KEYS, default=0, required=False, where=where)
    if n == 0:
        return {}
    if n > MAX_MTP_LAYERS:  # drafts past 64 per step are more than any engine proposes (QA 2026-11-28: 1e9 was taken)
        raise SpecError(f"{where}: {MTP_KEYS[0]} must be at most {MAX_MTP_LAYERS} draft layers, got {n}")
    out = {"mtp_layers": n}
    for key in ("mtp_acceptance", "mtp_acceptance_decay"):
        if meta.get(key) is not None:
            v = spec_number(meta[key], f"{where}: meta {key}", maximum=1.0)
            src = spec_str(meta.get(key + "_source"), f"{where}: meta {key}_source")
            if not src:
                raise SpecError(f"{where}: meta {key} needs {key}_source (where the figure comes from)")
            out.update({key: v, key + "_source": src})
    return out


def model_from_config(cfg: dict, *, id: str, name: str | None = None, source: str = "",
                      meta: dict | None = None, from_catalog: bool = False) -> ModelSpec:
    """Build a ModelSpec from a parsed Hugging Face config.json (and optional chalk meta.yaml); `from_catalog`: it is
    the catalog's own entry `id`."""
    where = source or id
    if not isinstance(cfg, dict):
        raise SpecError(f"{where}: config.json must hold a JSON object")
    meta = meta or {}
    if not isinstance(meta, dict):
        raise SpecError(f"{where}: meta.yaml must hold a mapping")
    mt = spec_str(cfg.get("model_type"), f"{where}: model_type").lower()
    if mt not in SUPPORTED_MODEL_TYPES:
        shown = f"'{mt}'" if mt else "(none)"
        raise UnsupportedArchitectureError(
            f"{where}: unsupported model_type {shown}; chalk sizes {', '.join(SUPPORTED_MODEL_TYPES)}")
    L = _int(cfg, "num_hidden_layers", "n_layer", "num_layers", where=where, maximum=MAX_LAYERS)
    H = _int(cfg, "hidden_size", "d_model", where=where)
    nh = _int(cfg, "num_attention_heads", "n_head", where=where)
    if L == 0 or H == 0 or nh == 0:
        raise SpecError(f"{where}: num_hidden_layers, hidden_size and num_attention_heads must be positive")
    # a present count must be positive (0 is no attention); absent (or null): multi-head, one KV head per head
    nkv = _int(cfg, "num_key_value_heads", default=None, required=False, where=where, minimum=1) or nh
    head_dim = _int(cfg, "head_dim", default=H // nh, required=False, where=where) or H // nh
    if head_dim == 0:
        raise SpecError(f"{where}: head_dim is 0 (hidden_size {H} < num_attention_heads {nh}); give head_dim")
    d: dict = dict(
        id=id, name=name or spec_str(meta.get("name"), f"{where}: meta name") or id, model_type=mt, source=source,
        from_catalog=bool(from_catalog),
        aliases=tuple(a.lower() for a in spec_str_list(meta.get("aliases"), f"{where}: meta aliases")),
        vocab_size=_int(cfg, "vocab_size", where=where), hidden_size=H, num_layers=L, num_heads=nh,
        num_kv_heads=nkv, head_dim=head_dim,
        intermediate_size=_int(cfg, "intermediate_size", default=0, required=False, where=where),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        max_context=_int(cfg, "max_position_embeddings", default=None, required=False, where=where,
                         minimum=1) or None,
        notes=spec_str(meta.get("notes"), f"{where}: meta notes"),
    )
    sliding = [False] * L
    window = None

    if mt in ("llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe"):
        d["qkv_bias"] = bool(cfg.get("attention_bias", False)) or mt == "qwen2"
        d["o_bias"] = bool(cfg.get("attention_bias", False)) and mt not in ("qwen2", "qwen3", "qwen3_moe")
        d["mlp_bias"] = bool(cfg.get("mlp_bias", False))
        d["qk_norm"] = mt in ("qwen3", "qwen3_moe")
        if mt in ("mistral", "mixtral") and cfg.get("sliding_window") is not None:
            window = _int(cfg, "sliding_window", where=where, minimum=1)
            sliding = [True] * L
        if mt in ("qwen2", "qwen3", "qwen3_moe") and cfg.get("use_sliding_window") and cfg.get("sliding_window") is not None:
            window = _int(cfg, "sliding_window", where=where, minimum=1)
            first = _int(cfg, "max_window_layers", default=L, required=False, where=where)
            sliding = [i >= first for i in range(L)]
    if mt == "mixtral":
        d.update(num_experts=_int(cfg, "num_local_experts", where=where),
                 experts_per_token=_int(cfg, "num_experts_per_tok", where=where),
                 moe_intermediate_size=d["intermediate_size"])
        d["moe_layers"] = tuple([True] * L)
    if mt == "qwen3_moe":
        E = _int(cfg, "num_experts", where=where)
        step = _int(cfg, "decoder_sparse_step", default=1, required=False, where=where, minimum=1)
        only_mlp = set(_int_list(cfg, "mlp_only_layers", where))
        d.update(num_experts=E, experts_per_token=_int(cfg, "num_experts_per_tok", where=where),
                 moe_intermediate_size=_int(cfg, "moe_intermediate_size", where=where))
        d["moe_layers"] = tuple(E > 0 and i not in only_mlp and (i + 1) % step == 0 for i in range(L))
    if mt in ("deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2"):
        d.update(
            attention="mla", q_lora_rank=_int(cfg, "q_lora_rank", default=0, required=False, where=where),
            kv_lora_rank=_int(cfg, "kv_lora_rank", where=where, minimum=1),
            qk_nope_head_dim=_int(cfg, "qk_nope_head_dim", where=where),
            qk_rope_head_dim=_int(cfg, "qk_rope_head_dim", where=where),
            v_head_dim=_int(cfg, "v_head_dim", where=where, minimum=1),
            num_kv_heads=1,
            num_experts=_int(cfg, "n_routed_experts", default=0, required=False, where=where),
            experts_per_token=_int(cfg, "num_experts_per_tok", default=0, required=False, where=where),
            moe_intermediate_size=_int(cfg, "moe_intermediate_size", default=0, required=False, where=where),
            num_shared_experts=_int(cfg, "n_shared_experts", default=0, required=False, where=where),
        )
        d["head_dim"] = d["qk_nope_head_dim"] + d["qk_rope_head_dim"]
        first_dense = _int(cfg, "first_k_dense_replace", default=0, required=False, where=where)
        freq = _int(cfg, "moe_layer_freq", default=1, required=False, where=where, minimum=1)
        d["moe_layers"] = tuple(d["num_experts"] > 0 and i >= first_dense and i % freq == 0 for i in range(L))
        if mt == "deepseek_v32" or cfg.get("index_topk"):
            d.update(index_n_heads=_int(cfg, "index_n_heads", where=where, minimum=1),
                     index_head_dim=_int(cfg, "index_head_dim", where=where, minimum=1),
                     index_topk=_int(cfg, "index_topk", where=where, minimum=1))
    if mt == "gpt_oss":
        E = _int(cfg, "num_local_experts", "num_experts", where=where)
        d.update(qkv_bias=True, o_bias=True, attention_sinks=True, router_bias=True, expert_bias=True,
                 num_experts=E, experts_per_token=_int(cfg, "num_experts_per_tok", "experts_per_token",
                                                       where=where),
                 moe_intermediate_size=d["intermediate_size"])
        d["moe_layers"] = tuple([True] * L)
        window = _int(cfg, "sliding_window", default=128, required=False, where=where, minimum=1)
        types = _layer_types(cfg, L, where)
        sliding = types if types is not None else [i % 2 == 0 for i in range(L)]
    if mt in ("llama", "qwen3", "qwen2") and cfg.get("layer_types") and window:
        sliding = _layer_types(cfg, L, where)

    if not d.get("moe_layers"):
        d["moe_layers"] = tuple([False] * L)
    if any(d["moe_layers"]) and (d.get("num_experts", 0) <= 0 or d.get("experts_per_token", 0) <= 0
                                 or d.get("moe_intermediate_size", 0) <= 0):
        raise SpecError(f"{where}: MoE config needs positive expert count, experts per token and expert size")
    if any(d["moe_layers"]) and d["experts_per_token"] > d["num_experts"]:
        raise SpecError(f"{where}: experts per token ({d['experts_per_token']}) exceeds experts ({d['num_experts']})")
    if not all(d["moe_layers"]) and d["intermediate_size"] <= 0:
        raise SpecError(f"{where}: missing field 'intermediate_size' needed to size the dense layers")
    if nh % d["num_kv_heads"] and d.get("attention", "gqa") == "gqa":
        raise SpecError(f"{where}: num_attention_heads ({nh}) is not a multiple of num_key_value_heads "
                        f"({d['num_kv_heads']})")
    d["sliding_layers"] = tuple(bool(s) and window is not None for s in sliding)
    d["sliding_window"] = window if any(d["sliding_layers"]) else None

    n_moe = sum(d["moe_layers"])
    fmt = weight_format_from_config(cfg, {"attention": L, "mlp": L - n_moe, "shared_experts": n_moe, "router": n_moe,
                                          "experts": n_moe}, where)
    prec = spec_str(meta.get("weights_precision"), f"{where}: meta weights_precision") or \
        _precision_from_config(cfg, fmt)
    prec = _precision_name(prec, where)
    d["weight_format"] = fmt if fmt is not None and fmt.precision == prec else None  # meta.yaml may override
    if prec == "mxfp4":  # gpt-oss: MoE experts in MXFP4, everything else bf16
        d["native_precision"], d["expert_precision"] = "bf16", "mxfp4"
    else:
        d["native_precision"] = prec
    d.update(_mtp(cfg, meta, where))
    for key, field in (("card_total_params_b", "card_total_params"), ("card_active_params_b", "card_active_params")):
        if meta.get(key) is not None:
            d[field] = spec_number(meta[key], f"{where}: meta {key}", maximum=1e6) * 1e9
    try:
        return ModelSpec(**d)
    except ValueError as e:
        from chalk.specs.hardware import _first_line

        raise SpecError(f"{where}: {_first_line(e)}") from None
