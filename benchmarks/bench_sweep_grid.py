"""The vectorised and event paths near the hardware (issue 28 item 5), in CPU seconds (the least of 3 runs: the machine is shared):

1. a batch x context sweep of the step model over N points (default 1e7: a column of ~316 batches by a row of ~31,600
   contexts), against a bare numpy roofline over the same grid (one decode step: max(FLOP / peak, bytes / bandwidth)
   with the weights and the KV cache read once; five array expressions). Target: within 20x of the bare roofline's
   CPU time, under 150 bytes per point (peak traced by tracemalloc, the grid's own inputs and the answer's 8 bytes
   per point included). The sweep is asked in row blocks of ~`--block` points written into one answer array (a
   one-shot call keeps every op's intermediate arrays alive: printed too, at 1e6 points). Asked twice:
   - of the step model (`chalk.analyses.step.estimate.Session.estimate(...).step_time_s`: measured kernel tables, the
     layout's ops; the fields a step time does not need stay deferred), the figure the targets are for;
   - of the public `chalk.Session`, which attaches each answer's energy (`estimate_energy`), and so works out every
     deferred field of the answer (cost, range, fit, the lecture's quantities) over the whole grid;
2. `chalk simulate` (continuous batching, the compiled loop when numba is installed) on `--requests` requests:
   simulated requests per CPU-second of the whole process (start-up and numba's load included, and without them).

Run: python benchmarks/bench_sweep_grid.py [--points 1e7] [--requests 1e6] [--block 1048576] [--reference]
(`--reference`: the kernel grids interpolated the plain way, `corner_weights`' points x 2^d arrays, as before
issue 28, for comparison.)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import tracemalloc

import numpy as np

MODEL, HARDWARE = "llama-3.1-70b", "h100-sxm"


def grid(points: int):
    """Batch (a column) x context (a row): ~sqrt(points) each, `points` in all."""
    nb = max(1, int(round(points ** 0.5 / 10)))
    nl = max(1, points // nb)
    return np.geomspace(1.0, 4096.0, nb)[:, None], np.geomspace(128.0, 131072.0, nl)[None, :]


def bare_roofline(B, L, m, chip):
    """One decode step's bare roofline over the grid: FLOP = 2 x active params x batch + attention's
    4 x layers x heads x head dim x batch x context; bytes = the weights + the KV cache read once."""
    from chalk.analyses.step.model_sizes import sizes

    sz = sizes(m)
    peak, bw = chip.flops_per_s["bf16"], chip.hbm_bandwidth_bytes_per_s
    w_bytes = 2.0 * sz.total_params
    kv_tok = 2.0 * m.num_layers * 2 * m.num_kv_heads * m.head_dim
    flops = 2.0 * sz.active_params * B + (4.0 * m.num_layers * m.num_heads * m.head_dim) * (B * L)
    return np.maximum(flops / peak, (w_bytes + kv_tok * (B * L)) / bw)


def cpu() -> float:
    return time.process_time()


def sweep_blocks(session, B, L, block: int) -> np.ndarray:
    """The step time at every (batch, context), asked a block of rows at a time into one answer array."""
    out = np.empty((B.shape[0], L.shape[1]))
    rows = max(1, block // L.shape[1])
    for r in range(0, B.shape[0], rows):
        out[r:r + rows] = session.estimate(B[r:r + rows], L).step_time_s
    return out


def traced(fn, repeats: int = 3):
    """(result, CPU seconds, peak bytes traced by tracemalloc) of `fn()`: the least CPU time of `repeats` untraced
    runs (a shared machine only adds to it), then one traced run for the peak."""
    best = float("inf")
    for _ in range(repeats):
        c = cpu()
        r = fn()
        best = min(best, cpu() - c)
        del r
    tracemalloc.start()
    r = fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return r, best, peak


def sweep(points: int, block: int) -> None:
    import chalk
    from chalk.analyses.step.estimate import Session as StepSession
    from chalk.specs.catalog import load_model, resolve_hardware

    m, chip = load_model(MODEL), resolve_hardware(HARDWARE).chip
    B, L = grid(points)
    n = B.size * L.size
    bare, bare_cpu, bare_peak = traced(lambda: bare_roofline(B, L, m, chip))
    print(f"{MODEL} on {HARDWARE}, decode, {B.shape[0]:,} batches x {L.shape[1]:,} contexts = {n:,} points "
          f"(blocks of ~{block:,}); {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    print(f"  bare numpy roofline : {bare_cpu:7.2f} CPU-s {n / bare_cpu / 1e6:7.1f} M points/CPU-s "
          f"{bare_peak / n:6.1f} B/point peak")
    for label, s in (("chalk step model    ", StepSession(MODEL, HARDWARE)),
                     ("chalk.Session (API) ", chalk.Session(MODEL, HARDWARE))):
        s.estimate(B[:2], L[:, :2]).step_time_s  # warm the layout search and the kernel grids
        ours, ours_cpu, ours_peak = traced(lambda: sweep_blocks(s, B, L, block))
        assert ours.shape == bare.shape and not np.isnan(ours).any()
        print(f"  {label}: {ours_cpu:7.2f} CPU-s {n / ours_cpu / 1e6:7.1f} M points/CPU-s "
              f"{ours_peak / n:6.1f} B/point peak   {ours_cpu / bare_cpu:5.1f}x the bare roofline"
              + ("   (targets: < 20x, < 150 B/point)" if "model" in label else
                 "   (energy attached: every deferred field worked out)"))
        del ours
    s = StepSession(MODEL, HARDWARE)
    B1, L1 = grid(min(points, 1_000_000))
    n1 = B1.size * L1.size
    _, one_cpu, one_peak = traced(lambda: s.estimate(B1, L1).step_time_s)
    print(f"  step model, one call, {n1:,} pts: {one_cpu:7.2f} CPU-s {n1 / one_cpu / 1e6:7.1f} M points/CPU-s "
          f"{one_peak / n1:6.1f} B/point peak (every op's arrays alive at once)")


def simulate(requests: int) -> None:
    """`chalk simulate` in a fresh process: its CPU time (resource's children figures) and requests per CPU-s."""
    args = [sys.executable, "-m", "chalk", "simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--rate", "600",
            "--requests", str(requests), "--input-len", "512", "--output-len", "128", "--max-batch", "256", "--json"]

    def child_cpu(argv):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        p = subprocess.run(argv, capture_output=True, text=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if p.returncode:
            raise SystemExit(f"{' '.join(argv[3:])} failed: {p.stderr.strip()}")
        return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime), p.stdout

    whole, out = child_cpu(args)
    small, _ = child_cpu(args[:args.index("--requests") + 1] + ["1000"] + args[args.index("--requests") + 2:])
    r = json.loads(out)
    steps = r.get("n_steps") or r.get("steps")
    print(f"chalk simulate llama-3.1-8b on h100-sxm, continuous B=256, 600 req/s, {requests:,} requests"
          f"{'' if steps is None else f' ({steps:,} steps)'}: {whole:.2f} CPU-s for the process, "
          f"{requests / whole:,.0f} req/CPU-s; less a 1,000-request run's ({small:.2f} CPU-s: start-up, numba's "
          f"load): {(requests - 1000) / max(whole - small, 1e-9):,.0f} req/CPU-s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=float, default=1e7)
    ap.add_argument("--requests", type=float, default=1e6)
    ap.add_argument("--block", type=int, default=1 << 20)
    ap.add_argument("--reference", action="store_true")
    a = ap.parse_args()
    ap_ref = a.reference
    if ap_ref:
        from chalk.analyses.step import kernels as KK

        def plain(axes, x_log2, values):
            cols, w = KK.corner_weights(axes, x_log2)
            return (np.ravel(values)[cols] * w).sum(-1)

        KK.interpolate = plain
        KK.interpolate_outer = lambda axes, x_log2, grid: None  # no column-by-row path either
        print("kernel grids interpolated the plain way (corner_weights), for comparison")
    sweep(int(a.points), a.block)
    simulate(int(a.requests))


if __name__ == "__main__":
    main()
