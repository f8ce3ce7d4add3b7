"""Issue 2 speed targets, printed (not asserted):
- `chalk estimate` whole process under 0.5 s wall on a 2-core machine;
- a sweep evaluates at least 1e6 (batch x context) points per second.

Run: python benchmarks/bench_core.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

import numpy as np


def cli_wall_s(args: list[str], repeats: int = 7) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "chalk", *args], capture_output=True, check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def sweep_points_per_s(model: str, hardware: str, n_batch: int = 1000, n_ctx: int = 1000) -> float:
    from chalk.analyses.step.roofline import step
    from chalk.specs.catalog import load_model, resolve_hardware

    m, s = load_model(model), resolve_hardware(hardware)
    B, L = np.meshgrid(np.geomspace(1, 8192, n_batch), np.geomspace(128, 131072, n_ctx), indexing="ij")
    step(m, s, B[:2, :2], L[:2, :2])  # warm caches
    t0 = time.perf_counter()
    step(m, s, B, L)
    return B.size / (time.perf_counter() - t0)


if __name__ == "__main__":
    for args in (["estimate", "-m", "llama-3.1-70b", "-H", "h100-sxm", "-b", "64", "-c", "4096", "--json"],
                 ["estimate", "-m", "deepseek-v3", "-H", "gb200-nvl72", "-b", "256", "-c", "8192"]):
        print(f"chalk {' '.join(args)}: {cli_wall_s(args):.3f} s wall (median of 7; target < 0.5 s)")
    for model, hw in (("llama-3.1-70b", "h100-sxm"), ("deepseek-v3", "gb200-nvl72"), ("gpt-oss-120b", "h100-sxm")):
        print(f"sweep {model} on {hw}: {sweep_points_per_s(model, hw) / 1e6:.2f} M points/s (target >= 1 M/s)")
