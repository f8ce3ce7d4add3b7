"""Validation answers kept by the calibration fields they read: a fit asks chalk again only what a new parameter
value can change.

An answer (one validation point: `chalk.analyses.fidelity.validate.point`) is a deterministic function of the calibration
fields its computation reads. Each answer is worked out once under a tracked copy of the calibration that records
every field read (`_Tracked`), and is reused for any later calibration that agrees on those fields, whatever its
other fields hold: the same reads returning the same values replay the same computation. A dense model on an NVIDIA
chip never reads the AMD factors or the expert-balancer width, so a coordinate-descent step over those reuses it.

Kernel-table lookups depend on the chip and the op's shape, never on the calibration: while answers are worked out,
the kernel profile's timing methods are kept by their exact arguments (`_kernel_memo`), so a new calibration
re-times the same grid of shapes (a layout search's arrays) from memory.

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
from collections import OrderedDict
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
    to copy it are not counted: the copy is a `_Tracked` too, and an unchanged field read from it counts then."""

    def __getattribute__(self, name):
        reads = _READS[0]
        if reads is not None:
            if name in _FIELD_SET:
                if sys._getframe(1).f_code not in _COPYING:
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


#: Bytes of kernel times `_kernel_memo` keeps before it forgets them all.
KERNEL_MEMO_BYTES = 256e6
#: `KernelProfile` methods kept by `_kernel_memo`: pure functions of the profile (one per chip and framework, its
#: tables immutable) and their arguments. The array lookup behind them (`_time`) too, for the shapes' own calls.
KEPT_KERNEL_METHODS = ("gemm_time_s", "attention_time_s", "moe_time_s", "allreduce_time_s", "_time")
_KERNEL_TIMES: dict = {}
_KERNEL_BYTES = [0.0]


_PLAIN = frozenset((float, int, bool, str, type(None), np.float64, np.int64))


def _arg_key(x):
    """A hashable stand-in for an argument, equal exactly when the argument is (arrays by dtype, shape, bytes)."""
    t = type(x)
    if t in _PLAIN:
        return (t, x)  # 4 and 4.0 may take different paths
    if t is tuple or t is list:
        return (t, tuple([_arg_key(v) for v in x]))
    if isinstance(x, np.ndarray):
        return (np.ndarray, x.dtype.str, x.shape, x.tobytes())
    if isinstance(x, (tuple, list)):
        return (t, tuple([_arg_key(v) for v in x]))
    hash(x)  # TypeError for anything else unhashable: that call is not kept
    return (t, x)


def _size(key) -> int:
    """Bytes a key holds, roughly: its byte strings, and 8 for anything else."""
    n, todo = 0, [key]
    while todo:
        k = todo.pop()
        if type(k) is tuple:
            todo.extend(k)
        else:
            n += len(k) if type(k) is bytes else 8
    return n


def _copy(v):
    if isinstance(v, np.ndarray):
        return v.copy()
    if isinstance(v, tuple):
        return tuple(_copy(x) for x in v)
    return v


def _kept_method(name, plain):
    def kept(self, *args, **kw):
        try:
            key = (id(self), name, _arg_key(args), _arg_key(tuple(sorted(kw.items()))))
        except TypeError:
            return plain(self, *args, **kw)
        hit = _KERNEL_TIMES.get(key)
        if hit is None:
            if _KERNEL_BYTES[0] > KERNEL_MEMO_BYTES:
                _KERNEL_TIMES.clear()
                _KERNEL_BYTES[0] = 0.0
            hit = _KERNEL_TIMES[key] = (self, plain(self, *args, **kw))  # the profile held: its id stays its own
            _KERNEL_BYTES[0] += 2 * _size(key) + 200
        return _copy(hit[1])

    kept._kept = True
    return kept


@contextmanager
def _kernel_memo():
    """The `KEPT_KERNEL_METHODS` of `KernelProfile` kept by their exact arguments while the block runs (a method the
    class does not have is left out); the kept times outlive the block, for the next one."""
    try:
        from chalk.analyses.step.kernels import KernelProfile
    except ImportError:  # pragma: no cover - kernel tables absent
        yield
        return
    plain = {n: KernelProfile.__dict__.get(n) for n in KEPT_KERNEL_METHODS}
    plain = {n: f for n, f in plain.items() if callable(f) and not getattr(f, "_kept", False)}
    for n, f in plain.items():
        setattr(KernelProfile, n, _kept_method(n, f))
    try:
        yield
    finally:
        for n, f in plain.items():
            setattr(KernelProfile, n, f)


#: Closed-loop replays `_replay_memo` keeps, most recently used first out (a replay holds its run's per-request
#: arrays: about 1 MB at 20,000 requests).
KEPT_REPLAYS = 128
_REPLAYS: OrderedDict = OrderedDict()
_QUEUES: OrderedDict = OrderedDict()
_COMPILED: list = []  # [whether the compiled loop loads here], worked out once per process


def compiled_loop() -> bool:
    """Whether the simulator's compiled event loop (numba, `chalk[fast]`) loads in this process."""
    if not _COMPILED:
        try:
            import chalk.analyses.traffic.simulate_compiled  # noqa: F401
            _COMPILED.append(True)
        except (ImportError, RuntimeError, OSError):
            _COMPILED.append(False)
    return _COMPILED[0]


def _lru(table: OrderedDict, key, make, size: int):
    hit = table.get(key)
    if hit is None:
        hit = table[key] = make()
        if len(table) > size:
            table.popitem(last=False)
    else:
        table.move_to_end(key)
    return hit


@contextmanager
def _replay_memo():
    """While the block runs, the request simulator's closed-loop replays (`simulate.closed_loop_requests` and
    `simulate.simulate_continuous`, as `serving.closed_loop_latencies` calls them) are kept by their exact inputs:
    a client queue by its arguments, a run by its queue, its step cost (a frozen dataclass: every coefficient), its
    batch and every other argument. A calibration that changes nothing a replay is given reuses it, whichever
    fields it read on the way. A run asked without a `loop` takes the compiled loop where numba loads (the same
    loop, statement for statement and in the same floating-point order: identical answers) whatever its length."""
    from chalk.analyses.traffic import simulate as sim

    plain_queue, plain_run = sim.closed_loop_requests, sim.simulate_continuous
    if getattr(plain_run, "_kept", False):  # already inside one
        yield
        return
    loop = {"loop": "compiled"} if compiled_loop() else {}

    def queue(*args, **kw):
        try:
            key = (_arg_key(args), _arg_key(tuple(sorted(kw.items()))))
        except TypeError:  # a length distribution: not kept
            return plain_queue(*args, **kw)
        return _lru(_QUEUES, key, lambda: plain_queue(*args, **kw), KEPT_REPLAYS)

    def run(requests, step_cost, *args, **kw):
        try:
            key = (id(requests), step_cost, _arg_key(args), _arg_key(tuple(sorted(kw.items()))))
            hash(key)
        except TypeError:
            return plain_run(requests, step_cost, *args, **kw)
        # the queue is held beside its run, so its id stays its own while the run is kept
        return _lru(_REPLAYS, key, lambda: (requests, plain_run(requests, step_cost, *args, **{**loop, **kw})),
                    KEPT_REPLAYS)[1]

    run._kept = True
    sim.closed_loop_requests, sim.simulate_continuous = queue, run
    try:
        yield
    finally:
        sim.closed_loop_requests, sim.simulate_continuous = plain_queue, plain_run


#: Bytes of stage steps `_step_memo` keeps (their arrays; least recently asked first out): a step over a search's
#: grid holds a few MB, one at a point a few kB.
KEPT_STEP_BYTES = 128e6
_STEPS: OrderedDict = OrderedDict()  # {arguments: (objects held, {fields: {their values: step}}, bytes)}
_STEP_BYTES = [0.0]
_COPIES: OrderedDict = OrderedDict()
STEPS_REUSED = [0]  # stage steps answered from `_STEPS` (for tests and benchmarks)


def _step_bytes(d: dict) -> int:
    """Bytes of a stage step's arrays, roughly (its ops' fields and its own), and 64 for each other value."""
    n = 0
    for v in (*d.values(), *(x for op in (d.get("ops") or {}).values() for x in op)):
        n += v.nbytes if isinstance(v, np.ndarray) else 64
    return n


def _copy_step(d: dict) -> dict:
    """A stage step's answer as a caller may change it: its dicts and writeable arrays copied."""
    return {k: (v.copy() if isinstance(v, np.ndarray) and v.flags.writeable else dict(v) if isinstance(v, dict)
                else v) for k, v in d.items()}


@contextmanager
def _step_memo():
    """While the block runs, `stage_step` (as `chalk.analyses.step.parallel`, `serving` and `validate` call it) is
    kept by its exact arguments and the calibration fields it depends on, so a calibration that moves a field the
    step never reads (the scheduler cap at a concurrency below it, the KV reserve, the request latency) reuses it.

    The fields are found as `Answers` finds an answer's: the step is worked out on a tracked copy of the
    calibration, one copy per answer and layout, and every field ever read from that copy counts (a plan the step
    model kept by the copy's identity from an earlier step of the same layout carries that step's reads, so they
    count here too). A hit adds its fields to the answer's reads."""
    from chalk.analyses.fidelity import validate as VA
    from chalk.analyses.step import parallel as PL
    from chalk.analyses.traffic import serving as SV

    plain = PL.stage_step
    if getattr(plain, "_kept", False):  # already inside one
        yield
        return

    def kept(costs, system, tp, attn_dp, pp, ep, decode_seqs, prefill_tokens, context, prompt_len, cal, **kw):
        args = (costs, system, tp, attn_dp, pp, ep, decode_seqs, prefill_tokens, context, prompt_len)
        reads = _READS[0]
        if reads is None or not isinstance(cal, Calibration):
            return plain(*args, cal, **kw)
        try:
            lay = _arg_key((tp, attn_dp, pp, ep))
            key = (id(costs), id(system), lay, _arg_key((decode_seqs, prefill_tokens, context, prompt_len)),
                   tuple(sorted((k, (id(v),) if k == "kernels" and v else _arg_key(v)) for k, v in kw.items())))
            hash(key)
        except TypeError:
            return plain(*args, cal, **kw)
        entry = _STEPS.get(key)
        if entry is None:
            entry = _STEPS[key] = [(costs, system, kw.get("kernels")), {}, 0]  # held: their ids stay their own
        else:
            _STEPS.move_to_end(key)
            for fields, table in entry[1].items():
                hit = table.get(tuple([object.__getattribute__(cal, f) for f in fields]))
                if hit is not None:
                    reads.update(fields)
                    STEPS_REUSED[0] += 1
                    return _copy_step(hit)
        group = (id(cal), key[0], key[1], lay, id(kw.get("kernels")))
        held = _COPIES.get(group)
        if held is None:
            held = _COPIES[group] = (cal, _Tracked(**{f: object.__getattribute__(cal, f) for f in _FIELDS}), set())
            if len(_COPIES) > 64:
                _COPIES.popitem(last=False)
        _, copy, seen = held
        _READS[0] = seen
        try:
            out = plain(*args, copy, **kw)
        finally:
            _READS[0] = reads
        reads.update(seen)
        fields = tuple(sorted(seen))
        step = _copy_step(out)
        size = _step_bytes(step)
        entry[1].setdefault(fields, {})[tuple([object.__getattribute__(cal, f) for f in fields])] = step
        entry[2] += size
        _STEP_BYTES[0] += size
        while _STEP_BYTES[0] > KEPT_STEP_BYTES and len(_STEPS) > 1:
            _, old = _STEPS.popitem(last=False)  # the least recently asked (never this one: it was just asked)
            _STEP_BYTES[0] -= old[2]
        return out

    kept._kept = True
    mods = [m for m in (PL, SV, VA) if getattr(m, "stage_step", None) is plain]
    for m in mods:
        m.stage_step = kept
    try:
        yield
    finally:
        for m in mods:
            m.stage_step = plain


def _metric_wanted(ttft: bool):
    from chalk.analyses.fidelity.validate import FITTED_METRICS

    return lambda r: r.metric in FITTED_METRICS or (ttft and r.metric == "ttft_s")


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
        with _kernel_memo(), _replay_memo(), _step_memo():
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
    (`chalk.executor.executor(...)`: in-process, a process pool of its size, Ray actors)."""
    import multiprocessing

    if hasattr(workers, "shards"):
        if workers.kind == "ray":
            return ExecutorAnswers(rows, workers)
        workers = workers.workers
    w = min(usable_cpus(), 8) if workers is None else int(workers)
    if w > 1 and "fork" in multiprocessing.get_all_start_methods():
        return ShardedAnswers(rows, w)
    return Answers(rows)
