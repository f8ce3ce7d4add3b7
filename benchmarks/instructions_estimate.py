"""CPU instructions per new question to a reused `chalk.Session`, counted by valgrind's callgrind (needs valgrind).

Wall-clock rates on a shared machine move by +-5-10% from run to run (`bench_estimate.py`); an instruction count
does not, so it tells whether a change to the estimate path made it cheaper. The workload is bench_estimate's
first line: llama-3.1-70b on h100-sxm, batch cycling over 1..512 and context 1024 + 7 i, new Session, cold caches.

Run: PYTHONPATH=$PWD/src python benchmarks/instructions_estimate.py [--questions 3000]
It runs the workload twice under callgrind, with N questions and with none, and prints the difference over N.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys

WORKLOAD = ("import sys, chalk\n"
            "s = chalk.Session('llama-3.1-70b', 'h100-sxm')\n"
            "s.estimate(1, 999.5)\n"
            "for i in range(int(sys.argv[1])):\n"
            "    s.estimate(1 + i % 512, 1024 + 7 * i).tokens_per_s\n")


def instructions(n: int) -> int:
    """Instructions callgrind counts for the whole process asking `n` questions."""
    p = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=" + os.devnull,
                        os.path.realpath(sys.executable), "-c", WORKLOAD, str(n)],
                       capture_output=True, text=True, check=True)
    m = re.search(r"Collected\s*:\s*(\d+)", p.stderr)
    if m is None:
        raise SystemExit("callgrind printed no instruction count")
    return int(m.group(1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--questions", type=int, default=3000)
    n = ap.parse_args().questions
    if shutil.which("valgrind") is None:
        raise SystemExit("needs valgrind (apt install valgrind)")
    per = (instructions(n) - instructions(0)) / n
    print(f"chalk.Session, new questions: {per:,.0f} instructions per estimate (callgrind, {n} questions)")


if __name__ == "__main__":
    main()
