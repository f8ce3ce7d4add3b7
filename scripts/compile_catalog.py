"""Write the compiled catalog: every YAML file of `src/chalk/catalog/` parsed once, stored as JSON.

    python scripts/compile_catalog.py        # after editing any catalog YAML file

chalk reads a catalog file from `src/chalk/catalog/compiled.json` when the file's bytes are those it was compiled
from, so `chalk estimate` need not import PyYAML (~9 ms of its start, issue 12); an edited file is read from its
YAML until this runs again. tests/test_catalog_compiled.py fails while the two disagree.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from chalk.specs.catalog import write_compiled_catalog  # noqa: E402


def main() -> int:
    out = write_compiled_catalog()
    n = len(json.loads(out.read_text())["files"])  # what was written, not a second compile
    print(f"wrote {out} ({n} YAML files, {out.stat().st_size / 1e3:.0f} kB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
