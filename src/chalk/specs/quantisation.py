"""How a checkpoint stores its weights: a Hugging Face `quantization_config` read into a `WeightFormat`.

Schemes read: GPTQ and AWQ (`bits`, `group_size`, zero points), bitsandbytes (`load_in_4bit` NF4/FP4 with or
without double quantisation, `load_in_8bit`), compressed-tensors (`config_groups`: W4A16 / W8A16 integer weights,
W8A8 FP8 and INT8, NVFP4), MXFP4 (gpt-oss) and FP8 with block scales (DeepSeek-V3). Weight-only schemes are sized at
their stored bits (scales and zero points included: `chalk.specs.precision.WeightOnly`) and run their math at 16
bits; W8A8 schemes run it at 8 bits. Modules a checkpoint keeps unquantised (`modules_to_not_convert`, `ignore`,
`llm_int8_skip_modules`, and each scheme's defaults: embeddings and norms are never a Linear, GPTQ / AWQ /
bitsandbytes leave `lm_head` and MoE routers alone) are sized at the checkpoint's 16-bit dtype, per parameter group.
Anything else (an unknown `quant_method`, bits of 0 or 1e9, a malformed block) is refused with one SpecError line.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from chalk.errors import SpecError
from chalk.specs.precision import WeightOnly, bytes_per_element, weight_only
from chalk.specs.workload import short

#: Parameter groups of a model (`chalk.analyses.step.model_sizes.ModelSizes.group_params`).
GROUPS = ("embedding", "lm_head", "attention", "mlp", "shared_experts", "router", "experts", "norms")

#: Module-name words -> parameter group, for the lists of modules a checkpoint leaves unquantised. The last word of
#: an entry that names a group decides (`model.layers.*.mlp.router` is the router, `re:.*mlp.gate$` too).
MODULE_WORDS = {
    "lm_head": "lm_head", "output": "lm_head",
    "embed_tokens": "embedding", "embed": "embedding", "wte": "embedding", "embeddings": "embedding",
    "self_attn": "attention", "attn": "attention", "attention": "attention", "q_proj": "attention",
    "k_proj": "attention", "v_proj": "attention", "o_proj": "attention", "qkv_proj": "attention",
    "q_a_proj": "attention", "q_b_proj": "attention", "kv_a_proj_with_mqa": "attention", "kv_b_proj": "attention",
    "mlp": "mlp", "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp", "gate_up_proj": "mlp",
    "feed_forward": "mlp",
    "shared_experts": "shared_experts", "shared_expert": "shared_experts",
    "gate": "router", "router": "router",
    "experts": "experts", "block_sparse_moe": "experts",
    "norm": "norms", "input_layernorm": "norms", "post_attention_layernorm": "norms",
}

#: Groups each scheme keeps at 16 bits whatever its lists say. Embeddings and norms are not Linear layers, which
#: is all GPTQ, AWQ, bitsandbytes and compressed-tensors quantise; GPTQ (AutoGPTQ / GPTQModel, unless `lm_head: true`),
#: AWQ (AutoAWQ) and bitsandbytes (transformers keeps the output embedding: `get_keys_to_not_convert`) leave the LM
#: head, and their MoE module lists leave the router gate, in 16 bits. compressed-tensors quantises every Linear it
#: does not `ignore`. MXFP4 and FP8 block checkpoints say what they keep in `modules_to_not_convert` where they do;
#: an FP8 block checkpoint's embeddings and LM head stay 16-bit whether listed or not (DeepSeek-V3's config lists
#: none, and its model.embed_tokens and lm_head tensors are bf16 with no weight_scale_inv beside them: FP8 block
#: scaling quantises the Linear layers of the blocks); counted as FP8 they under-sized a Llama-70B FP8-block
#: checkpoint by 2 GB, fitting one H100 that its W8A8 twin (LM head kept) does not (QA 2026-11-28).
SCHEME_KEEPS = {
    "gptq": ("embedding", "norms", "lm_head", "router"),
    "awq": ("embedding", "norms", "lm_head", "router"),
    "bitsandbytes": ("embedding", "norms", "lm_head", "router"),
    "compressed-tensors": ("embedding", "norms"),
    "mxfp4": ("embedding", "norms"),
    "fp8": ("embedding", "norms", "lm_head"),
    # FBGEMM FP8 (Meta's Llama-3.1-405B-Instruct-FP8): FP8 weights per channel, activations per token at run time;
    # quantises Linear layers, its `modules_to_not_convert` naming what else stays 16-bit (the LM head, at least)
    "fbgemm_fp8": ("embedding", "norms", "lm_head"),
    # NVIDIA ModelOpt (config.json `quant_method: modelopt`, as hf_quant_config.json): its recipes leave
    # `*lm_head*` and the MoE routers unquantised; `exclude_modules` names more
    "modelopt": ("embedding", "norms", "lm_head", "router"),
}

#: ModelOpt `quant_algo` values chalk sizes, and the precision each stores its quantised weights at (vLLM's
#: ModelOpt docs list FP8, FP8_PER_CHANNEL_PER_TOKEN, FP8_PB_WO (block-scaled FP8), NVFP4 and MXFP8; chalk has no
#: MXFP8 precision, so it is refused with the others)
MODELOPT_ALGOS = {"fp8": "fp8", "fp8_per_channel_per_token": "fp8", "fp8_pb_wo": "fp8", "nvfp4": "fp4"}

_DTYPES = {"float32": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16"}


@dataclass(frozen=True)
class WeightFormat:
    """A checkpoint's stored weights: the quantised weights' precision (`chalk.specs.precision`), the 16-bit dtype
    of the modules it keeps unquantised, and which parameter groups those are (group, fraction of its layers)."""

    method: str
    precision: str
    dense_dtype: str = "bf16"
    unquantised: tuple[tuple[str, float], ...] = ()
    #: The KV-cache dtype the checkpoint's quantisation config declares (compressed-tensors `kv_cache_scheme`,
    #: ModelOpt's `kv_cache_quant_algo`); None where it declares none (an engine following the checkpoint then
    #: stores the KV cache at `dense_dtype`).
    kv_cache: str | None = None

    def fraction(self, group: str) -> float:
        """Fraction of `group`'s parameters kept at `dense_dtype`."""
        return max((f for g, f in self.unquantised if g == group), default=0.0)

    @property
    def bits_per_weight(self) -> float:
        """Stored bits per quantised weight, scales and zero points included."""
        return bytes_per_element(self.precision) * 8

    @property
    def weight_only(self) -> bool:
        return weight_only(self.precision)

    @property
    def compute(self) -> str:
        """The precision the matrix math runs at: 16 bits for weight-only schemes, else the weights' own."""
        return self.dense_dtype if self.weight_only else self.precision

    def describe(self) -> str:
        """One line: scheme, stored bits per weight, math, what stays unquantised."""
        kept = [g if f >= 1 else f"{g} ({f:.0%} of layers)" for g, f in self.unquantised]
        math_ = f"{self.compute} math" if self.weight_only else \
            f"{self.compute} math where the chip has that rate, else the next wider"
        return (f"{self.method} {self.precision}: {self.bits_per_weight:.3g} bits per weight, {math_}"
                + (f"; {', '.join(kept)} in {self.dense_dtype}" if kept else ""))

    def to_dict(self) -> dict:
        return {"method": self.method, "precision": self.precision, "kv_cache": self.kv_cache,
                "bits_per_weight": self.bits_per_weight,
                "compute_precision": self.compute, "weight_only": self.weight_only,
                "unquantised": {g: f for g, f in self.unquantised}, "unquantised_dtype": self.dense_dtype,
                "description": self.describe()}


# --------------------------------------------------------------------------- reading a config
def _bits(v, where: str, key: str = "bits", allowed=range(1, 9)) -> int:
    if isinstance(v, str) and v.strip().lower().lstrip("int").isdigit():  # "int4", "4"
        v = int(v.strip().lower().lstrip("int"))
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v != int(v) \
            or int(v) not in allowed:
        raise SpecError(f"{where}: quantization_config {key} must be one of {', '.join(map(str, allowed))}, "
                        f"got {short(v)}")
    return int(v)


def _group(v, where: str, key: str = "group_size") -> int:
    """A group size: a positive whole number of weights, or -1 / None for one scale per output channel (0 is no
    group size a quantiser writes: refused rather than read as per-channel)."""
    if v is None or (v == -1 and not isinstance(v, bool)):
        return 0
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v != int(v) \
            or not 1 <= v <= 1 << 20:
        raise SpecError(f"{where}: quantization_config {key} must be a positive whole number of weights (or -1: per "
                        f"channel), got {short(v)}")
    return int(v)


def _flag(q: dict, key: str, default: bool, where: str) -> bool:
    v = q.get(key, default)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise SpecError(f"{where}: quantization_config {key} must be true or false, got {short(v)}")
    return v


def _modules(q: dict, keys, where: str) -> list[str]:
    out = []
    for key in keys:
        v = q.get(key)
        if v is None:
            continue
        if isinstance(v, str):
            v = [v]
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise SpecError(f"{where}: quantization_config {key} must be a list of module names, got {short(v)}")
        out += v
    return out


def unquantised_groups(names, layers: dict[str, int]) -> dict[str, float]:
    """{group: fraction of its layers} a list of module names (or `re:` patterns) keeps unquantised. A name with a
    layer number counts that layer of its group (`layers`: the group's layer count); a name without one, or with
    a wildcard, the whole group. A name that names one projection counts its whole group (conservative: more
    bytes); names of no known group (a vision tower) count nothing."""
    picked: dict[str, set | None] = {}
    for name in names:
        words = re.findall(r"[a-z_]+|\d+", name.lower().removeprefix("re:"))
        group = next((MODULE_WORDS[w] for w in reversed(words) if w in MODULE_WORDS), None)
        if group is None:
            continue
        idx = [int(w) for w in words if w.isdigit()]
        if not idx or "*" in name or "re:" in name.lower() or picked.get(group, set()) is None:
            picked[group] = None
        else:
            picked.setdefault(group, set()).add(idx[0])
    return {g: 1.0 if s is None else min(1.0, len(s) / max(layers.get(g, 1), 1)) for g, s in picked.items()}


def _gptq(q, where):
    bits = _bits(q.get("bits"), where, allowed=(2, 3, 4, 8))
    fmt = WeightOnly(bits=bits, label="gptq", group_size=_group(q.get("group_size"), where), zero_point=True)
    keeps = [g for g in SCHEME_KEEPS["gptq"] if not (g == "lm_head" and _flag(q, "lm_head", False, where))]
    return fmt.register(), keeps, ("modules_to_not_convert", "modules_not_quantized")


def _awq(q, where):
    bits = _bits(q.get("bits", q.get("w_bit")), where, allowed=(4,))
    fmt = WeightOnly(bits=bits, label="awq", group_size=_group(q.get("group_size", q.get("q_group_size")), where),
                     zero_point=_flag(q, "zero_point", True, where))
    return fmt.register(), list(SCHEME_KEEPS["awq"]), ("modules_to_not_convert",)


def _bnb(q, where):
    four, eight = _flag(q, "load_in_4bit", False, where), _flag(q, "load_in_8bit", False, where)
    if four == eight:
        raise SpecError(f"{where}: a bitsandbytes quantization_config needs exactly one of load_in_4bit and "
                        f"load_in_8bit true")
    if eight:
        fmt = WeightOnly(bits=8, label="bnb8")
    else:
        kind = str(q.get("bnb_4bit_quant_type", "fp4")).lower()
        if kind not in ("nf4", "fp4"):
            raise SpecError(f"{where}: bnb_4bit_quant_type must be 'nf4' or 'fp4', got {short(kind)}")
        label = ("nf4" if kind == "nf4" else "bnbfp4") + ("dq" if _flag(q, "bnb_4bit_use_double_quant", False,
                                                                       where) else "")
        fmt = WeightOnly(bits=4, label=label, group_size=64)  # bitsandbytes' 4-bit blocksize
    return fmt.register(), list(SCHEME_KEEPS["bitsandbytes"]), ("llm_int8_skip_modules",)


def _ct_scheme(g: dict, where: str) -> str:
    """The precision one compressed-tensors config group stores and runs its weights at."""
    w, a = g.get("weights"), g.get("input_activations")
    if not isinstance(w, dict) or (a is not None and not isinstance(a, dict)):
        raise SpecError(f"{where}: compressed-tensors config group needs a 'weights' mapping (and 'input_activations' "
                        f"a mapping or null), got {short(g)}")
    bits = _bits(w.get("num_bits"), where, "num_bits", allowed=(2, 3, 4, 8))  # compressed-tensors' weight widths
    kind = str(w.get("type", "int")).lower()
    a_bits = None if a is None else _bits(a.get("num_bits"), where, "input_activations num_bits")
    a_kind = None if a is None else str(a.get("type", kind)).lower()
    strategy = str(w.get("strategy", "group")).lower()
    if kind == "int" and a is None:
        group = _group(w.get("group_size"), where) if strategy == "group" else 0
        return WeightOnly(bits=bits, label="ct", group_size=group,
                          zero_point=not _flag(w, "symmetric", True, where)).register()
    if (kind, bits, a_kind, a_bits) in (("float", 8, "float", 8), ("float", 8, None, None)):
        return "fp8"  # W8A8-FP8 (per-channel / per-tensor / block scales: < 0.01 bit per weight)
    if (kind, bits, a_kind, a_bits) == ("int", 8, "int", 8):
        return "int8"  # W8A8-INT8
    if (kind, bits, a_kind, a_bits) == ("float", 4, "float", 4):
        return "fp4"  # NVFP4
    act = "16" if a is None else f"{a_bits} ({a_kind})"
    raise SpecError(f"{where}: compressed-tensors scheme W{bits} ({kind}) A{act} is not one chalk sizes (W4A16 or "
                    f"W8A16 integer, W8A8 FP8 or INT8, NVFP4)")


def _ct(q, where):
    groups = q.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise SpecError(f"{where}: compressed-tensors quantization_config needs a non-empty config_groups mapping, "
                        f"got {short(groups)}")
    schemes = {_ct_scheme(g if isinstance(g, dict) else {}, where) for g in groups.values()}
    if len(schemes) > 1:
        raise SpecError(f"{where}: compressed-tensors config_groups mix schemes ({', '.join(sorted(schemes))}); "
                        f"chalk sizes one scheme per checkpoint")
    return schemes.pop(), list(SCHEME_KEEPS["compressed-tensors"]), ("ignore",)


def _mxfp4(q, where):
    return "mxfp4", list(SCHEME_KEEPS["mxfp4"]), ("modules_to_not_convert",)


def _fp8(q, where):
    block = q.get("weight_block_size")
    if block is not None and (not isinstance(block, list) or not block or not all(
            isinstance(b, int) and not isinstance(b, bool) and 1 <= b <= 1 << 20 for b in block)):
        raise SpecError(f"{where}: quantization_config weight_block_size must be a list of positive whole numbers, "
                        f"got {short(block)}")
    return "fp8", list(SCHEME_KEEPS["fp8"]), ("modules_to_not_convert", "ignored_layers")


#: What a checkpoint's declared KV-cache quantisation stores: ModelOpt's `kv_cache_quant_algo` names, and
#: compressed-tensors `kv_cache_scheme` (type, num_bits) pairs.
KV_CACHE_ALGOS = {"fp8": "fp8", ("float", 8): "fp8", "int8": "int8", ("int", 8): "int8", "nvfp4": "fp4",
                  ("float", 4): "fp4"}


def declared_kv_cache(q: dict, where: str) -> str | None:
    """The KV-cache dtype a quantization_config declares (None: it declares none); an unknown one is refused."""
    algo, scheme = q.get("kv_cache_quant_algo"), q.get("kv_cache_scheme")
    if algo is not None:
        name, key = "kv_cache_quant_algo", str(algo).strip().lower()
    elif isinstance(scheme, dict):
        name, key = "kv_cache_scheme", (str(scheme.get("type", "float")).lower(), scheme.get("num_bits"))
    elif scheme is None:
        return None
    else:
        raise SpecError(f"{where}: quantization_config kv_cache_scheme must be a mapping, got {short(scheme)}")
    if key not in KV_CACHE_ALGOS:
        raise SpecError(f"{where}: quantization_config {name} declares a KV cache chalk does not know "
                        f"({short(key)}; known: FP8, INT8, NVFP4)")
    return KV_CACHE_ALGOS[key]


def _fbgemm_fp8(q, where):
    return "fp8", list(SCHEME_KEEPS["fbgemm_fp8"]), ("modules_to_not_convert",)


def _modelopt(q, where):
    algo = q.get("quant_algo")
    key = str(algo).strip().lower() if isinstance(algo, str) else None
    if key not in MODELOPT_ALGOS:
        raise SpecError(f"{where}: quantization_config quant_algo {short(algo)} is not a ModelOpt scheme chalk sizes "
                        f"(known: {', '.join(a.upper() for a in MODELOPT_ALGOS)})")
    return MODELOPT_ALGOS[key], list(SCHEME_KEEPS["modelopt"]), ("exclude_modules", "ignore")


#: quant_method -> reader: (precision of the quantised weights, groups the scheme keeps, keys listing more)
READERS = {"gptq": _gptq, "awq": _awq, "bitsandbytes": _bnb, "compressed-tensors": _ct, "mxfp4": _mxfp4,
           "fp8": _fp8, "fbgemm_fp8": _fbgemm_fp8, "modelopt": _modelopt}


def quant_method(q: dict):
    """A `quantization_config`'s method as given (`quant_method`; an FP8 config without one, `fmt: e4m3`, is 'fp8';
    a bitsandbytes one, `load_in_4bit` / `load_in_8bit`, is 'bitsandbytes'); None where it names none."""
    method = q.get("quant_method")
    if method is None and q.get("fmt") == "e4m3":
        method = "fp8"
    if method is None and ("load_in_4bit" in q or "load_in_8bit" in q):
        method = "bitsandbytes"
    return method


def weight_format_from_config(cfg: dict, layers: dict[str, int], where: str = "config.json") -> WeightFormat | None:
    """The stored weight format a config.json's `quantization_config` describes (None: none, the weights are
    stored at `torch_dtype`). `layers`: each parameter group's layer count (for per-layer module lists)."""
    q = cfg.get("quantization_config")
    if q is None or q == {}:
        return None
    if not isinstance(q, dict):
        raise SpecError(f"{where}: quantization_config must be a mapping, got {short(q)}")
    method = quant_method(q)
    key = str(method).strip().lower() if isinstance(method, str) else None
    if key not in READERS:
        raise SpecError(f"{where}: quantization_config quant_method {short(method)} is not one chalk sizes "
                        f"(known: {', '.join(READERS)})")
    precision, keeps, list_keys = READERS[key](q, where)
    if key == "mxfp4" and layers.get("experts", 0) <= 0:
        raise SpecError(f"{where}: quantization_config quant_method 'mxfp4' quantises routed experts only (gpt-oss's "
                        "scheme: engines load its other layers at 16 bits), and this model has none")
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16").lower()
    dense = _DTYPES.get(dtype, "bf16")
    if dense == "fp32":  # a serving engine loads it at 16 bits: vLLM's --dtype auto "will use FP16 precision for FP32
        # and FP16 models" (its engine-arguments docs), and the quantised kernels take 16-bit activations (QA
        # 2026-11-28: a float32 GPTQ config said 'fp32 math' beside a bf16 compute precision)
        dense = "fp16"
    kept = dict.fromkeys((g for g in keeps if layers.get(g, 1) > 0), 1.0)  # (a dense model has no router)
    for g, f in unquantised_groups(_modules(q, list_keys, where), layers).items():
        kept[g] = max(kept.get(g, 0.0), f)
    return WeightFormat(method=key, precision=precision, dense_dtype=dense,
                        unquantised=tuple((g, kept[g]) for g in GROUPS if kept.get(g, 0.0) > 0),
                        kv_cache=declared_kv_cache(q, where))
