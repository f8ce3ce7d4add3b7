"""The web explorer in a real headless Chromium (Debian's `chromium`), driven by Playwright for Python.

Starts `chalk web`'s Streamlit command on a free localhost port, waits for the page and its plotly charts,
reads the "Step time" metric, moves the batch slider with the keyboard and checks the step time changed.
Set CHALK_SCREENSHOT_DIR to keep screenshots.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _have_playwright() -> bool:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return False
    return True


needs_browser = pytest.mark.skipif(not (Path(CHROMIUM).exists() and _have_playwright()),
                                   reason="needs Debian's chromium at /usr/bin/chromium and playwright")


def test_command_binds_localhost_headless():
    from chalk.faces.web import command

    cmd = command("127.0.0.1", 8765)
    assert cmd[1:4] == ["-m", "streamlit", "run"] and cmd[4].endswith("web_app.py")
    assert cmd[cmd.index("--server.address") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--server.port") + 1] == "8765"
    assert cmd[cmd.index("--server.headless") + 1] == "true"
    assert cmd[cmd.index("--browser.gatherUsageStats") + 1] == "false"
    assert cmd[cmd.index("--client.toolbarMode") + 1] == "minimal"  # no "Deploy" button on a local tool
    assert cmd[cmd.index("--server.fileWatcherType") + 1] == "none"


def test_cli_web_rejects_bad_port():
    r = subprocess.run([sys.executable, "-m", "chalk.faces.cli", "web", "--port", "70000", "--no-browser"],
                       capture_output=True, text=True, timeout=60, env=_env())
    assert r.returncode == 2 and "port" in r.stderr and "Traceback" not in r.stderr


def _env():
    from chalk.faces.web import environment

    env = environment()
    env.setdefault("HOME", str(Path.home()))
    return env


@pytest.fixture
def server(tmp_path):
    from chalk.faces.web import command, free_port, wait_until_up

    if shutil.which("streamlit") is None and not _module("streamlit"):
        pytest.skip("streamlit not installed")
    port = free_port("127.0.0.1", 8600)
    log = open(tmp_path / "streamlit.log", "w")
    proc = subprocess.Popen(command("127.0.0.1", port), env=_env(), stdout=log, stderr=subprocess.STDOUT,
                            cwd=tmp_path, start_new_session=True)
    try:
        assert wait_until_up("127.0.0.1", port, timeout_s=90, proc=proc), \
            (tmp_path / "streamlit.log").read_text()[-3000:]
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _module(name):
    import importlib.util

    return importlib.util.find_spec(name) is not None


def _wait_idle(page, timeout_ms=120_000):
    """Wait until Streamlit has finished the current run (its running indicator is gone)."""
    page.wait_for_timeout(300)
    page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=timeout_ms)


NUMBERS = '[data-testid="stMarkdown"] table'  # the header's numbers: one labelled table


def _numbers(page) -> dict:
    """The header's numbers as {label: value}, read in one go (a rerun may redraw the table between two reads)."""
    page.wait_for_function("(s) => { const t = document.querySelector(s);"
                           " return t && t.querySelectorAll('th').length === t.querySelectorAll('td').length; }",
                           arg=NUMBERS, timeout=60_000)
    return page.evaluate("""(s) => { const t = document.querySelector(s);
        const h = [...t.querySelectorAll('th')].map(e => e.innerText.trim());
        const c = [...t.querySelectorAll('td')].map(e => e.innerText.trim());
        return Object.fromEntries(h.map((k, i) => [k, c[i]])); }""", NUMBERS)


def _step_time(page) -> str:
    return next(v for k, v in _numbers(page).items() if k.startswith("Decode step"))


@needs_browser
def test_page_loads_charts_render_and_batch_slider_moves_step_time(server):
    from playwright.sync_api import sync_playwright

    shots = os.environ.get("CHALK_SCREENSHOT_DIR")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=["--no-sandbox", "--disable-dev-shm-usage"])
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 1100})
            page.goto(server, wait_until="domcontentloaded", timeout=120_000)
            page.wait_for_selector(NUMBERS, timeout=120_000)
            page.wait_for_selector(".js-plotly-plot .main-svg", timeout=120_000)
            page.wait_for_function("document.querySelectorAll('.js-plotly-plot .main-svg .scatterlayer path')"
                                   ".length >= 5", timeout=120_000)
            assert page.locator(".js-plotly-plot").count() >= 3  # latency, cost, context
            assert page.get_by_text("Latency vs batch").count() >= 1
            before = _step_time(page)
            assert before and any(u in before for u in ("s", "µs", "ms"))
            if shots:
                page.screenshot(path=str(Path(shots) / "web_before.png"), full_page=True)

            slider = page.get_by_role("slider", name="batch (sequences)")  # the sidebar's batch slider
            assert (slider.get_attribute("aria-valuetext") or slider.get_attribute("aria-valuenow")) == "64"
            slider.focus()
            for _ in range(4):  # 64 -> 256 in half-octave steps (1024 fits on no layout of 8 H100s at 4096)
                page.keyboard.press("ArrowRight")
            for _ in range(240):  # the slider shows 256 once its four steps are taken
                if (slider.get_attribute("aria-valuetext") or slider.get_attribute("aria-valuenow")) == "256":
                    break
                page.wait_for_timeout(250)
            _wait_idle(page)
            page.wait_for_function(
                "(b) => { const t = document.querySelector('[data-testid=\"stMarkdown\"] table');"
                " return t && t.querySelector('td').innerText.trim() !== b; }",
                arg=before, timeout=120_000)
            after = _step_time(page)
            assert after != before
            assert (slider.get_attribute("aria-valuetext") or slider.get_attribute("aria-valuenow")) == "256"
            _wait_idle(page)
            page.wait_for_function("document.querySelectorAll('.js-plotly-plot').length >= 3", timeout=120_000)
            assert page.locator('[data-testid="stException"]').count() == 0
            if shots:
                page.screenshot(path=str(Path(shots) / "web_after.png"), full_page=True)
        finally:
            browser.close()


def test_figure_builders_draw_the_roofline_fields():
    """The explorer's plotly charts (no browser needed): lines are RooflineResult fields, log axes, a marker."""
    from chalk import api
    from chalk.faces import web_app
    from chalk.faces.plots import roofline_over_batch, roofline_over_context

    r = roofline_over_batch("llama-3.1-8b", "hgx-h100", 4096, ideal=True)
    fig = web_app.latency_figure(r, 64, float(api.estimate("llama-3.1-8b", "hgx-h100", 64, ideal=True).step_time_s))
    names = [t.name for t in fig.data]
    assert r.view == "layout"  # a layout's time fields are its ops by what binds each, and say so
    assert names[:4] == ["compute-bound ops (GEMMs, attention)", "weight reads (memory-bound GEMMs)",
                         "KV reads (memory-bound attention)", "memory-bound ops (weights + KV + activations)"]
    assert list(fig.data[0].y) == pytest.approx(list(r.compute_time_s * 1e3))
    agg = api.estimate("llama-3.1-8b", "hgx-h100", r.batch, 4096, ideal=True, aggregate=True)
    lecture = [t.name for t in web_app.latency_figure(agg).data]  # the aggregate bound: the lecture's terms
    assert lecture == ["compute (eq. 2)", "weight fetch (eq. 3)", "KV fetch (eq. 3)", "weights + KV",
                       "step time = max (eq. 1)"]
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert "you are here" in names
    cost = web_app.cost_figure(r, "hgx-h100", 64, 1.0)
    assert any(t.name == "cost per token (eq. 4)" for t in cost.data)
    dense = roofline_over_context("llama-3.1-8b", "hgx-h100", 64, ideal=True)
    sparse = roofline_over_context("llama-3.1-8b", "hgx-h100", 64, ideal=True, sparse_law="sqrt")
    assert len(web_app.context_figure(dense, sparse, 4096).data) == 4
    assert len(web_app.pipeline_figure(4, 8, "1f1b").data) == 2
    assert web_app.BATCHES[0] == 1 and 64 in web_app.BATCHES and 1024 in web_app.BATCHES


def test_uploaded_config_is_loadable(tmp_path):
    from chalk.faces.web_app import _uploaded_model
    from chalk.specs.catalog import load_model

    src = next((Path(__file__).resolve().parents[1] / "src/chalk/catalog/models/llama-3.1-8b").glob("config.json"))

    class Upload:
        name = "my-model.json"

        def getvalue(self):
            return src.read_bytes()

    path = _uploaded_model(Upload())
    m = load_model(path)
    assert m.num_layers == load_model("llama-3.1-8b").num_layers


HOSTILE_TYPE = "![t](http://host/x.png) [CLICK](http://evil.example)"


def _hostile_config() -> bytes:
    import json

    src = Path(__file__).resolve().parents[1] / "src/chalk/catalog/models/llama-3.1-8b/config.json"
    cfg = json.loads(src.read_text())
    cfg["model_type"] = HOSTILE_TYPE
    return json.dumps(cfg).encode()


def _foreign(url: str) -> bool:
    from urllib.parse import urlsplit

    u = urlsplit(url)
    return u.scheme not in ("data", "blob", "about") and (u.hostname or "") not in ("127.0.0.1", "localhost")


def _upload(page, server, name, data):
    page.goto(server, wait_until="domcontentloaded", timeout=120_000)
    page.wait_for_selector(NUMBERS, timeout=120_000)
    page.get_by_text("upload config.json").click()
    page.wait_for_selector('input[type="file"]', state="attached", timeout=60_000)
    page.set_input_files('input[type="file"]', files=[{"name": name, "mimeType": "application/json",
                                                        "buffer": data}])


@needs_browser
def test_hostile_upload_is_shown_as_text_with_no_outbound_request_and_no_server_path(server):
    """Issue 26: a model_type holding markdown image/link markup rendered an <img> fetched from a foreign host and
    a link inside st.error, next to the server's private upload folder."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=["--no-sandbox", "--disable-dev-shm-usage"])
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 1100})
            outbound = []
            page.on("request", lambda req: outbound.append(req.url) if _foreign(req.url) else None)
            _upload(page, server, "hostile.json", _hostile_config())
            alert = page.locator('[data-testid="stAlert"]').filter(has_text="unsupported model_type")
            alert.first.wait_for(timeout=120_000)
            _wait_idle(page)
            page.wait_for_timeout(1500)  # give any image or prefetch the time to leave
            text = alert.first.inner_text()
            assert HOSTILE_TYPE.lower() in text.lower()  # literal: brackets, parentheses and URLs as typed
            assert text.lstrip().startswith("hostile.json")  # the file's own name, not where the server kept it
            assert outbound == []
            assert page.locator('img[src*="host/x.png"], img[src*="://host"]').count() == 0
            assert page.locator('a[href*="evil.example"]').count() == 0
            assert alert.first.locator("img, a").count() == 0
            body = page.locator("body").inner_text()
            html = page.content()
            for leak in ("chalk-web-", "/tmp/", str(Path(__file__).resolve().parents[1])):
                assert leak not in body and leak not in html
            assert page.locator('[data-testid="stException"]').count() == 0
        finally:
            browser.close()


@needs_browser
def test_oversized_upload_is_refused(server):
    from playwright.sync_api import sync_playwright

    from chalk.faces.web import MAX_UPLOAD_BYTES

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=["--no-sandbox", "--disable-dev-shm-usage"])
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 1100})
            _upload(page, server, "big.json", b"{" + b" " * (2 * MAX_UPLOAD_BYTES) + b"}")
            page.get_by_text("1.0MB or smaller").first.wait_for(timeout=60_000)
            assert page.locator('[data-testid="stException"]').count() == 0
        finally:
            browser.close()


def _children(pid: int) -> list[int]:
    """Every live descendant of `pid` (from /proc)."""
    kids = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            kids.setdefault(int(fields[1]), []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append(k)
            todo.append(k)
    return out


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


@pytest.mark.parametrize("sigs", ["SIGTERM", "SIGINT", "SIGTERM,SIGTERM"])
def test_signal_to_chalk_web_ends_the_streamlit_process_group(tmp_path, sigs):
    """Issue 26: SIGTERM to `chalk web` left the Streamlit child running. The server runs in its own process
    group, which chalk web ends on SIGTERM / SIGINT (a second signal does not cut the shutdown short)."""
    import signal
    import time

    from chalk.faces.web import free_port, wait_until_up

    if not _module("streamlit"):
        pytest.skip("streamlit not installed")
    port = free_port("127.0.0.1", 8700)
    log = open(tmp_path / "web.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "chalk.faces.cli", "web", "--port", str(port), "--no-browser"],
                            env=_env(), stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path, start_new_session=True)
    try:
        assert wait_until_up("127.0.0.1", port, timeout_s=90, proc=proc), (tmp_path / "web.log").read_text()[-3000:]
        kids = _children(proc.pid)
        assert kids, "chalk web started no server process"
        groups = {os.getpgid(k) for k in kids}
        assert os.getpgid(proc.pid) not in groups  # the server runs in its own process group
        for sig in sigs.split(","):
            proc.send_signal(getattr(signal, sig))
            time.sleep(0.2)
        assert proc.wait(timeout=20) == 0
        end = time.monotonic() + 5
        while time.monotonic() < end and any(_alive(k) for k in kids):
            time.sleep(0.1)
        assert not [k for k in kids if _alive(k)]
        for g in groups:
            with pytest.raises(ProcessLookupError):
                os.killpg(g, 0)
        assert "Traceback" not in (tmp_path / "web.log").read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
