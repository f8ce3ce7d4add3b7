"""Write the `warmed` column of src/chalk/validation/validation.csv (and surplus.csv):
`python scripts/apply_warmed.py`.

`warmed` is 1 where the row's harness ran warm-up requests on the same engine before its timed run, so the run it
reports started on a warm engine (chalk's replay then adds no cold first-step delay, `Calibration.warmup_s`). Read
from the row's own notes: vLLM's `benchmark_latency` (its `--num-iters-warmup` iterations, default 10 in
vllm benchmarks/benchmark_latency.py, run before the timed ones: a row that does not state the count gets a clause
saying so), runs whose notes state warm-up requests or iterations, and runs of one request in flight driven by
vLLM's benchmark_serving (`vllm bench serve`), which sends the run's first prompt once as a test request before the
timed run ("Starting initial single prompt test run...", benchmarks/benchmark_serving.py): that warms the engine
for a first wave of one, not for a larger one; LMDeploy's profile_generation.py (its warmup() at the run's own
concurrency and lengths) and trtllm-bench at one or two in flight (its `--warmup` requests, default 2). Every
other row stays empty (a cold engine or not stated).
Idempotent; measured values, ids and other columns are not touched.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from apply_max_tokens import FILES, rewrite_column  # noqa: E402 (the two files, and the CSV rewrite both share)

STATED = re.compile(r"warm-?up (requests|iterations)|\d+ warm-?up \+ \d+ timed", re.I)
LATENCY = "benchmark_latency"
CLAUSE = ("; warmed: vLLM's benchmark_latency runs --num-iters-warmup iterations (default 10, "
          "benchmarks/benchmark_latency.py) before the timed ones")
#: LMDeploy's profile_generation.py warms the engine at the run's own shape before the timed threads: the version of
#: the test-round-10 era (`--test-round` default 10, which the lmdeploy rows assume) calls
#: `warmup(tm_model, concurrency, input_ids, output_seqlen)` (2 rounds of every thread at the run's concurrency) in
#: profile_throughput() before starting the timed threads; later versions keep it (`--warmup-round`, default 1,
#: benchmark/profile_generation.py at InternLM/lmdeploy 01143d5)
PROFILE = "profile_generation.py"
PROFILE_CLAUSE = ("; warmed: profile_generation.py runs warmup() (every thread at the run's concurrency and lengths, "
                  "2 rounds in the test-round-10 era script, --warmup-round 1 later) before its timed threads")
#: trtllm-bench throughput sends `--warmup` requests (default 2, tensorrt_llm/bench/benchmark/throughput.py) before
#: the timed ones: that warms the engine for a first wave of at most that many, not for a larger one
BENCH, BENCH_WARMUP = "trtllm-bench", 2
BENCH_CLAUSE = ("; warmed: trtllm-bench throughput sends its --warmup requests (default 2) before the timed run, "
                "which warms a first wave of at most 2 in flight")
SERVE = ("benchmark_serving", "bench serve")
SERVE_CLAUSE = ("; warmed: at one request in flight, benchmark_serving's single test prompt (the run's first prompt, "
                "sent once before the timed run) has already run the shape the run repeats")


def warmed(r: dict) -> str:
    """'1' where the row's harness warmed the engine before its timed run (amending the notes to say why where
    they do not), else empty."""
    serve_one = r.get("concurrency") == "1" and any(h in r["notes"] for h in SERVE)
    profile = PROFILE in r["notes"]
    bench_few = BENCH in r["notes"] and r.get("kind") == "fixed" and (r.get("concurrency") or "").isdigit() \
        and 0 < int(r["concurrency"]) <= BENCH_WARMUP
    warm = bool(STATED.search(r["notes"])) or LATENCY in r["notes"] or serve_one or profile or bench_few
    if LATENCY in r["notes"] and not STATED.search(r["notes"]) and CLAUSE not in r["notes"]:
        r["notes"] += CLAUSE
    elif serve_one and SERVE_CLAUSE not in r["notes"]:
        r["notes"] += SERVE_CLAUSE
    elif profile and PROFILE_CLAUSE not in r["notes"]:
        r["notes"] += PROFILE_CLAUSE
    elif bench_few and BENCH_CLAUSE not in r["notes"]:
        r["notes"] += BENCH_CLAUSE
    return "1" if warm else ""


def main() -> None:
    for path in FILES:
        print(f"{path.name}: warmed set on {rewrite_column(path, 'warmed', warmed)} rows")


if __name__ == "__main__":
    main()
