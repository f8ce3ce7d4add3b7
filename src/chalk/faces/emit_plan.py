"""`chalk plan --emit k8s|compose DIR`: the cheapest option written as Kubernetes manifests or a docker-compose file.

Thin: every command, count and GPU number comes from the plan's option (`launch_steps`, rendered by
`chalk.specs.launch`); this module only lays them out. Kubernetes: a Deployment per pool whose replica fits one node,
a LeaderWorkerSet (leaderworkerset.x-k8s.io/v1) per pool whose replica spans several (the leader runs node 0's
command, the workers the others', `$(LWS_LEADER_ADDRESS)` standing in for HEAD_NODE_IP and `$(LWS_WORKER_INDEX)` for
the rank), a Service per pool, ConfigMaps for options files, and the router of a disaggregated option. Compose: one
node's services. The folder is written whole or not at all: into a temporary sibling, then renamed into place.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import tempfile
from pathlib import Path

import yaml

from chalk.errors import InputError

KINDS = ("k8s", "compose")
#: Container port each engine's server listens on by default (vLLM 8000, SGLang 30000, trtllm-serve 8000) comes from
#: catalog/launch.yaml disaggregation.<engine>.server_port.
ROUTER_PORT = 8000


def _rules() -> dict:
    from chalk.specs.checkpoints import launch_rules

    return launch_rules()


def _name(*parts) -> str:
    s = re.sub(r"[^a-z0-9-]+", "-", "-".join(str(p) for p in parts).lower()).strip("-")
    return s[:63].strip("-") or "chalk"


def _image(engine: str) -> str:
    return f"{_rules()['images'][engine]['repository']}:ENGINE_TAG"


def _gpu(option) -> str:
    from chalk.specs.catalog import as_system

    vendor = as_system(option["chip"]).chip.vendor.lower()
    return _rules()["gpu_resource"].get(vendor, {"name": "nvidia.com/gpu"})["name"]


def _compose_driver(option) -> str | None:
    """The docker compose device driver that reserves the option's GPUs (catalog/launch.yaml gpu_resource), or None."""
    from chalk.specs.catalog import as_system

    vendor = as_system(option["chip"]).chip.vendor.lower()
    return _rules()["gpu_resource"].get(vendor, {}).get("compose_driver")


def _engine(option, engine, kind: str) -> str:
    """The engine whose launch `kind` lays out (`engine`, else the one that sized `option`); refused in one line where
    the option has no launch for it, with the plan's reason (QA: a KV dtype the engine cannot run, `--kv-precision
    int8` on vLLM, left no launch, and --emit compose failed with a KeyError traceback, --emit k8s with 'it was
    sized with )')."""
    steps = option.get("launch_steps") or {}
    eng = engine or option.get("engine") or next(iter(steps), None)
    if eng in steps:
        return eng
    why = (option.get("launch_refused") or {}).get(eng)  # why the plan could not render it
    if why is None and steps:
        why = f"it was launched with {', '.join(steps)}"
    raise InputError(f"--emit {kind}: the plan has no {eng or 'engine'} launch of this option to write"
                     + (f": {why}" if why else ""))


def _local_model(option, engine: str) -> tuple[str, str] | tuple[None, None]:
    """(the checkpoint as the launch names it, its absolute host path) where the option's launch loads a folder on
    this machine (a config given by its path, or --checkpoint FOLDER), else (None, None)."""
    ck = (option.get("checkpoint") or {}).get(engine) or {}
    return (ck["repo"], ck["local_path"]) if ck.get("local_path") else (None, None)


def _model_note(path: str, how: str) -> str:
    return (f"the checkpoint is the local folder {path}: it is mounted read-only at that path from the host "
            f"({how}), so it must be there on every machine that runs an engine (or give the volume shared storage)")


def _pools(option, engine: str) -> list[dict]:
    """The option's pools for `engine`: role, replicas, nodes and the per-node commands; a local checkpoint is named
    by its absolute path, the one its volume is mounted at (QA: the host path was in the container's command with
    no volume)."""
    steps = option["launch_steps"][engine]
    repo, path = _local_model(option, engine)
    if path:
        steps = [{**s, "argv": [path if a == repo else a for a in s["argv"]]} for s in steps]
    out: dict[str, dict] = {}
    for s in steps:
        p = out.setdefault(s["role"], {"role": s["role"], "replicas": s["replicas"], "nodes": s["nodes"],
                                       "gpus": s["gpus_per_replica"], "commands": []})
        p["commands"].append(s)
    return list(out.values())


def _container(engine, cmd, gpu_name, gpus_per_node, env=None, config=None) -> dict:
    argv = [_k8s_vars(a) for a in cmd["argv"]]
    c = {"name": "engine", "image": _image(engine), "command": argv[:1], "args": argv[1:],
         "ports": [{"containerPort": int(_rules()["disaggregation"][engine]["server_port"])}],
         "resources": {"limits": {gpu_name: gpus_per_node}, "requests": {gpu_name: gpus_per_node}}}
    if env:
        c["env"] = env
    if config:
        c["workingDir"] = "/chalk-config"
        c["volumeMounts"] = [{"name": "config", "mountPath": "/chalk-config"}]
    return c


def _k8s_vars(arg: str) -> str:
    """Placeholders a multi-node workload fills itself: the leader's address and the worker's index."""
    return arg.replace("HEAD_NODE_IP", "$(LWS_LEADER_ADDRESS)")


def _pod(container, config_map=None, gpus: int = 0, model: str | None = None) -> dict:
    """The pod spec around `container`: its options-file ConfigMap, a memory-backed /dev/shm where it runs `gpus`
    GPU processes that share memory (catalog/launch.yaml pod_volumes.shared_memory; QA: TP>1 pods had only the
    runtime's 64 MB /dev/shm, which NCCL and vLLM's workers outgrow), and `model`, a local checkpoint folder, from
    the node's disk, read-only at the same path."""
    spec = {"containers": [container]}
    volumes = []
    if config_map:
        volumes.append({"name": "config", "configMap": {"name": config_map}})
    if model:
        volumes.append({"name": "model", "hostPath": {"path": model, "type": "Directory"}})
        container.setdefault("volumeMounts", []).append({"name": "model", "mountPath": model, "readOnly": True})
    shm = _rules()["pod_volumes"]["shared_memory"]
    if gpus >= int(shm["min_gpus"]):
        volumes.append({"name": shm["name"], "emptyDir": {"medium": shm["medium"]}})
        container.setdefault("volumeMounts", []).append({"name": shm["name"], "mountPath": shm["mount"]})
    if volumes:
        spec["volumes"] = volumes
    return spec


def k8s_manifests(result, option=None, engine=None) -> list[dict]:
    """The Kubernetes objects of `option` (default: the cheapest) launched with `engine` (default: its own)."""
    o = option or result["options"][0]
    eng = _engine(o, engine, "k8s")
    gpu = _gpu(o)
    base = _name(result["model"].split("/")[-1], o["chip"], eng)
    objs: list[dict] = []
    hosts: dict[str, list[str]] = {}
    wiring = _rules()["disaggregation"][eng]  # the engine's server port and, disaggregated, how its pools are reached
    port = int(wiring["server_port"])
    own = wiring.get("own_address_env") if o["prefill"] else None
    model = _local_model(o, eng)[1]
    # a local checkpoint's folder comes from each node's disk: said on the workloads that mount it
    notes = {"annotations": {"chalk/note": _model_note(model, "a hostPath volume")}} if model else {}
    for pool in _pools(o, eng):
        name = _name(base, pool["role"])
        labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": base,
                  "chalk/role": pool["role"]}
        per_node = -(-pool["gpus"] // pool["nodes"])
        cfg = next((c for c in pool["commands"] if c["config_yaml"]), None)
        cm = None
        if cfg is not None:
            cm = _name(name, "config")
            objs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": cm, "labels": labels},
                         "data": {cfg["config_file"]: cfg["config_yaml"]}})
        env = None
        if own:  # the pod's own IP, not localhost, for the other pool to reach (QA 2026-11-28)
            env = [{"name": own["name"], "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
        each = (wiring.get("instance_ports") or {}).get(pool["role"]) if o["prefill"] else None
        if pool["nodes"] == 1 and each:
            # instances the router must list one by one (QA 2026-11-28: SGLang's decode servers reached the prefill
            # pool's bootstrap port through one Service over 6 pods, and that port was not exposed): a StatefulSet
            # behind a headless Service gives each pod a stable name, every port exposed
            c = _container(eng, pool["commands"][0], gpu, per_node, env=env, config=cm)
            c["ports"] += [{"containerPort": int(v), "name": k} for k, v in each.items()]
            objs.append({"apiVersion": "apps/v1", "kind": "StatefulSet",
                         "metadata": {"name": name, "labels": labels, **notes},
                         "spec": {"serviceName": name, "replicas": pool["replicas"],
                                  "selector": {"matchLabels": labels},
                                  "template": {"metadata": {"labels": labels},
                                               "spec": _pod(c, cm, per_node, model)}}})
            objs.append({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "labels": labels},
                         "spec": {"clusterIP": "None", "selector": labels, "ports": [
                             {"name": "http", "port": port, "targetPort": port},
                             *({"name": k, "port": int(v), "targetPort": int(v)} for k, v in each.items())]}})
            hosts[pool["role"]] = [f"{name}-{i}.{name}" for i in range(pool["replicas"])]
            continue
        if pool["nodes"] == 1:
            c = _container(eng, pool["commands"][0], gpu, per_node, env=env, config=cm)
            objs.append({"apiVersion": "apps/v1", "kind": "Deployment",
                         "metadata": {"name": name, "labels": labels, **notes},
                         "spec": {"replicas": pool["replicas"], "selector": {"matchLabels": labels},
                                  "template": {"metadata": {"labels": labels},
                                               "spec": _pod(c, cm, per_node, model)}}})
        else:
            leader = pool["commands"][0]
            worker = pool["commands"][1] if len(pool["commands"]) > 1 else None
            if worker is None:  # one command for the head node: the engine spans nodes as one MPI job or Ray
                # cluster, which a LeaderWorkerSet of servers is not (QA 2026-11-28: every pod ran the whole
                # 16-GPU server on its 8 GPUs)
                role = "" if pool["role"] == "replica" else f"{pool['role']} "
                raise InputError(f"--emit k8s: this option's {role}replicas span {pool['nodes']} nodes, "
                                 f"which {eng} launches from the head node alone (as one MPI job or Ray cluster; "
                                 "the printed launch notes say how): chalk writes no manifest for that; use the "
                                 "printed commands, or a layout within one node")
            # only the leader serves HTTP (vLLM's workers run --headless): the Service selects the leader pods
            labels = {**labels, "chalk/node": "leader"}
            lt = {"metadata": {"labels": labels},
                  "spec": _pod(_container(eng, leader, gpu, per_node, env=env, config=cm), cm, per_node, model)}
            wcmd = worker or leader
            wt = {"metadata": {"labels": {**labels, "chalk/node": "worker"}},
                  "spec": _pod(_container(eng, _worker_argv(wcmd, pool["nodes"]), gpu, per_node, config=cm), cm,
                               per_node, model)}
            objs.append({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                         "metadata": {"name": name, "labels": labels, **notes},
                         "spec": {"replicas": pool["replicas"], "leaderWorkerTemplate": {
                             "size": pool["nodes"], "leaderTemplate": lt, "workerTemplate": wt}}})
        objs.append({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "labels": labels},
                     "spec": {"selector": labels, "ports": [{"name": "http", "port": port, "targetPort": port}]}})
        hosts[pool["role"]] = [name] * pool["replicas"]
    if o["prefill"]:
        from chalk.specs.launch import router_parts

        listed = {r: h if len(set(h)) > 1 else h[:1] for r, h in hosts.items()}  # each instance, or the Service
        argv, conf_file, conf, _ = router_parts(eng, len(hosts["prefill"]), len(hosts["decode"]), hosts=listed)
        name = _name(base, "router")
        labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": base, "chalk/role": "router"}
        c = {"name": "router", "image": _image(eng), "command": argv[:1], "args": argv[1:],
             "ports": [{"containerPort": ROUTER_PORT}]}
        spec = {"containers": [c]}
        if conf_file:
            cm = _name(name, "config")
            objs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": cm, "labels": labels},
                         "data": {conf_file: conf}})
            c["workingDir"] = "/chalk-config"
            c["volumeMounts"] = [{"name": "config", "mountPath": "/chalk-config"}]
            spec["volumes"] = [{"name": "config", "configMap": {"name": cm}}]
        objs.append({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": labels},
                     "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                              "template": {"metadata": {"labels": labels}, "spec": spec}}})
        objs.append({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "labels": labels},
                     "spec": {"selector": labels, "ports": [{"name": "http", "port": ROUTER_PORT,
                                                             "targetPort": ROUTER_PORT}]}})
    return objs


def _flags_filled_with(placeholder: str) -> frozenset:
    """The multi-node flags (catalog/launch.yaml multi_node, every engine) whose value the renderer fills with
    `placeholder` ('{rank}', '{start_rank}', '{local_ranks}'): which flags carry a node's numbers is launch data."""
    out = set()
    for rule in (_rules().get("multi_node") or {}).values():
        for flag, value in [*(rule.get("all") or []), *(rule.get("workers") or [])]:
            if value == placeholder:
                out.add(flag)
    return frozenset(out)


def _worker_argv(cmd: dict, nodes: int) -> dict:
    """A worker's command for any rank: the rendered rank 1 command with its rank numbers taken from the pod: the
    node rank is the worker's index, and a data-parallel start rank (vLLM's multi-node launch: node i starts at
    i x its local ranks) is computed from it by a shell, since Kubernetes substitutes variables but not arithmetic
    (QA 2026-11-28: every worker of a 4-node Kimi-K2 set claimed --data-parallel-start-rank 1)."""
    argv = list(cmd["argv"])
    rank, start_rank, local_ranks = (_flags_filled_with(p) for p in ("{rank}", "{start_rank}", "{local_ranks}"))
    local = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a in local_ranks), None)
    start = None
    for i, a in enumerate(argv[:-1]):
        if a in rank:
            argv[i + 1] = "$(LWS_WORKER_INDEX)"
        elif a in start_rank and local is not None:
            start = i + 1
    if start is None:
        return {**cmd, "argv": argv}
    words = [shlex.quote(a) for a in argv]
    words[start] = f"$((LWS_WORKER_INDEX * {int(local)}))"
    return {**cmd, "argv": ["sh", "-c", "exec " + " ".join(words)]}


def compose_file(result, option=None, engine=None) -> dict:
    """A docker-compose file for one node of `option` (default: the cheapest): one service per pool replica and
    the router; an option whose replica spans nodes is refused (use k8s)."""
    o = option or result["options"][0]
    eng = _engine(o, engine, "compose")
    pools = _pools(o, eng)
    driver = _compose_driver(o)
    if driver is None:
        raise InputError(f"--emit compose reserves GPUs through the NVIDIA container runtime; {o['chip']} is not an "
                         f"NVIDIA chip: use --emit k8s")
    if any(p["nodes"] > 1 for p in pools):
        raise InputError(f"--emit compose writes one node, and this option's replicas span "
                         f"{max(p['nodes'] for p in pools)} nodes: use --emit k8s")
    services, gpu_at = {}, 0
    chips = o.get("host_chips") or o["domain_chips"]  # one host's GPUs (an NVL72 rack's tray: 4)
    wiring = _rules()["disaggregation"][eng]
    port = int(wiring["server_port"])
    disagg = bool(o["prefill"])
    own = wiring.get("own_address_env") if disagg else None
    model = _local_model(o, eng)[1]
    for p in pools:
        for i in range(p["replicas"]):
            if gpu_at + p["gpus"] > chips:
                break  # one node: the replicas that fit it
            cmd = p["commands"][0]
            ids = [str(g) for g in range(gpu_at, gpu_at + p["gpus"])]
            gpu_at += p["gpus"]
            # the whole argv as the entrypoint: an engine image's own ENTRYPOINT (vLLM's is `vllm serve`) would
            # run before a `command` (QA 2026-11-28: `vllm serve vllm serve ...`)
            svc = {"image": _image(eng), "entrypoint": list(cmd["argv"]), "ipc": "host",
                   "deploy": {"resources": {"reservations": {"devices": [
                       {"driver": driver, "device_ids": ids, "capabilities": ["gpu"]}]}}}}
            if not disagg:  # a disaggregated option's pools are reached through its router
                svc["ports"] = [f"{port + len(services)}:{port}"]
            if cmd["config_yaml"]:
                svc["configs"] = [{"source": _name(p["role"], "options"), "target": f"/{cmd['config_file']}"}]
                svc["working_dir"] = "/"
            if own:  # its own service name on the compose network, not localhost (QA 2026-11-28)
                svc["environment"] = {own["name"]: _name(p["role"], i + 1)}
            if model:  # a local checkpoint: the host's folder, read-only at the path the command names
                svc["volumes"] = [{"type": "bind", "source": model, "target": model, "read_only": True}]
            services[_name(p["role"], i + 1)] = svc
    held = {p["role"]: sum(1 for k in services if k.startswith(f"{p['role']}-")) for p in pools}
    if disagg and not all(held.values()):  # QA 2026-11-28: 'decode replicas must be an integer >= 1, got 0'
        raise InputError(f"--emit compose writes one {chips}-GPU node, which this option's pools do not share: "
                         + ", ".join(f"{p['replicas']} {p['role']} replica{'s' if p['replicas'] > 1 else ''} of "
                                     f"{p['gpus']} GPU{'s' if p['gpus'] > 1 else ''}" for p in pools)
                         + "; use --emit k8s")
    out = {"name": _name(result["model"].split("/")[-1], o["chip"], eng), "services": services}
    short = [f"{held[p['role']]} of the {p['replicas']} " + ("" if p["role"] == "replica" else f"{p['role']} ")
             + "replicas" for p in pools if held[p["role"]] < p["replicas"]]
    if short:  # one node holds part of the fleet: said in the file and by `emit` (QA 2026-11-28: 4 of 30, silently)
        out["x-chalk-note"] = (f"one {chips}-GPU node: this file holds {', '.join(short)} the plan sized; run it on "
                               "more nodes behind a load balancer, or use --emit k8s for the whole fleet")
    if model:
        out["x-chalk-model-note"] = _model_note(model, "a bind volume")
    cfgs = {_name(p["role"], "options"): {"content": p["commands"][0]["config_yaml"]} for p in pools
            if p["commands"][0]["config_yaml"]}
    if disagg:
        # the router fronting the two pools (QA 2026-11-28: the file had the pools and nothing wiring them), over
        # the compose network's service names
        from chalk.specs.launch import router_parts

        hosts = {role: [k for k in services if k.startswith(f"{role}-")] for role in ("prefill", "decode")}
        argv, conf_file, conf, _ = router_parts(eng, len(hosts["prefill"]), len(hosts["decode"]), hosts=hosts)
        router = {"image": _image(eng), "entrypoint": argv, "ports": [f"{ROUTER_PORT}:{ROUTER_PORT}"],
                  "depends_on": [*hosts["prefill"], *hosts["decode"]]}
        if conf_file:
            cfgs[_name("router", "config")] = {"content": conf}
            router["configs"] = [{"source": _name("router", "config"), "target": f"/{conf_file}"}]
            router["working_dir"] = "/"
        services["router"] = router
    if cfgs:
        out["configs"] = cfgs
    return out


def check_target(kind: str, folder) -> tuple[Path, Path]:
    """Refuse, in one line, a kind other than k8s / compose and a folder that is a file, is not empty, or whose
    parent is missing or not writable; returns (folder, its parent)."""
    if kind not in KINDS:
        raise InputError(f"--emit must be k8s or compose, got {str(kind)[:40]!r}")
    dest = Path(folder)
    if dest.exists() and not dest.is_dir():
        raise InputError(f"--emit folder {str(dest)[:200]!r} is a file")
    if dest.is_dir() and any(dest.iterdir()):
        raise InputError(f"--emit folder {str(dest)[:200]!r} exists and is not empty")
    parent = dest.resolve().parent
    if not parent.is_dir():
        raise InputError(f"--emit folder's parent {str(parent)[:200]!r} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"--emit folder's parent {str(parent)[:200]!r} is not writable")
    return dest, parent


def emit_notes(folder) -> list[str]:
    """What the written files say of themselves: a compose file's `x-chalk-note` (one node holding part of the
    fleet) and `x-chalk-model-note` (a local checkpoint's mount), the `chalk/note` annotations of manifests."""
    f = Path(folder) / "compose.yaml"
    if f.is_file():
        d = yaml.safe_load(f.read_text()) or {}
        return [d[k] for k in ("x-chalk-note", "x-chalk-model-note") if d.get(k)]
    notes: list[str] = []
    for m in sorted(Path(folder).glob("*.yaml")):
        note = ((yaml.safe_load(m.read_text()) or {}).get("metadata") or {}).get("annotations", {}).get("chalk/note")
        if note and note not in notes:
            notes.append(note)
    return notes


def emit(result, kind: str, folder) -> Path:
    """Write the cheapest option as `kind` ('k8s' | 'compose') into `folder` atomically: a temporary sibling
    folder filled, then renamed into place. `folder` must not exist, or be an empty folder."""
    dest, parent = check_target(kind, folder)
    files = {}
    if kind == "k8s":
        for i, obj in enumerate(k8s_manifests(result)):
            files[f"{i:02d}-{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"] = obj
    else:
        files["compose.yaml"] = compose_file(result)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=parent))
    except OSError as e:
        raise InputError(f"cannot write the --emit folder {str(dest)[:200]!r}: {e.strerror or e}") from None
    try:
        for name, obj in files.items():
            (tmp / name).write_text(yaml.safe_dump(obj, sort_keys=False))
        os.chmod(tmp, 0o755)
        if dest.is_dir():
            dest.rmdir()  # empty: replaced by the filled folder
        os.rename(tmp, dest)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise InputError(f"cannot write the --emit folder {str(dest)[:200]!r}: {e.strerror or e}") from None
    return dest
