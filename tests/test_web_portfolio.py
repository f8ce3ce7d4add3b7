"""Issue 28 item 1, the web tab: the explorer's Portfolio tab answers a portfolio YAML with the call `chalk plan
--portfolio FILE` makes (`chalk.analyses.planning.portfolio.portfolio`): per-model assignment, totals, the replay's
p99s and what binds; bad input is one message; the answer is cached on the file's contents (Streamlit's AppTest, no
browser; the tab's example file is pointed at a small portfolio so the test runs in seconds)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("streamlit")
pytest.importorskip("plotly")

SMALL = """\
chips: [h100-sxm, mi300x]
settings: {{sim_requests: 600, seed: 0}}
models:
  - name: small
    model: llama-3.1-8b
    rate: {rate}
    input_len: 1000
    output_len: 200
    min_user_tps: 40
    engines: [vllm]
    modes: [aggregated]
  - name: chat
    model: llama-3.1-70b
    users: 200
    input_len: 2000
    output_len: 300
    min_user_tps: 20
    ttft_p99: 2s
    engines: [vllm]
    modes: [aggregated]
fleet:
  gpus: {{mi300x: {mi300x}}}
"""


def _write(tmp_path, name="p.yaml", rate=10, mi300x=4, text=None) -> Path:
    p = tmp_path / name
    p.write_text(text if text is not None else SMALL.format(rate=rate, mi300x=mi300x))
    return p


def _app(monkeypatch, path):
    from streamlit.testing.v1 import AppTest

    import chalk.faces.web_app as web_app
    import chalk.faces.web_portfolio as web_portfolio

    monkeypatch.setattr(web_portfolio, "EXAMPLE", Path(path))
    at = AppTest.from_file(str(Path(web_app.__file__)), default_timeout=240).run()
    assert not at.exception and "Portfolio" in [t.label for t in at.tabs]
    at.session_state["tab"] = "Portfolio"  # lazy tabs: only the open one runs
    return at.run()


@pytest.mark.slow  # two portfolio runs of 4 candidates each: ~5 s on this machine
def test_portfolio_tab_shows_the_assignment_totals_p99s_and_what_binds(tmp_path, monkeypatch):
    from chalk.analyses.planning.portfolio import portfolio
    from chalk.faces.fmt import num, seconds, usd

    path = _write(tmp_path)
    at = _app(monkeypatch, path)
    assert not at.exception and not at.error
    want = portfolio(str(path))
    tot = want["total"]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["$ per hour (fleet)"] == usd(tot["usd_per_hour"])
    assert metrics["GPUs (fleet)"] == num(tot["gpus"])
    df = at.dataframe[0].value
    assert list(df["model"]) == [m["name"] for m in want["models"]] == ["small", "chat"]
    for col, key in (("chip", "chip"), ("layout", "layout"), ("GPUs", "gpus"), ("precision", "precision")):
        assert list(df[col]) == [m[key] for m in want["models"]], col
    assert list(df["$/hour"]) == [usd(m["usd_per_hour"]) for m in want["models"]]
    assert list(df["replay p99 TTFT"]) == [seconds(m["ttft_p99_s"]) for m in want["models"]]
    assert list(df["replay p99 TPOT"]) == [seconds(m["tpot_p99_s"]) for m in want["models"]]
    assert all(0 < m["tpot_p99_s"] <= 1 / 20 * 1.001 for m in want["models"] if m["name"] == "chat")  # its target
    binds = at.table[0].value
    assert list(binds["what binds"]) == ["; ".join(m["binds"]) for m in want["models"]]
    cons = at.table[1].value
    assert list(cons["constraint"]) == [c["name"] for c in want["constraints"]] == ["gpus mi300x"]
    assert list(cons["binds"]) == ["yes" if c["binds"] else "no" for c in want["constraints"]]
    head = next(m.value for m in at.markdown if m.value.startswith("**Portfolio"))
    assert f"{usd(tot['usd_per_hour'])} per hour" in head and "optimal" in head


def test_portfolio_answer_is_cached_on_the_files_contents(tmp_path, monkeypatch):
    import chalk.analyses.planning.portfolio as P

    calls = []
    real = P.portfolio

    def counted(*a, **kw):
        calls.append(a[0])
        return real(*a, **kw)

    monkeypatch.setattr(P, "portfolio", counted)
    path = _write(tmp_path, rate=11)  # contents no other test asks about
    at = _app(monkeypatch, path)
    assert not at.error and len(calls) == 1
    at.run()
    assert not at.error and len(calls) == 1  # the same contents: the cached answer
    first = at.metric[0].value
    _write(tmp_path, rate=40)  # the same file, new contents: asked again
    at.run()
    assert not at.error and len(calls) == 2
    assert at.metric[0].value != first  # four times the demand of the small model costs more


@pytest.mark.parametrize("text, says", [
    (SMALL.format(rate=10, mi300x=4).replace("llama-3.1-8b", "no-such-model"), "no-such-model"),
    (SMALL.format(rate=10, mi300x=4).replace("min_user_tps: 40", "min_user_tps: 40\n    colour: red"), "colour"),
    (SMALL.format(rate=10, mi300x=4) + "  budget_usd_per_hour: 0.5\n", "budget"),
    ("models: [", "portfolio"),
], ids=["unknown-model", "unknown-key", "constraint-no-assignment-meets", "broken-yaml"])
def test_bad_portfolio_is_one_clear_message(tmp_path, monkeypatch, text, says):
    path = _write(tmp_path, text=text)
    at = _app(monkeypatch, path)
    assert not at.exception
    assert len(at.error) == 1 and says in at.error[0].value, [e.value for e in at.error]
    assert "Traceback" not in at.error[0].value
    assert not at.dataframe and not at.metric and not at.table


def test_an_uploaded_portfolio_cannot_read_the_servers_files(tmp_path):
    from chalk.errors import InputError
    from chalk.faces.web import scrub_paths
    from chalk.faces.web_portfolio import _no_files, _saved_upload

    class Upload:
        name = "mine.yaml"

        def __init__(self, data):
            self.data = data

        def getvalue(self):
            return self.data

    text = SMALL.format(rate=10, mi300x=4).replace("    rate: 10\n", "    trace: /etc/hosts\n")
    saved = _saved_upload(Upload(text.encode()))
    assert saved.read_text() == text and str(tmp_path) not in str(saved)
    with pytest.raises(InputError, match=r"models\[0\] \(small\) names a trace file") as e:
        _no_files(saved)
    assert scrub_paths(e.value).startswith("mine.yaml: models[0]")
    assert scrub_paths(f"{saved}: bad") == "mine.yaml: bad"  # messages name the user's file, not the server's folder
    diurnal = SMALL.format(rate=10, mi300x=4).replace("    rate: 10\n", "    rate: 10\n    diurnal: day.csv\n")
    with pytest.raises(InputError, match="diurnal CSV"):
        _no_files(_saved_upload(Upload(diurnal.encode())))
    _no_files(_saved_upload(Upload(SMALL.format(rate=10, mi300x=4).encode())))  # demand in the file itself: taken
    with pytest.raises(InputError, match="at most"):
        _saved_upload(Upload(b"#" * (2 << 20)))
