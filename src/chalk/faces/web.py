"""`chalk web`: run the Streamlit explorer (`web_app.py`) on a local address."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from chalk.errors import InputError

APP = Path(__file__).with_name("web_app.py")
DEFAULT_PORT = 8501
#: The environment variable naming the server's private upload folder (read by web_app).
UPLOADS_ENV = "CHALK_WEB_UPLOADS"
#: The largest upload the explorer takes: 1 MiB (a config.json is a few KB). Streamlit's limit is set from it
#: (--server.maxUploadSize, in MB) and web_app checks the bytes again before parsing.
MAX_UPLOAD_BYTES = 1 << 20


# ------------------------------------------------------------------ what the page may show
_PRIVATE_UPLOADS: list[str] = []


def upload_root() -> Path:
    """This server's private upload folder: the one `chalk web` made (and removes on exit), else one made
    here with tempfile.mkdtemp (mode 0700) and removed when this process exits."""
    given = os.environ.get(UPLOADS_ENV)
    if given and Path(given).is_dir():
        return Path(given)
    if not _PRIVATE_UPLOADS:
        import atexit
        import shutil

        _PRIVATE_UPLOADS.append(tempfile.mkdtemp(prefix="chalk-web-"))
        atexit.register(shutil.rmtree, _PRIVATE_UPLOADS[0], True)
    return Path(_PRIVATE_UPLOADS[0])


#: Saved upload path -> the name the user gave it: what messages show instead of the server's folder.
_UPLOAD_NAMES: dict[str, str] = {}


def md_escape(text) -> str:
    """Text shown inside st.markdown with every ASCII punctuation character backslash-escaped (CommonMark
    allows it for all of them), so no link, image, autolink, HTML tag, emoji/colour directive or math survives."""
    return re.sub(r"([!-/:-@\[-`{-~])", r"\\\1", str(text))


def scrub_paths(text) -> str:
    """`text` with the server's folders removed: an uploaded config's saved path becomes the file's own name,
    any other path under the upload folder or the chalk package becomes a placeholder."""
    out = str(text)
    for saved, name in sorted(_UPLOAD_NAMES.items(), key=lambda kv: -len(kv[0])):
        out = out.replace(saved, name)
    roots = {str(upload_root()), os.path.realpath(upload_root()), str(Path(__file__).resolve().parents[1])}
    for root in sorted(roots, key=len, reverse=True):
        out = out.replace(root, "<server>")
    return out


def code_span(text) -> str:
    """`text` as one markdown inline code span: nothing inside is read as a link, image, HTML, emoji/colour
    directive or math, and GFM's autolinks (which a backslash escape does not stop: Streamlit links
    `http\\:\\/\\/a\\.example`) do not apply. Line breaks become spaces, so the span cannot be cut by a new block."""
    flat = re.sub(r"[\r\n\v\f\x85\u2028\u2029]", " ", str(text))
    if not flat:
        return ""
    fence = "`" * (max((len(m) for m in re.findall(r"`+", flat)), default=0) + 1)
    return f"{fence} {flat} {fence}"


def shown(text) -> str:
    """The one way a user-derived string reaches st.error / st.warning / st.info / st.markdown / st.caption /
    st.subheader: server paths scrubbed (an upload's saved path becomes its own file name), then shown as a
    literal inline code span."""
    return code_span(scrub_paths(text))


def free_port(host: str = "127.0.0.1", start: int = DEFAULT_PORT, tries: int = 50) -> int:
    """The first port from `start` that nothing listens on."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for port in range(start, start + tries):
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    raise InputError(f"no free port in {start}..{start + tries - 1} on {host}")


def command(host: str = "127.0.0.1", port: int = DEFAULT_PORT) -> list[str]:
    """The argv that serves the app: headless, no usage statistics, bound to `host`; a local tool's toolbar (no
    "Deploy" button: client.toolbarMode minimal) and no source-file watcher (chalk's modules are not the user's
    script to edit live; watching them costs start-up time and offers reruns nobody asked for)."""
    return [sys.executable, "-m", "streamlit", "run", str(APP), "--server.address", host, "--server.port", str(port),
            "--server.headless", "true", "--browser.gatherUsageStats", "false",
            "--server.maxUploadSize", str(max(1, MAX_UPLOAD_BYTES >> 20)),
            "--client.toolbarMode", "minimal", "--server.fileWatcherType", "none"]


def environment() -> dict:
    """The child's environment: chalk importable even when run from a source checkout (PYTHONPATH=src)."""
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2])
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if src not in parts:
        env["PYTHONPATH"] = os.pathsep.join([src, *parts])
    return env


def wait_until_up(host: str, port: int, timeout_s: float = 60.0, proc: subprocess.Popen | None = None) -> bool:
    """Poll until something accepts connections on host:port (False on timeout or if proc exits)."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            with socket.create_connection((host, port), timeout=1):
                return True
        except OSError:
            time.sleep(0.25)
    return False


def validate(host: str, port: int | None) -> None:
    """Refuse, before any banner, a host this machine cannot bind or a port out of range or in use."""
    if not host or len(host) > 253 or any(c.isspace() for c in host):
        raise InputError(f"--host must be an address like 127.0.0.1, got {host[:60]!r}")
    if port is not None and not (1 <= int(port) <= 65535):
        raise InputError(f"--port must be in 1..65535, got {port!r}")
    try:
        infos = socket.getaddrinfo(host, port or 0, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise InputError(f"--host {host[:60]!r} is not an address this machine can serve on") from None
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
        except OSError as e:
            what = f"port {port} on {host}" if port else host
            raise InputError(f"cannot bind {what}: {e.strerror or e}") from None


def banner_url(host: str, port: int) -> str:
    """What the banner shows: the address really bound (all interfaces for 0.0.0.0 / ::)."""
    if host in ("0.0.0.0", "::"):
        return f"http://{host}:{port} (every interface; locally http://127.0.0.1:{port})"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _interrupt(*_):
    raise KeyboardInterrupt


def launch(host: str = "127.0.0.1", port: int | None = None, open_browser: bool = True) -> int:
    """Serve the explorer until interrupted; returns the server's exit code."""
    validate(host, port)
    try:
        import streamlit  # noqa: F401
    except ImportError:
        raise InputError("chalk web needs streamlit: pip install streamlit") from None
    port = port or free_port(host)
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    url = f"http://[{shown}]:{port}" if ":" in shown else f"http://{shown}:{port}"
    uploads = tempfile.mkdtemp(prefix="chalk-web-")  # private (0700), removed when the server stops
    env = environment()
    env[UPLOADS_ENV] = uploads
    sys.stderr.write(f"chalk web: serving on {banner_url(host, port)} (Ctrl-C to stop)\n")
    try:
        code = _serve(host, port, url, shown, env, open_browser)
    finally:
        shutil.rmtree(uploads, ignore_errors=True)
    if code not in (0, -signal.SIGTERM, -signal.SIGINT):
        raise InputError(f"the Streamlit server stopped with exit code {code}")
    return 0


def _end_group(proc: subprocess.Popen, grace_s: float = 10.0) -> int:
    """SIGTERM the server's whole process group, SIGKILL it after `grace_s`; returns the server's exit code.
    Further SIGTERM / SIGINT / SIGHUP are ignored meanwhile, so a second signal cannot cut the shutdown short."""
    for sig in _STOP_SIGNALS:
        try:
            signal.signal(sig, signal.SIG_IGN)
        except ValueError:  # not the main thread
            pass
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            return proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
    return proc.wait()


def _serve(host: str, port: int, url: str, shown: str, env: dict, open_browser: bool) -> int:
    # Its own session and process group, so SIGTERM / SIGINT / SIGHUP to `chalk web` end the server and anything
    # it started (a terminal's Ctrl-C reaches only our group; we forward it).
    for sig in _STOP_SIGNALS:  # before the child exists, so no signal finds it unowned
        try:
            signal.signal(sig, _interrupt)
        except ValueError:  # not the main thread
            pass
    proc = subprocess.Popen(command(host, port), env=env, start_new_session=True)
    if open_browser:
        def _open():
            if wait_until_up(shown, port, proc=proc):
                import webbrowser

                webbrowser.open(url)

        threading.Thread(target=_open, daemon=True).start()
    try:
        return proc.wait()
    except KeyboardInterrupt:
        return _end_group(proc)
    finally:
        if proc.poll() is None:
            _end_group(proc)
        else:  # the server is gone; end anything it left in its group
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
