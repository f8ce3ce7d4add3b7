"""`chalk measure --quick` on this machine: ceilings, fitted efficiencies, held-out error, wall time.

Issue target (printed, not asserted): at least four held-out steps with a median absolute
relative error of at most 15%, the whole quick run in about two minutes on a 2-core CPU.

Run: PYTHONPATH=src python benchmarks/bench_measure.py [cpu|cuda] [OUT_DIR]
"""

from __future__ import annotations

import json
import sys
import time

if __name__ == "__main__":
    t0 = time.perf_counter()
    from chalk.analyses.step.measure import format_report, run_measure

    device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    out_dir = sys.argv[2] if len(sys.argv) > 2 else None
    res = run_measure(device, quick=True, out_dir=out_dir,
                      progress=lambda s: print(f"[{time.perf_counter() - t0:6.1f} s] {s}", file=sys.stderr))
    wall = time.perf_counter() - t0
    print(format_report(res))
    d = res.to_dict()
    ok = d["n_held_out"] >= 4 and d["median_abs_error_held_out"] <= 0.15
    print(f"\nprocess wall {wall:.1f} s; target (>= 4 held-out, median <= 15%, ~2 min): {'met' if ok else 'NOT met'}"
          f" (n={d['n_held_out']}, median {d['median_abs_error_held_out'] * 100:.1f}%)")
    if out_dir:
        with open(f"{out_dir}/measure.json", "w") as f:
            json.dump(d, f, indent=1)
