"""Issue 27, item 6: the web explorer in a real headless Chromium (Debian's `chromium`, Playwright for Python),
point by point: the numbers come fast on a warm server, no "Deploy" button, one labelled view per number (the
header's layout view, the Lecture tab's aggregate bound), the Layout tab opens on a serving chart, the Plan tab
takes the input length and shows its long columns whole, the Pricing sheet follows the model, the KV precision
follows the checkpoint, and an infeasible choice shows its reason instead of numbers and charts. Item 7: the energy
of the header's, the Serving tab's and the Plan tab's answers. Issue 28 item 1: the Portfolio tab answers
examples/portfolio.yaml.

Set CHALK_SCREENSHOT_DIR to keep a screenshot of each tab (<tab>.png).
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from test_web_browser import CHROMIUM, NUMBERS, _numbers, _wait_idle, needs_browser, server  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.slow]

#: The warm server's budget for the first numbers of a new visit (issue 27).
FIRST_NUMBERS_S = 5.0


def _shot(page, name):
    """A screenshot of the whole page: the viewport stretched to the main area's height for the shot (Streamlit
    scrolls inside its main area, so a full-page shot of the window would stop at the fold), then put back."""
    shots = os.environ.get("CHALK_SCREENSHOT_DIR")
    if shots:
        Path(shots).mkdir(parents=True, exist_ok=True)
        size = page.viewport_size
        tall = page.evaluate("() => Math.max(...[...document.querySelectorAll('[data-testid=stMain], "
                             "[data-testid=stAppViewContainer], section.main')].map(e => e.scrollHeight), 0)")
        page.set_viewport_size({"width": size["width"], "height": max(size["height"], min(int(tall) + 40, 8000))})
        page.wait_for_timeout(800)
        page.screenshot(path=str(Path(shots) / f"{name}.png"), full_page=True)
        page.set_viewport_size(size)
        page.wait_for_timeout(300)


@contextmanager
def _browser():
    """A headless chromium for one test, closed after it; on a failure, a shot of the page it last opened."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=["--no-sandbox", "--disable-dev-shm-usage"])
        try:
            yield browser
        except Exception:
            pages = [pg for ctx in browser.contexts for pg in ctx.pages]
            if pages:
                _shot(pages[-1], "failure")
            raise
        finally:
            browser.close()


def _choose(page, label, option):
    """Pick `option` in the sidebar select labelled `label`, then wait for the rerun to end."""
    box = page.get_by_role("combobox", name=label, exact=True)
    box.click()
    box.fill(option)
    page.get_by_role("option", name=option, exact=True).click()
    page.wait_for_function("([l, o]) => { const b = document.querySelector(`input[aria-label=\"${l}\"]`);"
                           " return b && b.value === o; }", arg=[label, option], timeout=60_000)
    _wait_idle(page)


def _tab(page, name):
    page.get_by_role("tab", name=name, exact=True).click()
    page.wait_for_function("(n) => [...document.querySelectorAll('[role=tab]')].some("
                           "t => t.innerText.trim() === n && t.getAttribute('aria-selected') === 'true')",
                           arg=name, timeout=60_000)
    _wait_idle(page)


def _open(browser, url):
    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    t0 = time.monotonic()
    page.goto(url, wait_until="domcontentloaded", timeout=120_000)
    page.wait_for_selector(NUMBERS, timeout=120_000)
    return page, time.monotonic() - t0


def _table_after(page, starts: str) -> dict:
    """The markdown table under the paragraph starting with `starts`, as {label: value}."""
    sel = "[data-testid=stMarkdown]"
    page.wait_for_function("([s, t]) => [...document.querySelectorAll(s)].some(m => m.innerText.startsWith(t)"
                           " && m.querySelector('table'))", arg=[sel, starts], timeout=120_000)
    return page.evaluate("""([s, t]) => { const m = [...document.querySelectorAll(s)].find(
            m => m.innerText.startsWith(t) && m.querySelector('table'));
        const h = [...m.querySelectorAll('th')].map(e => e.innerText.trim());
        const c = [...m.querySelectorAll('td')].map(e => e.innerText.trim());
        return Object.fromEntries(h.map((k, i) => [k, c[i]])); }""", [sel, starts])


def _body(page) -> str:
    return page.locator('[data-testid="stMain"], section.main, .main').first.inner_text()


@needs_browser
def test_explorer_issue27_points(server):  # noqa: F811 - the fixture imported above
    from chalk import api
    from chalk.faces.web_tabs import energy_cells
    from chalk.specs.catalog import as_system

    ref = api.estimate("llama-3.1-70b", "hgx-h100", 64, 4096)  # the header's question at the page's defaults
    agg = api.estimate("llama-3.1-70b", "hgx-h100", 64, 4096, aggregate=True)
    with _browser() as browser:
        page, _ = _open(browser, server)  # warms the server: modules imported, answers memoised
        _wait_idle(page)
        page.close()
        page, first_s = _open(browser, server)
        print(f"time to first numbers on a warm server: {first_s:.2f} s")
        assert first_s < FIRST_NUMBERS_S
        _wait_idle(page)
        page.wait_for_selector(".js-plotly-plot .main-svg", timeout=120_000)

        # a local tool: no Deploy button, no toolbar menu
        assert page.get_by_role("button", name="Deploy").count() == 0
        assert page.locator('[data-testid="stAppDeployButton"]').count() == 0

        # one labelled view per number: the header is the layout view, its GPUs and layout named
        lay, gpus = ref.layout["label"], int(ref.chips)
        head = page.locator("h4").first.inner_text()
        assert f"on {gpus} of {as_system('hgx-h100').chips} GPUs" in head and f"layout {lay}" in head
        nums = _numbers(page)
        step_key = f"Decode step (layout view, {gpus} GPUs)"
        assert step_key in nums and f"Output tokens/s per replica ({gpus} GPUs)" in nums
        assert "Output tokens/s per GPU" in nums
        assert nums[step_key].endswith("ms")
        assert float(nums[step_key].split()[0]) == pytest.approx(ref.step_time_s * 1e3, rel=0.01)
        assert page.get_by_text("Layout view: one replica on").count() == 1
        # energy (issue 27 item 7): the API's figures for the header's answer, labelled per GPU and per replica
        energy = _table_after(page, "Energy (layout view")
        assert energy == {k: v for k, v in energy_cells(ref.energy, "replica")}
        assert f"Power per replica ({gpus} GPUs, at the wall)" in energy
        page.get_by_text("energy: electricity price and PUE").first.wait_for(timeout=60_000)  # the sidebar's inputs
        _shot(page, "roofline")

        _tab(page, "Lecture")  # the aggregate bound, labelled as such, beside the layout view's number
        info = page.locator('[data-testid="stAlert"]').filter(has_text="Aggregate bound")
        info.first.wait_for(timeout=60_000)
        text = info.first.inner_text()
        assert f"all {int(agg.chips)} GPUs" in text and "upper bound" in text
        assert f"one replica on {lay}, {gpus} GPUs" in text
        page.get_by_text("The lecture's claims, computed by chalk").first.wait_for(timeout=120_000)
        _wait_idle(page)
        assert f"(aggregate bound, {int(agg.chips)} GPUs)" in _body(page)
        _shot(page, "lecture")

        _tab(page, "Layout")  # opens on a serving chart; the training pipeline sits in a closed expander
        # 240 s: beside the slow tier's cross-validation on 2 cores this chart once took over 120 s (alone: seconds)
        page.wait_for_function("() => { const p = document.querySelector('[role=tabpanel] .js-plotly-plot');"
                               " return p && p.innerText.includes('Serving layouts'); }", timeout=240_000)
        panel = page.locator('[role="tabpanel"]')
        exp = panel.locator('[data-testid="stExpander"]').filter(has_text="Training: a pipeline schedule")
        exp.wait_for(timeout=60_000)
        _wait_idle(page)
        assert exp.count() == 1
        assert exp.locator("details").get_attribute("open") is None
        visible = [t for t in panel.locator(".js-plotly-plot").all() if t.is_visible()]
        assert len(visible) == 1 and "Serving layouts" in visible[0].inner_text()
        assert not any("backward" in t.inner_text() for t in visible)  # no training pipeline chart in view
        _shot(page, "layout")

        _tab(page, "Pricing")  # no DeepSeek sheet against a Llama model
        page.get_by_text("No API price sheet for").first.wait_for(timeout=120_000)
        body = _body(page)
        assert "No API price sheet for llama-3.1-70b" in body
        assert "margin on the day" not in body
        assert page.get_by_role("combobox", name="price sheet").count() == 0
        _shot(page, "pricing-llama")

        _tab(page, "Serving")
        page.get_by_text("Serving view").first.wait_for(timeout=120_000)
        page.wait_for_function("() => [...document.querySelectorAll('[role=tabpanel] .js-plotly-plot')].some("
                               "p => p.innerText.includes('serving frontier'))", timeout=120_000)
        served = _table_after(page, "Energy (serving view")
        assert "J per output token" in served and any(k.startswith("Power per deployment") for k in served)
        _shot(page, "serving")

        # issue 28: examples/portfolio.yaml placed on its fleet (a fresh server: not cached yet, so the candidates
        # run, with a progress bar counting them), then cached on the file's contents
        page.get_by_role("tab", name="Portfolio", exact=True).click()
        bar = page.locator('[role="tabpanel"] [data-testid="stProgress"]')
        bar.first.wait_for(timeout=120_000)
        page.get_by_text("candidates planned and replayed:").first.wait_for(timeout=120_000)
        _shot(page, "portfolio-running")
        page.locator('[role="tabpanel"] strong').filter(has_text="Portfolio examples/portfolio.yaml:").first \
            .wait_for(timeout=300_000)
        _wait_idle(page, timeout_ms=300_000)
        body = _body(page)
        assert "binding:" in body and "optimal" in body
        pmetrics = page.locator('[role="tabpanel"] [data-testid="stMetricLabel"]').all_inner_texts()
        assert [m.strip() for m in pmetrics] == ["$ per hour (fleet)", "$ per day (fleet, at peak)",
                                                 "GPUs (fleet)", "Power (fleet, TDP x PUE)"]
        ptables = page.locator('[role="tabpanel"] [data-testid="stTable"]')
        # the table's header cells can land a moment after the page goes idle under load (a clean-clone CI run at
        # 0f42e06 read none): wait for them, then read them
        ptables.first.locator("th").first.wait_for(timeout=60_000)
        assert "what binds" in ptables.first.locator("th").all_inner_texts()
        assert ptables.first.locator("tbody tr").count() == 5  # one row per model of the example
        assert page.locator('[role="tabpanel"] [data-testid="stDataFrame"]').count() == 1
        assert page.get_by_text("Fleet constraints").count() == 1
        clipped = page.evaluate("""() => [...document.querySelectorAll(
            '[role=tabpanel] [data-testid="stTable"] td')]
            .filter(td => td.offsetParent && td.scrollWidth > td.clientWidth + 1).length""")
        assert clipped == 0
        assert page.locator('[role="tabpanel"] [data-testid="stProgress"]').count() == 0  # the bar, gone when done
        _shot(page, "portfolio")

        _tab(page, "Training")
        page.wait_for_function("() => [...document.querySelectorAll('[role=tabpanel] .js-plotly-plot')].some("
                               "p => p.innerText.includes('Tokens per pool'))", timeout=120_000)
        _shot(page, "training")

        _tab(page, "Plan")  # an input-length field; long columns in a table that wraps
        field = page.locator('input[aria-label="input tokens per request"]')
        field.wait_for(timeout=60_000)
        assert field.count() == 1 and field.input_value() == "4096"
        field.fill("2000")
        chips = page.locator('[data-testid="stMultiSelect"]')
        for name in ("h200", "b200", "mi300x"):  # one candidate chip keeps the plan short
            chips.get_by_role("button", name=f"Remove {name}").click()
        page.get_by_role("button", name="Plan").click()
        table = page.locator('[role="tabpanel"] [data-testid="stTable"]')
        table.wait_for(timeout=240_000)
        page.get_by_text("latencies measured in a replay").first.wait_for(timeout=120_000)
        _wait_idle(page)
        assert "2000 in / 500 out" in _body(page).replace(",", "")
        assert "Cheapest: h100-sxm" in _body(page)
        metrics = page.locator('[role="tabpanel"] [data-testid="stMetricValue"]')
        assert page.evaluate("""() => [...document.querySelectorAll(
            '[role=tabpanel] [data-testid="stMetricValue"] div, [role=tabpanel] [data-testid="stMetricValue"]')]
            .filter(e => e.scrollWidth > e.clientWidth + 1).length""") == 0 and metrics.count() == 3
        heads = table.locator("th").all_inner_texts()
        assert "why it loses" in heads and "$/GPU-hour (date; source)" in heads
        clipped = page.evaluate("""() => [...document.querySelectorAll('[data-testid="stTable"] td')]
            .filter(td => td.offsetParent && td.scrollWidth > td.clientWidth + 1).length""")
        assert clipped == 0
        assert table.locator("td").filter(has_text="cheapest").count() >= 1
        fleet = _table_after(page, "Energy of the cheapest option")
        assert any(k.startswith("Power per fleet") for k in fleet) and "kWh per day (fleet)" in fleet
        _shot(page, "plan")

        # the KV precision follows the checkpoint; the Pricing sheet follows the model
        _choose(page, "model", "deepseek-r1")
        _choose(page, "chip or system", "hgx-h200")
        kv = page.get_by_role("combobox", name="KV precision", exact=True)
        assert kv.input_value().startswith("auto → fp8")
        assert "fp8 KV" in page.locator("h4").first.inner_text()
        _tab(page, "Pricing")
        sheet = page.get_by_role("combobox", name="price sheet", exact=True)
        sheet.wait_for(timeout=60_000)
        assert sheet.input_value() == "deepseek-r1"
        page.get_by_text("margin on the day").first.wait_for(timeout=60_000)
        assert "Sheet deepseek-r1 for deepseek-r1" in _body(page)
        assert "Pricing view (a day's traffic on layout" in _body(page)  # its own view, named beside the header's
        _shot(page, "pricing")

        # an infeasible choice: the reason, no numbers, no charts; the tabs that ask their own questions (Plan,
        # Portfolio, Training) stay, and the step's own tabs say why they are empty
        _choose(page, "chip or system", "hgx-h100")
        err = page.locator('[data-testid="stAlert"]').filter(has_text="Infeasible")
        err.first.wait_for(timeout=60_000)
        assert "does not fit" in err.first.inner_text() and "Fix:" in err.first.inner_text()
        _wait_idle(page)
        page.locator(NUMBERS).first.wait_for(state="detached", timeout=60_000)  # the last run's, taken away
        assert page.locator(NUMBERS).count() == 0
        assert page.locator(".js-plotly-plot").count() == 0
        assert page.locator('[data-testid="stMetric"]').count() == 0
        assert page.get_by_role("tab").count() == 8
        assert "This view draws the sidebar's step, which does not fit" in _body(page)
        _shot(page, "infeasible")
        assert page.locator('[data-testid="stException"]').count() == 0


def test_roofline_and_serving_curves_pass_through_the_header():
    """The charts' layout-view curves run on the header's replica: at the sidebar's batch they give the header's
    step time (a sweep left to choose its own layout held its largest batch: TP8 beside a TP4 header)."""
    import numpy as np

    from chalk import api
    from chalk.faces import web_app
    from chalk.faces.plots import batch_range

    common = dict(model="llama-3.1-70b", hardware="hgx-h100", precision=None, kv_precision="bf16", ideal=False,
                  eplb="auto")
    r = api.estimate("llama-3.1-70b", "hgx-h100", 64, 4096, kv_precision="bf16")
    B = np.unique(np.concatenate([batch_range(r), [64.0]]))
    rb = web_app._on_layout(common, r, B, 4096.0)
    i = int(np.flatnonzero(B == 64.0)[0])
    assert rb.chips == r.chips == 4
    assert float(rb.step_time_s[i]) == pytest.approx(float(r.step_time_s), rel=1e-9)
    fig = web_app.frontier_figure(rb, r.chips, 64)
    here = next(t for t in fig.data if t.name == "you are here")
    assert here.y[0] == pytest.approx(float(r.tokens_per_s) / r.chips, rel=1e-6)
    assert "one replica on 4 GPUs" in fig.data[0].name
    lat = web_app.latency_figure(rb, 64, float(r.step_time_s))
    assert lat.layout.title.text == "Latency vs batch (layout view, TP4 on 4 GPUs)"
    # the layout view's time fields are the step's ops by what binds each (as `chalk estimate` lists them), not the
    # lecture's eq. 2-3 terms: its compute-bound ops take no time below the critical batch, where eq. 2 would not
    names = [d.name for d in lat.data]
    assert names[:5] == ["compute-bound ops (GEMMs, attention)", "weight reads (memory-bound GEMMs)",
                         "KV reads (memory-bound attention)", "memory-bound ops (weights + KV + activations)",
                         "step time = all ops + communication + overhead"]
    assert not any("eq. 2" in x for x in names)
    assert float(np.asarray(rb.compute_time_s)[i]) == 0.0 < float(r.critical_batch) and 64 < r.critical_batch
    parts = (np.asarray(rb.compute_time_s) + np.asarray(rb.memory_time_s)
             + np.asarray(rb.comm_time_s) + np.asarray(rb.overhead_time_s))
    assert parts == pytest.approx(np.asarray(rb.step_time_s), rel=1e-6)  # the legend's "all ops + comm + overhead"
    cost = web_app.cost_figure(rb, "hgx-h100", 64, float(r.cost_per_mtok_usd))
    assert cost.data[0].name == "compute-bound ops (GEMMs, attention), per token"


SMALL_PORTFOLIO = """\
chips: [h100-sxm, mi300x]
settings: {sim_requests: 600, seed: 0}
models:
  - name: small
    model: llama-3.1-8b
    rate: 10
    input_len: 1000
    output_len: 200
    min_user_tps: 40
    engines: [vllm]
    modes: [aggregated]
fleet:
  gpus: {mi300x: 4}
"""


@needs_browser
def test_portfolio_tab_takes_an_uploaded_yaml_and_refuses_one_naming_server_files(server):  # noqa: F811
    """Issue 28's web tab with an upload: a small portfolio is answered; one whose model names a trace file is one
    error line naming the user's file (an upload cannot read the server's files), with no server folder shown."""
    with _browser() as browser:
        page, _ = _open(browser, server)
        _wait_idle(page)
        _tab(page, "Portfolio")
        page.get_by_text("upload a portfolio YAML").click()
        page.wait_for_selector('[role="tabpanel"] input[type="file"]', state="attached", timeout=60_000)
        _wait_idle(page)
        page.set_input_files('[role="tabpanel"] input[type="file"]', files=[{
            "name": "mine.yaml", "mimeType": "application/x-yaml", "buffer": SMALL_PORTFOLIO.encode()}])
        page.locator('[role="tabpanel"] strong').filter(has_text="Portfolio mine.yaml:").first \
            .wait_for(timeout=240_000)
        _wait_idle(page, timeout_ms=240_000)
        assert "1 model on 1 GPU," in _body(page)
        rows = page.locator('[role="tabpanel"] [data-testid="stTable"]').first.locator("tbody tr")
        rows.first.wait_for(timeout=60_000)  # the table draws after its component loads
        assert rows.count() == 1 and "small" in rows.first.inner_text()

        bad = SMALL_PORTFOLIO.replace("    rate: 10\n", "    trace: /etc/hosts\n")
        page.set_input_files('[role="tabpanel"] input[type="file"]', files=[{
            "name": "traced.yaml", "mimeType": "application/x-yaml", "buffer": bad.encode()}])
        err = page.locator('[data-testid="stAlert"]').filter(has_text="cannot read files on the server")
        err.first.wait_for(timeout=120_000)
        _wait_idle(page)
        assert err.count() == 1 and "models[0] (small) names a trace file" in err.first.inner_text()
        assert err.first.inner_text().strip().startswith("traced.yaml: ")  # the user's name for the file
        body, html = _body(page), page.content()
        assert "chalk-web-" not in body and "chalk-web-" not in html  # the server's upload folder stays unseen
        assert page.locator('[role="tabpanel"] [data-testid="stMetric"]').count() == 0
        assert page.locator('[data-testid="stException"]').count() == 0
        _shot(page, "portfolio-upload-refused")
