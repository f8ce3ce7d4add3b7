"""Launch commands: one deployment rendered as `vllm serve`, SGLang `launch_server` and `trtllm-serve`.

Flag names come from each engine profile (catalog/engines/<id>.yaml), which also records every
flag the engine accepted at the version the profile was read from; tests check that each
rendered flag is in that list.

Parallelism, as chalk counts it for one replica: `tp` x `attn_dp` x `pp` GPUs. `attn_dp` > 1 is
data-parallel attention inside one instance (MoE experts shared across the ranks, `ep` of them);
`dp` > 1 is plain data parallelism (independent copies behind the engine's own load balancer).
`max_num_seqs` counts sequences across the whole launch; it is split per rank where the engine
counts per rank (vLLM per DP rank, TensorRT-LLM per attention-DP rank; SGLang counts in total).
"""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import dataclass
from pathlib import Path

import yaml

from chalk.errors import InputError
from chalk.specs.catalog import catalog_meta, load_model, package_path, read_json
from chalk.specs.checkpoints import Checkpoint, checkpoint_for, launch_rules
from chalk.specs.engine import ENGINES, EngineProfile, load_engine
from chalk.specs.precision import canonical

TRTLLM_OPTIONS_FILE = "extra_llm_api_options.yaml"


#: Speculative decoding methods chalk times and launches: the model's own next-token heads, or an EAGLE draft head.
SPECULATION_METHODS = ("mtp", "eagle")


@dataclass(frozen=True)
class Speculation:
    """Speculative decoding to launch with: 'mtp' (the model's own next-token heads) or 'eagle'
    (a separate draft model, `draft_model` its HF repo), proposing `k` tokens per step."""

    method: str
    k: int
    draft_model: str | None = None

    def __post_init__(self):
        if self.method not in SPECULATION_METHODS:
            raise InputError(f"speculative method must be 'mtp' or 'eagle', got {self.method!r}")
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise InputError(f"speculative K must be an integer >= 1, got {self.k!r}")
        if self.method == "eagle" and not self.draft_model:
            raise InputError("eagle speculation needs its draft model (a Hugging Face repo id)")


@dataclass(frozen=True)
class Deployment:
    """One replica's layout and limits, engine-neutral. None means: leave the engine's default."""

    model: str
    tp: int = 1
    pp: int = 1
    ep: int = 1
    attn_dp: int = 1
    dp: int = 1
    max_num_seqs: int | None = None
    max_model_len: int | None = None
    kv_cache_dtype: str = "bf16"
    memory_fraction: float | None = None      # in the engine's own meaning (see EngineProfile)
    chunked_prefill_tokens: int | None = None
    cuda_graph_max_batch: int | None = None
    speculative: Speculation | None = None
    trust_remote_code: bool | None = None      # None: on for catalog models whose HF code needs it
    eplb: bool = False                         # an expert-load balancer on the EP group (ep > 1 only)
    precision: str | None = None               # the weight precision it was sized at (None: the checkpoint's)
    checkpoint: str | None = None              # the user's own checkpoint (repo id or folder), loaded as given
    role: str | None = None                    # 'prefill' | 'decode': one pool of a disaggregated deployment
    vendor: str | None = None                  # the chip's vendor (a known checkpoint may serve only some)
    nodes: int = 1                             # nodes one replica spans
    node_rank: int = 0                         # which of them this command runs on

    def __post_init__(self):
        _whole("nodes", self.nodes)
        if isinstance(self.node_rank, bool) or not isinstance(self.node_rank, int) or \
                not 0 <= self.node_rank < self.nodes:
            raise InputError(f"node_rank must be an integer in [0, {self.nodes}), got {self.node_rank!r}")
        if self.role not in (None, "prefill", "decode"):
            raise InputError(f"role must be 'prefill' or 'decode' (or None), got {self.role!r}")
        for name in ("tp", "pp", "ep", "attn_dp", "dp"):
            _whole(name, getattr(self, name))
        for name in ("max_num_seqs", "max_model_len", "chunked_prefill_tokens", "cuda_graph_max_batch"):
            if getattr(self, name) is not None:
                _whole(name, getattr(self, name))
        if self.attn_dp > 1 and self.dp > 1:
            raise InputError("give attention data parallelism (attn_dp) or plain replicas (dp), not both")
        world = self.tp * self.attn_dp * self.dp
        if self.ep > world or world % self.ep:
            raise InputError(f"ep={self.ep} must divide the {world} GPUs per pipeline stage (tp x attn_dp x dp)")
        if self.memory_fraction is not None:
            f = self.memory_fraction
            if not isinstance(f, (int, float)) or not math.isfinite(f) or not 0 < f <= 1:
                raise InputError(f"memory fraction must be in (0, 1], got {f!r}")
        object.__setattr__(self, "kv_cache_dtype", canonical(self.kv_cache_dtype))

    @property
    def gpus(self) -> int:
        return self.tp * self.attn_dp * self.dp * self.pp


@dataclass(frozen=True)
class LaunchCommand:
    """A rendered launch: `argv` (the command's tokens), `config_yaml` (TensorRT-LLM's options file,
    else None), `text` (a shell snippet that writes the file and runs the command), `notes`."""

    engine: str
    version: str
    argv: tuple[str, ...]
    config_yaml: str | None
    notes: tuple[str, ...]
    checkpoint: Checkpoint | None = None      # what it loads, at which precision, and why
    config_file: str = TRTLLM_OPTIONS_FILE    # where `config_yaml` is written

    @property
    def command(self) -> str:
        return " ".join(shlex.quote(a) if not a.startswith("-") else a for a in self.argv)

    @property
    def text(self) -> str:
        head = f"# {self.engine} {self.version.split(' (')[0]}\n" + "".join(f"# note: {n}\n" for n in self.notes)
        if self.config_yaml is None:
            return head + self.command
        return head + f"cat > {self.config_file} <<'EOF'\n{self.config_yaml}EOF\n{self.command}"

    @property
    def flags(self) -> list[str]:
        """The flag names the command uses (tokens starting with '--', values stripped)."""
        return [a.split("=", 1)[0] for a in self.argv if a.startswith("--")]


def hf_repo(model) -> str:
    """What to serve: the catalog's hf_repo, `model` itself if it names a repo outside the catalog, or a
    local checkpoint's folder."""
    mid = getattr(model, "id", None) or str(model)
    local = Path(mid)
    if not hasattr(model, "id") and local.exists():  # a local checkpoint: engines serve its folder
        return str(local.parent if local.is_file() else local)
    if "/" in mid and not mid.startswith((".", "/")):
        try:
            load_model(mid)
        except Exception:  # not in the catalog: take it as a repo id as given
            return mid
    spec = load_model(mid) if not hasattr(model, "id") else model
    if not spec.from_catalog:  # a config read from a path: its own folder, never the catalog's repo of that id
        return str(Path(spec.source).parent)
    repo = catalog_meta(spec).get("hf_repo")
    if not repo:
        raise InputError(f"model {spec.id!r} has no hf_repo in its catalog meta.yaml; pass the repo id")
    return str(repo)


def _needs_remote_code(model: str) -> bool:
    """Whether the engines are told to trust the checkpoint's own code (`--trust-remote-code`): as its catalog
    meta.yaml says (`trust_remote_code`, with `trust_remote_code_source`), else when its config.json maps classes
    to code shipped in the repository (`auto_map`, Hugging Face's sign that the model's code is not the library's).
    Read from data, never from the model's name."""
    try:
        spec = load_model(model)
    except Exception:
        return False
    meta = catalog_meta(spec)
    if "trust_remote_code" in meta:
        return bool(meta["trust_remote_code"])
    try:
        cfg = Path(str(spec.source))  # a user's own config.json, else the catalog's copy
        if not cfg.is_file() and spec.from_catalog:
            cfg = package_path("catalog", "models", spec.id, "config.json")
        return cfg.is_file() and bool(read_json(cfg).get("auto_map"))
    except Exception:
        return False


def _whole(name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise InputError(f"{name} must be an integer >= 1, got {v!r}")
    return v


def _mtp_layers(model: str) -> int:
    """The draft (multi-token-prediction) layers the model's config ships; 0 where unknown."""
    try:
        return load_model(model).mtp_layers
    except Exception:
        return 0


def _routed_experts(model: str) -> int:
    """The model's routed experts (0 for a dense model or a repo id outside the catalog)."""
    try:
        return int(load_model(model).num_experts or 0)
    except Exception:
        return 0


def _model_type(model: str) -> str:
    try:
        return load_model(model).model_type
    except Exception:
        return ""


# ----------------------------------------------------------------------------- renderers
def render_launch(engine, dep: Deployment, profile: EngineProfile | None = None) -> LaunchCommand:
    """Render `dep` for one engine ('vllm' | 'sglang' | 'trtllm' or an alias). `profile`: the engine
    profile to take unset limits from (e.g. load_engine(...).for_gpu(...)); default: the catalog's."""
    prof = profile or load_engine(engine)
    ck = resolve_checkpoint(dep, prof.id)
    trust = _needs_remote_code(dep.model) if dep.trust_remote_code is None else dep.trust_remote_code
    render = {"vllm": _vllm, "sglang": _sglang, "trtllm": _trtllm}[prof.id]
    argv, cfg, notes = render(prof, dep, ck.repo, trust)
    extra = ck.argv()
    if extra:  # the quantisation flags go right after the model
        at = argv.index(ck.repo) + 1
        argv[at:at] = extra
    if ck.note:
        notes.append(ck.note)
    lacks = prof.lacks(argv)  # a release without flags this launch needs (QA 2026-11-28: vllm@0.6 got 0.11's)
    if lacks:
        raise InputError(lacks)
    if dep.role is not None:  # wire the pool for disaggregation: the engine's role flags or options-file keys
        why = prof.refuses_disaggregation()  # a release without the connector (QA: vllm@0.6 got NixlConnector)
        if why:
            raise InputError(why)
        rule = _disaggregation(prof.id)
        for flag, value in (rule.get("flags") or {}).get(dep.role, ()):
            argv += [flag] if value is None else [flag, str(value)]
        own = rule.get("own_address_env")
        if own:  # (QA 2026-11-28: the pools on two machines could not hand off KV through localhost)
            notes.append(f"set {own['name']} to this instance's own address (its default, localhost, serves only "
                         "pools on one machine): the other pool reaches it there for the KV cache")
        extra_opts = (rule.get("options") or {}).get(dep.role)
        if extra_opts:
            cfg = yaml.safe_dump({**(yaml.safe_load(cfg or "") or {}), **extra_opts}, sort_keys=False)
            if prof.flags["extra_options"] not in argv:
                argv += [prof.flags["extra_options"], TRTLLM_OPTIONS_FILE]
    if dep.nodes > 1:
        _multi_node(prof.id, dep, argv, notes)
    conf_file = TRTLLM_OPTIONS_FILE
    if cfg is not None and dep.role is not None:  # one options file per pool, so one snippet can write both
        conf_file = TRTLLM_OPTIONS_FILE.replace(".yaml", f"_{dep.role}.yaml")
        argv = [conf_file if a == TRTLLM_OPTIONS_FILE else a for a in argv]
    experts = _routed_experts(dep.model)
    if dep.ep > 1 and experts and experts % dep.ep:
        # QA 2026-11-28: a model's 256 experts sized on EP3 / EP6 pools, launched as given: an even expert
        # sharding (SGLang's and TensorRT-LLM's MoE layers) refuses the width without redundant slots
        slots = -experts % dep.ep
        notes.append(f"the {experts} routed experts do not divide over expert-parallel {dep.ep}: an engine that "
                     f"shards experts evenly needs {slots} redundant expert slot{'s' if slots > 1 else ''} (expert-"
                     f"load balancing, {experts + slots} = {dep.ep} x {(experts + slots) // dep.ep}) to launch it")
    if dep.speculative is not None and dep.speculative.method == "mtp" and not _mtp_layers(dep.model):
        notes.append("MTP needs next-token heads (draft layers) in the checkpoint; this model's config.json declares "
                     "none (num_nextn_predict_layers / mtp_num_hidden_layers)")
    return LaunchCommand(prof.id, prof.version, tuple(argv), cfg, tuple(notes), ck, conf_file)


def _multi_node(engine: str, dep: Deployment, argv: list, notes: list) -> None:
    """Add the node count, rank and rendezvous flags of one node's command (`catalog/launch.yaml` multi_node)."""
    rule = launch_rules().get("multi_node", {}).get(engine) or {}
    ranks = dep.attn_dp * dep.dp
    if dep.pp > 1 and ranks > 1 and rule.get("pipeline_across_nodes_with_dp") is False:
        # (QA 2026-11-28: DeepSeek-R1 DP-attn8 EP8 PP2 on two H100 nodes was launched with 4 DP ranks per node, its
        # all-to-all over the network card, where chalk timed it over NVLink with a stage per node)
        raise InputError(f"{engine} keeps each data-parallel rank's pipeline stages on one node, so this layout's "
                         f"{ranks} data-parallel ranks x PP {dep.pp} over {dep.nodes} nodes would run each stage's "
                         "expert-parallel group across the nodes, which chalk did not time (it puts a stage per "
                         "node): launch it with an engine that places a stage per node, or size a layout without PP")
    if rule.get("needs_dp_split") and ranks % dep.nodes:
        rule = rule.get("otherwise") or {}
        rows = rule.get("flags") or []
    else:
        rows = list(rule.get("all") or []) + (list(rule.get("workers") or []) if dep.node_rank > 0 else [])
    fill = {"nodes": dep.nodes, "rank": dep.node_rank, "local_ranks": ranks // dep.nodes,
            "start_rank": dep.node_rank * (ranks // dep.nodes)}
    for flag, value in rows:
        argv += [flag] if value is None else [flag, str(value).format(**fill)]
    if rule.get("note"):
        notes.append(rule["note"])
    if not rule.get("head_only"):
        notes.append(f"node {dep.node_rank + 1} of {dep.nodes}: HEAD_NODE_IP is the first node's address")


def nodes_to_launch(engine: str, dep: Deployment) -> int:
    """How many per-node commands a replica of `dep` over `dep.nodes` nodes takes (1 where the engine launches
    from the head node only)."""
    rule = launch_rules().get("multi_node", {}).get(load_engine(engine).id) or {}
    if rule.get("needs_dp_split") and (dep.attn_dp * dep.dp) % dep.nodes:
        rule = rule.get("otherwise") or {}
    return 1 if rule.get("head_only") else dep.nodes


def _disaggregation(engine: str) -> dict:
    rule = launch_rules().get("disaggregation", {}).get(engine)
    if not rule:
        raise InputError(f"chalk has no disaggregated-serving wiring for {engine}")
    return rule


#: Most replicas of a pool the router snippet lists by placeholder: a fleet of thousands is routed by service
#: discovery, and listing every one made a plan for 1e9 users spend 6 minutes and 5 GB rendering its router.
ROUTER_MAX_LISTED = 256


def router_launch(engine: str, prefill_replicas: int, decode_replicas: int, hosts: dict | None = None) -> str:
    """The router (proxy) that fronts a disaggregated deployment's prefill and decode pools, as a shell snippet
    (`catalog/launch.yaml` disaggregation.<engine>.router); the pools' addresses are placeholders PREFILL_HOST_i /
    DECODE_HOST_i to fill, at most ROUTER_MAX_LISTED per pool (a comment says how many more to add)."""
    P, D = int(prefill_replicas), int(decode_replicas)
    lp, ld = (min(n, ROUTER_MAX_LISTED) for n in (P, D)) if hosts is None else (P, D)
    argv, conf_file, conf, port = router_parts(engine, lp, ld, hosts)
    head = (f"# router: one in front of the pools (replace PREFILL_HOST_i / DECODE_HOST_i with the replicas' "
            f"addresses, each serving on port {port})\n")
    if (lp, ld) != (P, D):
        head += (f"# listed: {lp:,} of {P:,} prefill and {ld:,} of {D:,} decode replicas; add the rest the same way "
                 "(or front the pools with service discovery)\n")
    cmd = " ".join(shlex.quote(a) for a in argv)
    if conf_file:
        return head + f"cat > {conf_file} <<'EOF'\n{conf}EOF\n{cmd}"
    return head + cmd


def router_parts(engine: str, prefill_replicas: int, decode_replicas: int, hosts: dict | None = None):
    """(argv, config file name or None, its YAML text or None, the pools' server port) of the router; `hosts`:
    {'prefill': [...], 'decode': [...]} addresses (default: PREFILL_HOST_i / DECODE_HOST_i placeholders)."""
    eng = load_engine(engine).id
    rule = _disaggregation(eng)
    r, port = rule["router"], int(rule["server_port"])
    P, D = _whole("prefill replicas", int(prefill_replicas)), _whole("decode replicas", int(decode_replicas))
    hosts = hosts or {"prefill": [f"PREFILL_HOST_{i + 1}" for i in range(P)],
                      "decode": [f"DECODE_HOST_{i + 1}" for i in range(D)]}
    # a router lists one address per instance it balances over: TensorRT-LLM's refuses a num_instances other than
    # its urls' count (disagg_utils: "Number of hostnames (1) should be equal to the number of instances (12)"),
    # and a Kubernetes Service stands for all of its pool's replicas as one address
    P, D = len(hosts["prefill"]), len(hosts["decode"])
    each = r.get("each") or {}
    fill = {f"{k}_hosts": " ".join(v) for k, v in hosts.items()} | \
        {f"{k}_ports": " ".join([str(port)] * len(v)) for k, v in hosts.items()} | \
        {f"{k}_each": " ".join(each.get(k, "").format(host=h, port=port) for h in v) for k, v in hosts.items()}
    argv = shlex.split(r["command"].format(**fill))
    if r.get("config_file"):
        conf = {"hostname": "0.0.0.0", "port": 8000, "backend": "pytorch",
                "context_servers": {"num_instances": P, "urls": [f"{h}:{port}" for h in hosts["prefill"]]},
                "generation_servers": {"num_instances": D, "urls": [f"{h}:{port}" for h in hosts["decode"]]}}
        return argv, r["config_file"], yaml.safe_dump(conf, sort_keys=False), port
    return argv, None, None, port


def resolve_checkpoint(dep: Deployment, engine: str) -> Checkpoint:
    """The checkpoint `engine` loads for `dep` at its sized precision (`chalk.specs.checkpoints.checkpoint_for`)."""
    try:
        spec = load_model(dep.model)
    except Exception:  # a repo id outside the catalog: its precision is unknown, it loads as given
        spec = None
    # a config loaded from a path is the user's checkpoint: the catalog's checkpoints of a model with the same id
    # are not its weights (QA: a 70B config in a folder named llama-3.1-8b launched nvidia/Llama-3.1-8B-Instruct-FP8)
    known = catalog_meta(spec).get("checkpoints") if spec is not None else None
    base = hf_repo(dep.model) if dep.checkpoint is None else ""
    return checkpoint_for(spec, base, dep.precision, engine, user=dep.checkpoint, known=known, vendor=dep.vendor)


def launch_commands(dep: Deployment, engines=ENGINES, profiles: dict | None = None) -> dict[str, str]:
    """Engine id -> launch text for every engine in `engines` (the plan JSON's `launch` mapping)."""
    profiles = profiles or {}
    return {load_engine(e).id: render_launch(e, dep, profiles.get(e)).text for e in engines}


def _fraction(prof: EngineProfile, dep: Deployment) -> str:
    return f"{dep.memory_fraction if dep.memory_fraction is not None else prof.kv_cache_memory_fraction:g}"


def _vllm(prof, dep, repo, trust):
    f, notes = prof.flags, []
    ranks = dep.attn_dp * dep.dp
    argv = ["vllm", "serve", repo, f["tp"], str(dep.tp)]
    if dep.pp > 1:
        argv += [f["pp"], str(dep.pp)]
    if ranks > 1:
        argv += [f["dp"], str(ranks)]
    if dep.ep > 1:
        argv.append(f["ep"])
        if dep.ep != dep.tp * ranks:
            notes.append(f"vLLM sets the expert-parallel size to TP x DP = {dep.tp * ranks}, not {dep.ep}")
        if dep.eplb:
            argv.append(f["eplb"])
    if dep.max_num_seqs is not None:
        argv += [f["max_num_seqs"], str(math.ceil(dep.max_num_seqs / ranks))]
        if ranks > 1:
            notes.append(f"--max-num-seqs is per DP rank: {dep.max_num_seqs} sequences over {ranks} ranks")
    if dep.max_model_len is not None:
        argv += [f["max_model_len"], str(dep.max_model_len)]
    argv += [f["kv_cache_dtype"], prof.kv_dtype(dep.kv_cache_dtype)]
    argv += [f["memory_fraction"], _fraction(prof, dep)]
    if dep.chunked_prefill_tokens is not None:
        argv += [f["chunked_prefill_tokens"], str(dep.chunked_prefill_tokens)]
    if dep.cuda_graph_max_batch is not None:
        k = dep.speculative.k if dep.speculative else 0
        argv += [f["cuda_graph_max_batch"], str(dep.cuda_graph_max_batch * (1 + k))]
    if dep.speculative is not None:
        s = dep.speculative
        if s.method == "mtp":
            methods = prof.speculative["mtp_method"]
            cfg = {"method": methods.get(_model_type(dep.model), methods["default"]), "num_speculative_tokens": s.k}
        else:
            cfg = {"method": prof.speculative["eagle_method"], "model": s.draft_model, "num_speculative_tokens": s.k}
        argv += [f["speculative"], json.dumps(cfg, separators=(",", ":"))]
    if trust:
        argv.append(f["trust_remote_code"])
    return argv, None, notes


def _sglang(prof, dep, repo, trust):
    f, notes = prof.flags, []
    ranks = dep.attn_dp * dep.dp
    # SGLang's server binds 127.0.0.1 unless told (ServerArgs.host): a Service or a router must reach it
    argv = ["python", "-m", "sglang.launch_server", f["model"], repo, f["host"], "0.0.0.0",
            f["tp"], str(dep.tp * dep.attn_dp)]
    if dep.pp > 1:
        argv += [f["pp"], str(dep.pp)]
    if ranks > 1:
        argv += [f["dp"], str(ranks)]
    if dep.attn_dp > 1:
        argv.append(f["attn_dp"])
    if dep.dp > 1:
        notes.append(f"--dp-size {dep.dp} without DP attention runs {dep.dp} copies of a TP-{dep.tp} model")
    if dep.ep > 1:
        argv += [f["ep"], str(dep.ep)]
        if dep.eplb:
            argv.append(f["eplb"])
    if dep.max_num_seqs is not None:
        argv += [f["max_num_seqs"], str(dep.max_num_seqs)]
    if dep.max_model_len is not None:
        argv += [f["max_model_len"], str(dep.max_model_len)]
    argv += [f["kv_cache_dtype"], prof.kv_dtype(dep.kv_cache_dtype)]
    argv += [f["memory_fraction"], _fraction(prof, dep)]
    if dep.chunked_prefill_tokens is not None:
        argv += [f["chunked_prefill_tokens"], str(dep.chunked_prefill_tokens)]
    if dep.cuda_graph_max_batch is not None:
        argv += [f["cuda_graph_max_batch"], str(dep.cuda_graph_max_batch)]
    if dep.speculative is not None:
        s = dep.speculative
        algo = prof.speculative["mtp_algorithm" if s.method == "mtp" else "eagle_algorithm"]
        argv += [f["speculative"], algo, f["speculative_steps"], str(s.k), f["speculative_topk"], "1",
                 f["speculative_draft_tokens"], str(s.k + 1)]
        if s.method == "eagle":
            argv += [f["speculative_draft_model"], s.draft_model]
    if trust:
        argv.append(f["trust_remote_code"])
    return argv, None, notes


def _trtllm(prof, dep, repo, trust):
    f, notes = prof.flags, []
    world = dep.tp * dep.attn_dp
    if dep.dp > 1:
        notes.append(f"trtllm-serve runs one replica: launch {dep.dp} of these behind a router")
    # trtllm-serve binds localhost unless told (its --host option): a Service or a router must reach it
    argv = ["trtllm-serve", repo, f["host"], "0.0.0.0", f["backend"], "pytorch", f["tp"], str(world)]
    if dep.pp > 1:
        argv += [f["pp"], str(dep.pp)]
    if dep.ep > 1:
        argv += [f["ep"], str(dep.ep)]
        if dep.eplb:
            notes.append("expert-load balancing is configured in the options file's moe_config.load_balancer "
                         "(slots for redundant experts): not rendered, set it as TensorRT-LLM's wide-EP guide shows")
    if dep.max_num_seqs is not None:
        ranks = dep.attn_dp * dep.dp
        argv += [f["max_num_seqs"], str(math.ceil(dep.max_num_seqs / ranks))]
        if ranks > 1:
            notes.append(f"--max_batch_size is per {'attention-DP rank' if dep.attn_dp > 1 else 'replica'}: "
                         f"{dep.max_num_seqs} sequences over {ranks}")
    if dep.chunked_prefill_tokens is not None:
        argv += [f["chunked_prefill_tokens"], str(dep.chunked_prefill_tokens)]
    if dep.max_model_len is not None:
        argv += [f["max_model_len"], str(dep.max_model_len)]
        budget = dep.chunked_prefill_tokens if dep.chunked_prefill_tokens is not None else prof.chunked_prefill_tokens
        if dep.max_model_len > budget:  # chalk sized prompts prefilled in chunks of the budget; trtllm-serve's
            # chunked prefill is off unless asked, and then it refuses any prompt past --max_num_tokens (QA
            # 2026-11-28: 20,000-token prompts launched against the 8,192 default)
            argv.append("--enable_chunked_prefill")
    argv += [f["memory_fraction"], _fraction(prof, dep)]
    if trust:
        argv.append(f["trust_remote_code"])
    opts: dict = {}
    if dep.attn_dp > 1:
        opts["enable_attention_dp"] = True
    opts["kv_cache_config"] = {"dtype": prof.kv_dtype(dep.kv_cache_dtype)}
    if dep.cuda_graph_max_batch is not None:
        opts["cuda_graph_config"] = {"enable_padding": True, "max_batch_size": dep.cuda_graph_max_batch}
    if dep.speculative is not None:
        s = dep.speculative
        if s.method == "mtp":
            opts["speculative_config"] = {"decoding_type": prof.speculative["mtp_decoding_type"],
                                          "num_nextn_predict_layers": s.k}
        else:
            opts["speculative_config"] = {"decoding_type": prof.speculative["eagle_decoding_type"],
                                          "max_draft_len": s.k, "speculative_model_dir": s.draft_model}
    argv += [f["extra_options"], TRTLLM_OPTIONS_FILE]
    return argv, yaml.safe_dump(opts, sort_keys=False), notes


def yaml_keys(text: str) -> list[str]:
    """Dotted key paths of a YAML mapping (two levels), e.g. ['kv_cache_config', 'kv_cache_config.dtype']."""
    data = yaml.safe_load(text) or {}
    out = []
    for k, v in data.items():
        out.append(str(k))
        if isinstance(v, dict):
            out += [f"{k}.{kk}" for kk in v]
    return out
