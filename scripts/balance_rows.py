"""Keep every source family of the validation set at or under `MAX_FAMILY_SHARE` of the rows (issue 24):
`python scripts/balance_rows.py [--check]`.

A family above the bound, counted over all rows of validation.csv or over the rows `validate --cv` judges (the
fitted metrics), gives up whole operating points (the rows sharing an id stem: `-out`, `-tpot`, `-ttft`,
`-ttft-p50` rows of one run) in descending order of the SHA-256 of the stem, one at a time, until every family is
within the bound on both counts. A row's error plays no part. The rows that leave are appended to surplus.csv (same
columns), which `chalk validate` does not read. `--check`: print the shares and exit 1 if a family is above the
bound, changing nothing.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import re
import sys
from collections import Counter
from pathlib import Path

from chalk.analyses.fidelity.validate import FITTED_METRICS, MAX_FAMILY_SHARE

HERE = Path(__file__).resolve().parents[1] / "src" / "chalk" / "validation"


def stem(row_id: str) -> str:
    """The operating point a row belongs to: its id without the metric suffix."""
    return re.sub(r"-(ttft-p50|out|tpot|ttft)$", "", row_id)


def shares(rows: list[dict]) -> dict[str, tuple[float, float]]:
    """Per family: (share of all rows, share of the fitted-metric rows)."""
    every = Counter(r["family"] for r in rows)
    fitted = Counter(r["family"] for r in rows if r["metric"] in FITTED_METRICS)
    n, nf = len(rows), max(sum(fitted.values()), 1)
    return {f: (every[f] / n, fitted[f] / nf) for f in every}


def balance(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """(rows kept, rows moved out), by the rule in the module docstring."""
    kept, out = list(rows), []
    while True:
        over = {f: max(s) for f, s in shares(kept).items() if max(s) > MAX_FAMILY_SHARE}
        if not over:
            return kept, out
        fam = max(over, key=lambda f: (over[f], f))
        stems = {stem(r["id"]) for r in kept if r["family"] == fam}
        drop = max(stems, key=lambda s: hashlib.sha256(s.encode()).hexdigest())
        out += [r for r in kept if r["family"] == fam and stem(r["id"]) == drop]
        kept = [r for r in kept if not (r["family"] == fam and stem(r["id"]) == drop)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="report only; exit 1 if a family is over the bound")
    ns = ap.parse_args()
    path = HERE / "validation.csv"
    text = path.read_text()
    header = text.splitlines()[0].split(",")
    rows = list(csv.DictReader(io.StringIO(text)))
    kept, out = balance(rows)
    for f, (a, b) in sorted(shares(kept if not ns.check else rows).items(), key=lambda kv: -max(kv[1])):
        print(f"{f:16s} {a:6.1%} of all rows, {b:6.1%} of the fitted-metric rows")
    if ns.check:
        return 1 if out else 0
    if out:
        surplus = HERE / "surplus.csv"
        before = list(csv.DictReader(io.StringIO(surplus.read_text()))) if surplus.is_file() else []
        for p, rs in ((path, kept), (surplus, before + out)):  # both files in validation.csv's columns
            buf = io.StringIO()
            w = csv.DictWriter(buf, fieldnames=header, lineterminator="\n", restval="", extrasaction="ignore")
            w.writeheader()
            w.writerows(rs)
            p.write_text(buf.getvalue())
    print(f"{len(out)} rows moved to surplus.csv ({len({stem(r['id']) for r in out})} operating points); "
          f"{len(kept)} rows kept")
    return 0


if __name__ == "__main__":
    sys.exit(main())
