"""The work inside a validation answer kept by exactly what it is given, while `fit_memo.Answers` works answers
out: a fit asks the step model and the request simulator again only what a new parameter value changes.

- Kernel-table lookups (`kernel_memo`) depend on the chip and the op's shape, never on the calibration: the kernel
  profile's timing methods are kept by their exact arguments, so a new calibration re-times the same grid of shapes
  (a layout search's arrays) from memory.
- Stage steps' work (`step_memo`: all but their host overhead) is kept by its arguments and the calibration
  fields it reads, found as `fit_memo` finds an answer's: each step is worked out on a tracked copy of the
  calibration, one copy per answer and layout, and every field ever read from that copy counts (a plan the step
  model keeps by the copy's identity, from an earlier step of the same layout, carries that step's reads). A hit
  adds its fields to the answer's.
- Closed-loop replays in the request simulator (`replay_memo`) are kept by their client queue, step cost, batch
  and options, and run on the compiled loop where numba loads (the same loop, statement for statement and in the
  same floating-point order: identical answers).

So a fitting step that moves a field an answer reads but that leaves a step or a replay unchanged (the scheduler
cap above a deployment's concurrency, the KV reserve, the request latency) costs that answer little. Each memo
patches the functions it keeps only while its block runs, and every key holds the objects whose identity it uses.
"""

from __future__ import annotations

from collections import OrderedDict
from contextlib import contextmanager

import numpy as np

from chalk.analyses.step.calibration import Calibration


#: Bytes of kernel times `kernel_memo` keeps before it forgets them all.
KERNEL_MEMO_BYTES = 256e6
#: `KernelProfile` methods kept by `kernel_memo`: pure functions of the profile (one per chip and framework, its
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
    if t is tuple or t is list:  # plain items keyed in line (the same key, one call fewer each)
        return (t, tuple([(type(v), v) if type(v) in _PLAIN else _arg_key(v) for v in x]))
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
def kernel_memo():
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


#: Closed-loop replays `replay_memo` keeps, most recently used first out (a replay holds its run's per-request
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
def replay_memo():
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


#: Bytes of stage steps `step_memo` keeps (their arrays; least recently asked first out): a step over a search's
#: grid holds a few MB, one at a point a few kB.
KEPT_STEP_BYTES = 128e6
_STEPS: OrderedDict = OrderedDict()  # {arguments: (objects held, {fields: {their values: step}}, bytes)}
_STEP_BYTES = [0.0]
_COPIES: OrderedDict = OrderedDict()
STEPS_REUSED = [0]  # stage steps answered from `_STEPS` (for tests and benchmarks)


def _step_bytes(d: dict) -> int:
    """Bytes of a stage step, from its size alone: 64 per value and per op field, and per point of its grid
    (`stage_time_s`'s size) 8 per value of its own and 52 per op (three float arrays and a 7-character bound
    name). Within about 1.1x above a count of every array's bytes (up to 1.8x for a step of scalars), at no cost
    per array."""
    ops = d.get("ops") or {}
    n = np.size(d.get("stage_time_s", d.get("base", 0.0)))
    return 64 * (len(d) + 8 * len(ops)) + n * (8 * len(d) + 52 * len(ops))


def _copy_step(d: dict) -> dict:
    """A stage step's answer as a caller may change it: its dicts and writeable arrays copied."""
    return {k: (v.copy() if isinstance(v, np.ndarray) and v.flags.writeable else dict(v) if isinstance(v, dict)
                else v) for k, v in d.items()}


@contextmanager
def step_memo(reads_now: list, tracked, own=None):
    """While the block runs, the work of a stage step (`step_model._stage_core`: every op but the host overhead,
    which `stage_ops` adds after it) is kept by its exact arguments and the calibration fields it depends on, so a
    calibration that moves a field that work never reads (the scheduler cap at a concurrency below it, the KV
    reserve, the request latency, and the overhead fields, read by `_stage_finish` on the answer's own calibration)
    reuses it.

    The fields are found as `Answers` finds an answer's: the step is worked out on a tracked copy of the
    calibration, one copy per answer and layout, and every field ever read from that copy counts (a plan the step
    model kept by the copy's identity from an earlier step of the same layout carries that step's reads, so they
    count here too). A hit adds its fields to the answer's reads, less those the answer set itself (`own(cal)`:
    fields of the calibration the step is given that the answer's code replaced, `fit_memo.own_fields`; the step
    is kept by their values all the same). `reads_now`: the one-item list holding the set an answer's reads go to
    (None when none is tracked); `tracked(cal)`: a tracked copy of `cal` (`fit_memo`'s)."""
    from chalk.analyses.step import step_model as SM

    plain = SM._stage_core
    if getattr(plain, "_kept", False):  # already inside one
        yield
        return

    def kept(costs, system, tp, attn_dp, pp, ep, decode_seqs, prefill_tokens, context, prompt_len, cal, **kw):
        args = (costs, system, tp, attn_dp, pp, ep, decode_seqs, prefill_tokens, context, prompt_len)
        reads = reads_now[0]
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
                    reads.update(fields if own is None else set(fields) - own(cal))
                    STEPS_REUSED[0] += 1
                    return _copy_step(hit)
        group = (id(cal), key[0], key[1], lay, id(kw.get("kernels")))
        held = _COPIES.get(group)
        if held is None:
            held = _COPIES[group] = (cal, tracked(cal), set())
            if len(_COPIES) > 64:
                _COPIES.popitem(last=False)
        _, copy, seen = held
        reads_now[0] = seen
        try:
            out = plain(*args, copy, **kw)
        finally:
            reads_now[0] = reads
        reads.update(seen if own is None else seen - own(cal))
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
    SM._stage_core = kept
    try:
        yield
    finally:
        SM._stage_core = plain
