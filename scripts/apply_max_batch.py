"""Write the `max_batch` column of src/chalk/validation/validation.csv from the table below: `python scripts/apply_max_batch.py`.

`max_batch` is the decode engine's cap on sequences run at once PER SCHEDULER, as the row's deployment set it:
per attention-DP rank where the engine runs attention DP, per engine instance otherwise; empty where the launch
leaves it at the engine default or the source does not say. Engine semantics used for the division:
  - TensorRT-LLM `max_batch_size` is already per rank under `enable_attention_dp` (a DEP16 recipe with batch64
    runs 16 x 64 = 1024 at once), so it is recorded as written.
  - SGLang `--max-running-requests` is per server; with `--enable-dp-attention` each DP scheduler gets
    max_running_requests // dp_size (sgl-project/sglang python/sglang/srt/managers/tp_worker.py @4f34e24,
    TpModelWorker.__init__), so it is divided by the DP size.
  - vLLM `--max-num-seqs` is per engine (per DP rank), recorded as written.
Each entry appends one clause to the row's `notes` saying where its number came from (or why it is empty).
`fixed` rows feed the number to the deployment they replay; `search` rows (a benchmark's own best steady state)
carry it as the launch's recorded cap, where the source fixes one.
Rows are matched by id stem (the id without its metric suffix). Idempotent: re-running rewrites the column and
does not repeat a clause already present. Measured values, ids and other columns are not touched.
"""

from __future__ import annotations

import csv
import io
import re
import sys
from pathlib import Path

CSV = Path(__file__).resolve().parents[1] / "src" / "chalk" / "validation" / "validation.csv"
SUFFIX = re.compile(r"-(out|tpot|ttft|in|e2e|itl)$")

NVM = "nvidia-master.yaml @0004cf5"

# stem -> (max_batch or None, clause appended to notes)
TABLE: dict[str, tuple[int | None, str]] = {}


def put(stems, value, clause):
    for s in stems:
        TABLE[s] = (value, clause)


# ---- InferenceX disaggregated, Dynamo + TensorRT-LLM (decode max_batch_size; the recipe name's batchN is it) ----
put(["ix-r1-gb200-dynamo-trtllm-fp8-mtp-disagg-8p16d-1k1k-c1229"], 64,
    "max_batch 64 per DEP rank: decode max_batch_size 64 in recipe ctx1_gen1_dep16_batch64_eplb0_mtp1_1229 "
    f"({NVM}; srt-slurm-recipes/dsr1/trtllm/gb200-fp8/1k1k/disagg/mtp @20e0744), TRT-LLM's cap is per attention-DP "
    "rank: 16 x 64 = 1024 of 1229 run at once")
put(["ix-r1-gb300-dynamo-trtllm-fp8-mtp-disagg-4p32d-1k8k-c2048"], 64,
    f"max_batch 64 per DEP rank: recipe ctx1_gen2_dep16_batch64_eplb0_mtp1_2048 ({NVM}), per attention-DP rank "
    "in TRT-LLM: 2 workers x 16 ranks x 64 = 2048")
put(["ix-r1-b300-dynamo-trtllm-fp4-mtp-disagg-10p16d-1k1k-c8609"], 512,
    f"max_batch 512 per DEP rank: recipe ctx5_gen2_dep8_batch512_eplb0_mtp1 ({NVM}), per attention-DP rank in "
    "TRT-LLM: 2 x 8 x 512 = 8192 of 8609 run at once")
put(["ix-r1-b300-dynamo-trtllm-fp8-mtp-disagg-4p32d-8k1k-c20"], 4,
    "max_batch 4 per TP8 decode engine (no attention DP): decode max_batch_size 4 in recipe "
    f"ctx1_gen4_tp8_batch4_eplb0_mtp3_20 ({NVM}; srt-slurm-recipes/dsr1/trtllm/b300-fp8/8k1k/disagg/mtp @792d8aa)")
put(["ix-r1-gb200-dynamo-trtllm-fp4-mtp-disagg-4p56d-1k8k-c28"], 4,
    f"max_batch 4 per TEP8 decode engine (no attention DP): recipe ctx1_gen7_tep8_batch4_eplb0_mtp3 ({NVM}, "
    "conc-list 4..48 there; 7 x 4 = 28)")
put(["ix-r1-h200-dynamo-trtllm-fp8-mtp-disagg-24p40d-8k1k-c160"], 32,
    "max_batch 32 per TEP8 decode engine (no attention DP): recipe c32_ctx3_gen5_tep8_batch32_eplb0_mtp3, the only "
    f"H200 8k1k MTP entry with 3 TEP8 prefill and 5 TEP8 decode workers ({NVM}, which lists conc 32 for it; the "
    "run's 160 = 5 x 32)")
put(["ix-r1-gb300-dynamo-trtllm-fp8-disagg-4p32d-1k1k-c84"], 16,
    "max_batch 16 per TEP8 decode engine (no attention DP): decode max_batch_size 16 in recipe "
    f"ctx1_gen4_tep8_batch16_eplb0_mtp0_84 ({NVM}; srt-slurm-recipes/dsr1/trtllm/gb300-fp8/1k1k/disagg/stp @20e0744)")
put(["ix-r1-b300-dynamo-trtllm-fp4-disagg-2p40d-1k1k-c195"], 64,
    f"max_batch 64 per TEP8 decode engine (no attention DP): recipe ctx1_gen5_tep8_batch64_eplb0_mtp0 ({NVM}, "
    "conc-list 60/110/195/395)")
put(["ix-r1-gb200-dynamo-trtllm-fp4-disagg-4p24d-8k1k-c3"], None,
    "max_batch unknown: this Dec-2025 run took DECODE_MAX_BATCH_SIZE from nvidia-master.yaml additional-settings "
    "(benchmarks/dsr1_fp4_gb200_dynamo-trt_slurm.sh @15eda16) and no config of that date is stored; "
    f"{NVM} has no 8k1k 3-worker TEP8 entry")

# ---- InferenceX disaggregated, Dynamo + SGLang (srt-slurm recipes named by nvidia-master.yaml) ----
put(["ix-r1-b200-dynamo-sglang-fp4-mtp-disagg-4p8d-8k1k-c4",
     "ix-r1-b200-dynamo-sglang-fp4-mtp-disagg-4p8d-8k1k-c16",
     "ix-r1-b200-dynamo-sglang-fp4-mtp-disagg-4p8d-8k1k-c64"], 512,
    "max_batch 512 per TP8 decode server (no DP attention): --max-running-requests 512 (cuda-graph-max-bs 512) in "
    f"recipe b200-fp4/8k1k/mtp/low-latency-tp4-1p-tp8-1d.yaml named by {NVM} (read from fork csahithi/srt-slurm "
    "@2c18779; the STP twin in ishandhanani/srt-slurm @6951981 sets the same)")
put(["ix-r1-b200-dynamo-sglang-fp8-disagg-8p40d-1k1k-c1024"], 128,
    "max_batch 128 per DP rank: --max-running-requests 1024 with --dp-size 8 --enable-dp-attention in recipe "
    f"b200-fp8/1k1k/stp/max-tpt-dep8-1p5d.yaml named by {NVM} (read from fork elvischenv/srt-slurm @658d9b9); "
    "SGLang gives each DP scheduler max_running_requests // dp_size (sglang tp_worker.py @4f34e24): 1024 / 8")

# ---- InferenceX disaggregated, SGLang + MoRI on MI355X (amd_utils launcher) ----
put(["ix-r1-mi355x-sglang-fp8-mtp-disagg-4p8d-1k1k-c8", "ix-r1-mi355x-sglang-fp8-mtp-disagg-4p8d-1k1k-c32",
     "ix-r1-mi355x-sglang-fp8-mtp-disagg-4p8d-8k1k-c16"], 128,
    "max_batch 128 per TP8 decode server (no DP attention, EP1): benchmarks/multi_node/amd_utils/server.sh @033aa6e "
    "passes --max-running-requests $DECODE_MAX_RUNNING_REQUESTS_NO_DP, 128 for DeepSeek-R1-0528 decode.no_dp in "
    "amd_utils/models.yaml @02d1804 (a later version than the run; server.sh's own fallback is also 128)")

# ---- InferenceX single node, SGLang ----
put(["ix-r1-b200-tp8-1k1k-45", "ix-r1-b200-tp8-1k8k-45", "ix-r1-b200-tp8-8k1k-24"], 128,
    "max_batch 128 per server (TP8, no DP attention): --max-running-requests 128 (TP8 branch) in "
    "benchmarks/dsr1_fp8_b200.sh @1fc5d73, the same in dsr1_fp8_b200_slurm.sh @0b5f821 (script at the run date "
    "not pinned)")
put(["ix-r1-b200-sglang-fp4-tp4-1k8k-c16", "ix-r1-b200-sglang-fp4-tp4-1k1k-c128",
     "ix-r1-b200-sglang-fp4-tp8ep8-1k8k-c4", "ix-r1-b200-sglang-fp4-tp8ep8-8k1k-c16",
     "ix-r1-b200-sglang-fp4-tp8ep8-1k1k-c32"], 256,
    "max_batch 256 per server (no DP attention): --max-running-requests 256 in benchmarks/dsr1_fp4_b200.sh "
    "@1fc5d73, the same in dsr1_fp4_b200_docker.sh @2e46dba (script at the run date not pinned)")
put(["ix-r1-h200-sglang-fp8-tp8-1k1k-c32"], 512,
    "max_batch 512 per server (TP8, no DP attention): --max-running-requests 512 for 1k/1k in "
    "benchmarks/dsr1_fp8_h200.sh @1fc5d73, the same in dsr1_fp8_h200_slurm.sh @11cc03b")
put(["ix-r1-h200-sglang-fp8-tp8-8k1k-c8", "ix-r1-h200-sglang-fp8-tp8-1k8k-c64"], 256,
    "max_batch 256 per server (TP8, no DP attention): --max-running-requests 256 for lengths other than 1k/1k in "
    "benchmarks/dsr1_fp8_h200.sh @1fc5d73, the same in dsr1_fp8_h200_slurm.sh @11cc03b")
_amd_default = ("max_batch empty: {script} sets --cuda-graph-max-bs 128 but no --max-running-requests "
                "(SGLang's memory-derived default)")
put(["ix-r1-mi355x-tp4-1k1k-37", "ix-r1-mi355x-tp4-1k1k-66", "ix-r1-mi355x-tp4-1k8k-24",
     "ix-r1-mi355x-sglang-fp4-tp4-1k1k-c16", "ix-r1-mi355x-sglang-fp4-tp4-1k1k-c32",
     "ix-r1-mi355x-sglang-fp4-tp4-1k1k-c64"], None,
    _amd_default.format(script="benchmarks/dsr1_fp4_mi355x.sh @1fc5d73 (and dsr1_fp4_mi355x_docker.sh @07d3877)"))
put(["ix-r1-mi355x-sglang-fp8-tp8-1k1k-c64", "ix-r1-mi355x-sglang-fp8-tp8-8k1k-c64",
     "ix-r1-mi355x-sglang-fp8-tp8-1k8k-c64"], None,
    _amd_default.format(script="benchmarks/dsr1_fp8_mi355x.sh @1fc5d73"))
put(["ix-r1-mi325x-sglang-fp8-tp8-1k1k-c4", "ix-r1-mi325x-sglang-fp8-tp8-1k8k-c8",
     "ix-r1-mi325x-sglang-fp8-tp8-8k1k-c8", "ix-r1-mi325x-sglang-fp8-tp8-1k1k-c16"], None,
    _amd_default.format(script="benchmarks/dsr1_fp8_mi325x.sh @1fc5d73"))

# ---- InferenceX single node, TensorRT-LLM: trtllm-serve without --max_batch_size (engine default) ----
_trt_default = ("max_batch empty: {script} sets cuda_graph_config.max_batch_size {cg} but no max_batch_size "
                "(trtllm-serve default)")
put(["ix-r1-b200-trtllm-fp4-tp4-1k1k-c256", "ix-r1-b200-trtllm-fp4-tp4-8k1k-c256",
     "ix-r1-b200-trtllm-fp4-tp8ep8-1k1k-c16", "ix-r1-b200-trtllm-fp4-tp8ep8-1k1k-c64",
     "ix-r1-b200-trtllm-fp4-tp8ep8-1k1k-c128", "ix-r1-b200-trtllm-fp4-tp8ep8-1k8k-c128"], None,
    _trt_default.format(script="benchmarks/dsr1_fp4_b200_trt.sh @111f031 (and dsr1_fp4_b200_trt_slurm.sh @07d82b1)",
                        cg=512))
put(["ix-r1-b200-trtllm-fp8-tp8ep8-1k8k-c64"], None,
    _trt_default.format(script="benchmarks/dsr1_fp8_b200_trt.sh @0a919c5", cg="= CONC"))
put(["ix-r1-h200-trtllm-fp8-tp8-8k1k-c8", "ix-r1-h200-trtllm-fp8-tp8-1k8k-c16",
     "ix-r1-h200-trtllm-fp8-tp8ep8-1k8k-c4"], None,
    _trt_default.format(script="benchmarks/dsr1_fp8_h200_trt.sh @1fc5d73 (and dsr1_fp8_h200_trt_slurm.sh @2e46dba)",
                        cg=128))

# ---- NVIDIA TensorRT-LLM blogs: trtllm-bench --max_batch_size as each row's notes quote it ----
put(["nvblog-dsr1-bp-b200-minlat-tp8ep2-mtp3-c1", "nvblog-dsr1-bp-h200-minlat-tp8ep4-mtp3-c1",
     "nvblog-dsr1-bp0-b200-minlat-tp8ep4-mtp3-c1"], 1,
    "max_batch 1 per TP8 engine (no attention DP): trtllm-bench --max_batch_size 1 (source above)")
put(["nvblog-dsv32-b200-tp4-mtp3-8k1k-c1"], 1,
    "max_batch 1 per TP4 engine (no attention DP): trtllm-bench --max_batch_size 1 (source above)")
put(["nvblog-dsr1-bp-b200-maxtp-dep8-fp8kv-c7168"], 896,
    "max_batch 896 per DEP rank: trtllm-bench --max_batch_size 896 with enable_attention_dp (source above), per "
    "rank in TRT-LLM: 8 x 896 = 7168")
put(["nvblog-dsr1-bp-b200-maxtp-dep8-bf16kv-c3072", "nvblog-dsr1-bp0-b200-maxtp-dep8-c3072"], 384,
    "max_batch 384 per DEP rank: trtllm-bench --max_batch_size 384 with enable_attention_dp (source above), per "
    "rank in TRT-LLM: 8 x 384 = 3072")
put(["nvblog-dsr1-bp-h200-maxtp-dep8-c1024", "nvblog-dsr1-bp0-h200-maxtp-dep8-c1024"], 128,
    "max_batch 128 per DEP rank: trtllm-bench --max_batch_size 128 with enable_attention_dp (source above), per "
    "rank in TRT-LLM: 8 x 128 = 1024")
put(["nvblog-dsv32-b200-dep8-mtp1-8k1k-c256"], 256,
    "max_batch 256 per DEP rank: trtllm-bench --max_batch_size 256 with enable_attention_dp (source above), per "
    "rank in TRT-LLM (not binding at 256 in flight over 8 ranks)")

# ---- dstack DeepSeek-R1 study, TensorRT-LLM task ----
put(["dstack-r1-h200-trtllm-3200-800-c8", "dstack-r1-h200-trtllm-3200-800-c64"], 512,
    "max_batch 512 per TP8 engine (no attention DP): trtllm-serve --max_batch_size $MAX_BATCH_SIZE with "
    "MAX_BATCH_SIZE=512 in the 'Tensorrt-LLM-H200' dstack task of Deepseek-R1/README.md (dstackai/benchmarks @209ca6f)")

# ---- vLLM (--max-num-seqs is per engine) ----
put(["vllmrec-kimik2-h800-tp8pp2-1k512-c1"], 1,
    "max_batch 1 per engine: vllm serve --max-num-seqs 1 (Kimi-K2.md @1f49590), one TP8 x PP2 engine")
put(["gtpu-l33-70b-v6e8-vllm-1k1k-c64", "gtpu-l33-70b-v6e8-vllm-1k1k-c128"], 256,
    "max_batch 256 per engine: vllm serve --max-num-seqs 256 (tpu-recipes README @00c8229), one TP8 engine")

# ---- TensorRT-LLM perf-overview (trtllm-bench throughput, no --max_batch_size on the command line) ----
# docs/source/developer-guide/perf-overview.md @03e27c7 ('Reproducing Benchmarked Results') runs
# `trtllm-bench ... throughput --dataset ... --backend pytorch --extra_llm_api_options $llm_options` and its GPT-OSS
# llm_options.yml sets cuda_graph_config, enable_attention_dp, kv_cache_config and moe_config but no max_batch_size.
# trtllm-bench then derives the cap itself (tensorrt_llm/bench/benchmark/utils/general.py get_settings, stored copy
# @0171265) through tensorrt_llm/bench/build/build.py get_benchmark_engine_settings (@000a01d): a checkpoint whose
# quant_algo is outside TUNED_QUANTS = {NVFP4, FP8, FP8_BLOCK_SCALES, NO_QUANT, None} gets
# DEFAULT_MAX_BATCH_SIZE = BuildConfig.max_batch_size = 2048 (tensorrt_llm/builder.py @008b2b8). The gpt-oss MXFP4
# checkpoints load as W4A8_MXFP4_MXFP8 on Blackwell (CUTLASS MoE) or W4A16_MXFP4 on Hopper
# (tensorrt_llm/_torch/model_config.py ModelConfig.get_mxfp4_quant_algo), both outside TUNED_QUANTS. Under
# enable_attention_dp TRT-LLM's max_batch_size is per rank. The other perf-overview models (NVFP4/FP8 ModelOpt
# checkpoints) take calc_engine_setting's memory heuristic instead (bench/build/tuning.py): it needs the checkpoint's
# safetensors parameter count, the GPU's NVML memory and the run's kv_cache_free_gpu_mem_fraction (0.90 default, 0.95
# 'in many cases' per the doc), which no source pins per row, so those rows stay empty.
_GOSS_RUNS = {
    "trt2-goss120": "b200-1k-1k gb200-1k-1k h200-1k-1k h100-1k-1k gb200-1k-8k h200-1k-8k b200-1k-32k gb200-1k-32k "
                    "h100-1k-32k b200-8k-1k gb200-8k-1k h100-8k-1k b200-32k-1k gb200-32k-1k h100-32k-1k",
    "trt2-goss20": "b200-1k-1k gb200-1k-1k h200-1k-1k h100-1k-1k b200-1k-8k gb200-1k-8k h200-1k-8k h100-1k-8k "
                   "b200-1k-32k gb200-1k-32k b200-8k-1k gb200-8k-1k h200-8k-1k h100-8k-1k b200-32k-1k gb200-32k-1k "
                   "h200-32k-1k",
}
put([f"{p}-{r}" for p, runs in _GOSS_RUNS.items() for r in runs.split()], 2048,
    "max_batch 2048 per scheduler (per attention-DP rank under DEP): the perf-overview command passes no "
    "--max_batch_size and trtllm-bench's get_benchmark_engine_settings (bench/build/build.py @000a01d) gives an MXFP4 "
    "checkpoint (quant_algo W4A8_MXFP4_MXFP8 / W4A16_MXFP4, outside TUNED_QUANTS) BuildConfig.max_batch_size = 2048 "
    "(tensorrt_llm/builder.py @008b2b8), max_num_tokens 8192; code read at those stored commits, not pinned to the run")


def stem(row_id: str) -> str:
    return SUFFIX.sub("", row_id)


def apply(text: str) -> tuple[str, int, int, set[str]]:
    rows = list(csv.reader(io.StringIO(text)))
    header, body = rows[0], rows[1:]
    if "max_batch" not in header:
        header.append("max_batch")
        for r in body:
            r.append("")
    i_id, i_notes, i_cap, i_kind = (header.index(c) for c in ("id", "notes", "max_batch", "kind"))
    used: set[str] = set()
    n_cap = n_note = 0
    for r in body:
        s = stem(r[i_id])
        if s not in TABLE:
            continue
        if r[i_kind] not in ("fixed", "search"):
            raise SystemExit(f"{r[i_id]}: not a fixed or search row")
        used.add(s)
        value, clause = TABLE[s]
        r[i_cap] = "" if value is None else str(value)
        n_cap += value is not None
        if clause not in r[i_notes]:
            r[i_notes] = f"{r[i_notes]}; {clause}" if r[i_notes] else clause
        n_note += 1
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows([header] + body)
    return out.getvalue(), n_cap, n_note, set(TABLE) - used


def main() -> int:
    text, n_cap, n_note, unused = apply(CSV.read_text())
    if unused:
        print("table entries matching no row:", sorted(unused), file=sys.stderr)
        return 1
    CSV.write_text(text)
    print(f"{n_cap} rows got a max_batch; {n_note} rows got a notes clause")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
