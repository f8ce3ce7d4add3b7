"""Wall time of a portfolio's candidate evaluations in this process and on a local Ray of 2 workers, and the
speed-up (issue 28: >= 500 candidate evaluations).

Run: PYTHONPATH=src python benchmarks/bench_portfolio.py [candidates] [sim_requests]
The portfolio: small and mid-size models (llama-3.1-8b, qwen3-30b-a3b, gpt-oss-20b) at several demands, on eight
chips, two precisions, two modes, vllm: model entries are added until there are at least `candidates` (default
500). Each candidate is one single-model plan replayed with `sim_requests` requests (default 1,000). Both runs
evaluate every candidate from scratch (no results file) and must give the same assignment.
"""

from __future__ import annotations

import json
import sys
import time

CHIPS = ["h100-sxm", "h200", "b200", "mi300x", "mi325x", "a100-sxm", "h800", "mi355x"]
MODELS = [("llama-3.1-8b", 1000, 200), ("qwen3-30b-a3b", 2000, 300), ("gpt-oss-20b", 1000, 1000)]


def portfolio(n: int, sim_requests: int) -> dict:
    from chalk.analyses.planning.portfolio import candidates, load

    models = []
    i = 0
    while True:
        model, inp, out = MODELS[i % len(MODELS)]
        models.append({"name": f"m{i}-{model}", "model": model, "users": 100 * (1 + i // len(MODELS)),
                       "input_len": inp, "output_len": out, "min_user_tps": 20, "precisions": ["bf16", "fp8"],
                       "engines": ["vllm"], "modes": ["aggregated", "disaggregated"]})
        pf = {"models": models, "chips": CHIPS, "settings": {"sim_requests": sim_requests}}
        if len(candidates(load(pf))) >= n:
            return pf
        i += 1


def main() -> None:
    from chalk.analyses.planning.portfolio import candidates, load, portfolio as run
    from chalk.executor import InProcess, RayExecutor

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    sim = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    pf = portfolio(n, sim)
    count = len(candidates(load(pf)))
    print(f"portfolio: {len(pf['models'])} model entries x {len(CHIPS)} chips x 2 precisions x 2 modes = "
          f"{count} candidate evaluations, {sim:,} replayed requests each")
    t0 = time.perf_counter()
    serial = run(pf, executor=InProcess())
    t_serial = time.perf_counter() - t0
    print(f"serial (in-process): {t_serial:.1f} s wall ({count / t_serial:.1f} candidates/s)")
    t0 = time.perf_counter()
    ex = RayExecutor(workers=2)
    t_start = time.perf_counter() - t0
    try:
        t1 = time.perf_counter()
        par = run(pf, executor=ex)
        t_ray = time.perf_counter() - t1
    finally:
        ex.close()
    same = json.dumps(serial.answer(), sort_keys=True) == json.dumps(par.answer(), sort_keys=True)
    print(f"local Ray, 2 workers: {t_ray:.1f} s wall ({count / t_ray:.1f} candidates/s), plus {t_start:.1f} s to "
          f"start Ray")
    print(f"speed-up: {t_serial / t_ray:.2f}x ({t_serial / (t_ray + t_start):.2f}x counting Ray's start); "
          f"same answer: {same}; total ${serial['total']['usd_per_hour']:,.2f}/h")
    if not same:
        raise SystemExit("the Ray run gave a different answer")


if __name__ == "__main__":
    main()
