"""`chalk report` wall time (issue 12 target: under 2 s on an idle machine). Printed, not asserted.

Run: PYTHONPATH=$PWD/src python benchmarks/bench_report.py [--repeats 3]
Same as `time chalk report -m llama-3.1-70b -H h100-sxm -o /tmp/r.html`, best and median of the repeats, with the
CPU time of the child (user + sys), which load from other processes inflates less than the wall time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ARGS = ["-m", "chalk", "report", "-m", "llama-3.1-70b", "-H", "h100-sxm", "-o"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    n = ap.parse_args().repeats
    walls, cpus = [], []
    with tempfile.TemporaryDirectory() as d:
        for _ in range(n):
            before = os.times()
            t0 = time.perf_counter()
            subprocess.run([sys.executable, *ARGS, os.path.join(d, "r.html")], capture_output=True, check=True)
            walls.append(time.perf_counter() - t0)
            after = os.times()
            cpus.append((after.children_user - before.children_user) + (after.children_system - before.children_system))
    print(f"chalk report -m llama-3.1-70b -H h100-sxm: wall best {min(walls):.2f} s, median "
          f"{statistics.median(walls):.2f} s; CPU best {min(cpus):.2f} s (n={n}; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
