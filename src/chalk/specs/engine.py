"""Inference-engine profiles (vLLM, SGLang, TensorRT-LLM): the defaults that bound real throughput.

Each profile is package data (catalog/engines/<id>.yaml) holding every default with the engine
version and the code or docs it was read from. `load_engine(name)` gives the defaults for an
80 GB-class data-center GPU; `profile.for_gpu(hbm_bytes, tp=...)` applies the engine's own rule
where a default depends on the GPU (vLLM by memory and name, SGLang by memory and TP size).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from functools import lru_cache
from types import MappingProxyType

from chalk.equations import engine as EQ
from chalk.errors import InputError, SpecError, UnknownNameError
from chalk.specs.catalog import _catalog_dir, read_yaml

ENGINES = ("vllm", "sglang", "trtllm")
GIB = 2.0 ** 30
MIB = 2.0 ** 20
_REQUIRED = ("id", "version", "max_num_seqs", "cuda_graph_max_batch", "kv_cache_memory_fraction",
             "kv_cache_memory_fraction_of", "chunked_prefill_tokens", "step_overhead_s",
             "kernel_framework", "flags", "sources", "accepted_flags", "command")


@dataclass(frozen=True)
class EngineProfile:
    """One engine's scheduling and memory defaults, with where each came from.

    kv_cache_memory_fraction is read as a fraction of TOTAL GPU memory (`kv_cache_memory_fraction_of`
    = 'total': vLLM gpu_memory_utilization covers weights + activations + KV; SGLang
    mem_fraction_static covers weights + KV pool) or of the memory FREE after weights and buffers
    ('free': TensorRT-LLM kv_cache_free_gpu_memory_fraction).
    """

    id: str
    version: str                      # the engine version the defaults were read from
    max_num_seqs: int                 # sequences per scheduler (vLLM max_num_seqs, SGLang max_running_requests
                                      #  ceiling, TRT-LLM max_batch_size)
    cuda_graph_max_batch: int         # largest decode batch captured in CUDA graphs (beyond: eager)
    kv_cache_memory_fraction: float
    chunked_prefill_tokens: int       # vLLM max_num_batched_tokens, SGLang chunked_prefill_size, TRT-LLM max_num_tokens
    step_overhead_s: float            # per-step host overhead not hidden behind the GPU (estimated: see sources)
    kernel_framework: str             # which measured kernel tables apply
    flags: dict                       # chalk concept -> the engine's launch flag
    sources: dict                     # field -> source (repo path @ commit, or docs URL)
    kv_cache_memory_fraction_of: str = "total"
    name: str = ""
    command: str = ""
    step_overhead_estimated: bool = True
    accepted_flags: tuple[str, ...] = ()
    accepted_yaml_keys: tuple[str, ...] = ()
    kv_cache_dtypes: dict = field(default_factory=dict)
    speculative: dict = field(default_factory=dict)
    rules: dict = field(default_factory=dict, repr=False)  # the GPU-dependent rules, as in the YAML
    resolved_for: str = "80 GB-class GPU, TP 1 (catalog default)"

    @property
    def label(self) -> str:
        return f"{self.name or self.id} {self.version.split(' ')[0]}"

    def kv_dtype(self, precision: str) -> str:
        """The engine's --kv-cache-dtype value for chalk's KV precision name (bf16, fp8, ...)."""
        try:
            return self.kv_cache_dtypes[precision]
        except KeyError:
            raise InputError(f"{self.id} has no KV-cache dtype for {precision!r} "
                             f"(supported: {', '.join(self.kv_cache_dtypes)})") from None

    def kv_cache_bytes(self, hbm_bytes: float, weight_bytes: float, other_bytes: float = 0.0) -> float:
        """KV-cache bytes per GPU under this engine's memory fraction (see equations.engine)."""
        return EQ.kv_cache_budget_bytes(hbm_bytes, weight_bytes, other_bytes, self.kv_cache_memory_fraction,
                                        self.kv_cache_memory_fraction_of)

    def decode_graph_batch(self, speculative_tokens: int = 0) -> int:
        """Largest decode batch that stays inside a CUDA graph (vLLM counts graph sizes in tokens)."""
        if self.id == "vllm":
            return int(EQ.cuda_graph_decode_batch_limit(self.cuda_graph_max_batch, speculative_tokens))
        return int(self.cuda_graph_max_batch)

    def scheduler_limit(self, kv_tokens: float | None = None, context_len: float | None = None) -> int:
        """Most sequences one scheduler runs at once. SGLang sizes its request pool from the KV
        capacity when max_running_requests is unset; the others use max_num_seqs as is."""
        if self.id == "sglang" and kv_tokens is not None and context_len:
            r = self.rules.get("max_running_rule", {})
            n = EQ.sglang_request_pool_size(kv_tokens, context_len, r.get("per_context_factor", 512),
                                            r.get("floor", 2048), r.get("cap", self.max_num_seqs))
            return max(int(n), 1)
        return int(self.max_num_seqs)

    def for_gpu(self, hbm_bytes: float, *, tp: int = 1, pp: int = 1, dp: int = 1, attn_dp: bool = False,
                speculative: bool = False, chip: str = "") -> EngineProfile:
        """This profile with the defaults the engine would pick on a GPU of `hbm_bytes`."""
        if not (isinstance(hbm_bytes, (int, float)) and math.isfinite(hbm_bytes) and hbm_bytes > 0):
            raise InputError(f"GPU memory must be a positive number of bytes, got {hbm_bytes!r}")
        for nm, v in (("tp", tp), ("pp", pp), ("dp", dp)):
            if not isinstance(v, int) or v < 1:
                raise InputError(f"{nm} must be a positive integer, got {v!r}")
        gib = hbm_bytes / GIB
        upd: dict = {}
        if self.id == "vllm":
            for r in self.rules.get("gpu_rules", []):
                if gib >= r.get("min_gpu_gib", 0) and not (r.get("exclude_chip") and r["exclude_chip"] in chip.lower()):
                    upd = {"chunked_prefill_tokens": int(r["chunked_prefill_tokens"]),
                           "max_num_seqs": int(min(r["max_num_seqs"], r["chunked_prefill_tokens"]))}
                    break
            cg = self.rules.get("cuda_graph_rule", {})
            seqs = upd.get("max_num_seqs", self.max_num_seqs)
            upd["cuda_graph_max_batch"] = int(min(seqs * cg.get("per_seq_factor", 2), cg.get("tokens_cap", 512),
                                                  upd.get("chunked_prefill_tokens", self.chunked_prefill_tokens)))
        elif self.id == "sglang":
            for r in self.rules.get("gpu_rules", []):
                if gib < float(r["below_gpu_gib"]):
                    upd = {"chunked_prefill_tokens": int(r["chunked_prefill_tokens"]),
                           "cuda_graph_max_batch": int(r["cuda_graph_max_batch_tp4" if tp >= 4 else
                                                         "cuda_graph_max_batch"])}
                    break
            m = self.rules.get("mem_fraction_rule", {})
            mib = hbm_bytes / MIB
            reserved = EQ.sglang_reserved_memory_mib(
                upd.get("chunked_prefill_tokens", self.chunked_prefill_tokens),
                upd.get("cuda_graph_max_batch", self.cuda_graph_max_batch), tp, pp, mib,
                dp_attention=attn_dp, dp=dp, speculative=speculative,
                **{k: m[j] for k, j in (("base", "base_mib"), ("per_chunk_token", "per_chunk_token_mib"),
                                        ("per_graph_seq", "per_graph_seq_mib"), ("per_tp8", "per_tp8_mib"),
                                        ("dp_per_graph_seq", "dp_attention_per_graph_seq_mib"),
                                        ("dp_large_extra", "dp_attention_large_graph_extra_mib"),
                                        ("floor", "floor_mib"), ("spec", "speculative_mib")) if j in m})
            upd["kv_cache_memory_fraction"] = round((mib - reserved) / mib, 3)
            if upd["kv_cache_memory_fraction"] <= 0:
                raise InputError(f"sglang's default memory rule leaves nothing for weights and KV on a "
                                 f"{gib:.0f} GiB GPU (reserves {reserved / 1024:.1f} GiB)")
        where = f"{chip + ' ' if chip else ''}{hbm_bytes / 1e9:.0f} GB, TP {tp}" + (f", PP {pp}" if pp > 1 else "") + \
            (f", DP-attention {dp}" if attn_dp else "")
        return dataclasses.replace(self, resolved_for=where, **upd)


def _aliases() -> dict[str, str]:
    out = {}
    for eid in ENGINES:
        out[eid] = eid
        for a in _raw(eid).get("aliases", []) or []:
            out[str(a).lower()] = eid
    return out


@lru_cache(maxsize=None)
def _raw(eid: str) -> dict:
    return read_yaml(_catalog_dir("engines") / f"{eid}.yaml", f"catalog engine {eid}.yaml")


@lru_cache(maxsize=None)
def load_engine(name: str) -> EngineProfile:
    """An engine profile by id or alias ('vllm', 'sglang', 'trtllm', 'tensorrt-llm', 'trt-llm')."""
    key = str(name).strip().lower()
    aliases = _aliases()
    if key not in aliases:
        raise UnknownNameError("engine", name, aliases, ENGINES)
    d = _raw(aliases[key])
    where = f"catalog engine {aliases[key]}.yaml"
    missing = [k for k in _REQUIRED if k not in d]
    if missing:
        raise SpecError(f"{where}: missing {', '.join(missing)}")
    try:
        prof = EngineProfile(
            id=str(d["id"]), version=str(d["version"]), max_num_seqs=int(d["max_num_seqs"]),
            cuda_graph_max_batch=int(d["cuda_graph_max_batch"]),
            kv_cache_memory_fraction=float(d["kv_cache_memory_fraction"]),
            chunked_prefill_tokens=int(d["chunked_prefill_tokens"]), step_overhead_s=float(d["step_overhead_s"]),
            kernel_framework=str(d["kernel_framework"]), flags=MappingProxyType(dict(d["flags"])),
            sources=MappingProxyType(dict(d["sources"])),
            kv_cache_memory_fraction_of=str(d["kv_cache_memory_fraction_of"]), name=str(d.get("name", d["id"])),
            command=str(d["command"]), step_overhead_estimated=bool(d.get("step_overhead_estimated", True)),
            accepted_flags=tuple(d["accepted_flags"]), accepted_yaml_keys=tuple(d.get("accepted_yaml_keys", ())),
            kv_cache_dtypes=MappingProxyType(dict(d.get("kv_cache_dtypes", {}))),
            speculative=MappingProxyType(dict(d.get("speculative", {}))),
            rules=MappingProxyType({k: d[k] for k in ("gpu_rules", "cuda_graph_rule", "mem_fraction_rule",
                                                      "max_running_rule") if k in d}))
    except (TypeError, ValueError) as e:
        raise SpecError(f"{where}: {e}") from None
    if prof.kv_cache_memory_fraction_of not in ("total", "free") or not 0 < prof.kv_cache_memory_fraction <= 1:
        raise SpecError(f"{where}: kv_cache_memory_fraction must be in (0, 1] of 'total' or 'free'")
    return prof


def engine_defaults_table() -> list[dict]:
    """Every engine's defaults as rows (engine, field, value, source): the table a report prints."""
    rows = []
    for eid in ENGINES:
        p = load_engine(eid)
        for f in ("max_num_seqs", "cuda_graph_max_batch", "kv_cache_memory_fraction", "chunked_prefill_tokens",
                  "step_overhead_s"):
            rows.append({"engine": eid, "version": p.version, "field": f, "value": getattr(p, f),
                         "source": p.sources.get(f, "")})
    return rows
