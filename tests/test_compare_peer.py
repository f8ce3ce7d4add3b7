"""The differential script's pure helpers (scripts/compare_peer.py): the row -> peer-question mapping, the op classes
and the mechanism naming. The peer (aiconfigurator) is not needed and not imported."""

import importlib.util
import sys
from pathlib import Path

import pytest

from chalk.analyses.fidelity.validate import load_rows

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "compare_peer.py"


@pytest.fixture(scope="module")
def cp():
    spec = importlib.util.spec_from_file_location("compare_peer", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_peer_is_imported_only_by_the_script(cp):
    assert "aiconfigurator" not in sys.modules  # loading the script does not import the peer
    src = Path(__file__).resolve().parents[1] / "src" / "chalk"
    offenders = [p for p in src.rglob("*.py") if "import aiconfigurator" in p.read_text()
                 or "from aiconfigurator" in p.read_text()]
    assert offenders == []


def test_fixed_row_maps_concurrency_per_dp_rank(cp):
    rows = {r.id: r for r in load_rows()}
    r = rows["ix-r1-b200-tp8-1k1k-45"]  # DeepSeek-R1 B200 TP8 conc 64, FP8, SGLang
    q, why = cp.peer_question(r)
    assert why == ""
    assert q["kwargs"]["system_name"] == "b200_sxm" and q["kwargs"]["backend_name"] == "sglang"
    assert q["kwargs"]["gemm_quant_mode"] == "fp8_block" and q["kwargs"]["kvcache_quant_mode"] == "fp8"
    assert q["layouts"] == [(8, 1, 1, 8, 1)]  # EP8 over the 8 TP ranks: a TP8 row without ep
    assert q["batch"] == 64
    dp_rows = [x for x in load_rows() if x.kind == "fixed" and (x.attn_dp or 1) > 1 and not x.disaggregated
               and x.hardware in cp.PEER_SYSTEM and x.concurrency]
    asked = 0
    for x in dp_rows:
        q, why = cp.peer_question(x)
        if q is None:  # a row the peer cannot be asked (its engine, precision or chip): skipped with the reason
            assert why
            continue
        asked += 1
        tp, dp, pp, etp, ep = q["layouts"][0]
        assert q["batch"] * dp * q["replicas"] == pytest.approx(x.concurrency, rel=0.5 / (dp * q["replicas"]) + 0.02)
        assert etp * ep == tp * dp
    assert asked >= 5


def test_skips_carry_a_reason(cp):
    reasons = {cp.peer_question(r)[1] for r in load_rows() if cp.peer_question(r)[0] is None}
    assert any("mi300x" in w for w in reasons)
    assert any("disaggregated" in w for w in reasons)
    assert "" not in reasons


def test_quant_modes(cp):
    assert cp.quant_modes("llama-3.3-70b", "fp8", "auto") == {"gemm_quant_mode": "fp8", "kvcache_quant_mode": "fp8"}
    assert cp.quant_modes("deepseek-r1", "fp4", "auto")["moe_quant_mode"] == "nvfp4"
    assert cp.quant_modes("gpt-oss-120b", "mxfp4", "auto") == {"kvcache_quant_mode": "fp8"}
    assert cp.quant_modes("llama-3.1-8b", "bf16", "auto")["kvcache_quant_mode"] == "bfloat16"


def test_accepted_per_step(cp):
    assert cp.accepted_per_step(1, 0.85) == pytest.approx(0.85)
    assert cp.accepted_per_step(3, 0.5) == pytest.approx(0.875)


@pytest.mark.parametrize("name,cls", [
    ("generation_qkv_gemm", "attention (incl. qkv/o proj)"), ("attn_proj", "attention (incl. qkv/o proj)"),
    ("generation_mla_block", "attention (incl. qkv/o proj)"), ("attention_decode", "attention (incl. qkv/o proj)"),
    ("generation_gate_ffn1_gemm", "ffn/moe (incl. expert all-to-all)"), ("mlp", "ffn/moe (incl. expert all-to-all)"),
    ("generation_moe_overlap", "ffn/moe (incl. expert all-to-all)"), ("alltoall", "ffn/moe (incl. expert all-to-all)"),
    ("shared_experts", "ffn/moe (incl. expert all-to-all)"), ("router", "ffn/moe (incl. expert all-to-all)"),
    ("generation_act_gate", "elementwise"), ("generation_add_norm_1", "elementwise"),
    ("generation_embedding", "elementwise"), ("generation_embedding_ar", "comm (allreduce/p2p)"),
    ("generation_ar_1", "comm (allreduce/p2p)"), ("allreduce", "comm (allreduce/p2p)"),
    ("generation_p2p", "comm (allreduce/p2p)"), ("lm_head", "logits"), ("generation_logits_gemm", "logits"),
    ("sampling", "logits"), ("overhead", "overhead")])
def test_op_class(cp, name, cls):
    assert cp.op_class(name) == cls


def test_name_mechanism(cp):
    m = cp.name_mechanism({"ffn": 10.0, "attention": 5.0, "overhead": 2.0}, {"ffn": 6.0, "attention": 5.5})
    assert m["op_class"] == "ffn" and m["direction"] == "chalk slower"
    assert m["diff_ms"] == pytest.approx(4.0) and m["step_gap_ms"] == pytest.approx(5.5)
    assert m["share_of_step_gap"] == pytest.approx(4.0 / 5.5)
