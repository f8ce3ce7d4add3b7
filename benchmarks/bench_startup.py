"""CLI start-up against numpy's import (issue 12): `chalk estimate` as a whole process should cost at most 2x
the wall time of `python -c "import numpy"` on the same machine. Printed, not asserted.

Run: PYTHONPATH=$PWD/src python benchmarks/bench_startup.py [--repeats 9]
It also lists the heavy modules a plain `chalk estimate` imports (typer and rich are expected; pandas, pydantic,
matplotlib, scipy and PyYAML, whose catalog files come from catalog/compiled.json, are not), and whether chalk's
modules ran from __pycache__. An install writes that cache (pip for a regular one; setup.py's build_py for
`pip install -e .`). Without it, and with PYTHONDONTWRITEBYTECODE set, every run compiles the ~6,000 lines
`chalk estimate` imports again: ~40 ms, a third of what chalk adds. (After editing a module in such a checkout,
`python -m compileall -q src/chalk` writes it again.)
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

#: `python -m chalk` runs what the `chalk` console script runs (`chalk.__main__.main`), without the shell or pyenv
#: shim a bare `chalk` may go through first
ESTIMATE = ["-m", "chalk", "estimate", "-m", "llama-3.1-70b", "-H", "h100-sxm", "-b", "64", "-c", "4096"]
HEAVY = ("pandas", "pydantic", "matplotlib", "scipy", "plotly", "streamlit", "yaml", "rich", "typer")


def once_s(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, *argv], capture_output=True, check=True)
    return time.perf_counter() - t0


def paired_s(repeats: int) -> tuple[float, float, float]:
    """Median numpy-import time, median estimate time and median ratio, the two runs interleaved so that load
    from other processes on a shared machine hits both alike (after one warm-up of each)."""
    once_s(["-c", "import numpy"]), once_s(ESTIMATE)
    base, est = [], []
    for _ in range(repeats):
        base.append(once_s(["-c", "import numpy"]))
        est.append(once_s(ESTIMATE))
    ratios = [e / b for b, e in zip(base, est)]
    return statistics.median(base), statistics.median(est), statistics.median(ratios)


def heavy_imports() -> list[str]:
    """Top-level heavy packages loaded by one `chalk estimate` run."""
    code = ("import sys, runpy; sys.argv = ['chalk'] + %r\n"
            "try:\n    runpy.run_module('chalk', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))" % (ESTIMATE[2:],))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = set(out.split("\n")[-2].split())
    return [h for h in HEAVY if h in loaded]


def bytecode() -> str:
    """Whether the runs above found chalk's modules compiled in __pycache__ or compiled them each time."""
    import importlib.util
    import os

    if os.path.exists(importlib.util.cache_from_source(importlib.util.find_spec("chalk.faces.cli").origin)):
        return "cached in __pycache__"
    return "compiled on every run" + (" (PYTHONDONTWRITEBYTECODE is set)" if sys.flags.dont_write_bytecode else "")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=9)
    n = ap.parse_args().repeats
    base, est, ratio = paired_s(n)
    print(f"python -c 'import numpy': {base:.3f} s (median of {n})")
    print(f"chalk estimate -m llama-3.1-70b -H h100-sxm -b 64 -c 4096: {est:.3f} s (median of {n})")
    print(f"ratio: {ratio:.2f}x (median of {n} interleaved pairs; target <= 2x)")
    print(f"heavy packages imported: {', '.join(heavy_imports()) or 'none'}")
    print(f"chalk's bytecode: {bytecode()}")


if __name__ == "__main__":
    main()
