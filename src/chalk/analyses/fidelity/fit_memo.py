"""Validation answers kept by the calibration fields they read: a fit asks chalk again only what a new parameter
value can change.

An answer (one validation point: `chalk.analyses.fidelity.validate.point`) is a deterministic function of the calibration
fields its computation reads. Each answer is worked out once under a tracked copy of the calibration that records
every field read (`_Tracked`), and is reused for any later calibration that agrees on those fields, whatever its
other fields hold: the same reads returning the same values replay the same computation. A dense model on an NVIDIA
chip never reads the AMD factors or the expert-balancer width, so a coordinate-descent step over those reuses it.

Below the answers, the work inside them is kept by exactly what it is given (`chalk.analyses.fidelity.work_memo`:
kernel-table times, stage steps by the fields they read, closed-loop replays), so a fitting step that moves a field an
answer reads but that leaves a step or a replay unchanged (a scheduler cap above the concurrency) reuses them.

A value the answer's own code puts in place of a field (an engine profile's scheduler cap, by `dataclasses.replace`)
is not a read of that field: the copy marks it its own (`own_replaced_fields`), so a fitting step over the fitted cap
leaves the answers that run their engine's as they are.

Every answer is worked out under its own copy, so no cache keyed on the calibration's identity (the step model's
plans) hands one point's work to another unseen; a cache keyed on its value hashes every field, which reads them
all (kept, merely never reused). `ShardedAnswers` splits the points over worker processes (fork), each keeping
its own points' answers between calls.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from contextlib import contextmanager

import numpy as np

from chalk.analyses.step.calibration import Calibration
from chalk.errors import ChalkError

_FIELDS = tuple(f.name for f in dataclasses.fields(Calibration))
_FIELD_SET = frozenset(_FIELDS)
#: Attribute reads that expose every field at once (a copy, a pickle, the instance dict).
_WHOLE = frozenset(("__dict__", "__getstate__", "__reduce__", "__reduce_ex__", "__copy__", "__deepcopy__"))
_READS: list = [None]  # the field names read while an answer is worked out, or None


#: Code that copies every field of a calibration into a new one without using them (`dataclasses.replace`; a
#: `_Tracked` copy is tracked in turn, so what is read from the copy counts then).
_COPYING = frozenset(f.__code__ for f in (dataclasses.replace, getattr(dataclasses, "_replace", None)) if f)


class _Tracked(Calibration):
    """A calibration that records the fields read from it into `_READS[0]`. The reads `dataclasses.replace` makes
    to copy it are not counted: the copy is a `_Tracked` too, and an unchanged field read from it counts then.
    `_own`: fields whose value the code being tracked set itself (`dataclasses.replace(cal, field=...)` while
    `own_replaced_fields` runs: an engine profile's scheduler cap over the fitted one); reading them reads
    nothing of the calibration the copy came from (what the new value was computed from was read, and counted,
    where it was computed), so they are not counted."""

    _own = frozenset()

    def __getattribute__(self, name):
        reads = _READS[0]
        if reads is not None:
            if name in _FIELD_SET:
                if name not in object.__getattribute__(self, "_own") and sys._getframe(1).f_code not in _COPYING:
                    reads.add(name)
            elif name in _WHOLE:
                reads.update(_FIELDS)
        return object.__getattribute__(self, name)

    def __eq__(self, other):  # equal to a plain calibration of the same values, as the plain one would be
        if not isinstance(other, Calibration):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in _FIELDS)

    __hash__ = Calibration.__hash__


def tracked(cal: Calibration) -> _Tracked:
    """A tracked copy of `cal` (same field values)."""
    return _Tracked(**{f: getattr(cal, f) for f in _FIELDS})


def _untracked_copy(cal: Calibration) -> _Tracked:
    """`tracked(cal)`, reading `cal`'s fields without recording them (a copy for one piece of an answer's work,
    whose reads are counted apart: `work_memo.step_memo`)."""
    return _Tracked(**{f: object.__getattribute__(cal, f) for f in _FIELDS})


def own_fields(cal) -> frozenset:
    """The fields of `cal` the tracked code set itself (`_Tracked._own`; none for a plain calibration)."""
    return object.__getattribute__(cal, "_own") if isinstance(cal, _Tracked) else frozenset()


@contextmanager
def own_replaced_fields():
    """While the block runs, `dataclasses.replace` on a tracked calibration marks the fields it is given as the
    copy's own (`_Tracked._own`, kept by later copies of the copy): an answer that replaces the fitted scheduler
    cap by its engine's reads the engine's, and a fit moving the fitted cap leaves that answer as it is."""
    plain = dataclasses.replace
    if getattr(plain, "_own", False):  # already inside one
        yield
        return

    def replace(obj, /, **changes):
        new = plain(obj, **changes)
        if isinstance(new, _Tracked):
            own = own_fields(obj) | frozenset(k for k in changes if k in _FIELD_SET)
            object.__setattr__(new, "_own", own)
        return new

    replace._own = True
    dataclasses.replace = replace
    try:
        yield
    finally:
        dataclasses.replace = plain


def answer_tracked(fn, cal: Calibration):
    """(fields read, fn(tracked copy of cal)): the answer and the calibration fields it depends on."""
    reads: set = set()
    prev, _READS[0] = _READS[0], reads
    try:
        out = fn(tracked(cal))
    finally:
        _READS[0] = prev
    return tuple(sorted(reads)), out


class _Kept:
    """One point's answers, by the fields they read: {fields: {their values: answer}}."""

    __slots__ = ("tables",)

    def __init__(self):
        self.tables: dict = {}

    def find(self, cal):
        for fields, table in self.tables.items():
            hit = table.get(tuple([getattr(cal, f) for f in fields]))
            if hit is not None:
                return hit
        return None

    def keep(self, fields, cal, ans):
        self.tables.setdefault(fields, {})[tuple([getattr(cal, f) for f in fields])] = ans


def _metric_wanted(ttft: bool):
    from chalk.analyses.fidelity.validate import FITTED_METRICS, TTFT_METRICS

    return lambda r: r.metric in FITTED_METRICS or (ttft and r.metric in TTFT_METRICS)


class Answers:
    """Predictions of validation rows under calibrations, the rows grouped into points and each point's answers kept
    (`_Kept`). `points`: indices of the points this instance answers (all by default)."""

    def __init__(self, rows, points=None):
        from chalk.analyses.fidelity.validate import point

        keys: dict = {}
        for i, r in enumerate(rows):
            keys.setdefault(point(r), []).append(i)
        self.rows = rows
        self.groups = list(keys.values())  # row indices of each point
        self.points = list(range(len(self.groups))) if points is None else list(points)
        self.kept = {p: _Kept() for p in self.points}
        self.worked = 0  # answers worked out (not found kept)

    def run(self, cals, ttft: bool = False, need=None) -> np.ndarray:
        """(len(cals), len(rows)) predictions of the rows of a fitted metric (and TTFT rows with `ttft`) on this
        instance's points; NaN elsewhere and where chalk cannot answer. `need`: (len(cals), len(rows)) booleans,
        the rows each calibration is asked for (None: all); a point none of whose rows is needed under a
        calibration is not answered there (NaN), the others exactly as without it."""
        want = _metric_wanted(ttft)
        out = np.full((len(cals), len(self.rows)), math.nan)
        need = None if need is None else np.asarray(need, dtype=bool).reshape(len(cals), len(self.rows))
        from chalk.analyses.fidelity.work_memo import kernel_memo, replay_memo, step_memo

        with kernel_memo(), replay_memo(), step_memo(_READS, _untracked_copy, own_fields), own_replaced_fields():
            self._run(cals, want, out, need)
        return out

    def _run(self, cals, want, out, need=None):
        for p in self.points:
            idx = [i for i in self.groups[p] if want(self.rows[i])]
            if not idx:
                continue
            rep = self.rows[idx[0]]
            metrics = sorted({self.rows[i].metric for i in idx})
            kept = self.kept[p]
            asked = None if need is None else need[:, idx].any(axis=1)
            for k, cal in enumerate(cals):
                if asked is not None and not asked[k]:
                    continue
                hit = kept.find(cal)
                if hit is None or any(m not in hit for m in metrics):
                    fields, hit = answer_tracked(lambda c: _answer_floats(rep, c, metrics), cal)
                    kept.keep(fields, cal, hit)
                    self.worked += 1
                for i in idx:
                    out[k, i] = hit[self.rows[i].metric]

    def close(self):
        pass


def _answer_floats(row, cal, metrics) -> dict:
    from chalk.analyses.fidelity.validate import answer

    try:
        res = answer(row, cal, memo=False)
        return {m: float(res[m]) for m in metrics}
    except ChalkError:
        return {m: math.nan for m in metrics}


def usable_cpus() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


#: Relative cost of answering a point, by kind (a search walks every layout and batch; measured on the shipped set:
#: ~10 ms a search, ~6 ms a fixed deployment, ~3 ms a pool at its layout). Used to balance the workers.
_COST = {"search": 10.0, "fixed": 6.0, "row": 3.0}


def _shards(rows, n: int) -> list[list[int]]:
    """Points split into `n` shards of about equal cost (largest first onto the lightest shard)."""
    from chalk.analyses.fidelity.validate import point

    keys: dict = {}
    for r in rows:
        keys.setdefault(point(r), None)
    cost = [_COST.get(k[0], 5.0) * (1.0 if k[0] != "search" or k[5] else 2.0) for k in keys]
    load, shards = [0.0] * n, [[] for _ in range(n)]
    for p in sorted(range(len(cost)), key=lambda p: -cost[p]):
        j = int(np.argmin(load))
        shards[j].append(p)
        load[j] += cost[p]
    return [sorted(s) for s in shards]


def _serve(conn, rows, points):  # pragma: no cover - runs in a worker process
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it closes the pipes, the worker ends
    ans = Answers(rows, points)
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            conn.close()
            return
        cals, ttft, need = msg
        try:
            reply = ("ok", ans.run(cals, ttft, need), ans.worked)
        except BaseException as e:  # noqa: BLE001 - handed to the parent, which raises it
            import traceback

            reply = ("error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}", 0)
        try:
            conn.send(reply)
        except (BrokenPipeError, OSError):
            return


class ShardedAnswers:
    """`Answers` split over `workers` forked processes, each keeping its own points' answers between calls."""

    def __init__(self, rows, workers: int):
        import multiprocessing

        ctx = multiprocessing.get_context("fork")
        self.rows = rows
        self.procs, self.conns = [], []
        for shard in _shards(rows, workers):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_serve, args=(child, rows, shard), daemon=True)
            p.start()
            child.close()
            self.procs.append(p)
            self.conns.append(parent)
        self.worked = 0

    def run(self, cals, ttft: bool = False, need=None) -> np.ndarray:
        for c in self.conns:
            c.send((list(cals), ttft, need))
        out = np.full((len(cals), len(self.rows)), math.nan)
        errors, worked = [], 0
        for c in self.conns:
            status, part, n = c.recv()
            if status != "ok":
                errors.append(part)
                continue
            worked += n
            have = ~np.isnan(part)
            out[have] = part[have]
        if errors:
            self.close()
            raise RuntimeError("a cross-validation worker failed:\n" + errors[0])
        self.worked = worked
        return out

    def close(self):
        for c in self.conns:
            try:
                c.send(None)
                c.close()
            except (OSError, BrokenPipeError):
                pass
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
        self.conns, self.procs = [], []


class ExecutorAnswers:
    """`Answers` split over the shards of an executor (`chalk.executor`: Ray actors), each keeping its own points'
    answers between calls; the same points, answered the same way, so the same figures as in one process."""

    def __init__(self, rows, executor):
        self.rows = rows
        self.group = executor.shards(Answers, [(rows, s) for s in _shards(rows, max(executor.workers, 1))])
        self.worked = 0

    def run(self, cals, ttft: bool = False, need=None) -> np.ndarray:
        out = np.full((len(cals), len(self.rows)), math.nan)
        for part in self.group.call("run", list(cals), ttft, need):
            have = ~np.isnan(part)
            out[have] = part[have]
        return out

    def close(self):
        self.group.close()


def answers(rows, workers=None):
    """An `Answers` for `rows`, split over `workers` processes where more than one is asked for and fork exists
    (default: the usable CPUs, at most 8), or over an executor's shards where `workers` is one
    (`chalk.executor.executor(...)`: in-process, a process pool of its size, Ray actors). In a daemonic process
    (a multiprocessing pool's worker, which may start none of its own) every row is answered in the process."""
    import multiprocessing

    if hasattr(workers, "shards"):
        if workers.kind == "ray":
            return ExecutorAnswers(rows, workers)
        workers = workers.workers
    w = min(usable_cpus(), 8) if workers is None else int(workers)
    if w > 1 and "fork" in multiprocessing.get_all_start_methods() and not multiprocessing.current_process().daemon:
        return ShardedAnswers(rows, w)
    return Answers(rows)
