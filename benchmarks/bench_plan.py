"""Wall and CPU time of `chalk plan` (issue 13's two done-when plans and issue 28's two 4-chip plans, as the CLI
runs them) and of a one-million-request multi-replica replay.

Run: PYTHONPATH=src python benchmarks/bench_plan.py [n_requests]
Targets: the llama-3.1-70b plan on four chips < 3 s wall; the DeepSeek-V3 plan on GB200 NVL72 (with its
disaggregated option) < 10 s; 1e6 requests replayed across the replicas of the chosen llama fleet < 10 s on 2 cores;
issue 28: the README's 1,000-user llama-3.1-70b question and 5,000 users of llama-3.3-70b over four chips each
< 1 s of CPU. CPU time is the child process's (user + system, `resource.getrusage`), start-up included, and the
plan alone in-process (`time.process_time`, imports warm), asked as the CLI asks it (precision 'explore', no
curves): the first plan in the process (it loads the catalog entries and builds the kernel tables it reads),
the same plan again, and the plan replaying every option (`replay_all=True`, what a plan did before it replayed only
the options that can still be the cheapest). On a shared machine wall time mostly measures the others.
n_requests 0: the plans only.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time

PLANS = {
    "llama-3.3-70b, 5000 users at 50 tok/s, 4 chips (issue 28: < 1 CPU-s)":
        ["-m", "llama-3.3-70b", "--users", "5000", "--min-user-tps", "50", "--input-len", "2000",
         "--output-len", "500", "-H", "h100-sxm,h200,b200,mi300x"],
    "llama-3.1-70b, 1000 users at 50 tok/s, 4 chips (target < 3 s; issue 28: < 1 CPU-s)":
        ["-m", "llama-3.1-70b", "--users", "1000", "--min-user-tps", "50", "--input-len", "2000",
         "--output-len", "500", "-H", "h100-sxm,h200,b200,mi300x"],
    "deepseek-v3 on gb200-nvl72, 20000 users at 30 tok/s, agg + disagg (target < 10 s)":
        ["-m", "deepseek-v3", "--users", "20000", "--min-user-tps", "30", "--input-len", "2000",
         "--output-len", "1000", "-H", "gb200-nvl72"],
}


def cli_wall(args) -> tuple[float, float]:
    """(wall, CPU) seconds of `chalk plan ARGS --json` in a fresh interpreter (start-up included)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in ("src", env.get("PYTHONPATH", "")) if p)
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "chalk", "plan", *args, "--json"], capture_output=True,
                         text=True, env=env)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise SystemExit(f"chalk plan failed: {out.stderr.strip()}")
    return wall, (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)


def plan_times(args, **extra) -> tuple[float, float]:
    """(CPU, wall) seconds of the plan alone, in this process (its imports loaded; the replay loop the plan picks,
    `sizing.replay_loop`: the compiled one only if this process has loaded it already), asked
    as the CLI asks it (every precision explored); `extra`: more arguments (replay_all=True: every option replayed,
    as plans did before issue 28 item 3)."""
    from chalk.analyses.planning.plan import plan

    kw, i = {}, 0
    while i < len(args):
        kw[args[i].lstrip("-").replace("-", "_")] = args[i + 1]
        i += 2
    kw = {{"m": "model", "H": "hardware"}.get(k, k): (float(v) if v.replace(".", "").isdigit() else v)
          for k, v in kw.items()}
    kw.setdefault("precision", "explore")  # the CLI's default
    kw.setdefault("curves", False)  # the CLI computes the curves only for --plot
    c, w = time.process_time(), time.perf_counter()
    plan(kw.pop("model"), **kw, **extra)
    return time.process_time() - c, time.perf_counter() - w


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
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    for label, args in PLANS.items():
        wall, cpu = cli_wall(args)
        print(f"{'chalk plan ' + label:<80} {wall:6.2f} s wall {cpu:6.2f} s CPU (process)")
        for how, extra in (("the plan alone in this process", {}), ("the plan alone again", {}),
                           ("the plan alone, every option replayed (replay_all)", {"replay_all": True})):
            c, w = plan_times(args, **extra)
            print(f"{'  ' + how:<80} {w:6.2f} s wall {c:6.2f} s CPU")
    if n:
        replay_1m(n)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000)
