"""Wall time of `chalk plan` (issue 13's two done-when plans, as the CLI runs them) and of a one-million-request
multi-replica replay.

Run: PYTHONPATH=src python benchmarks/bench_plan.py [n_requests]
Targets: the llama-3.1-70b plan on four chips < 3 s; the DeepSeek-V3 plan on GB200 NVL72 (with its disaggregated
option) < 10 s; 1e6 requests replayed across the replicas of the chosen llama fleet < 10 s on 2 cores.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

PLANS = {
    "llama-3.1-70b, 1000 users at 50 tok/s, 4 chips (target < 3 s)":
        ["-m", "llama-3.1-70b", "--users", "1000", "--min-user-tps", "50", "--input-len", "2000",
         "--output-len", "500", "-H", "h100-sxm,h200,b200,mi300x"],
    "deepseek-v3 on gb200-nvl72, 20000 users at 30 tok/s, agg + disagg (target < 10 s)":
        ["-m", "deepseek-v3", "--users", "20000", "--min-user-tps", "30", "--input-len", "2000",
         "--output-len", "1000", "-H", "gb200-nvl72"],
}


def cli_wall(args) -> float:
    """Wall time of `chalk plan ARGS --json` in a fresh interpreter (start-up included)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in ("src", env.get("PYTHONPATH", "")) if p)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "chalk", "plan", *args, "--json"], capture_output=True,
                         text=True, env=env)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"chalk plan failed: {out.stderr.strip()}")
    return wall


def replay_1m(n: int) -> None:
    """The cheapest H100 aggregated fleet of the llama plan, replayed with `n` requests over every replica."""
    from chalk.analyses.planning import sizing as S
    from chalk.analyses.planning.plan import plan  # noqa: F401  (warms the imports, as the CLI has them)
    from chalk.specs.catalog import as_model, as_system
    from chalk.specs.demand import Demand

    ask = S.Ask(model=as_model("llama-3.1-70b"), input_len=2000.0, output_len=500.0, I=2000.0, O=500.0,
                demand=Demand(users=1000, min_user_tps=50), precisions=(None,), kv_precision="auto",
                speculative=None, engine=None, ideal=False, sim_requests=n, seed=0)
    system = as_system("h100-sxm")
    s, _ = S.best(ask, system, "aggregated")
    t0 = time.perf_counter()
    sim = S.replay(ask, system, s, n_requests=n)
    wall = time.perf_counter() - t0
    print(f"{'replay: ' + f'{sim.n_requests:,} requests over {sim.replicas_simulated} x ' + s['layout'] + ' H100':<80}"
          f" {wall:6.2f} s  ({sim.n_requests / wall:,.0f} req/s; p99 TTFT {sim.ttft_p99_s * 1e3:.0f} ms, "
          f"p99 TPOT {sim.tpot_p99_s * 1e3:.1f} ms; {os.cpu_count()} cores)")


def main(n: int = 1_000_000) -> None:
    for label, args in PLANS.items():
        print(f"{'chalk plan ' + label:<80} {cli_wall(args):6.2f} s")
    replay_1m(n)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000)
