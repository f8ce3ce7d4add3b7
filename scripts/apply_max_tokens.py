"""Write the `max_tokens` column of src/chalk/validation/validation.csv (and surplus.csv):
`python scripts/apply_max_tokens.py`.

`max_tokens` is the prompt tokens one scheduler may run per step (the chunked-prefill budget) as the row's launch
command set it: vLLM `--max-num-batched-tokens` (per engine), TensorRT-LLM `--max_num_tokens` (per rank, so per
attention-DP rank under `enable_attention_dp`). The value is read from the launch command quoted in the row's own
`notes`; rows whose notes quote no such flag stay empty (the engine profile's default answers). A value the notes
give as a code default rather than a flag the run passed (`max_num_tokens 8192` read from a build script) is not
taken. `whole`: the notes say the engine prefills every prompt it admits whole, in one step (no budget per
step). Idempotent; measured values, ids and other columns are not touched.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

HERE = Path(__file__).resolve().parents[1] / "src" / "chalk" / "validation"
FILES = (HERE / "validation.csv", HERE / "surplus.csv")  # surplus.csv keeps validation.csv's columns
FLAG = re.compile(r"(?:--max-num-batched-tokens|--max_num_tokens)[ =](\d+)")
#: what a row's notes say where its engine has no per-step budget and prefills every admitted prompt in one step
WHOLE = "prefills every prompt it admits whole"


def rewrite_column(path: Path, column: str, value) -> int:
    """Rewrite `path` (validation.csv's columns) with `column` (added last where missing) set to `value(row)` on every
    row (`value` may also amend the row's notes); returns the rows given a non-empty value."""
    rows = list(csv.DictReader(io.StringIO(path.read_text())))
    fields = list(rows[0].keys())
    if column not in fields:
        fields.append(column)
    n = 0
    for r in rows:
        r[column] = value(r)
        n += bool(r[column])
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    path.write_text(out.getvalue())
    return n


def budget(r: dict) -> str:
    """The row's `max_tokens`: the one budget its notes quote, `whole`, or empty."""
    found = set(FLAG.findall(r["notes"]))
    if len(found) > 1:
        raise SystemExit(f"{r['id']}: notes quote several token budgets {sorted(found)}")
    if WHOLE in r["notes"]:
        if found:
            raise SystemExit(f"{r['id']}: notes quote a token budget and whole-prompt prefill")
        found = {"whole"}
    return found.pop() if found else ""


def main() -> None:
    for path in FILES:
        print(f"{path.name}: max_tokens set on {rewrite_column(path, 'max_tokens', budget)} rows")


if __name__ == "__main__":
    main()
