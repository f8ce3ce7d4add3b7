"""Issue 24 item 8 / issue 28: how long leave-one-family-out cross-validation takes, printed (not asserted).
Target (issue 24, Done when): `chalk validate --cv` under 3 minutes wall on this 2-core machine.

Runs `chalk validate --cv --json` (or the arguments given after `--`) in a child process and prints its wall time,
its CPU time (user + sys of the process and its workers), the machine's load average before and after (other work
on the machine stretches the wall time, not the CPU time) and the headline figures, so two runs can be compared.

Run: python benchmarks/bench_cv.py [--ray] [--workers N] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time


def run(args: list[str]) -> tuple[dict, float, float, str]:
    """(the JSON answer, wall s, CPU s of the child and its workers, stderr) of `chalk <args>`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "chalk", *args], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if p.returncode != 0:
        raise SystemExit(f"chalk {' '.join(args)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    return json.loads(p.stdout), wall, cpu, p.stderr


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ray", action="store_true", help="answer the rows on a local Ray (validate --cv --ray)")
    ap.add_argument("--workers", type=int, default=None, help="processes answering the rows (default: the CPUs)")
    ap.add_argument("--out", default=None, help="write the JSON answer here (to compare two runs)")
    ns = ap.parse_args()
    args = ["validate", "--cv", "--json"] + (["--ray"] if ns.ray else []) + \
        (["--workers", str(ns.workers)] if ns.workers else [])
    load0 = os.getloadavg()
    d, wall, cpu, _ = run(args)
    load1 = os.getloadavg()
    if ns.out:
        with open(ns.out, "w") as f:
            json.dump(d, f, indent=1, sort_keys=True)
    print(f"chalk {' '.join(args)}")
    print(f"  {d['n']} rows in the objective, {d['n_families']} families")
    print(f"  wall {wall:.1f} s, CPU {cpu:.1f} s (user + sys, workers included); {os.cpu_count()} CPUs, "
          f"load average {load0[0]:.2f} before, {load1[0]:.2f} after")
    print(f"  cv_median_abs_error {d['cv_median_abs_error']:.6f}, cv_p90_abs_error {d['cv_p90_abs_error']:.6f}, "
          f"cv_range_coverage {d['cv_range_coverage']:.6f}")


if __name__ == "__main__":
    main()
