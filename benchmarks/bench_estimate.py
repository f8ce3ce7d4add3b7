"""How many estimates per second the Python API answers in-process (issue 12: >= 20,000/s with a reused session).

Prints six figures, the new-question ones first, before anything else has warmed chalk's caches:
- a reused `chalk.Session` asked new questions: batch and context both change every call (batch cycling over
  1..512, as integer batches of a sweep or a grid do; context never repeats), so no whole answer is kept; the step
  model runs every time, and the ops that do not depend on the context are found kept for a batch seen before
  (`step_model._token_ops_kept`). Step time and tokens/s read;
- the same, every field read (the fields an estimate defers, such as the op table, worked out too);
- the same, no batch ever asked before (batch 513, 514, ...): nothing kept applies, the worst case;
- a plain loop over `chalk.estimate` with varying batch;
- a reused `chalk.Session` asked repeated questions (a notebook re-running a cell);
- one vectorised call over a grid.
"""

from __future__ import annotations

import time

import numpy as np

import chalk


def rate(fn, n):
    fn(0)
    t = time.perf_counter()
    for i in range(n):
        fn(i)
    return n / (time.perf_counter() - t)


def main():
    m, h = "llama-3.1-70b", "h100-sxm"
    fresh_session = chalk.Session(m, h)
    fresh = rate(lambda i: fresh_session.estimate(1 + i % 512, 1024 + 7 * i).tokens_per_s, 3000)
    every_session = chalk.Session(m, h)  # the same, every field read: the deferred ones (op table, MFU, ...) too
    every = rate(lambda i: every_session.estimate(1 + i % 512, 1024 + 7 * i + 3).to_dict(), 1000)
    cold_session = chalk.Session(m, h)
    cold = rate(lambda i: cold_session.estimate(513 + i, 1024 + 7 * i + 5).tokens_per_s, 1000)
    loop = rate(lambda i: chalk.estimate(m, h, 1 + i % 512, 4096).step_time_s, 300)
    s = chalk.Session(m, h)
    for b in range(1, 65):
        s.estimate(b, 4096)
    repeated = rate(lambda i: s.estimate(1 + i % 64, 4096), 50_000)
    B = np.arange(1, 100_001, dtype=float)
    t = time.perf_counter()
    r = s.estimate(B, 4096.0, layout="tp=4")
    vec = B.size / (time.perf_counter() - t)
    assert np.all(np.isfinite(r.step_time_s))
    print(f"chalk.Session, new questions:             {fresh:,.0f} estimates/s (batch cycling 1..512 and context both "
          "new; step time and tokens/s read)")
    print(f"chalk.Session, new questions, all fields: {every:,.0f} estimates/s (to_dict: op table, MFU, range...)")
    print(f"chalk.Session, no batch asked before:     {cold:,.0f} estimates/s (batch 513, 514, ...: the worst case)")
    print(f"chalk.estimate in a loop, new questions:  {loop:,.0f} estimates/s")
    print(f"chalk.Session, repeated questions:        {repeated:,.0f} estimates/s")
    print(f"chalk.Session, one vectorised call:       {vec:,.0f} estimates/s (100,000 batches, layout tp=4)")


if __name__ == "__main__":
    main()
