"""A streamed simulation at scale: wall time, simulated requests per second and peak memory (issue 23 item 9).

Run: python benchmarks/bench_simulate_stream.py [n_requests] [python]   (default 1e8; `python`: the pure-Python
reference loop instead of the compiled one, which runs when numba is installed: `pip install 'chalk[fast]'`)
Workload: llama-3.1-8b, one H100 (TP1), Poisson arrivals at 30 req/s (about 80% of what the replica sustains),
prompts 512, outputs 128 (means, spread as every replay spreads them), continuous batching under the engine
limits throughput replays (chalk's fitted scheduler cap, an 8,192-token prefill chunk; TTFT on the client's clock):
`chalk simulate -m llama-3.1-8b -H h100-sxm --layout tp=1 --rate 30 -n N --input-len 512 --output-len 128`. Its step
cost is settled on a held replay of the first 16,000 requests first. Requests are generated a chunk at a time and
folded into log-bucketed histograms once finished, so memory holds the requests in flight, not the run.
"""

from __future__ import annotations

import resource
import sys
import time


def main(n: int = 100_000_000, loop: str = "auto") -> None:
    import chalk
    from chalk.analyses.traffic import simulate

    if loop == "python":
        simulate.COMPILED_MIN_REQUESTS = 1 << 62
    t0 = time.perf_counter()
    c0 = time.process_time()
    compiled = simulate._compiled("auto", n)  # imports numba when installed (its time counts below)
    r = chalk.simulate("llama-3.1-8b", "h100-sxm", layout="tp=1", rate=30.0, requests=n, input_len=512,
                       output_len=128)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    print(f"{n:,} requests streamed ({'compiled' if compiled else 'Python'} loop): wall {wall:,.1f} s, CPU "
          f"{cpu:,.1f} s, {n / cpu:,.0f} simulated requests per CPU-second, peak RSS {rss / 1e6:,.0f} MB ({rss / n:.2f} bytes per request of the run)")
    print(f"  window: {r.latency_window['requests']:,} requests; TTFT p50/p99 {r.ttft_p50_s * 1e3:.1f}/"
          f"{r.ttft_p99_s * 1e3:.1f} ms; TPOT p50/p99 {r.tpot_p50_s * 1e3:.2f}/{r.tpot_p99_s * 1e3:.2f} ms; "
          f"{r.output_tokens_per_s:,.0f} output tokens/s per replica; {r.n_steps:,} steps")


if __name__ == "__main__":
    main(int(float(sys.argv[1])) if len(sys.argv) > 1 else 100_000_000, sys.argv[2] if len(sys.argv) > 2 else "auto")
