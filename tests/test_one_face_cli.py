"""issue 27 (one face), the command line: one option set, one vocabulary, honest defaults.

A walk over the whole command tree checks every option for help text, one spelling and one value type per name,
units in values rather than in names, and the length-distribution form wherever lengths are taken. Then
`chalk --version`, the per-GPU / per-replica labels and the one-line header of each answer, the fast and slow modes
table at 80 columns, throughput's word on its default point, and the precisions `plan` explores.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from chalk.errors import ChalkError

DIST = "lognormal:mean=2000,p99=8000"


def run(*args, columns: int = 200):
    p = subprocess.run([sys.executable, "-m", "chalk.faces.cli", *args], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "COLUMNS": str(columns)})
    return p.returncode, p.stdout, p.stderr


def _tree():
    """(path, command) for every command and group under `chalk`, groups included (their own options count)."""
    import typer

    from chalk.faces.cli import app

    root = typer.main.get_command(app)
    out = []

    def walk(cmd, path):
        out.append((path, cmd))
        if hasattr(cmd, "list_commands"):
            ctx = cmd.context_class(cmd)
            for name in cmd.list_commands(ctx):
                walk(cmd.get_command(ctx, name), (*path, name))

    walk(root, ())
    return out


def _options():
    """(path, option) for every visible option of every command."""
    return [(path, p) for path, cmd in _tree() for p in cmd.params
            if p.param_type_name == "option" and not p.hidden]


def _convert(cmd, param, value):
    """`value` as the command line would hand it to the command: type conversion and the option's callback."""
    return param.process_value(cmd.context_class(cmd), value)


def test_the_walk_sees_every_command():
    paths = {" ".join(p) for p, _ in _tree()}
    assert {"estimate", "throughput", "simulate", "plan", "sweep", "layout", "report", "revnet", "train",
            "pricing margin", "models show", "hardware list"} <= paths
    assert len(_options()) > 150


def test_every_option_and_argument_has_help():
    bare = [(" ".join(path), p.opts) for path, cmd in _tree() for p in cmd.params
            if not p.hidden and not (getattr(p, "help", None) or "").strip()]
    assert bare == []


def test_one_spelling_and_one_value_type_per_option_name():
    """An option name means one thing: every command spells it with the same aliases and reads the same type.
    One short flag names one long option, but for -o, the output path (a file for plot and report, a folder
    for measure)."""
    spellings, types, shorts = {}, {}, {}
    for path, p in _options():
        names = tuple(sorted(p.opts + p.secondary_opts))
        for o in (o for o in p.opts if o.startswith("--")):
            spellings.setdefault(o, set()).add(names)
            types.setdefault(o, set()).add(p.type.name)
        longs = [o for o in p.opts if o.startswith("--")]
        for s in (o for o in p.opts if not o.startswith("--")):
            shorts.setdefault(s, set()).add(longs[0])
    assert {o: v for o, v in spellings.items() if len(v) > 1} == {}
    assert {o: v for o, v in types.items() if len(v) > 1} == {}
    shorts["-o"] -= {"--output", "--output-dir"}
    assert {s: v for s, v in shorts.items() if len(v) > 1 or (s == "-o" and v)} == {}
    for must in (("--model", "-m"), ("--hardware", "-H"), ("--precision", "-p")):
        assert spellings[must[0]] and all(must[1] in f for f in spellings[must[0]]), must


def test_no_option_carries_its_unit_in_its_name():
    """Times are values with units (`--ttft-p99 2s`, `--period 20ms`), not names (`--max-ttft-s`, `--period-ms`,
    kept only as hidden, deprecated spellings)."""
    named = sorted({o for _, p in _options() for o in p.opts if re.search(r"(?<!-per)-(s|ms|us|sec|secs)$", o)})
    assert named == []
    hidden = {o for path, cmd in _tree() for p in cmd.params if p.param_type_name == "option" and p.hidden
              for o in p.opts}
    assert {"--max-ttft-s", "--period-ms"} <= hidden


def test_every_time_option_reads_durations_with_units():
    timed = [(path, cmd, p) for path, cmd in _tree() for p in cmd.params
             if p.param_type_name == "option" and not p.hidden
             and any(o in ("--ttft-p99", "--tpot-p99", "--ttft-mean", "--period", "--client-latency") for o in p.opts)]
    assert {p.opts[0] for _, _, p in timed} == {"--ttft-p99", "--tpot-p99", "--ttft-mean", "--period",
                                                "--client-latency"}
    assert len(timed) >= 7  # throughput and plan share the p99 pair
    for path, cmd, p in timed:
        assert _convert(cmd, p, "20ms") == pytest.approx(0.02), (path, p.opts)
        assert _convert(cmd, p, "2s") == pytest.approx(2.0)
        assert _convert(cmd, p, "0.5") == pytest.approx(0.5)
        assert _convert(cmd, p, "150us") == pytest.approx(150e-6)
        with pytest.raises(ChalkError, match=re.escape(p.opts[0])):
            _convert(cmd, p, "soon")


def test_every_length_option_takes_the_distribution_form():
    """--input-len / --output-len: a mean, a distribution or a file, in every command that takes lengths (simulate
    refused `lognormal:...` once); a malformed one is refused when the command line is read."""
    lens = [(path, cmd, p) for path, cmd in _tree() for p in cmd.params
            if p.param_type_name == "option" and {"--input-len", "--output-len"} & set(p.opts)]
    assert {" ".join(path) for path, _, _ in lens} >= {"throughput", "simulate", "plan", "pricing margin"}
    for path, cmd, p in lens:
        assert "lognormal" in p.help or "as --input-len" in p.help, (path, p.opts)
        assert _convert(cmd, p, "1500") == 1500.0
        got = _convert(cmd, p, DIST)
        assert got == DIST or got == pytest.approx(2000.0), (path, got)  # margin reads the mean
        with pytest.raises(ChalkError, match="lognormal"):
            _convert(cmd, p, "lognormal:mean=2000")


def test_simulate_runs_a_length_distribution():
    rc, out, err = run("simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--input-len", DIST,
                       "--output-len", "lognormal:mean=200,sigma=0.5", "-n", "300", "--rate", "2", "--json")
    assert rc == 0, err
    d = json.loads(out)
    assert d["input_len_mean"] == pytest.approx(2000, rel=0.25)  # 300 draws of the lognormal, cut at the context


def test_version():
    from chalk import __version__

    rc, out, err = run("--version")
    assert rc == 0 and err == ""
    assert out.strip() == f"chalk {__version__}"
    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    assert __version__ == pyproject["project"]["version"]


def test_fmt_counts_gpus_and_says_per_what():
    from chalk.faces.fmt import gpus, header, rate

    assert gpus(8, "h100-sxm") == "8 x h100-sxm GPUs" and gpus(1, "b200") == "1 x b200 GPU"
    assert rate(7999, "tokens/s", "replica", 16) == "7999 tokens/s per replica (16 GPUs)"
    assert rate(12.5, "tokens/s", "user") == "12.5 tokens/s per user"
    h = header("m", "h100-sxm", 4, "TP4", "bf16", "fp8", None, "calibrated", "decode", system="hgx-h100")
    assert h == ("m · 4 x h100-sxm GPUs of hgx-h100 · layout TP4 · bf16 weights, fp8 KV · no engine profile · "
                 "efficiency calibrated · decode")


def _title(out: str) -> str:
    return out.splitlines()[0]


def test_estimate_labels_its_throughput_per_replica_and_per_gpu():
    args = ("estimate", "-m", "llama-3.1-70b", "-H", "h100-sxm", "-b", "64", "--layout", "tp=4")
    rc, out, err = run(*args, "--json")
    assert rc == 0, err
    d = json.loads(out)
    assert d["gpus_per_replica"] == 4
    assert d["tokens_per_s_per_replica"] == d["tokens_per_s"]
    assert d["tokens_per_s_per_gpu"] * 4 == pytest.approx(d["tokens_per_s"])
    rc, out, err = run(*args)
    assert rc == 0, err
    head = _title(out)
    for word in ("llama-3.1-70b", "4 x h100-sxm GPUs of hgx-h100", "layout TP4", "bf16 (bf16 compute) weights",
                 "bf16 KV", "no engine profile", "efficiency calibrated"):
        assert word in head, word
    assert re.search(r"throughput +[\d,.]+ tokens/s per replica \(4 GPUs\) = [\d,.]+ tokens/s per GPU", out)
    rc, out, err = run("estimate", "-m", "llama-3.1-70b", "-H", "h100-sxm,b200", "-b", "64", "--json")
    assert rc == 0, err
    for o in json.loads(out)["compare"]:  # the comparison across chips labels each answer the same way
        assert o["tokens_per_s_per_gpu"] * o["gpus_per_replica"] == pytest.approx(o["tokens_per_s"])
    rc, out, err = run("estimate", "-m", "llama-3.1-70b", "-H", "h100-sxm", "-b", "64", "--aggregate", "--json")
    d = json.loads(out)
    assert rc == 0 and d["tokens_per_s_per_fleet"] == d["tokens_per_s"] and d["gpus_per_fleet"] == 8


def test_simulate_labels_its_throughput_per_replica_and_per_gpu():
    args = ("simulate", "-m", "llama-3.1-70b", "-H", "h100-sxm", "--layout", "tp=2", "-n", "300", "--rate", "2")
    rc, out, err = run(*args, "--json")
    assert rc == 0, err
    d = json.loads(out)
    assert d["output_tokens_per_s_per_replica"] == d["output_tokens_per_s"]
    assert d["output_tokens_per_s_per_gpu"] * 2 == pytest.approx(d["output_tokens_per_s"])
    rc, out, err = run(*args)
    assert rc == 0, err
    for word in ("llama-3.1-70b", "2 x h100-sxm GPUs of hgx-h100", "layout TP2", "bf16 weights, bf16 KV",
                 "no engine profile", "efficiency calibrated"):
        assert word in _title(out), word
    assert re.search(r"output throughput +[\d,.]+ tokens/s per replica \(2 GPUs\) = [\d,.]+ tokens/s per GPU", out)


def test_throughput_without_a_floor_says_so_and_its_modes_read_at_80_columns():
    args = ("throughput", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--input-len", "1000", "--output-len", "200")
    rc, out, err = run(*args, "--json")
    assert rc == 0, err
    d = json.loads(out)
    assert "--min-user-tps" in d["objective"] and "most output tokens/s per GPU" in d["objective"]
    assert d["modes"][0]["speedup"] == 0.5 and d["modes"][0]["user_tokens_per_s"] == d["modes"][1]["user_tokens_per_s"]
    rc, out, err = run(*args, columns=80)
    assert rc == 0, err
    lines = out.splitlines()
    assert max(len(ln) for ln in lines) <= 80
    for word in ("llama-3.1-8b", "1 x h100-sxm GPU of hgx-h100", "layout TP1 (aggregated)", "bf16 weights",
                 "no engine profile", "efficiency calibrated"):
        assert word in " ".join(" ".join(lines[:3]).split()), word
    assert any("tokens/s per GPU" in ln for ln in lines)
    assert "give --min-user-tps N" in " ".join(lines)
    i = next(i for i, ln in enumerate(lines) if ln.startswith("speed-up"))
    assert lines[i].split() == ["speed-up", "tok/s/user", "price", "x", "$/M", "out", "layout"]  # one line
    rows = [ln for ln in lines[i + 2:] if re.match(r"^[\d.]+x", ln)]
    assert rows[0].startswith("0.5x, 1x ")  # the repeated row merged
    assert len(rows) == len(set(ln.split(None, 1)[1] for ln in rows)) == len(d["modes"]) - 1
    rc, out, err = run(*args, "--min-user-tps", "40", "--json")
    assert rc == 0 and "objective" not in json.loads(out)


def test_modes_table_merges_points_that_repeat():
    from rich.console import Console

    from chalk.faces.cli_serving import modes_table

    same = {"user_tokens_per_s": 20.0, "price_multiple": 1.0, "layout": "TP1", "cost_per_mtok_output_usd": 0.1}
    modes = [{**same, "speedup": 0.5}, {**same, "speedup": 1.0},
             {"speedup": 2.0, "user_tokens_per_s": 40.0, "price_multiple": 1.3, "layout": "TP2",
              "cost_per_mtok_output_usd": 0.13},
             {"speedup": 8.0, "user_tokens_per_s": 160.0, "price_multiple": None, "layout": ""}]
    c = Console(width=80, record=True)
    c.print(modes_table(modes))
    text = c.export_text()
    assert [ln.split()[0] for ln in text.splitlines() if re.match(r"^[\d.]+x", ln)] == ["0.5x,", "2x", "8x"]
    assert "unreachable" in text and max(len(ln) for ln in text.splitlines()) <= 80


def test_throughput_old_spelling_still_works_and_says_the_new_one():
    base = ("throughput", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--gpus", "1", "--input-len", "8000",
            "--output-len", "500", "--json")
    rc, old, err = run(*base, "--max-ttft-s", "0.5")
    assert rc == 0 and "--max-ttft-s is deprecated; use --ttft-mean" in err
    rc, new, err2 = run(*base, "--ttft-mean", "500ms")
    assert rc == 0 and "deprecated" not in err2
    a, b = json.loads(old), json.loads(new)
    assert a["max_ttft_s"] == b["max_ttft_s"] == 0.5
    assert a["output_tokens_per_s_per_gpu"] == b["output_tokens_per_s_per_gpu"] and a["ttft_s"] <= 0.5


def test_simulate_period_with_units_and_its_old_spelling():
    base = ("simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--scheduler", "train", "--max-batch", "64",
            "--input-len", "1", "--output-len", "1", "-n", "200", "--json")
    rc, out, err = run(*base, "--period", "50ms")
    assert rc == 0, err
    assert json.loads(out)["period_s"] == pytest.approx(0.05)
    rc, out2, err = run(*base, "--period-ms", "50")
    assert rc == 0 and "--period-ms is deprecated" in err
    assert json.loads(out2)["period_s"] == pytest.approx(0.05)
    rc, out3, err = run(*base)  # the train scheduler's default period
    assert rc == 0 and json.loads(out3)["period_s"] == pytest.approx(0.02)
    # the continuous scheduler has no period: giving one is a mistake, said in one line
    cont = tuple(a for a in base if a not in ("--scheduler", "train"))
    rc, out4, err = run(*cont, "--period", "50ms")
    assert rc == 2 and "--scheduler train" in err and len(err.strip().splitlines()) == 1


def test_plan_explores_the_precisions_the_chips_run_and_says_which():
    from chalk.analyses.planning.plan import explored_precisions

    # bf16 checkpoint: fp8 on Hopper, fp8 and fp4 once a Blackwell chip is a candidate
    assert explored_precisions("llama-3.1-8b", "h100-sxm") == [None, "fp8"]
    assert explored_precisions("llama-3.1-8b", "h100-sxm,b200") == [None, "fp8", "fp4"]
    # an FP8 checkpoint is never widened; fp4 only where a chip runs it
    assert explored_precisions("deepseek-v3", "h100-sxm") == [None]
    assert explored_precisions("deepseek-v3", "b200") == [None, "fp4"]
    args = ("plan", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--rate", "5", "--input-len", "1000", "--output-len",
            "200", "--no-launch")
    rc, out, err = run(*args, "--json")
    assert rc == 0, err
    d = json.loads(out)
    assert d["precisions_explored"] == ["bf16 (checkpoint)", "fp8"]
    for o in d["options"]:
        assert o["precision"] in ("bf16", "fp8")
        assert o["output_tokens_per_s_per_fleet"] == pytest.approx(o["output_tokens_per_s"])
        assert o["output_tokens_per_s_per_gpu"] * o["gpus"] == pytest.approx(o["output_tokens_per_s"])
    rc, out, err = run(*args, "--precision", "bf16", "--json")
    assert rc == 0 and json.loads(out)["precisions_explored"] == ["bf16 (checkpoint)"]
    rc, out, err = run(*args)
    assert rc == 0, err
    text = " ".join(out.split())
    assert "precisions explored: bf16 (checkpoint), fp8" in text and "--precision bf16 keeps" in text
    assert "cheapest: llama-3.1-8b · 1 x h100-sxm GPU of hgx-h100" in text


def test_progress_is_silent_off_a_terminal_and_under_json(capsys):
    from chalk.faces.cli_common import busy, progress

    with progress(True, "x") as tick:
        assert tick is None
    with progress(False, "x") as tick:  # pytest's stderr is no terminal
        assert tick is None
    with busy(False, "x"):
        pass
    assert capsys.readouterr().err == ""
    rc, out, err = run("revnet", "--max-depth", "2", "--batch", "4", "--width", "8")
    assert rc == 0 and err == "" and "reversible vs standard stack" in out


def test_throughput_says_per_gpu_per_replica_and_per_fleet():
    """8 GPUs as 4 TP2 replicas: the per-GPU rate, one replica's (2 GPUs) and the fleet's (8) agree."""
    rc, out, err = run("throughput", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--input-len", "1000", "--output-len",
                       "200", "--gpus", "8", "--layout", "tp=2", "--concurrency", "64", "--json")
    assert rc == 0, err
    d = json.loads(out)
    assert d["replicas"] == 4 and d["gpus_per_replica"] == 2
    assert d["output_tokens_per_s_per_replica"] == pytest.approx(2 * d["output_tokens_per_s_per_gpu"])
    assert d["output_tokens_per_s_per_fleet"] == pytest.approx(4 * d["output_tokens_per_s_per_replica"])
    rc, out, err = run("throughput", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--input-len", "1000", "--output-len",
                       "200", "--gpus", "8")
    assert rc == 0, err
    text = " ".join(out.split())
    assert re.search(r"per replica [\d,.]+ output tokens/s per replica \((\d) GPUs?\); [\d,.]+ output tokens/s per "
                     r"fleet \(8 GPUs\)", text)


def test_sweep_rows_say_per_replica_and_per_gpu():
    rc, out, err = run("sweep", "-m", "llama-3.1-70b", "-H", "h100-sxm", "--batches", "1,64", "--json")
    assert rc == 0, err
    d = json.loads(out)
    n = d["meta"]["gpus_per_replica"]
    assert n == d["meta"]["chips"] >= 2
    for row in d["rows"]:
        assert row["tokens_per_s_per_replica"] == row["tokens_per_s"]
        assert row["tokens_per_s_per_gpu"] * n == pytest.approx(row["tokens_per_s"])
    rc, out, err = run("sweep", "-m", "llama-3.1-70b", "-H", "h100-sxm", "--batches", "1,64")
    assert rc == 0 and f"{n} x h100-sxm GPUs of hgx-h100" in _title(out) and "tok/s/replica" in out
