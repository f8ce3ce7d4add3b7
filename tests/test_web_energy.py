"""Issue 27 item 7, the web page's part: the explorer shows the energy of each answer (joules per output token, power
per GPU and per replica / deployment / fleet, kWh per day, the electricity share of $/M tokens) with the electricity
price and PUE as sidebar inputs starting at the catalog's sourced defaults. The figures are the ones the API attaches
(`chalk.estimate(...).energy`, `chalk.throughput(...)["energy"]`, `chalk.plan(...)` options' `energy`): the page only
formats them (Streamlit's AppTest, no browser)."""

from __future__ import annotations

from pathlib import Path

import pytest

import chalk

pytest.importorskip("streamlit")
pytest.importorskip("plotly")

M, H, B, C = "llama-3.1-70b", "hgx-h100", 64, 4096  # the page's defaults


def _app():
    from streamlit.testing.v1 import AppTest

    import chalk.faces.web_app as web_app

    return AppTest.from_file(str(Path(web_app.__file__)), default_timeout=240)


def _table(at, starts: str) -> dict:
    """The markdown table that follows the line starting with `starts`, as {label: value} (escapes removed)."""
    md = next(m.value for m in at.markdown if m.value.startswith(starts))
    head, _, values = md.split("\n\n", 1)[1].replace("\\", "").split("\n")
    cells = [c.strip() for c in head.strip("|").split("|")], [c.strip() for c in values.strip("|").split("|")]
    return dict(zip(*cells))


def _input(at, label):
    return next(n for n in at.sidebar.number_input if n.label == label)


def test_energy_inputs_start_at_the_catalogs_sourced_defaults():
    from chalk.analyses.economics.energy import energy_defaults

    at = _app().run()
    assert not at.exception
    d = energy_defaults()
    price, pue = _input(at, "electricity price (USD per kWh)"), _input(at, "PUE (facility power / IT power)")
    assert price.value == pytest.approx(d.usd_per_kwh) and pue.value == pytest.approx(d.pue)
    assert d.usd_per_kwh_source in price.help and d.pue_source in pue.help  # the sources, where the value is set


def test_header_energy_is_the_apis_for_the_headers_answer_and_follows_price_and_pue():
    from chalk.faces.web_tabs import energy_cells

    at = _app().run()
    assert not at.exception
    shown = _table(at, "Energy (layout view")
    api = chalk.estimate(M, H, B, C)
    assert shown == dict(energy_cells(api.energy, "replica"))  # the API's figures, cell for cell
    gpus = int(api.chips)
    assert f"Power per replica ({gpus} GPUs, at the wall)" in shown
    j = float(shown["J per output token"])
    assert j == pytest.approx(api.energy.joules_per_token, rel=1e-3)
    # J/token = GPUs x W x PUE / (tokens/s): TDP 700 W for an H100 SXM (NVIDIA H100 datasheet), PUE 1.3 (energy.yaml)
    assert j == pytest.approx(gpus * 700 * 1.3 / float(api.tokens_per_s), rel=1e-3)
    share = float(shown["Electricity share of $/M tokens"].rstrip("%")) / 100
    assert share == pytest.approx(api.energy.electricity_share_of_cost, abs=5e-4)

    _input(at, "PUE (facility power / IT power)").set_value(1.5)
    _input(at, "electricity price (USD per kWh)").set_value(0.2)
    at.run()
    assert not at.exception
    moved = _table(at, "Energy (layout view")
    assert moved == dict(energy_cells(chalk.estimate(M, H, B, C, usd_per_kwh=0.2, pue=1.5).energy, "replica"))
    assert float(moved["J per output token"]) == pytest.approx(j * 1.5 / 1.3, rel=2e-3)  # J/token linear in PUE
    # electricity $/M tokens linear in price x PUE: 0.2 x 1.5 against 0.1 x 1.3
    assert float(moved["Electricity per M output tokens"].lstrip("$")) == pytest.approx(
        float(shown["Electricity per M output tokens"].lstrip("$")) * (0.2 * 1.5) / (0.1 * 1.3), rel=5e-3)
    note = next(c.value for c in at.caption if "PUE 1.5" in c.value.replace("\\", ""))
    assert "the sidebar's value" in note.replace("\\", "")


def test_a_bad_pue_cannot_be_entered():
    """The PUE input's floor is 1 (facility power is never below IT power), as the API's check."""
    at = _app().run()
    box = _input(at, "PUE (facility power / IT power)")
    assert box.min == 1.0 and box.max == 10.0
    with pytest.raises(chalk.errors.InputError):
        chalk.estimate(M, H, B, C, pue=0.9)


@pytest.mark.slow
def test_serving_and_plan_energy_are_the_apis():
    """The Serving tab's energy is `chalk.throughput`'s for the same question; the Plan tab's are `chalk.plan`'s
    options' (attach_plan_energy), the cheapest option's fleet shown whole."""
    from chalk.analyses.economics.energy import attach_plan_energy, serving_energy
    from chalk.analyses.planning.plan import plan
    from chalk.analyses.traffic.serving import throughput
    from chalk.faces.web_tabs import energy_cells
    from chalk.specs.catalog import as_system

    at = _app().run()
    at.session_state["tab"] = "Serving"
    at.run()
    assert not at.exception and not at.error
    shown = _table(at, "Energy (serving view")
    res = throughput(M, H, input_len=float(C), output_len=1024.0, precision=None, kv_precision="bf16", ideal=False,
                     pareto=True, eplb="auto")
    e = serving_energy(res, as_system(H).chip)
    assert shown == dict(energy_cells(e, "deployment"))
    assert f"Power per deployment ({int(res['gpus'])} GPUs, at the wall)" in shown
    # the tab draws the aggregated frontier (layouts x batch): the API's question with disaggregated=False (its
    # default searches both modes, as the command's --mode all)
    api = chalk.throughput(M, H, input_len=C, output_len=1024, kv_precision="bf16", pareto=True, disaggregated=False)
    assert float(shown["J per output token"]) == pytest.approx(api["energy"]["joules_per_token"], rel=2e-3)

    at.session_state["tab"] = "Plan"
    at.run()
    next(m for m in at.multiselect if m.label == "candidate chips").set_value(["h100-sxm"])
    next(b for b in at.button if b.label == "Plan").click().run()
    assert not at.exception and not at.error
    # the plan `chalk plan -m M -H h100-sxm --users 1000 --min-user-tps 30 --input-len 4096 --output-len 500` makes:
    # the checkpoint's precision and each narrower one the chip runs natively explored, KV 'auto'
    want = attach_plan_energy(plan(M, ["h100-sxm"], users=1000, min_user_tps=30.0, ttft_p99_s=None,
                                   input_len=float(C), output_len=500.0, precision="explore", kv_precision="auto",
                                   ideal=False, eplb="auto"))
    assert want["precisions_explored"] == ["bf16 (checkpoint)", "fp8"]  # H100: FP8 tensor cores, no FP4
    captions = " ".join(" ".join(c.value.replace("`", "").split()) for c in at.caption)
    assert "Precisions explored: bf16 (checkpoint), fp8 (the checkpoint's and each narrower" in captions
    df = at.dataframe[0].value
    assert list(df["precision"]) == [o["precision"] for o in want["options"]]
    best = want["options"][0]
    shown = _table(at, "Energy of the cheapest option")
    assert shown == dict(energy_cells(best["energy"], "fleet"))
    assert f"Power per fleet ({best['gpus']} GPUs, at the wall)" in shown
    df = at.dataframe[1].value  # the options' energy, beside their costs (at.dataframe[0])
    assert list(df["J per output token"]) == [energy_cells(o["energy"], "fleet")[0][1] for o in want["options"]]


def test_a_step_that_does_not_fit_leaves_the_tabs_that_ask_their_own_questions():
    """A batch and context that do not fit stopped the page after the reason: the Plan, Portfolio and Training tabs,
    which do not draw the sidebar's step, went with it (QA 2026-11-28). The reason stays; the tabs stay, the step's
    own saying why they are empty."""
    at = _app().run()
    assert not at.exception
    ctx = next(s for s in at.sidebar.select_slider if s.label == "context (tokens)")
    ctx.set_value(ctx.options[-1] if isinstance(ctx.options[-1], (int, float)) else int(ctx.options[-1])).run()
    batch = next(s for s in at.sidebar.select_slider if s.label == "batch (sequences)")
    batch.set_value(batch.options[-1] if isinstance(batch.options[-1], (int, float)) else int(batch.options[-1])).run()
    assert not at.exception
    assert any("Infeasible" in e.value for e in at.error)
    assert len(at.tabs) == 8
    assert any("This view draws the sidebar's step, which does not fit" in i.value for i in at.info)
