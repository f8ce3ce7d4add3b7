"""Issue 26, item 5: every public call in `chalk.__all__`, every one of its parameters, one bad value at a time.

The test walks `chalk.__all__`, reads each callable's parameters with `inspect` (and, for `**kwargs`, those of
the function they are passed to), and calls it with one bad value of every kind in place of one good argument:
wrong type, NaN, inf, negative, zero, huge, tiny, empty, None, a list, a dict, bytes, complex, Decimal, an array
with a NaN, a bool. The only outcome allowed is a `ChalkError` subclass; any other exception fails, and so does
a call that answers (silent acceptance) unless the value is legitimate for that parameter by a stated rule
(`legitimate` below: None where None is the default, zero where zero is allowed, ...). A TypeError for an
unknown keyword is not a bad value and is not tried.
"""

from __future__ import annotations

import inspect
import math
import warnings
from decimal import Decimal

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import chalk
from chalk.analyses.economics.pricing import Assumptions
from chalk.errors import ChalkError
from chalk.specs import arguments as A

M, H = "llama-3.1-8b", "h100-sxm"

#: one bad value of every kind the issue lists
BAD = {
    "str": "x", "empty": "", "none": None, "nan": math.nan, "inf": math.inf, "neg": -5, "zero": 0,
    "huge": 10**30, "tiny": 5e-324, "list": ["bf16"], "dict": {}, "bytes": b"x", "complex": 1j,
    "decimal_nan": Decimal("NaN"), "decimal": Decimal("3.5"), "array_nan": np.array([1.0, math.nan]),
    "bool": True,
}


def _session(*args, **kw):
    return chalk.Session(*args, **kw).estimate()


def _session_estimate(**kw):
    return chalk.Session(M, H).estimate(**kw)


def _assumptions(**kw):
    return chalk.pricing(Assumptions(**kw))


def _estimate_options():
    from chalk.analyses.step.estimate import estimate

    return inspect.signature(estimate).parameters


#: the smallest portfolio: one model on one chip
PORTFOLIO = {"chips": ["h100-sxm"], "settings": {"sim_requests": 200},
             "models": [{"name": "m", "model": M, "rate": 2, "input_len": 500, "output_len": 100,
                         "precisions": ["bf16"], "engines": ["vllm"], "modes": ["aggregated"]}]}

#: public name -> (callable, positional args, good keyword args, where `**kwargs` go, how many values to try)
CALLS = {
    "estimate": (chalk.estimate, (M, H), {}, None, None),
    "sweep": (chalk.sweep, (M, H), {"batches": [1, 2]}, None, None),
    "Session": (_session, (M, H), {}, _estimate_options, None),
    "Session.estimate": (_session_estimate, (), {}, _estimate_options, None),
    "throughput": (chalk.throughput, (M, H), {"input_len": 1000, "output_len": 200}, None, None),
    "layout": (chalk.layout, (M, H), {}, None, None),
    "simulate": (chalk.simulate, (M, H), {"rate": 5, "requests": 50}, None, None),
    "train": (chalk.train, (M,), {}, None, None),
    "pricing": (chalk.pricing, (), {}, None, None),
    "pricing(Assumptions)": (_assumptions, (), {}, None, None),
    "validate": (chalk.validate, (), {}, None, 8),  # each call reads the validation set: a sample of values
    "plan": (chalk.plan, (M, H), {"input_len": 1000, "output_len": 200, "rate": 5, "sim_requests": 200,
                                  "curves": False}, None, 8),
    # a one-model, one-chip portfolio: each legitimate call plans it (a sample of values per parameter)
    "portfolio": (chalk.portfolio, (PORTFOLIO,), {}, None, 6),
    # each answer draws a figure or builds a page: a sample of values per parameter
    "report": (chalk.report, (M, H), {}, None, 6),
    "plot": (chalk.plot, ("latency-vs-batch",), {"model": M, "hardware": H}, None, 6),
}
#: public names the table above covers (each is one or more rows of it)
COVERED = {"estimate", "sweep", "Session", "throughput", "layout", "simulate", "train", "pricing", "validate",
           "plan", "portfolio", "report", "plot", "__version__"}
#: public calls that take no argument (nothing to get wrong): each is called once in tests/test_api.py
NO_ARGUMENTS = {"hardware", "models", "lecture"}

#: text parameters where any string is a legitimate value (free text, or a repository name chalk cannot check)
FREE_TEXT = {"ratio_source", "draft_model"}
#: parameters where zero is legitimate
ZERO_OK = {"seed", "cache_hit", "obsolescence_probability", "client_latency_s", "rl_tokens", "usd_per_kwh",
           "acceptance"}
#: positive real numbers with no lower bound above zero: 5e-324 is legitimate
TINY_OK = A.POSITIVE | A.NON_NEGATIVE | {"batch", "context", "batches", "contexts", "cache_hit",
                                         "obsolescence_probability", "active_params", "multiplies_per_byte"}
#: None is legitimate for these whatever their default says (the estimate options' documented "use the default")
NONE_OK = {"layout", "speculative", "kv_precision", "precision"}  # precision None: the checkpoint's own

#: (call, parameter, value kind) that still break the contract; strict xfail, so a fix is noticed. Empty: all pass.
KNOWN_FAILURES: set[tuple[str, str, str]] = set()


def _parameters(name):
    """(parameter, default) for every parameter of the public call `name`, `**kwargs` expanded."""
    fn, args, kw, options, _ = CALLS[name]
    if name == "pricing(Assumptions)":
        return [(f.name, f.default) for f in Assumptions.__dataclass_fields__.values()]
    if name == "Session.estimate":
        sig = inspect.signature(chalk.Session.estimate).parameters
        own = [(p, v.default) for p, v in sig.items() if p not in ("self",) and v.kind is not v.VAR_KEYWORD]
    else:
        target = chalk.Session.__init__ if name == "Session" else fn
        sig = inspect.signature(target).parameters
        own = [(p, v.default) for p, v in sig.items() if p != "self" and v.kind is not v.VAR_KEYWORD]
    out = list(own)
    if options is not None:
        seen = {p for p, _ in out}
        out += [(p, v.default) for p, v in options().items() if p not in seen and p not in ("model", "hardware")]
    return out


def legitimate(param: str, kind: str, default) -> bool:
    """A value the parameter may take by the API's documented rules (so answering is not silent acceptance)."""
    if kind == "none":
        return default is None or param in NONE_OK
    if kind == "zero":
        return param in ZERO_OK
    if kind == "tiny":
        return param in TINY_OK
    if kind == "bool":
        return param in A.FLAGS
    if kind in ("str", "empty"):
        return param in FREE_TEXT
    if kind == "decimal":  # a plain positive number in another type: refusing it is fine, so is using it
        return True
    return False


def _cases():
    for name in CALLS:
        limit = CALLS[name][4]
        for param, default in _parameters(name):
            kinds = list(BAD)
            if limit is not None:  # a fixed sample, different per parameter, every kind covered across them
                start = sum(map(ord, param)) % len(kinds)
                kinds = (kinds * 2)[start:start + limit]
            for kind in kinds:
                marks = ([pytest.mark.xfail(strict=True, reason="known failure, issue 26")]
                         if (name, param, kind) in KNOWN_FAILURES else [])
                yield pytest.param(name, param, kind, default, id=f"{name}-{param}-{kind}", marks=marks)


def _call(name, param, value):
    fn, args, kw, _, _ = CALLS[name]
    args, kw = list(args), dict(kw)
    positional = {"train": ["model"], "plot": ["kind"], "portfolio": ["source"]}.get(name,
                                                                                   ["model", "hardware"][:len(args)])
    if param in positional:
        args[positional.index(param)] = value
    else:
        kw[param] = value
    return fn(*args, **kw)


def test_every_public_name_is_covered():
    assert set(chalk.__all__) == COVERED | NO_ARGUMENTS
    for name in NO_ARGUMENTS:
        assert not inspect.signature(getattr(chalk, name)).parameters, name
    for name in CALLS:
        assert _parameters(name), name


@pytest.mark.parametrize("name,param,kind,default", list(_cases()))
def test_one_bad_argument(name, param, kind, default):
    value = BAD[kind]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _call(name, param, value)
    except ChalkError as e:
        assert str(e).strip() and "\n" not in str(e).strip(), f"{name}({param}={value!r}): not one line: {e!r}"
        return
    except Exception as e:  # noqa: BLE001 -- the contract under test: nothing but a ChalkError escapes
        pytest.fail(f"{name}({param}={value!r}) raised {type(e).__name__}: {e}")
    assert legitimate(param, kind, default), f"{name}({param}={value!r}) was accepted silently"


@given(name=st.sampled_from(["estimate", "Session.estimate", "throughput", "train", "pricing(Assumptions)"]),
       data=st.data())
@settings(max_examples=40, deadline=None)
def test_bad_numbers_anywhere(name, data):
    """Hypothesis: numbers outside every parameter's range (huge, negative, non-finite, complex) in any numeric
    parameter of the cheap calls: a ChalkError or, where the rules allow the value, an answer."""
    params = [(p, d) for p, d in _parameters(name)
              if p in A.COUNTS | A.POSITIVE | A.NON_NEGATIVE | A.QUANTITIES | A.LENGTHS | set(A.FRACTIONS)
              | {"tokens", "seed", "active_params", "multiplies_per_byte", "cache_context", "mode_context"}]
    param, default = data.draw(st.sampled_from(params))
    value = data.draw(st.one_of(
        st.floats(max_value=0, allow_nan=False), st.floats(min_value=1e16, allow_infinity=True),
        st.just(math.nan), st.integers(min_value=10**16), st.integers(max_value=0),
        st.complex_numbers(min_magnitude=1, max_magnitude=10).filter(lambda z: z.imag != 0)))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _call(name, param, value)
    except ChalkError:
        return
    assert value == 0 and param in ZERO_OK, f"{name}({param}={value!r}) was accepted silently"
