"""Write the `client` column of src/chalk/validation/validation.csv (and surplus.csv):
`python scripts/apply_client.py`.

`client` is `in-process` where the row's harness drives the engine inside its own process, handing it prompts as
token ids and reading its outputs directly: no HTTP server, no request parsing or tokenisation, no streaming to a
client between the engine and the clock. The calibrated per-request time outside the engine's steps
(`Calibration.request_latency_s`, fitted on runs timed by HTTP benchmark clients) is then not part of the row's
figures. Read from the row's own notes, by the harness they name:
- vLLM's `benchmark_latency.py` and `benchmark_throughput.py` (the offline `LLM` class, dummy or pre-tokenised
  prompts; vllm benchmarks/);
- LMDeploy's `profile_generation.py` and `profile_throughput.py` (TurboMind instances created in the script, prompts
  as token ids; InternLM/lmdeploy benchmark/);
- `trtllm-bench` (TensorRT-LLM's in-process benchmark over its executor, a pre-tokenised dataset);
- gpt-fast's `generate.py` (the model called in the script).
Every other row stays empty: a client over HTTP (vLLM/SGLang serving benchmarks, genai-perf, SGLang's
`bench_one_batch_server`, which sends its batch to a launched server) or not stated. A clause naming the harness is
added to the notes of each in-process row. Idempotent; measured values, ids and other columns are not touched.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from apply_max_tokens import FILES, rewrite_column  # noqa: E402 (the two files, and the CSV rewrite both share)

#: the in-process harnesses, as the notes name them
HARNESS = re.compile(r"benchmark_latency|benchmark_throughput|profile_generation\.py|profile_throughput\.py|"
                     r"trtllm-bench|generate\.py")
CLAUSE = ("; client: in-process ({}: the engine runs inside the benchmark's own process on token ids, no HTTP "
          "server between it and the clock)")


def client(r: dict) -> str:
    """'in-process' where the row's notes name an in-process harness (amending them to say so), else empty."""
    m = HARNESS.search(r["notes"])
    if not m:
        return ""
    clause = CLAUSE.format(m.group(0))
    if "; client: in-process" not in r["notes"]:
        r["notes"] += clause
    return "in-process"


def main() -> None:
    for path in FILES:
        print(f"{path.name}: client set on {rewrite_column(path, 'client', client)} rows")


if __name__ == "__main__":
    main()
