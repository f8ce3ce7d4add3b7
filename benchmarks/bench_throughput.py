"""Wall time of `chalk throughput` for DeepSeek-V3 on a 72-GPU GB200 NVL72 rack, searching every deployment
size, layout and batch: the whole process, start to JSON. Target (issue 9): under 1 s.

    python benchmarks/bench_throughput.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGET_S = 1.0
CMD = ["-m", "chalk", "throughput", "--model", "deepseek-v3", "--hardware", "gb200-nvl72",
       "--input-len", "2000", "--output-len", "1000", "--pareto", "--json"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[1] / "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    times, out = [], None
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, *CMD], capture_output=True, text=True, env=env)
        times.append(time.perf_counter() - t0)
        if p.returncode != 0:
            sys.stderr.write(p.stderr)
            return 1
        out = json.loads(p.stdout)
    sys.path.insert(0, src)
    from chalk.analyses.step.parallel import enumerate_layouts
    from chalk.analyses.traffic.serving import deployment_sizes
    from chalk.specs.catalog import load_model, load_system

    m, s = load_model("deepseek-v3"), load_system("gb200-nvl72")
    n_layouts = sum(len(enumerate_layouts(m, n, s.chips)) for n in deployment_sizes(s))
    best, med = min(times), statistics.median(times)
    print(f"chalk throughput deepseek-v3 on gb200-nvl72: {n_layouts} layouts x batch grid searched; "
          f"wall time min {best:.2f} s, median {med:.2f} s over {len(times)} runs (target < {TARGET_S:.0f} s)")
    print(f"answer: {out['output_tokens_per_s_per_gpu']:.0f} output tok/s/GPU, {out['layout']}, "
          f"{out['user_tokens_per_s']:.1f} tok/s/user")
    return 0 if med < TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
