"""Write the `warmed` column of src/chalk/validation/validation.csv (and surplus.csv): `python scripts/apply_warmed.py`.

`warmed` is 1 where the row's harness ran warm-up requests on the same engine before its timed run, so the run it
reports started on a warm engine (chalk's replay then adds no cold first-step delay, `Calibration.warmup_s`). Read
from the row's own notes: vLLM's `benchmark_latency` (its `--num-iters-warmup` iterations, default 10 in
vllm benchmarks/benchmark_latency.py, run before the timed ones: a row that does not state the count gets a clause
saying so) and runs whose notes state warm-up requests or iterations. Every other row stays empty (a cold engine or
not stated). Idempotent; measured values, ids and other columns are not touched.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

HERE = Path(__file__).resolve().parents[1] / "src" / "chalk" / "validation"
FILES = (HERE / "validation.csv", HERE / "surplus.csv")  # surplus.csv keeps validation.csv's columns
STATED = re.compile(r"warm-?up (requests|iterations)|\d+ warm-?up \+ \d+ timed", re.I)
LATENCY = "benchmark_latency"
CLAUSE = ("; warmed: vLLM's benchmark_latency runs --num-iters-warmup iterations (default 10, "
          "benchmarks/benchmark_latency.py) before the timed ones")


def apply(path: Path) -> int:
    text = path.read_text()
    rows = list(csv.DictReader(io.StringIO(text)))
    fields = list(rows[0].keys())
    if "warmed" not in fields:
        fields.append("warmed")
    n = 0
    for r in rows:
        warm = bool(STATED.search(r["notes"])) or LATENCY in r["notes"]
        if LATENCY in r["notes"] and not STATED.search(r["notes"]) and CLAUSE not in r["notes"]:
            r["notes"] += CLAUSE
        r["warmed"] = "1" if warm else ""
        n += warm
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    path.write_text(out.getvalue())
    return n


def main() -> None:
    for path in FILES:
        print(f"{path.name}: warmed set on {apply(path)} rows")


if __name__ == "__main__":
    main()
