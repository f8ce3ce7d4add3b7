"""Launch what was sized (issue 25): the checkpoint and flags match the precision a plan sized, per engine; every
option says which engine and version sized it, and the price it is costed at with its source and date."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import yaml

from chalk.analyses.step.model_sizes import ModelSizes
from chalk.analyses.planning.plan import plan
from chalk.errors import InputError
from chalk.specs.catalog import as_model, as_system, model_ids, model_meta
from chalk.specs.checkpoints import launch_rules, stored_precision, user_checkpoint
from chalk.specs.engine import ENGINES, load_engine
from chalk.specs.launch import Deployment, nodes_to_launch, render_launch
from chalk.specs.precision import canonical
from test_launch import assert_launch_text_valid

CHIPS = "h100-sxm,h200,b200,mi300x"
GPTQ = "tests/data/llama-3.1-70b-gptq-int4"
#: the done-when models: a dense BF16, an FP8 MoE, an FP4-capable MoE (its own checkpoint BF16, FP8 and NVFP4 ones
#: known), a GPTQ 4-bit config; each planned over the four chips with the precisions it may run at
MODELS = [("llama-3.3-70b", "bf16,fp8,fp4"), ("deepseek-r1", "fp8,fp4"), ("qwen3-235b-a22b", "bf16,fp8,fp4"),
          (GPTQ, None)]


@pytest.fixture(scope="module", params=MODELS, ids=[m for m, _ in MODELS])
def planned(request):
    m, prec = request.param
    return m, plan(m, CHIPS, users=1000, min_user_tps=20, input_len=1000, output_len=500, precision=prec,
                   sim_requests=1000, curves=False)


def _weights_fit(model, precision, option) -> bool:
    """The checkpoint's weights at `precision`, spread over a replica's GPUs, fit the chip's memory (a necessary
    condition: replicated attention under EP only adds to a GPU's share)."""
    hbm = as_system(option["chip"]).chip.hbm_bytes
    pools = [(option["replica_gpus"], option["parallelism"])]
    if option["prefill"]:
        p = option["prefill"]["parallelism"]
        pools.append((p["tp"] * p["attn_dp"] * p["pp"], p))
    w = ModelSizes(model).weight_bytes(precision)
    return all(w / g <= hbm for g, _ in pools)


def test_every_option_loads_a_checkpoint_at_the_sized_precision_that_fits(planned):
    mid, r = planned
    m = as_model(mid)
    known = model_meta(m.id).get("checkpoints") or {}
    assert r["options"]
    for o in r["options"]:
        assert set(o["launch"]) == set(o["checkpoint"]) == {o["engine"]}
        for eng, ck in o["checkpoint"].items():
            assert ck["precision"] == o["precision"], (o["hardware"], eng, ck)  # never another precision
            if ck["how"] == "native":
                assert stored_precision(m) == o["precision"]
            elif ck["how"] == "catalog":
                assert ck["repo"] == known[o["precision"]]["repo"]
            elif ck["how"] == "on_load":
                assert ck["flags"] == ["--quantization fp8"] and o["precision"] == "fp8"
            else:  # a placeholder only where nothing is known for this chip's vendor, and said so
                vendors = (known.get(o["precision"]) or {}).get("vendors")
                assert ck["how"] == "placeholder" and (o["precision"] not in known or
                                                       as_system(o["chip"]).chip.vendor.lower() not in vendors)
                assert any("FILL IN" in n for n in [o["launch"][eng]])
            assert ck["repo"] in o["launch"][eng]
            assert _weights_fit(m, o["precision"], o), (o["hardware"], o["layout"], o["precision"])
            n = assert_launch_text_valid(eng, o["launch"][eng])
            assert n == _commands(mid, eng, o), o["launch"][eng]
            _assert_wired(eng, o)


def _commands(mid, eng, o) -> int:
    """Commands a launch holds: per pool, one per node a replica spans (one where the engine launches from the head
    node only), plus the router of a disaggregated option."""
    n = 0
    for par, G in [(o["parallelism"], o["replica_gpus"])] + (
            [(o["prefill"]["parallelism"], None)] if o["prefill"] else []):
        G = G or par["tp"] * par["attn_dp"] * par["pp"]
        nodes = -(-G // o["domain_chips"])
        n += nodes_to_launch(eng, Deployment(mid, tp=par["tp"], attn_dp=par["attn_dp"], ep=par["ep"], pp=par["pp"],
                                             nodes=nodes))
    return n + (1 if o["prefill"] else 0)


ROLE_MARKS = {"vllm": ('"kv_connector":"NixlConnector"', '"kv_connector":"NixlConnector"'),
              "sglang": ("--disaggregation-mode prefill", "--disaggregation-mode decode"),
              "trtllm": ("disable_overlap_scheduler: true", "cache_transceiver_config:")}


def _assert_wired(eng, o):
    """A disaggregated option wires its pools (each pool's role flags or options, and the router/proxy naming every
    replica of both pools); an aggregated one has none of that."""
    text = o["launch"][eng]
    if not o["prefill"]:
        assert "# router" not in text and "disaggregation" not in text and "kv_transfer" not in text
        return
    prefill, decode = text.split("# decode:")[0], text.split("# decode:")[1].split("# router:")[0]
    assert ROLE_MARKS[eng][0] in prefill and ROLE_MARKS[eng][1] in decode
    if eng == "trtllm":
        assert "disable_overlap_scheduler" not in decode and "trtllm-serve disaggregated -c disagg_config.yaml" in text
    router = text.split("# router:")[1]
    assert len(set(re.findall(r"PREFILL_HOST_\d+", router))) == o["prefill"]["replicas"]
    assert len(set(re.findall(r"DECODE_HOST_\d+", router))) == o["replicas"]


def test_the_issue_case_loads_the_fp4_checkpoint_not_the_bf16_one():
    """llama-3.3-70b FP4 on one B200: the 141 GB BF16 checkpoint does not leave room for the KV it was sized with;
    the launch loads NVIDIA's NVFP4 checkpoint (Model Optimizer README, 2025/02/25) on every engine."""
    for eng in ENGINES:
        cmd = render_launch(eng, Deployment("llama-3.3-70b", tp=1, precision="fp4"))
        assert cmd.checkpoint.repo == "nvidia/Llama-3.3-70B-Instruct-FP4" and cmd.checkpoint.how == "catalog"
        assert "nvidia/Llama-3.3-70B-Instruct-FP4" in cmd.argv and "meta-llama/Llama-3.3-70B-Instruct" not in cmd.argv
    amd = render_launch("vllm", Deployment("llama-3.3-70b", tp=1, precision="fp4", vendor="amd"))
    assert amd.checkpoint.placeholder and "on amd chips" in amd.checkpoint.note  # NVIDIA's NVFP4 is not for AMD
    r1 = render_launch("vllm", Deployment("deepseek-r1", tp=4, precision="fp4"))
    assert r1.argv[2] == "nvidia/DeepSeek-R1-FP4"
    own = render_launch("vllm", Deployment("deepseek-r1", tp=8, precision="fp8"))  # its own checkpoint is FP8
    assert own.argv[2] == "deepseek-ai/DeepSeek-R1" and own.checkpoint.how == "native"


def test_on_load_quantisation_where_the_engine_has_it_and_a_placeholder_where_not():
    """mixtral-8x7b has no FP8 checkpoint in the catalog: vLLM and SGLang quantise its BF16 weights on load
    (--quantization fp8); trtllm-serve has no such option, so its command carries a placeholder and a note."""
    for eng in ("vllm", "sglang"):
        cmd = render_launch(eng, Deployment("mixtral-8x7b", tp=2, precision="fp8"))
        i = cmd.argv.index("--quantization")
        assert cmd.argv[i + 1] == "fp8" and cmd.checkpoint.how == "on_load"
        assert "mistralai/Mixtral-8x7B-v0.1" in cmd.argv
    t = render_launch("trtllm", Deployment("mixtral-8x7b", tp=2, precision="fp8"))
    assert t.checkpoint.placeholder and t.argv[1] == "<fp8-checkpoint-of-mistralai/Mixtral-8x7B-v0.1>"
    assert any(n.startswith("FILL IN") for n in t.notes) and "FILL IN" in t.text
    assert "'<fp8-checkpoint-of-mistralai/Mixtral-8x7B-v0.1>'" in t.command  # quoted: the shell cannot misread it


def test_a_quantised_config_loads_as_given():
    m = as_model(GPTQ)
    assert stored_precision(m) == "w4a16-gptq-g128-zp"
    cmd = render_launch("vllm", Deployment(GPTQ, precision="w4a16-gptq-g128-zp"))
    assert cmd.argv[2] == GPTQ and cmd.checkpoint.how == "native" and "--quantization" not in cmd.argv


def test_users_own_checkpoint_and_bad_schemes(tmp_path):
    cmd = render_launch("sglang", Deployment("llama-3.3-70b", precision="fp4", checkpoint="me/my-llama-nvfp4"))
    assert cmd.argv[cmd.argv.index("--model-path") + 1] == "me/my-llama-nvfp4" and cmd.checkpoint.how == "user"
    assert any("fp4" in n for n in cmd.notes)
    assert user_checkpoint(str(tmp_path)) == str(tmp_path)
    for bad, msg in (("s3://bucket/llama", "unknown checkpoint scheme 's3'"), ("not a repo", "repo id"),
                     ("", "repo id")):
        with pytest.raises(InputError, match=msg):
            user_checkpoint(bad)


def test_catalog_checkpoints_and_launch_rules_are_sourced_and_use_recorded_flags():
    n = 0
    for mid in model_ids():
        for prec, e in (model_meta(mid).get("checkpoints") or {}).items():
            assert canonical(prec) == prec and re.match(r"^[\w.-]+/[\w.-]+$", e["repo"]) and len(e["source"]) > 20
            assert prec != stored_precision(as_model(mid))  # another precision than the model's own
            n += 1
    assert n == 11  # 7 models: 5 FP8 and 6 NVFP4 checkpoints
    rules = launch_rules()
    assert set(rules) == set(ENGINES) | {"disaggregation", "multi_node", "images", "gpu_resource", "pod_volumes"}
    for eng in ENGINES:
        accepted = load_engine(eng).accepted_flags
        for prec, rule in (rules[eng].get("on_load_quantization") or {}).items():
            assert rule["flag"] in accepted and rule["source"]
        d, m = rules["disaggregation"][eng], rules["multi_node"][eng]
        assert len(d["router"]["source"]) > 40  # where the wiring and the router were read
        assert all(f in accepted for role in (d.get("flags") or {}).values() for f, _ in role)
        assert all(k in load_engine(eng).accepted_yaml_keys for o in (d.get("options") or {}).values() for k in o)
        rows = (m.get("all") or []) + (m.get("workers") or []) + ((m.get("otherwise") or {}).get("flags") or [])
        assert all(f in accepted for f, _ in rows) and m["source"]


def test_engine_and_price_are_stated_per_option():
    r = plan("llama-3.3-70b", "h100-sxm,mi300x", users=500, min_user_tps=20, input_len=1000, output_len=500,
             precision="bf16,fp8", sim_requests=1000, curves=False, prices="mi300x=1.5", modes="aggregated")
    assert r["engines"] == ["sglang", "trtllm", "vllm"]
    for o in r["options"]:
        assert o["engine_version"] == load_engine(o["engine"]).version
        p = o["price"]
        if o["chip"] == "mi300x":
            assert p == {"usd_per_gpu_hour": 1.5, "given": True, "source": "given with --price", "date": None,
                         "assumption": False}
        else:  # the catalog's price, dated and sourced (h100-sxm.yaml: 2.50, 2026-05)
            assert p["usd_per_gpu_hour"] == 2.5 and p["date"] == "2026-05" and "http" in p["source"]
    assert {o["engine"] for o in r["options"] if o["chip"] == "mi300x"} == {"vllm", "sglang"}
    df = pytest.importorskip("pandas") and r.to_frame()
    assert {"engine", "engine_version", "precision", "price_source", "price_date", "price_given"} <= set(df.columns)
    assert list(df["engine"]) == [o["engine"] for o in r["options"]]
    one = plan("llama-3.3-70b", "h100-sxm,mi300x", users=500, min_user_tps=20, input_len=1000, output_len=500,
               sim_requests=1000, curves=False, engine="trtllm", modes="aggregated")
    assert {o["engine"] for o in one["options"]} == {"trtllm"}
    assert [u["hardware"] for u in one["unavailable"]] == ["mi300x"] and "does not run" in one["unavailable"][0]["why"]


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "chalk", *args], capture_output=True, text=True, timeout=300)


def test_cli_table_names_engine_precision_and_price():
    p = _cli("plan", "-m", "llama-3.3-70b", "--users", "500", "--min-user-tps", "20", "--input-len", "1000",
             "--output-len", "500", "-H", "b200", "-p", "bf16,fp4", "--mode", "aggregated", "--engine", "vllm",
             "--sim-requests", "1000", "--price", "b200=4")
    assert p.returncode == 0, p.stderr
    assert "vllm 0.11.x fp4" in p.stdout and "given with --price" in p.stdout and "$4.00/GPU-h" in p.stdout
    assert "vllm serve nvidia/Llama-3.3-70B-Instruct-FP4" in p.stdout
    j = _cli("plan", "-m", "llama-3.3-70b", "--users", "500", "--min-user-tps", "20", "--input-len", "1000",
             "--output-len", "500", "-H", "b200", "-p", "fp4", "--mode", "aggregated", "--engine", "sglang",
             "--sim-requests", "1000", "--checkpoint", "me/llama-nvfp4", "--json")
    o = json.loads(j.stdout)["options"][0]
    assert o["checkpoint"]["sglang"]["repo"] == "me/llama-nvfp4" and "--model-path me/llama-nvfp4" in o["launch"]["sglang"]


@pytest.mark.parametrize("args,msg", [
    (["--engine", "tgi"], "tgi"),
    (["--checkpoint", "s3://bucket/model"], "unknown checkpoint scheme"),
    (["--checkpoint", "no such thing"], "--checkpoint must be"),
])
def test_bad_launch_input_is_one_line_and_exit_2(args, msg):
    p = _cli("plan", "-m", "llama-3.3-70b", "--users", "100", "--input-len", "1000", "--output-len", "500",
             "-H", "b200", *args)
    assert p.returncode == 2 and msg in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_deepseek_r1_on_h100_launches_over_two_nodes():
    """671 GB of FP8 weights do not fit one 8 x H100 node: every option spans two nodes, and the vLLM and SGLang
    launches carry the node count, each node's rank and the rendezvous address (a placeholder to fill)."""
    r = plan("deepseek-r1", "h100-sxm", users=1000, min_user_tps=20, input_len=1000, output_len=500,
             sim_requests=1000, curves=False, engine=None)
    seen = set()
    for o in r["options"]:
        assert o["replica_gpus"] == 16 and o["replica_domains"] == 2
        text = o["launch"][o["engine"]]
        heads = re.findall(r"(?m)^# node (\d) of 2$", text)
        if o["engine"] == "sglang":
            lines = [ln for ln in text.splitlines() if ln.startswith("python -m sglang.launch_server")]
            assert [re.search(r"--node-rank (\d)", ln).group(1) for ln in lines] == ["0", "1"] * (len(lines) // 2)
            assert all("--nnodes 2" in ln and "--dist-init-addr HEAD_NODE_IP:5000" in ln for ln in lines)
            seen.add("sglang")
        elif o["engine"] == "vllm":
            lines = [ln for ln in text.splitlines() if ln.startswith("vllm serve")]
            par = o["parallelism"]
            local = par["attn_dp"] // 2
            assert all(f"--data-parallel-size-local {local}" in ln and "--data-parallel-address HEAD_NODE_IP" in ln
                       for ln in lines)
            assert sum("--headless" in ln for ln in lines) == len(lines) // 2
            assert f"--headless --data-parallel-start-rank {local}" in text
            seen.add("vllm")
        if o["engine"] in ("vllm", "sglang"):
            assert heads and set(heads) == {"1", "2"}
    assert seen == {"vllm", "sglang"}
    ray = render_launch("vllm", Deployment("llama-3.1-405b", tp=16, nodes=2))  # TP across nodes: a Ray cluster
    assert "--distributed-executor-backend" in ray.argv and any("ray start --head" in n for n in ray.notes)
    with pytest.raises(InputError, match="node_rank"):
        Deployment("llama-3.1-70b", tp=8, nodes=2, node_rank=2)


# ----------------------------------------------------------------------------------------------- --emit
def _validate_k8s(folder):
    """Every manifest passes the Kubernetes OpenAPI schema (kubernetes-validate, strict); a LeaderWorkerSet, a CRD
    the schema set lacks, has its leader and worker pod templates checked as core PodTemplates."""
    kv = pytest.importorskip("kubernetes_validate.utils")
    kinds = []
    for f in sorted(folder.glob("*.yaml")):
        d = yaml.safe_load(f.read_text())
        kinds.append(d["kind"])
        if d["kind"] == "LeaderWorkerSet":
            assert d["apiVersion"] == "leaderworkerset.x-k8s.io/v1" and d["spec"]["leaderWorkerTemplate"]["size"] >= 2
            for k in ("leaderTemplate", "workerTemplate"):
                kv.validate({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"},
                             "template": d["spec"]["leaderWorkerTemplate"][k]}, "1.30", strict=True)
        else:
            kv.validate(d, "1.30", strict=True)
    return kinds


@pytest.fixture(scope="module")
def r1_h100():
    return plan("deepseek-r1", "h100-sxm", users=1000, min_user_tps=20, input_len=1000, output_len=500,
                sim_requests=1000, curves=False, engine="sglang")


def test_emit_k8s_single_and_multi_node(tmp_path, r1_h100):
    from chalk.faces.emit_plan import emit

    r = plan("llama-3.3-70b", "b200", users=500, min_user_tps=20, input_len=1000, output_len=500, precision="fp4",
             sim_requests=1000, curves=False, engine="vllm", modes="aggregated")
    out = emit(r, "k8s", tmp_path / "one")
    kinds = _validate_k8s(out)
    assert kinds == ["Deployment", "Service"]
    dep = yaml.safe_load(next(out.glob("*deployment*")).read_text())
    o = r["options"][0]
    assert dep["spec"]["replicas"] == o["replicas"]
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["command"] + c["args"] == o["launch_steps"]["vllm"][0]["argv"]
    assert c["resources"]["limits"] == {"nvidia.com/gpu": o["replica_gpus"]}
    assert "nvidia/Llama-3.3-70B-Instruct-FP4" in c["args"]
    # DeepSeek-R1 on H100: each replica over two nodes -> LeaderWorkerSets, ranks and the leader address from LWS
    multi = emit(r1_h100, "k8s", tmp_path / "multi")
    kinds = _validate_k8s(multi)
    assert "LeaderWorkerSet" in kinds
    lws = [yaml.safe_load(f.read_text()) for f in multi.glob("*leaderworkerset*")]
    for d in lws:
        t = d["spec"]["leaderWorkerTemplate"]
        lead, work = (t[k]["spec"]["containers"][0]["args"] for k in ("leaderTemplate", "workerTemplate"))
        assert lead[lead.index("--node-rank") + 1] == "0" and work[work.index("--node-rank") + 1] == "$(LWS_WORKER_INDEX)"
        assert "$(LWS_LEADER_ADDRESS):5000" in lead and t["leaderTemplate"]["spec"]["containers"][0]["resources"][
            "limits"] == {"nvidia.com/gpu": 8}
    if r1_h100["options"][0]["prefill"]:
        assert "Deployment" in kinds  # the router


def test_emit_compose_one_node_and_refusals(tmp_path, r1_h100):
    from chalk.faces.emit_plan import emit

    r = plan("llama-3.1-8b", "h100-sxm", users=200, min_user_tps=20, input_len=1000, output_len=500,
             sim_requests=1000, curves=False, engine="trtllm", modes="aggregated")
    out = emit(r, "compose", tmp_path / "c")
    d = yaml.safe_load((out / "compose.yaml").read_text())
    o = r["options"][0]
    assert len(d["services"]) == min(o["replicas"], 8 // o["replica_gpus"])
    svc = next(iter(d["services"].values()))
    # the whole argv is the entrypoint: an image's own ENTRYPOINT (vLLM's `vllm serve`) would run before a
    # `command` (QA 2026-11-28: `vllm serve vllm serve ...`)
    assert svc["entrypoint"] == o["launch_steps"]["trtllm"][0]["argv"] and "command" not in svc
    assert svc["entrypoint"][0] == "trtllm-serve" and d["configs"]  # the options file travels as a compose config
    held = len(d["services"])
    assert ("x-chalk-note" in d) == (held < o["replicas"])  # a node holding part of the fleet says so
    with pytest.raises(InputError, match="span 2 nodes"):
        emit(r1_h100, "compose", tmp_path / "no")
    assert not (tmp_path / "no").exists() and not list(tmp_path.glob(".no.*"))  # nothing half-written
    (tmp_path / "file").write_text("x")
    for target, msg in ((tmp_path / "file", "is a file"), (tmp_path / "c", "not empty"),
                        (tmp_path / "missing" / "deeper", "does not exist")):
        with pytest.raises(InputError, match=msg):
            emit(r, "k8s", target)
    with pytest.raises(InputError, match="k8s or compose"):
        emit(r, "helm", tmp_path / "h")


def test_a_pod_with_several_gpus_mounts_memory_backed_shared_memory(tmp_path, r1_h100):
    """QA: a TP>1 pod had no /dev/shm mount, only the container runtime's 64 MB, which NCCL and vLLM's workers
    outgrow; vLLM's and SGLang's Kubernetes examples mount an `emptyDir: {medium: Memory}` there. Every pod running
    two or more GPUs now does (Deployments and both LeaderWorkerSet templates), a one-GPU pod does not; the
    manifests stay valid."""
    from chalk.faces.emit_plan import emit

    shm_vol, shm_mount = {"name": "dshm", "emptyDir": {"medium": "Memory"}}, {"name": "dshm", "mountPath": "/dev/shm"}
    kw = dict(input_len=1000, output_len=200, sim_requests=1000, curves=False, engine="vllm", modes="aggregated")
    for model, prec, many in (("llama-3.1-70b", "bf16", True), ("llama-3.1-8b", "fp8", False)):
        r = plan(model, "h100-sxm", users=50, precision=prec, **kw)
        assert (r["options"][0]["replica_gpus"] > 1) == many, r["options"][0]["replica_gpus"]
        out = emit(r, "k8s", tmp_path / model)
        assert _validate_k8s(out) == ["Deployment", "Service"]
        pod = yaml.safe_load(next(out.glob("*deployment*")).read_text())["spec"]["template"]["spec"]
        assert (shm_vol in pod.get("volumes", [])) == many
        assert (shm_mount in pod["containers"][0].get("volumeMounts", [])) == many
    multi = emit(r1_h100, "k8s", tmp_path / "multi")
    _validate_k8s(multi)
    for f in multi.glob("*leaderworkerset*"):
        t = yaml.safe_load(f.read_text())["spec"]["leaderWorkerTemplate"]
        for k in ("leaderTemplate", "workerTemplate"):
            assert shm_vol in t[k]["spec"]["volumes"] and shm_mount in t[k]["spec"]["containers"][0]["volumeMounts"]


def test_a_local_checkpoint_is_mounted_read_only_where_the_emitted_command_loads_it(tmp_path):
    """QA: compose and k8s files for a local checkpoint (`plan -m /path/to/config-dir`) named the host's folder in
    the container's command with no volume and no word. The folder is now mounted read-only at its absolute path
    (compose: a bind volume; k8s: a hostPath volume), the command names that path, and the files say so."""
    from pathlib import Path

    from chalk.faces.emit_plan import emit, emit_notes

    here = str(Path(GPTQ).resolve())
    kw = dict(users=50, input_len=1000, output_len=200, sim_requests=1000, curves=False, engine="vllm",
              modes="aggregated")
    r = plan(GPTQ, "h100-sxm", **kw)
    c = yaml.safe_load((emit(r, "compose", tmp_path / "c") / "compose.yaml").read_text())
    svc = c["services"]["replica-1"]
    assert svc["entrypoint"][:3] == ["vllm", "serve", here]
    assert svc["volumes"] == [{"type": "bind", "source": here, "target": here, "read_only": True}]
    assert here in c["x-chalk-model-note"] and "read-only" in c["x-chalk-model-note"]
    assert any("bind volume" in n for n in emit_notes(tmp_path / "c"))
    assert r["options"][0]["checkpoint"]["vllm"]["local_path"] == here
    k = emit(r, "k8s", tmp_path / "k")
    _validate_k8s(k)
    dep = yaml.safe_load(next(k.glob("*deployment*")).read_text())
    pod = dep["spec"]["template"]["spec"]
    assert {"name": "model", "hostPath": {"path": here, "type": "Directory"}} in pod["volumes"]
    assert {"name": "model", "mountPath": here, "readOnly": True} in pod["containers"][0]["volumeMounts"]
    assert pod["containers"][0]["args"][:2] == ["serve", here]
    assert "hostPath" in dep["metadata"]["annotations"]["chalk/note"] and emit_notes(k)
    # the user's own checkpoint folder is mounted the same way; a catalog model's repo id is not
    own = tmp_path / "my-ckpt"
    own.mkdir()
    r = plan("llama-3.1-8b", "h100-sxm", checkpoint=str(own), **kw)
    svc = yaml.safe_load((emit(r, "compose", tmp_path / "u") / "compose.yaml").read_text())["services"]["replica-1"]
    assert svc["volumes"][0]["source"] == str(own) and str(own) in svc["entrypoint"]
    r = plan("llama-3.1-8b", "h100-sxm", **kw)
    c = yaml.safe_load((emit(r, "compose", tmp_path / "n") / "compose.yaml").read_text())
    assert "volumes" not in c["services"]["replica-1"] and "x-chalk-model-note" not in c


@pytest.mark.parametrize("kind,target,msg", [("k8s", "FILE", "is a file"), ("helm", "NEW", "k8s or compose"),
                                             ("k8s", "RO/sub", "not writable")])
def test_cli_emit_bad_folder_is_one_line_exit_2(tmp_path, kind, target, msg):
    import os

    (tmp_path / "FILE").write_text("x")
    (tmp_path / "RO").mkdir()
    os.chmod(tmp_path / "RO", 0o500)
    if os.access(tmp_path / "RO", os.W_OK):
        pytest.skip("running as a user who writes anywhere (root)") if target.startswith("RO") else None
    p = _cli("plan", "-m", "llama-3.1-8b", "--users", "100", "--input-len", "1000", "--output-len", "500",
             "-H", "h100-sxm", "--emit", kind, str(tmp_path / target))
    assert p.returncode == 2 and msg in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not (tmp_path / "NEW").exists()


@pytest.mark.parametrize("kind", ["compose", "k8s"])
def test_cli_emit_of_an_option_without_a_launch_is_one_line_exit_2(tmp_path, kind):
    """QA: a KV dtype vLLM cannot run (`--kv-precision int8`) leaves the option without a launch (the plan notes 'not
    rendered'); --emit compose then failed with a KeyError traceback, --emit k8s with 'it was sized with )'. Both now
    refuse in one line that says why, exit 2, and write nothing."""
    args = ("plan", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--users", "50", "--input-len", "1000", "--output-len",
            "200", "--kv-precision", "int8", "--emit", kind)
    p = _cli(*args, str(tmp_path / "new"))
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert p.stderr.startswith(f"chalk: error: --emit {kind}: the plan has no vllm launch of this option to write: "
                               "vllm has no KV-cache dtype for 'int8'"), p.stderr
    assert "not rendered" in p.stdout  # the plan itself is still printed, its note saying the same
    assert list(tmp_path.iterdir()) == []  # no folder, not even a half-written temporary one
    p = _cli(*args, str(tmp_path / "new"), "--json")
    assert p.returncode == 2 and "no vllm launch" in json.loads(p.stderr)["error"], p.stderr
    assert json.loads(p.stdout)["options"][0]["launch_steps"] == {} and list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------ what the emitted files wire (QA 2026-11-28)
@pytest.fixture(scope="module")
def disagg_8b():
    return {eng: plan("llama-3.1-8b", "h100-sxm", rate=20, input_len=8000, output_len=200, ttft_p99_s=1.0,
                      tpot_p99_s=0.02, modes="disaggregated", engine=eng, sim_requests=1000, curves=False)
            for eng in ("vllm", "trtllm")}


def test_a_disaggregated_router_lists_one_address_per_instance_it_balances(tmp_path, disagg_8b):
    """TensorRT-LLM's disaggregated router refuses a num_instances other than its urls' count ("Number of hostnames
    (1) should be equal to the number of instances (12)"): the k8s router config gave each pool's replica count
    beside the one Service address standing for them all. The compose file had the pools and no router at all."""
    from chalk.faces.emit_plan import emit

    out = emit(disagg_8b["trtllm"], "k8s", tmp_path / "t")
    _validate_k8s(out)
    cm = yaml.safe_load(next(out.glob("*router-config*")).read_text())
    conf = yaml.safe_load(next(iter(cm["data"].values())))
    for pool in ("context_servers", "generation_servers"):
        assert conf[pool]["num_instances"] == len(conf[pool]["urls"]) >= 1
    r = disagg_8b["vllm"]
    o = r["options"][0]
    assert o["prefill"]
    d = yaml.safe_load((emit(r, "compose", tmp_path / "c") / "compose.yaml").read_text())
    router = d["services"]["router"]
    pools = {k: v for k, v in d["services"].items() if k != "router"}
    assert router["ports"] == ["8000:8000"] and set(router["depends_on"]) == set(pools)
    argv = router["entrypoint"]
    pre = argv[argv.index("--prefiller-hosts") + 1:argv.index("--prefiller-ports")]
    dec = argv[argv.index("--decoder-hosts") + 1:argv.index("--decoder-ports")]
    assert set(pre) | set(dec) == set(pools) and all(p.startswith("prefill-") for p in pre)
    assert all("ports" not in s for s in pools.values())  # reached through the router
    assert argv[argv.index("--host") + 1] == "0.0.0.0"


def test_every_server_and_router_listens_beyond_loopback():
    """SGLang's server binds 127.0.0.1 and trtllm-serve localhost unless told: a Service, a compose port or a
    router could not reach them. vLLM's server binds all interfaces by default."""
    from chalk.specs.launch import router_parts

    for eng in ("sglang", "trtllm"):
        argv = render_launch(eng, Deployment("llama-3.1-8b", tp=1)).argv
        assert argv[argv.index("--host") + 1] == "0.0.0.0", eng
    for eng in ENGINES:
        argv, _, conf, _ = router_parts(eng, 2, 3)
        assert "0.0.0.0" in (argv[argv.index("--host") + 1] if "--host" in argv else yaml.safe_load(conf)["hostname"])


def test_each_multi_node_worker_computes_its_own_data_parallel_start_rank():
    """vLLM's multi-node launch starts node i's data-parallel ranks at i x its local ranks. The LeaderWorkerSet's
    one worker template hard-coded node 1's start rank, so every worker of a 4-node set claimed rank 1: the rank is
    now computed by a shell from the pod's index (Kubernetes substitutes $(VAR), not arithmetic)."""
    from chalk.faces.emit_plan import _worker_argv

    dep = Deployment("kimi-k2", tp=8, dp=4, ep=32, nodes=4, node_rank=1, precision="fp8")
    cmd = {"argv": list(render_launch("vllm", dep).argv)}
    local = cmd["argv"][cmd["argv"].index("--data-parallel-size-local") + 1]
    w = _worker_argv(cmd, 4)["argv"]
    assert w[:2] == ["sh", "-c"] and w[2].startswith("exec vllm serve ")
    assert f"--data-parallel-start-rank $((LWS_WORKER_INDEX * {int(local)}))" in w[2]
    assert "--headless" in w[2]
    # a launch without a start rank keeps its argv, the node rank from the pod
    plain = {"argv": ["python", "-m", "sglang.launch_server", "--node-rank", "1", "--nnodes", "2"]}
    assert _worker_argv(plain, 2)["argv"] == ["python", "-m", "sglang.launch_server", "--node-rank",
                                              "$(LWS_WORKER_INDEX)", "--nnodes", "2"]


def test_a_multi_node_service_selects_only_the_leaders(tmp_path, r1_h100):
    """A LeaderWorkerSet's workers serve no HTTP (vLLM's run --headless; SGLang's answer through node 0): the
    Service selecting leader and worker pods alike sent some connections nowhere."""
    from chalk.faces.emit_plan import emit

    out = emit(r1_h100, "k8s", tmp_path / "m")
    for f in out.glob("*leaderworkerset*"):
        d = yaml.safe_load(f.read_text())
        t = d["spec"]["leaderWorkerTemplate"]
        name = d["metadata"]["name"]
        svc = yaml.safe_load(next(out.glob(f"*service-{name}.yaml")).read_text())
        sel = svc["spec"]["selector"]
        assert sel.items() <= t["leaderTemplate"]["metadata"]["labels"].items()
        assert not sel.items() <= t["workerTemplate"]["metadata"]["labels"].items()


def test_an_expert_width_that_does_not_divide_the_experts_says_what_it_needs():
    """DeepSeek-V3's 256 experts over EP3 (a width chalk sized for a pool): an even expert sharding needs 2 redundant
    slots (258 = 3 x 86), which the launch now says; EP8 says nothing."""
    notes = render_launch("sglang", Deployment("deepseek-v3", tp=1, attn_dp=3, ep=3, precision="fp8")).notes
    assert any("256 routed experts do not divide over expert-parallel 3" in n and "2 redundant expert slots" in n
               and "258 = 3 x 86" in n for n in notes)
    notes8 = render_launch("sglang", Deployment("deepseek-v3", tp=1, attn_dp=8, ep=8, precision="fp8")).notes
    assert not any("redundant expert slot" in n for n in notes8)


def test_compose_says_when_one_node_holds_part_of_the_fleet_and_refuses_pools_it_cannot_hold(tmp_path):
    """QA 2026-11-28: a 30-replica plan was written as a 4-replica compose file without a word, and a disaggregated
    plan whose prefill pool fills the node failed with 'decode replicas must be an integer >= 1, got 0' after the
    whole plan, printing none of it. The file and the command now say what part of the fleet it holds; pools one
    node cannot share are refused in one line naming them, after the plan is printed."""
    from chalk.faces.emit_plan import compose_file

    kw = dict(users=1000, min_user_tps=30, input_len=2000, output_len=500, sim_requests=1000, curves=False)
    r = plan("llama-3.1-70b", "h200", engine="vllm", modes="aggregated", **kw)
    o = r["options"][0]
    d = compose_file(r)
    assert o["replicas"] > len(d["services"])
    assert d["x-chalk-note"].startswith(f"one 8-GPU node: this file holds {len(d['services'])} of the "
                                        f"{o['replicas']} replicas the plan sized")
    p = _cli("plan", "-m", "llama-3.1-70b", "--users", "1000", "--min-user-tps", "30", "--input-len", "2000",
             "--output-len", "500", "-H", "h200", "--engine", "vllm", "--mode", "aggregated", "--emit", "compose",
             str(tmp_path / "c"))
    assert p.returncode == 0 and "note: one 8-GPU node: this file holds" in p.stderr, p.stderr
    p = _cli("plan", "-m", "llama-3.1-70b", "--users", "1000", "--min-user-tps", "30", "--input-len", "2000",
             "--output-len", "500", "-H", "h200", "--engine", "sglang", "--mode", "disaggregated", "--emit",
             "compose", str(tmp_path / "d"))
    # 20 one-GPU prefill replicas and 8 two-GPU decode ones do not share one node: refused after the plan is printed
    assert p.returncode == 2 and "cheapest" in p.stdout and not (tmp_path / "d").exists()
    assert p.stderr.strip().splitlines()[-1].startswith("chalk: error: --emit compose writes one 8-GPU node")


def test_trtllm_prompts_longer_than_its_token_budget_launch_with_chunked_prefill():
    """trtllm-serve's chunked prefill is off unless --enable_chunked_prefill, and then it refuses any prompt past
    --max_num_tokens (8,192 by default); chalk sizes long prompts prefilled in chunks of that budget. QA 2026-11-28:
    a 20,000-token-prompt plan launched without it. Prompts that fit the budget launch as before."""
    long = render_launch("trtllm", Deployment("llama-3.1-8b", tp=1, max_model_len=21504)).argv
    assert "--enable_chunked_prefill" in long
    short = render_launch("trtllm", Deployment("llama-3.1-8b", tp=1, max_model_len=4096)).argv
    assert "--enable_chunked_prefill" not in short
    wide = render_launch("trtllm", Deployment("llama-3.1-8b", tp=1, max_model_len=21504,
                                              chunked_prefill_tokens=32768)).argv
    assert "--enable_chunked_prefill" not in wide and wide[wide.index("--max_num_tokens") + 1] == "32768"


def test_vllm_pools_tell_nixl_their_own_address(tmp_path, disagg_8b):
    """vLLM's NIXL side channel binds localhost unless VLLM_NIXL_SIDE_CHANNEL_HOST says otherwise, so pools on two
    machines could not hand off KV (QA 2026-11-28). k8s pods take their own IP, compose services their name, and
    the printed commands say to set it."""
    from chalk.faces.emit_plan import emit

    r = disagg_8b["vllm"]
    out = emit(r, "k8s", tmp_path / "k")
    _validate_k8s(out)
    pods = [yaml.safe_load(f.read_text()) for f in out.glob("*deployment*")]
    engines = [d["spec"]["template"]["spec"]["containers"][0] for d in pods
               if d["metadata"]["labels"]["chalk/role"] in ("prefill", "decode")]
    assert engines and all(c["env"] == [{"name": "VLLM_NIXL_SIDE_CHANNEL_HOST",
                                         "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}] for c in engines)
    d = yaml.safe_load((emit(r, "compose", tmp_path / "c") / "compose.yaml").read_text())
    for name, svc in d["services"].items():
        if name != "router":
            assert svc["environment"] == {"VLLM_NIXL_SIDE_CHANNEL_HOST": name}
    notes = [n for step in r["options"][0]["launch_steps"]["vllm"] for n in step.get("notes", [])]
    assert any("VLLM_NIXL_SIDE_CHANNEL_HOST" in n for n in notes) or \
        "VLLM_NIXL_SIDE_CHANNEL_HOST" in json.dumps(r["options"][0]["launch"])


def test_emit_k8s_refuses_a_multi_node_replica_launched_from_its_head_node(tmp_path):
    """TensorRT-LLM spans nodes as one MPI job and vLLM's TP/PP across nodes as one Ray cluster, both launched from
    the head node: the LeaderWorkerSet ran the whole server on every pod (QA 2026-11-28). chalk writes no manifest
    for them and says why, in one line, after the plan (the printed commands carry the notes)."""
    p = _cli("plan", "-m", "deepseek-r1", "--users", "500", "--min-user-tps", "20", "--input-len", "2000",
             "--output-len", "500", "-H", "h100-sxm", "--engine", "trtllm", "--mode", "aggregated", "--emit", "k8s",
             str(tmp_path / "k"))
    assert p.returncode == 2 and "cheapest" in p.stdout and not (tmp_path / "k").exists(), p.stderr
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("chalk: error: --emit k8s: this option's replicas span 2 nodes, which trtllm launches "
                           "from the head node alone"), last


def test_sglang_prefill_instances_are_listed_one_by_one_with_their_bootstrap_port(tmp_path):
    """SGLang's router hands a decode server the prefill URL's host as its bootstrap host: through one Service over
    6 prefill pods, the bootstrap could reach another pod than the one prefilling, and its port (8998) was not
    exposed (QA 2026-11-28). The prefill pool is a StatefulSet behind a headless Service exposing it, and the
    router lists each pod."""
    from chalk.faces.emit_plan import emit

    r = plan("mixtral-8x7b", "h200", users=600, min_user_tps=30, input_len=2000, output_len=300, sim_requests=1000,
             curves=False, engine="sglang", modes="disaggregated")
    o = r["options"][0]
    out = emit(r, "k8s", tmp_path / "k")
    kinds = _validate_k8s(out)
    assert "StatefulSet" in kinds
    sts = yaml.safe_load(next(out.glob("*statefulset*prefill*")).read_text())
    svc = yaml.safe_load(next(out.glob("*service*prefill*")).read_text())
    n = o["prefill"]["replicas"]
    assert sts["spec"]["replicas"] == n and svc["spec"]["clusterIP"] == "None"
    assert {p["port"] for p in svc["spec"]["ports"]} == {30000, 8998}
    args = yaml.safe_load(next(out.glob("*deployment*router*")).read_text())["spec"]["template"]["spec"][
        "containers"][0]["args"]
    pre = [args[i + 1] for i, a in enumerate(args) if a == "--prefill"]
    name = sts["metadata"]["name"]
    assert pre == [f"http://{name}-{i}.{name}:30000" for i in range(n)]


def test_an_nvl72_replica_is_launched_over_its_four_gpu_compute_trays(tmp_path):
    """QA 2026-11-28: a GB200 NVL72 rack was launched as one 72-GPU host: a TP8 replica got one 8-GPU node and a
    Kubernetes pod asking for 8 GPUs, which no 4-GPU compute tray can hold, and a compose file put 29 services on
    GPUs 0-28 of 'one node'. A host is now the system's `host_chips` (4 per NVL72 tray, sourced), the domain still
    the rack."""
    from chalk.faces.emit_plan import emit

    nvl, hgx = as_system("gb200-nvl72"), as_system("h100-sxm")
    assert (nvl.chips, nvl.chips_per_host, hgx.chips_per_host) == (72, 4, 8)
    assert "host_chips" in nvl.sources
    r = plan("llama-3.1-405b", "gb200-nvl72", users=100, min_user_tps=20, input_len=2000, output_len=500,
             engine="sglang", modes="aggregated", precision="bf16", sim_requests=1000, curves=False)
    o = r["options"][0]
    assert o["host_chips"] == 4 and o["domain_chips"] == 72
    gpus = o["parallelism"]["tp"] * o["parallelism"]["attn_dp"] * o["parallelism"]["pp"]
    assert gpus == 8 and all(s["nodes"] == 2 for s in o["launch_steps"]["sglang"])
    out = emit(r, "k8s", tmp_path / "k8s")
    assert "LeaderWorkerSet" in _validate_k8s(out)
    asked = {int(g) for g in re.findall(r"nvidia.com/gpu: '?(\d+)", "".join(f.read_text() for f in out.glob("*")))}
    assert asked == {4}


def test_a_system_whose_host_chips_do_not_divide_its_domain_is_refused(tmp_path):
    from chalk.errors import SpecError
    from chalk.specs.catalog import _system_from_dict

    with pytest.raises(SpecError, match="host_chips"):
        _system_from_dict({"id": "x", "chip": "b200", "chips": 72, "kind": "rack", "host_chips": 5}, "x.yaml")
    assert _system_from_dict({"id": "x", "chip": "b200", "chips": 72, "kind": "rack"}, "x.yaml").chips_per_host == 72


def test_vllm_is_not_launched_where_its_rank_placement_splits_an_expert_group_over_nodes():
    """QA 2026-11-28: DeepSeek-R1 DP-attn8 EP8 PP2 on two H100 nodes was launched for vLLM with 4 DP ranks per node,
    each keeping its two pipeline stages on its node, so every stage's EP8 group ran its all-to-all over the network
    card where chalk timed it over NVLink (a stage per node). vLLM's multi-node rule says it does not place a stage
    per node (launch.yaml pipeline_across_nodes_with_dp: false); such a replica is not launched. SGLang, which
    places ranks over --nnodes as one job, is; PP without DP ranks (Ray) and DP without PP are, as before."""
    dep = dict(tp=1, attn_dp=8, ep=8, pp=2, nodes=2)
    with pytest.raises(InputError, match="expert-parallel group across the nodes"):
        render_launch("vllm", Deployment("deepseek-r1", **dep))
    assert "--nnodes" in render_launch("sglang", Deployment("deepseek-r1", **dep)).argv
    assert "--data-parallel-size-local" in render_launch("vllm", Deployment("deepseek-r1", tp=1, attn_dp=16, ep=16,
                                                                            nodes=2)).argv
    assert "--distributed-executor-backend" in render_launch("vllm", Deployment("llama-3.1-405b", tp=8, pp=2,
                                                                                nodes=2)).argv
