"""Inference-engine profiles (vLLM, SGLang, TensorRT-LLM): the defaults that bound real throughput.

Each profile is package data (catalog/engines/<id>.yaml) holding every default with the engine
version and the code or docs it was read from; older releases are `versions:` entries laid over the
newest. `load_engine("sglang@0.4")` picks a release (`load_engine("sglang")`: the newest) and gives its
defaults for an 80 GB-class data-center GPU; `profile.for_gpu(hbm_bytes, tp=...)` applies that
release's rules where a default depends on the GPU. Rules are data (`rules:`, each with a `kind`);
this module holds one interpretation per kind (`_RULES`) and no engine names.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from types import MappingProxyType

from chalk.equations import engine as EQ
from chalk.errors import InputError, SpecError, UnknownNameError
from chalk.specs.catalog import _catalog_dir, read_yaml

ENGINES = ("vllm", "sglang", "trtllm")
#: The vendor `chalk measure` gives the chip it calibrates (chalk.analyses.step.measure.ceilings.calibrated_chip):
#: its maker is not read, so every engine may run on it.
MEASURED_VENDOR = "measured"
GIB = 2.0 ** 30
MIB = 2.0 ** 20
_REQUIRED = ("id", "release", "version", "max_num_seqs", "cuda_graph_max_batch", "kv_cache_memory_fraction",
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
    kv_cache_dtype_auto: str = "checkpoint"  # what --kv-cache-dtype auto stores: 'activation' (the model's BF16
                                              #  activations) or 'checkpoint' (the checkpoint's own KV scheme)
    speculative: dict = field(default_factory=dict)
    rules: tuple = field(default=(), repr=False)  # the version's GPU-dependent rules ({kind: ..., ...}), YAML order
    resolved_for: str = "80 GB-class GPU, TP 1 (catalog default)"
    release: str = ""                 # the release this profile answers to in --engine NAME@VERSION ('0.11')
    releases: tuple[str, ...] = ()    # every release of this engine in the catalog, newest first
    newest: bool = True               # the newest release (its kernels: the package's main tables)
    #: checkpoint quantisation methods (a config.json's `quantization_config.quant_method`) the engine does not
    #: load, each with the chip vendors it refuses them on ('all': every vendor): (method, vendors) pairs
    unsupported_checkpoints: tuple = ()
    #: whether an attention-DP rank can itself be tensor-parallel (SGLang: --tp N --dp M, M < N; vLLM: DP x TP), or
    #: attention DP means attention TP 1 (TensorRT-LLM's enable_attention_dp)
    attention_dp_with_tp: bool = True
    #: the chip vendors the engine runs on (lower case; empty: every vendor)
    vendors: tuple[str, ...] = ()
    #: whether this release runs the disaggregated prefill/decode pools chalk launches (the KV connector wired in
    #: catalog/launch.yaml disaggregation); false in a release profile that lacks it, with its source
    disaggregated_serving: bool = True
    #: flags of the newest release's launch (its `accepted_flags`) that this release lacks, with their source: a
    #: launch needing one is not rendered for it
    absent_flags: tuple[str, ...] = ()
    #: whether the chunked-prefill budget is the replica's, split over its attention-DP ranks (each rank takes
    #: budget // attn_dp), rather than each rank's own; with its source
    chunk_split_over_attention_dp: bool = False

    def runs_on(self, vendor: str) -> str | None:
        """Why this engine cannot run on `vendor`'s chips, or None where it can (`vendors`, with its source)."""
        v = str(vendor).lower()
        if not self.vendors or v in self.vendors or v == MEASURED_VENDOR:  # a calibrated chip's maker is not known
            return None
        return f"{self.label} does not run on {vendor} chips (it runs on {', '.join(self.vendors)} chips)"

    def check_chip(self, vendor: str, method: str | None = None) -> None:
        """One InputError line where this engine does not run on `vendor`'s chips (`runs_on`), or does not load a
        checkpoint quantised with `method` there (`refuses`)."""
        why = self.runs_on(vendor) or (self.refuses(method, vendor) if method is not None else None)
        if why:
            raise InputError(f"{why}: choose another --engine")

    def refuses_disaggregation(self) -> str | None:
        """Why this release cannot run disaggregated prefill/decode pools, or None where it can (the catalog's
        `disaggregated_serving`, with the source it was read from)."""
        if self.disaggregated_serving:
            return None
        return (f"{self.label} has no KV connector for the disaggregated prefill/decode pools chalk launches "
                f"(sources in catalog {self.id}.yaml): use aggregated serving or a newer release")

    def lacks(self, argv) -> str | None:
        """Why a launch of `argv` does not run on this release (it uses flags the release lacks: `absent_flags`),
        or None."""
        missing = [a for a in argv if isinstance(a, str) and a.split("=")[0] in self.absent_flags]
        if not missing:
            return None
        return (f"{self.label} has no {', '.join(dict.fromkeys(m.split('=')[0] for m in missing))} (chalk records "
                f"the flags of {self.name} {self.releases[0] if self.releases else 'its newest release'}; sources in "
                f"catalog {self.id}.yaml): launch this release by hand, or size with a newer one")

    def refuses(self, method: str | None, vendor: str) -> str | None:
        """Why this engine cannot load a checkpoint quantised with `method` on `vendor`'s chips, or None if it can
        (the catalog's `unsupported_checkpoints`, with the source it was read from)."""
        if not method:
            return None
        v = str(vendor).lower()
        for m, vendors in self.unsupported_checkpoints:
            if m == str(method).lower() and (vendors == "all" or v in vendors):
                where = "" if vendors == "all" else f" on {vendor} chips"
                return f"{self.label} does not load {m} checkpoints{where} (sources in catalog {self.id}.yaml)"
        return None

    @property
    def seqs_capped_by_chunk(self) -> bool:
        """Whether the engine's default sequence cap is at most its prompt-token budget per step, whoever sets the
        budget (a `gpu_memory_tiers` rule with `cap_seqs_by_chunk`: vLLM's min(max_num_seqs,
        max_num_batched_tokens) where --max-num-seqs is not given)."""
        return any(r.get("cap_seqs_by_chunk") for r in self.rules)

    @property
    def label(self) -> str:
        return f"{self.name or self.id} {self.release or self.version.split(' ')[0]}"

    @property
    def kernel_version(self) -> str | None:
        """The engine version whose measured kernel tables to prefer: None for the newest release (the main
        tables), else this release (the nearest measured version answers; see specs.kernels)."""
        return None if self.newest else self.release

    def kv_dtype(self, precision: str) -> str:
        """The engine's --kv-cache-dtype value for chalk's KV precision name (bf16, fp8, ...)."""
        try:
            return self.kv_cache_dtypes[precision]
        except KeyError:
            raise InputError(f"{self.id} has no KV-cache dtype for {precision!r} "
                             f"(supported: {', '.join(self.kv_cache_dtypes)})") from None

    def kv_precision(self, kv_precision: str | None, model=None, precision: str | None = None) -> str | None:
        """The KV precision a deployment of this engine runs when asked for `kv_precision`: 'auto' (or None) is the
        engine's own default (`kv_cache_dtype_auto`): 'activation' engines store the KV cache at the model's
        activation dtype, BF16, whatever the weights; 'checkpoint' engines follow the checkpoint: loading `model`'s
        own quantised checkpoint at `precision`, what it declares (`chalk.specs.checkpoints.native_kv_cache`: BF16
        for gpt-oss's MXFP4 and DeepSeek-R1's FP8, which declare none), else 'auto' for chalk's reading of another
        checkpoint (`resolve_kv_precision`: 8-bit KV beside 8-bit weights). A named precision is kept."""
        if kv_precision is not None and str(kv_precision).strip().lower() != "auto":
            return kv_precision
        if self.kv_cache_dtype_auto == "activation":
            return "bf16"
        if model is not None:
            from chalk.specs.checkpoints import native_kv_cache

            return native_kv_cache(model, precision) or kv_precision
        return kv_precision

    def kv_cache_bytes(self, hbm_bytes: float, weight_bytes: float, other_bytes: float = 0.0) -> float:
        """KV-cache bytes per GPU under this engine's memory fraction (see equations.engine)."""
        return EQ.kv_cache_budget_bytes(hbm_bytes, weight_bytes, other_bytes, self.kv_cache_memory_fraction,
                                        self.kv_cache_memory_fraction_of)

    def _rule(self, kind: str) -> dict | None:
        """The first rule of `kind` in this version's rules, or None."""
        return next((r for r in self.rules if r.get("kind") == kind), None)

    def decode_graph_batch(self, speculative_tokens: int = 0) -> int:
        """Largest decode batch that stays inside a CUDA graph (under a `cuda_graph_tokens` rule graph sizes
        count tokens, so K speculative tokens divide it by 1 + K)."""
        if self._rule("cuda_graph_tokens") is not None:
            return int(EQ.cuda_graph_decode_batch_limit(self.cuda_graph_max_batch, speculative_tokens))
        return int(self.cuda_graph_max_batch)

    def scheduler_limit(self, kv_tokens: float | None = None, context_len: float | None = None) -> int:
        """Most sequences one scheduler runs at once: under a `request_pool` rule the pool is sized from the KV
        capacity (max_running_requests unset); otherwise max_num_seqs as is."""
        r = self._rule("request_pool")
        if r is not None and kv_tokens is not None and context_len:
            n = EQ.sglang_request_pool_size(kv_tokens, context_len, r.get("per_context_factor", 512),
                                            r.get("floor", 2048), r.get("cap", self.max_num_seqs))
            return max(int(n), 1)
        return int(self.max_num_seqs)

    def for_gpu(self, hbm_bytes: float, *, tp: int = 1, pp: int = 1, dp: int = 1, attn_dp: bool = False,
                speculative: bool = False, chip: str = "") -> EngineProfile:
        """This profile with the defaults the engine would pick on a GPU of `hbm_bytes`: the version's rules
        applied in their YAML order, one interpretation per rule kind (`_RULES`)."""
        if not (isinstance(hbm_bytes, (int, float)) and math.isfinite(hbm_bytes) and hbm_bytes > 0):
            raise InputError(f"GPU memory must be a positive number of bytes, got {hbm_bytes!r}")
        for nm, v in (("tp", tp), ("pp", pp), ("dp", dp)):
            if not isinstance(v, int) or v < 1:
                raise InputError(f"{nm} must be a positive integer, got {v!r}")
        ctx = {"gib": hbm_bytes / GIB, "mib": hbm_bytes / MIB, "tp": tp, "pp": pp, "dp": dp, "attn_dp": attn_dp,
               "speculative": speculative, "chip": chip.lower()}
        upd: dict = {}
        for r in self.rules:
            fn = _RULES.get(r.get("kind"))
            if fn is not None:
                fn(self, r, ctx, upd)
        where = f"{chip + ' ' if chip else ''}{hbm_bytes / 1e9:.0f} GB, TP {tp}" + (f", PP {pp}" if pp > 1 else "") + \
            (f", DP-attention {dp}" if attn_dp else "")
        return dataclasses.replace(self, resolved_for=where, **upd)


# --------------------------------------------------------------------------- rule kinds (one interpretation each)
def _cur(prof: EngineProfile, upd: dict, f: str):
    return upd.get(f, getattr(prof, f))


def _gpu_memory_tiers(prof, r, ctx, upd):
    """The first tier the GPU falls in sets its fields (`min_gpu_gib` / `below_gpu_gib` bound the memory,
    `exclude_chip` skips chips whose name holds it, `only_chip` applies only to them; a `<field>_tp4` value replaces
    `<field>` at TP >= 4);
    `cap_seqs_by_chunk`: max_num_seqs is then at most the chunked-prefill budget."""
    for t in r["tiers"]:
        if ctx["gib"] < t.get("min_gpu_gib", 0) or ctx["gib"] >= float(t.get("below_gpu_gib", math.inf)):
            continue
        if t.get("exclude_chip") and t["exclude_chip"] in ctx["chip"]:
            continue
        if t.get("only_chip") and t["only_chip"] not in ctx["chip"]:
            continue
        vals = {k: v for k, v in t.items() if k in _TUNABLE}
        for k in list(vals):
            if ctx["tp"] >= 4 and f"{k}_tp4" in t:
                vals[k] = t[f"{k}_tp4"]
        upd.update({k: (float(v) if k == "kv_cache_memory_fraction" else int(v)) for k, v in vals.items()})
        if r.get("cap_seqs_by_chunk"):
            upd["max_num_seqs"] = int(min(_cur(prof, upd, "max_num_seqs"), _cur(prof, upd, "chunked_prefill_tokens")))
        return


def _cuda_graph_tokens(prof, r, ctx, upd):
    """Graph capture sized in tokens: min(max_num_seqs * per_seq_factor, tokens_cap, chunked-prefill budget)."""
    upd["cuda_graph_max_batch"] = int(min(_cur(prof, upd, "max_num_seqs") * r.get("per_seq_factor", 2),
                                          r.get("tokens_cap", 512), _cur(prof, upd, "chunked_prefill_tokens")))


def _reserved_memory_fraction(prof, r, ctx, upd):
    """Memory fraction = (GPU memory - reserved) / GPU memory, reserved in MiB from the chunk size, graph batch,
    parallelism and drafts (equations.engine.sglang_reserved_memory_mib)."""
    mib = ctx["mib"]
    reserved = EQ.sglang_reserved_memory_mib(
        _cur(prof, upd, "chunked_prefill_tokens"), _cur(prof, upd, "cuda_graph_max_batch"), ctx["tp"], ctx["pp"],
        mib, dp_attention=ctx["attn_dp"], dp=ctx["dp"], speculative=ctx["speculative"],
        **{k: r[j] for k, j in (("base", "base_mib"), ("per_chunk_token", "per_chunk_token_mib"),
                                ("per_graph_seq", "per_graph_seq_mib"), ("per_tp8", "per_tp8_mib"),
                                ("dp_per_graph_seq", "dp_attention_per_graph_seq_mib"),
                                ("dp_large_extra", "dp_attention_large_graph_extra_mib"),
                                ("floor", "floor_mib"), ("spec", "speculative_mib")) if j in r})
    upd["kv_cache_memory_fraction"] = round((mib - reserved) / mib, 3)
    if upd["kv_cache_memory_fraction"] <= 0:
        raise InputError(f"{prof.id} {prof.release}'s default memory rule leaves nothing for weights and KV on a "
                         f"{ctx['gib']:.0f} GiB GPU (reserves {reserved / 1024:.1f} GiB)")


def _memory_fraction_by_tp(prof, r, ctx, upd):
    """Memory fraction from the tensor-parallel size: the first tier with tp >= its `min_tp`."""
    for t in r["tiers"]:
        if ctx["tp"] >= int(t.get("min_tp", 1)):
            upd["kv_cache_memory_fraction"] = float(t["fraction"])
            return


def _no_gpu_effect(prof, r, ctx, upd):
    """Rules read elsewhere (request_pool: scheduler_limit)."""


_TUNABLE = ("max_num_seqs", "chunked_prefill_tokens", "cuda_graph_max_batch", "kv_cache_memory_fraction")
_RULES = {"gpu_memory_tiers": _gpu_memory_tiers, "cuda_graph_tokens": _cuda_graph_tokens,
          "reserved_memory_fraction": _reserved_memory_fraction, "memory_fraction_by_tp": _memory_fraction_by_tp,
          "request_pool": _no_gpu_effect}


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


def version_tuple(v: str) -> tuple:
    """A version string as a comparable tuple of its numbers ('0.5.6.post2' -> (0, 5, 6, 2); '1.3.0rc20' ->
    (1, 3, 0, 20)); a release candidate sorts with its release's numbers."""
    return tuple(int(x) for x in re.findall(r"\d+", str(v)))


def _release_ids(d: dict) -> tuple[str, ...]:
    r = d.get("release")
    return tuple(str(x) for x in (r if isinstance(r, list) else [r])) if r is not None else ()


def _entries(eid: str) -> list[dict]:
    """The engine's profiles, newest first: the file's top level, then each of `versions` laid over it (fields
    replaced, `sources` merged, `rules` replaced whole)."""
    base = _raw(eid)
    out = [dict(base)]
    for v in base.get("versions", []) or []:
        d = {**base, **{k: x for k, x in v.items() if k != "sources"}}
        d["sources"] = {**(base.get("sources") or {}), **(v.get("sources") or {})}
        out.append(d)
    return out


def known_releases(name: str) -> tuple[str, ...]:
    """Every release of an engine the catalog holds a profile for, newest first."""
    eid = _aliases().get(str(name).strip().lower())
    if eid is None:
        raise UnknownNameError("engine", name, _aliases(), ENGINES)
    return tuple(r for d in _entries(eid) for r in _release_ids(d)[:1])


def parse_engine(name: str) -> tuple[str, str | None]:
    """'vllm@0.10' -> ('vllm', '0.10'); 'vllm' -> ('vllm', None)."""
    text = str(name).strip()
    if text.count("@") > 1 or text.startswith("@") or text.endswith("@"):
        raise InputError(f"engine must be NAME or NAME@VERSION (e.g. vllm@0.11), got {name!r}")
    eng, _, ver = text.partition("@")
    return eng.strip(), (ver.strip().lstrip("vV") or None) if ver else None


def _match(entries: list[dict], version: str) -> tuple[int, str] | None:
    """(index of the profile, the release of it) whose release is `version` or a prefix of it, or that `version` is
    a prefix of ('0.5' answers '0.5.4'); an exact release first."""
    want = version_tuple(version)
    if not want:
        return None
    best = None
    for i, d in enumerate(entries):
        for r in _release_ids(d):
            have = version_tuple(r)
            if have == want:
                return i, r
            n = min(len(have), len(want))
            if best is None and have[:n] == want[:n]:
                best = i, r
    return best


@lru_cache(maxsize=None)
def load_engine(name: str) -> EngineProfile:
    """An engine profile by id or alias ('vllm', 'sglang', 'trtllm', 'tensorrt-llm', 'trt-llm'), optionally at a
    release ('sglang@0.4', 'vllm@0.11'); without one, the newest release the catalog holds."""
    eng, version = parse_engine(name)
    key = eng.lower()
    aliases = _aliases()
    if key not in aliases:
        raise UnknownNameError("engine", eng, aliases, ENGINES)
    eid = aliases[key]
    entries = _entries(eid)
    releases = tuple(r for d in entries for r in _release_ids(d)[:1])
    if version is None:
        return _profile(entries[0], eid, releases, newest=True)
    found = _match(entries, version)
    if found is None:
        raise UnknownNameError(f"{eid} version", version, [r for d in entries for r in _release_ids(d)])
    i, release = found
    prof = _profile(entries[i], eid, releases, newest=i == 0)
    # a profile shared by several releases answers as the one asked ('trtllm@1.1': 1.1)
    return prof if release == prof.release else dataclasses.replace(prof, release=release)


def _unsupported(entries, where: str) -> tuple:
    """`unsupported_checkpoints` entries ({method, vendors: all | [vendor, ...]}) as (method, vendors) pairs."""
    out = []
    for e in entries:
        if not isinstance(e, dict) or not isinstance(e.get("method"), str):
            raise SpecError(f"{where}: unsupported_checkpoints entries need a 'method' (a quant_method name)")
        vs = e.get("vendors", "all")
        vendors = "all" if vs == "all" else tuple(str(v).lower() for v in (vs if isinstance(vs, list) else [vs]))
        out.append((e["method"].lower(), vendors))
    return tuple(out)


def _profile(d: dict, eid: str, releases: tuple, newest: bool) -> EngineProfile:
    where = f"catalog engine {eid}.yaml" + ("" if newest else f" (release {(_release_ids(d) or ('?',))[0]})")
    missing = [k for k in _REQUIRED if k not in d]
    if missing:
        raise SpecError(f"{where}: missing {', '.join(missing)}")
    rules = tuple(MappingProxyType(dict(r)) for r in d.get("rules", []) or [])
    unknown = [r.get("kind") for r in rules if r.get("kind") not in _RULES]
    if unknown:
        raise SpecError(f"{where}: unknown rule kind {unknown[0]!r} (known: {', '.join(_RULES)})")
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
            kv_cache_dtype_auto=str(d.get("kv_cache_dtype_auto", "checkpoint")),
            speculative=MappingProxyType(dict(d.get("speculative", {}))), rules=rules,
            release=(_release_ids(d) or ("",))[0], releases=releases, newest=newest,
            unsupported_checkpoints=_unsupported(d.get("unsupported_checkpoints") or (), where),
            attention_dp_with_tp=bool(d.get("attention_dp_with_tp", True)),
            vendors=tuple(str(v).lower() for v in (d.get("vendors") or ())),
            disaggregated_serving=d.get("disaggregated_serving", True),
            absent_flags=tuple(str(f) for f in (d.get("absent_flags") or ())),
            chunk_split_over_attention_dp=d.get("chunk_split_over_attention_dp", False))
    except (TypeError, ValueError) as e:
        raise SpecError(f"{where}: {e}") from None
    if not isinstance(prof.chunk_split_over_attention_dp, bool):
        raise SpecError(f"{where}: chunk_split_over_attention_dp must be true or false")
    if not isinstance(prof.disaggregated_serving, bool):
        raise SpecError(f"{where}: disaggregated_serving must be true or false")
    if prof.kv_cache_dtype_auto not in ("activation", "checkpoint"):
        raise SpecError(f"{where}: kv_cache_dtype_auto must be 'activation' or 'checkpoint'")
    if prof.kv_cache_memory_fraction_of not in ("total", "free") or not 0 < prof.kv_cache_memory_fraction <= 1:
        raise SpecError(f"{where}: kv_cache_memory_fraction must be in (0, 1] of 'total' or 'free'")
    return prof


def engine_defaults_table() -> list[dict]:
    """Every engine's defaults as rows (engine, field, value, source): the table a report prints."""
    rows = []
    for eid in ENGINES:
        for rel in known_releases(eid):
            p = load_engine(f"{eid}@{rel}")
            for f in ("max_num_seqs", "cuda_graph_max_batch", "kv_cache_memory_fraction",
                      "chunked_prefill_tokens", "step_overhead_s"):
                rows.append({"engine": eid, "release": p.release, "version": p.version, "field": f,
                             "value": getattr(p, f), "source": p.sources.get(f, "")})
    return rows
