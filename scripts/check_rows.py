"""Predict candidate validation rows before they join validation.csv: `python scripts/check_rows.py rows.csv`.

Prints, per row, chalk's prediction, the measured value and the signed error (predicted / measured - 1), or the
one-line reason chalk cannot answer it. Rows use validation.csv's columns (src/chalk/validation/README.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

from chalk.analyses.fidelity.validate import parse_rows, predict
from chalk.errors import ChalkError


def main(path: str) -> int:
    rows = parse_rows(Path(path).read_text())
    bad = 0
    for r in rows:
        try:
            p = predict(r)
            print(f"{r.id:60s} {r.metric:32s} predicted {p:12.5g} measured {r.measured:12.5g} error {p / r.measured - 1:+.1%}")
        except ChalkError as e:
            bad += 1
            print(f"{r.id:60s} CANNOT ANSWER: {e}")
    print(f"{len(rows)} rows, {bad} unanswerable")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
