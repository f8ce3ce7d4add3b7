"""Wall time of `chalk simulate`'s engine for one million requests, both schedulers.

Run: python benchmarks/bench_simulate.py [n_requests] [python]
Workload: llama-3.1-8b on h100-sxm (8 GPUs), Poisson arrivals, prompt 512, output 128 tokens.
Continuous batching runs the compiled loop when numba is installed (`chalk[fast]`); `python` as the second argument
runs the pure-Python reference loop instead. Times are wall and CPU seconds (the CPU figure holds on a busy machine).
"""

from __future__ import annotations

import sys
import time

from chalk.analyses.traffic import simulate
from chalk.analyses.traffic.simulate import StepCost, poisson_arrivals, simulate_continuous, simulate_train

MODEL, HARDWARE = "llama-3.1-8b", "h100-sxm"
INPUT, OUTPUT = 512, 128


def timed(label: str, fn, n: int):
    """Run `fn` once, print wall time and simulated requests per wall second, return its result."""
    t0, c0 = time.perf_counter(), time.process_time()
    r = fn()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"{label:<50} {wall:7.2f} s wall {cpu:6.2f} s CPU {n / cpu:12,.0f} req/CPU-s | {r.n_steps:>9,} steps, "
          f"{r.output_tokens_per_s:>9,.0f} out tok/s, TTFT p50 {r.ttft_p50_s * 1e3:7.1f} ms, "
          f"p99 {r.ttft_p99_s * 1e3:8.1f} ms, TPOT p50 {r.tpot_p50_s * 1e3:6.2f} ms, util {r.utilisation:.2f}")
    return r


def main(n: int = 1_000_000, loop: str = "auto") -> None:
    """Benchmark both schedulers at a load below and above the replica's capacity."""
    sc = StepCost.from_roofline(MODEL, HARDWARE)
    print(f"{n:,} requests, {sc.label}, prompt {INPUT}, output {OUTPUT}")
    if loop == "python":
        simulate.COMPILED_MIN_REQUESTS = 1 << 62
    elif simulate._compiled("auto", simulate.COMPILED_MIN_REQUESTS):  # load the compiled loop once, timed apart
        t0, c0 = time.perf_counter(), time.process_time()
        simulate_continuous(poisson_arrivals(10.0, 100, INPUT, OUTPUT), sc, 8, loop="compiled")
        print(f"{'loading the compiled loop (numba)':<50} {time.perf_counter() - t0:7.2f} s wall "
              f"{time.process_time() - c0:6.2f} s CPU")
    t0 = time.perf_counter()
    moderate = poisson_arrivals(600.0, n, INPUT, OUTPUT, seed=0)
    overload = poisson_arrivals(5000.0, n, INPUT, OUTPUT, seed=1)
    gentle = poisson_arrivals(200.0, n, INPUT, OUTPUT, seed=4)
    print(f"{'poisson_arrivals (x3)':<50} {time.perf_counter() - t0:7.2f} s")
    for name, req in (("600 req/s", moderate), ("5000 req/s (overload)", overload)):
        timed(f"continuous B=256, {name}", lambda: simulate_continuous(req, sc, 256), n)
        timed(f"continuous B=256 chunk 512, {name}",
              lambda: simulate_continuous(req, sc, 256, prefill_chunk_tokens=512), n)
    timed("train T=20 ms B=2048, 200 req/s", lambda: simulate_train(gentle, sc, 0.020, 2048), n)
    mixed = poisson_arrivals(200.0, n, INPUT, lambda rng, k: rng.integers(64, 193, k), seed=2)
    timed("train T=20 ms B=2048, 200 req/s, outputs 64-192 (heap)", lambda: simulate_train(mixed, sc, 0.020, 2048), n)
    light = poisson_arrivals(20.0, n, INPUT, OUTPUT, seed=3)
    timed("continuous B=256, 20 req/s (light, jumps)", lambda: simulate_continuous(light, sc, 256), n)


if __name__ == "__main__":
    main(int(float(sys.argv[1])) if len(sys.argv) > 1 else 1_000_000, sys.argv[2] if len(sys.argv) > 2 else "auto")
