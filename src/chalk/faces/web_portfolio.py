"""The explorer's "Portfolio" tab: a portfolio YAML in (examples/portfolio.yaml or an upload), the cheapest assignment
of its models to chips, layouts and regions out, with the replay's p99s and what binds. Thin: it makes the call
`chalk plan --portfolio FILE` makes (`chalk.analyses.planning.portfolio.portfolio`, in this process) and formats it;
no formulas."""

from __future__ import annotations

import hashlib
from pathlib import Path

from chalk.errors import InputError
from chalk.faces.fmt import num, seconds, usd

#: The example portfolio of a source checkout (absent from an installed wheel: then only an upload is offered).
EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "portfolio.yaml"
#: Answers kept (one per portfolio file's contents).
CACHE_ENTRIES = 16


def _answer(contents: bytes, _path: str):
    """The portfolio answer for the file at `_path`, whose bytes are `contents` (the cache key): the call
    `chalk plan --portfolio` makes, candidates in this process, no results file. A progress bar counts the
    candidates while they run and is removed when they are done."""
    import streamlit as st

    from chalk.analyses.planning.portfolio import portfolio

    bar = st.progress(0.0, text="planning every candidate (model x chip x precision x engine x mode)")
    try:
        return portfolio(_path, progress=lambda done, total: bar.progress(
            done / total if total else 1.0, text=f"candidates planned and replayed: {done} of {total}"))
    finally:
        bar.empty()


_CACHED: list = []


def cached_answer(contents: bytes, path: str):
    """`_answer` memoised on the file's contents (st.cache_data: a copy per caller, so no session alters
    another's answer)."""
    import streamlit as st

    if not _CACHED:
        _CACHED.append(st.cache_data(show_spinner="Placing the portfolio's models at the least total cost...",
                                     max_entries=CACHE_ENTRIES)(_answer))
    return _CACHED[0](contents, path)


def _no_files(path: Path) -> None:
    """Refuse an uploaded portfolio that names files (a trace, a diurnal CSV): an upload may not read the
    server's files. One InputError line naming the model."""
    from chalk.specs.catalog import read_yaml

    data = read_yaml(path, path.name)
    for i, m in enumerate(data.get("models") or []):
        if isinstance(m, dict) and (m.get("trace") is not None or isinstance(m.get("diurnal"), str)):
            what = "a trace" if m.get("trace") is not None else "a diurnal CSV"
            raise InputError(f"{path}: models[{i}] ({m.get('name') or m.get('model')}) names {what} file: an uploaded "
                             "portfolio cannot read files on the server; give its demand as users or rate (and a "
                             "diurnal list), or run chalk plan --portfolio FILE on your own machine")


def _saved_upload(up) -> Path:
    """An uploaded portfolio YAML saved in the server's private upload folder (at most MAX_UPLOAD_BYTES)."""
    from chalk.faces.web import _UPLOAD_NAMES, MAX_UPLOAD_BYTES, upload_root

    data = up.getvalue()
    if len(data) > MAX_UPLOAD_BYTES:
        raise InputError(f"the upload is {len(data):,} bytes; a portfolio YAML of at most {MAX_UPLOAD_BYTES:,} "
                         "bytes is taken")
    d = upload_root() / f"portfolio-{hashlib.sha1(data).hexdigest()[:12]}"
    d.mkdir(parents=True, exist_ok=True)
    path = d / "portfolio.yaml"
    path.write_bytes(data)
    _UPLOAD_NAMES[str(path)] = Path(str(up.name)).name[:80] or "portfolio.yaml"
    return path


def _source(st):
    """(path, label) of the portfolio to answer, or None while an upload is awaited."""
    from chalk.faces.web import shown

    choices = (["examples/portfolio.yaml"] if EXAMPLE.exists() else []) + ["upload a portfolio YAML"]
    pick = st.radio("portfolio", choices, horizontal=True, key="portfolio_source")
    if pick == "examples/portfolio.yaml":
        from chalk.faces.web import _UPLOAD_NAMES

        _UPLOAD_NAMES[str(EXAMPLE)] = "examples/portfolio.yaml"  # messages name it as the user knows it
        return EXAMPLE, "examples/portfolio.yaml"
    up = st.file_uploader("portfolio YAML (the form of examples/portfolio.yaml)", type=["yaml", "yml"],
                          key="portfolio_upload")
    if up is None:
        st.info("Upload a portfolio YAML: models with their demand and targets, the chips, the fleet's limits "
                "(see examples/portfolio.yaml).")
        return None
    path = _saved_upload(up)
    _no_files(path)
    return path, shown(Path(str(up.name)).name)


def _ms(v) -> str:
    return "-" if v is None else seconds(v)


def _targets(t: dict) -> str:
    parts = []
    if t.get("min_user_tps"):
        parts.append(f"≥ {num(t['min_user_tps'])} tok/s per user")
    if t.get("ttft_p99_s"):
        parts.append(f"TTFT p99 ≤ {seconds(t['ttft_p99_s'])}")
    if t.get("tpot_p99_s"):
        parts.append(f"TPOT p99 ≤ {seconds(t['tpot_p99_s'])}")
    return "; ".join(parts) or "none"


def tab_portfolio(st, common, batch, context, r):
    from chalk.faces.web import shown

    st.caption("Several models, each with its demand and latency targets, placed on the chips a fleet can rent at "
               "the least total cost within its limits (GPUs per chip type, budget, power, regions): the answer of "
               "chalk plan --portfolio FILE. The sidebar's model, chip and batch do not apply here.")
    src = _source(st)
    if src is None:
        return
    path, label = src
    contents = Path(path).read_bytes()
    with st.expander(f"the portfolio file ({label})"):
        st.code(contents.decode("utf-8", "replace"), language="yaml")
    res = cached_answer(contents, str(path))
    tot = res["total"]
    n = len(res["models"])
    st.markdown(f"**Portfolio {label}: {num(n)} model{'s' if n != 1 else ''} on {num(tot['gpus'])} "
                f"GPU{'s' if tot['gpus'] != 1 else ''}, "
                f"{usd(tot['usd_per_hour'])} per hour** · binding: "
                f"{shown(', '.join(res['binding']) or 'nothing')} · "
                f"{'optimal' if res['proven_optimal'] else 'best found, not proven optimal'}")
    m = st.columns(4)
    m[0].metric("$ per hour (fleet)", usd(tot["usd_per_hour"]))
    m[1].metric("$ per day (fleet, at peak)", usd(tot["usd_per_day"]))
    m[2].metric("GPUs (fleet)", num(tot["gpus"]))
    m[3].metric("Power (fleet, TDP x PUE)", "n/a" if tot["power_mw"] is None else f"{tot['power_mw'] * 1e3:,.4g} kW")
    rows = res["models"]
    st.dataframe({"model": [x["name"] for x in rows], "checkpoint": [x["model"] for x in rows],
                  "chip": [x["chip"] for x in rows], "region": [x["region"] or "-" for x in rows],
                  "engine": [x["engine"] or "-" for x in rows], "precision": [x["precision"] for x in rows],
                  "mode": [x["mode"] for x in rows], "layout": [x["layout"] for x in rows],
                  "GPUs": [x["gpus"] for x in rows], "$/GPU-hour": [usd(x["usd_per_gpu_hour"]) for x in rows],
                  "$/hour": [usd(x["usd_per_hour"]) for x in rows],
                  "replay p99 TTFT": [_ms(x["ttft_p99_s"]) for x in rows],
                  "replay p99 TPOT": [_ms(x["tpot_p99_s"]) for x in rows]}, width="stretch")
    # the long text columns as a wrapping table (a dataframe cell cuts them off at its width)
    st.table({"model": [x["name"] for x in rows], "targets": [_targets(x.get("targets") or {}) for x in rows],
              "what binds": ["; ".join(x["binds"]) for x in rows],
              "its own cheapest option": [f"{x['alone']['chip']} in {x['alone']['region'] or 'any region'}, "
                                          f"{usd(x['alone']['usd_per_hour'])}/hour" for x in rows]})
    if res["constraints"]:
        st.subheader("Fleet constraints")
        st.table({"constraint": [k["name"] for k in res["constraints"]],
                  "limit": [f"{num(k['limit'])} {k['unit']}" for k in res["constraints"]],
                  "used": [f"{num(k['used'])} {k['unit']}" for k in res["constraints"]],
                  "binds": ["yes" if k["binds"] else "no" for k in res["constraints"]],
                  "$/hour without it": ["-" if k["usd_per_hour_without"] is None else usd(k["usd_per_hour_without"])
                                        for k in res["constraints"]]})
    c = res["candidates"]
    st.caption(f"{num(c['total'])} candidates, {num(c['meeting_targets'])} meeting their targets; "
               f"{usd(tot['usd_per_hour_unconstrained'])}/hour with every model on its own cheapest option. "
               + " ".join(f"Note: {n}." for n in res["notes"])
               + " chalk.analyses.planning.portfolio.portfolio (chalk plan --portfolio).")
