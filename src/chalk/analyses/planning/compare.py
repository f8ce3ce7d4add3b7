"""One question asked of several chips: `-H h100-sxm,h200,b200,mi300x` on `estimate` and `throughput`."""

from __future__ import annotations

from chalk.errors import ChalkError, FitError, InputError


def hardware_list(text) -> list[str]:
    """'h100-sxm,h200' -> ['h100-sxm', 'h200']; a single name stays a one-element list."""
    from chalk.specs.demand import same_hardware_twice

    names = [h.strip() for h in str(text).split(",")]
    if any(not n for n in names):
        raise InputError(f"hardware list has an empty name: {text!r}")
    same_hardware_twice(names, text)
    return names


def compare(fn, hardware: list[str], *args, **kwargs) -> list[dict]:
    """`fn(hardware=h, ...)` for each chip: {'hardware': h, 'result': ..., 'error': None} in the given order.

    A chip on which the question has no answer (the model does not fit, a constraint cannot be met) gets its
    one-line reason in 'error' instead of stopping the comparison; unknown names still raise."""
    from chalk.specs.catalog import as_system

    out = []
    for h in hardware:
        as_system(h)  # unknown names fail here, before any work
        try:
            out.append({"hardware": h, "result": fn(*args, hardware=h, **kwargs), "error": None})
        except FitError as e:
            out.append({"hardware": h, "result": None, "error": str(e)})
    if all(o["result"] is None for o in out):
        raise FitError("no chip answers: " + "; ".join(f"{o['hardware']}: {o['error']}" for o in out))
    return out


__all__ = ["compare", "hardware_list", "ChalkError"]
