"""A portfolio's candidates run on an executor and written down as each finishes, so a long run survives.

The results file is JSON lines: a header (`RESULTS_HEADER`), then one `{"key", "record"}` per finished candidate,
written by this process alone (whatever executor ran the candidate), flushed and fsynced before the next. A resumed
run reads it back and runs only the candidates whose key it lacks; the key changes with anything the answer depends
on (`chalk.analyses.planning.portfolio.candidates`), so a stale answer is never reused. A last line without its
newline is a write a crash cut short: that candidate never finished, and the line is dropped before appending.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from chalk.errors import InputError

#: Bytes of a results file `resume` reads at most.
MAX_RESULTS_BYTES = 1 << 30
RESULTS_HEADER = {"chalk_portfolio_results": 1}


def run(fn, cands, executor=None, results=None, resume: bool = False, progress=None) -> tuple[dict, dict]:
    """({key: record}, counts): `fn(candidate)` for every candidate (on `executor`, default this process), each
    record appended to the JSON-lines file `results` as it finishes; with `resume`, the records already there are
    reused and only the missing candidates run."""
    from chalk.executor import InProcess

    executor = executor or InProcess()
    done = read_results(results) if resume and results is not None else {}
    wanted = {c["key"] for c in cands}
    have = {k: v for k, v in done.items() if k in wanted}
    todo = [c for c in cands if c["key"] not in have]
    fh = None
    if results is not None:
        fh = _open_results(results, append=resume)
    try:
        n = len(have)
        if progress:
            progress(n, len(cands))
        for _, rec in executor.map(fn, todo):
            have[rec["key"]] = rec
            if fh is not None:
                fh.write(json.dumps({"key": rec["key"], "record": rec}, sort_keys=True) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            n += 1
            if progress:
                progress(n, len(cands))
    finally:
        if fh is not None:
            fh.close()
    return have, {"candidates": len(cands), "evaluated": len(todo), "reused": len(cands) - len(todo)}


def _open_results(path, append: bool):
    p = Path(path)
    if append and p.exists() and p.stat().st_size > 0:
        fh = open(p, "r+b")
        data = fh.read()
        cut = data.rfind(b"\n") + 1  # a last line cut short by a crash was never finished: it is dropped
        fh.truncate(cut)
        fh.close()
        return open(p, "a", encoding="utf-8")
    fh = open(p, "w", encoding="utf-8")
    fh.write(json.dumps(RESULTS_HEADER) + "\n")
    return fh


def read_results(path) -> dict:
    """{key: record} from a results file (missing: empty). A line that is not a result is one InputError, except a
    last line cut short by a crash (no newline), which was never finished and is ignored."""
    from chalk.specs.files import read_bounded_text

    p = Path(path)
    if not p.exists():
        return {}
    text = read_bounded_text(p, str(path), MAX_RESULTS_BYTES, what="a portfolio results file", error=InputError)
    lines = text.split("\n")
    try:
        first = json.loads(lines[0]) if lines[0].strip() else None
    except ValueError:
        first = None
    if first != RESULTS_HEADER and text.strip():
        raise InputError(f"{path}: line 1 is not a chalk portfolio results header; fix or remove the file, or run "
                         "without --resume")
    out = {}
    for i, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            if not (isinstance(d, dict) and isinstance(d.get("key"), str) and isinstance(d.get("record"), dict)
                    and d["record"].get("key") == d["key"] and d["record"].get("status") in ("ok", "no fit", "error")):
                raise ValueError("not a candidate's result")
        except ValueError as e:
            if i == len(lines) and not text.endswith("\n"):
                break  # cut short by a crash: that candidate never finished
            raise InputError(f"{path}: line {i} is not a portfolio result ({str(e)[:60]}); fix or remove it, or "
                             "run without --resume") from None
        out.setdefault(d["key"], d["record"])  # the first answer for a key stands: none is repeated
    return out
