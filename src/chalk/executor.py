"""Where wide work runs: in this process, a local process pool, or Ray (a local Ray started for the run, or a
cluster at an address). One interface for `plan --portfolio`'s candidates and `validate --cv`'s folds.

Two shapes of work: `map` (independent tasks, results yielded as each finishes: portfolio candidates) and `shards`
(stateful workers answering the same calls over and over, each keeping its own memo: cross-validation's row
shards, `chalk.analyses.fidelity.fit_memo`). The answers never depend on where they ran: each task is a pure
function of its arguments, and callers order results by their own keys, never by finishing order.

Ray is an optional extra (`pip install 'chalk[ray]'`): only `RayExecutor` imports it, when it is asked for.
"""

from __future__ import annotations

import os
import socket

from chalk.errors import InputError, MissingExtraError

#: Seconds to wait for a Ray address to accept a connection before calling it unreachable.
RAY_CONNECT_TIMEOUT_S = 3.0


def usable_cpus() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


class InProcess:
    """Every task in this process, one after another."""

    kind = "in-process"
    workers = 1

    def map(self, fn, items):
        """(index, fn(item)) for each item, as each finishes."""
        for i, x in enumerate(items):
            yield i, fn(x)

    def shards(self, factory, args_list):
        return _LocalShards([factory(*a) for a in args_list])

    def describe(self) -> str:
        return self.kind

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _LocalShards:
    def __init__(self, objs):
        self.objs = objs

    def call(self, method: str, *args) -> list:
        return [getattr(o, method)(*args) for o in self.objs]

    def close(self):
        for o in self.objs:
            getattr(o, "close", lambda: None)()


class ProcessPool(InProcess):
    """Tasks over `workers` local processes (fork where it exists)."""

    kind = "process pool"

    def __init__(self, workers: int | None = None):
        self.workers = max(int(workers or usable_cpus()), 1)
        self._pool = None

    def _get(self):
        if self._pool is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            method = "fork" if "fork" in multiprocessing.get_all_start_methods() else None
            self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context(method))
        return self._pool

    def map(self, fn, items):
        from concurrent.futures import as_completed

        pool = self._get()
        futures = {pool.submit(fn, x): i for i, x in enumerate(items)}
        try:
            for f in as_completed(futures):
                yield futures[f], f.result()
        finally:
            for f in futures:
                f.cancel()

    def describe(self) -> str:
        return f"{self.kind} of {self.workers}"

    def close(self):
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None


class RayExecutor(InProcess):
    """Tasks and shards as Ray tasks and actors: a local Ray of `workers` CPUs started for the run (`address`
    None), or the cluster at `address` ('host:port', 'ray://host:port' or 'auto')."""

    kind = "ray"

    def __init__(self, address: str | None = None, workers: int | None = None):
        try:
            import ray
        except ImportError:
            raise MissingExtraError("Ray is not installed: pip install 'chalk[ray]'") from None
        if address is not None:
            _reachable(address)
        self.address = address
        self.started = not ray.is_initialized()
        if self.started:
            kw = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
            if address is None:
                kw["num_cpus"] = max(int(workers or usable_cpus()), 1)
            try:
                ray.init(address=address, **kw)
            except Exception as e:  # noqa: BLE001 - Ray raises ConnectionError, RuntimeError, ValueError...
                raise InputError(f"cannot start or reach Ray at {address or 'a local instance'}: "
                                 f"{' '.join(str(e).split())[:160]}") from None
        self.workers = max(int(ray.cluster_resources().get("CPU", 1)), 1)
        self._ray = ray

    def map(self, fn, items):
        ray = self._ray
        task = ray.remote(num_cpus=1)(_call)
        fn_ref = ray.put(fn)
        refs = {task.remote(fn_ref, x): i for i, x in enumerate(items)}
        pending = list(refs)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for r in done:
                    yield refs[r], ray.get(r)
        finally:
            for r in pending:
                ray.cancel(r)

    def shards(self, factory, args_list):
        ray = self._ray
        actor = ray.remote(num_cpus=1)(_Holder)
        return _RayShards(ray, [actor.remote(factory, a) for a in args_list])

    def describe(self) -> str:
        return f"ray ({self.address or 'local'}, {self.workers} CPUs)"

    def close(self):
        if self.started and self._ray.is_initialized():
            self._ray.shutdown()


def _call(fn, x):
    return fn(x)


class _Holder:
    """A Ray actor holding one shard object built in the actor."""

    def __init__(self, factory, args):
        self.obj = factory(*args)

    def call(self, method, *args):
        return getattr(self.obj, method)(*args)


class _RayShards:
    def __init__(self, ray, actors):
        self.ray, self.actors = ray, actors

    def call(self, method: str, *args) -> list:
        return self.ray.get([a.call.remote(method, *args) for a in self.actors])

    def close(self):
        for a in self.actors:
            self.ray.kill(a)
        self.actors = []


def _reachable(address: str) -> None:
    """Refuse an address nothing listens on, in seconds rather than Ray's minutes of retries."""
    if address == "auto":
        return
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise InputError(f"a Ray address is host:port, ray://host:port or auto, got {address[:60]!r}")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=RAY_CONNECT_TIMEOUT_S):
            pass
    except OSError as e:
        raise InputError(f"Ray at {address[:60]} is unreachable ({e.strerror or type(e).__name__})") from None


def executor(ray: bool = False, address: str | None = None, workers: int | None = None):
    """The executor asked for: Ray at `address` (or $RAY_ADDRESS with `ray`), a local Ray with `ray`, a process pool
    of `workers` (> 1), else this process."""
    if address is None and ray:
        address = os.environ.get("RAY_ADDRESS") or None
    if address is not None or ray:
        return RayExecutor(address, workers)
    if workers is not None and int(workers) > 1:
        return ProcessPool(workers)
    return InProcess()
