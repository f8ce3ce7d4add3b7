"""issue 27 item 8: the README's API section is a tested example: its code block runs as written, and what it
reads agrees with the CLI's JSON for the same question."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("pandas")

README = Path(__file__).resolve().parent.parent / "README.md"


def _api_example() -> str:
    text = README.read_text(encoding="utf-8")
    section = text.split("### The Python API", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_api_example_runs():
    ns: dict = {}
    exec(compile(_api_example(), str(README) + ":API", "exec"), ns)  # noqa: S102 -- the README's own example
    r, t = ns["r"], ns["t"]
    assert r.energy.pue == 1.2 and r.energy.usd_per_kwh == 0.08 and r.speculative.draft_tokens == 1
    assert len(ns["row"]) == 1 and ns["row"]["step_time_s"].iloc[0] == r.step_time_s
    assert t.energy["joules_per_token"] > 0 and t.output_tokens_per_s_per_gpu > 0
    assert len(ns["grid"]) == 8 and {"a100-sxm", "h100-sxm"} <= set(ns["chips"]["id"])
    assert "deepseek-v3" in set(ns["sizes"]["id"])


def test_the_api_and_the_cli_agree_on_energy():
    """One question through `chalk.estimate` and `chalk estimate --json`: the same J per token, to the bit."""
    import chalk
    from chalk.faces.cli import main

    r = chalk.estimate("llama-3.1-8b", "h100-sxm", 64, 4096, pue=1.1)
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        main(["estimate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "-b", "64", "--pue", "1.1", "--json"])
    d = json.loads(buf.getvalue())
    assert d["energy"]["joules_per_token"] == pytest.approx(r.energy.joules_per_token, rel=1e-12)
    assert d["energy"]["pue"] == 1.1 and d["energy"]["tokens"] == "output"
