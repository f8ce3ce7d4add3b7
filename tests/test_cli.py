"""The CLI contract: JSON keys, one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from chalk.faces.cli import ESTIMATE_KEYS


def run(*args, module="chalk.faces.cli"):
    p = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def last_line(code: str) -> str:
    """The last line `code` prints in a fresh interpreter (which must exit 0)."""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout.splitlines()[-1]


def test_estimate_json_keys_and_values():
    rc, out, err = run("estimate", "--model", "llama-3.1-70b", "--hardware", "h100-sxm", "--batch", "64",
                       "--context", "4096", "--ideal", "--json", "--aggregate")
    assert rc == 0, err
    d = json.loads(out)
    for k in ESTIMATE_KEYS:
        assert k in d
    assert d["bound"] in ("compute", "memory")
    assert d["kv_bytes_per_token"] == 327680
    assert d["total_params"] == pytest.approx(70.55e9, rel=0.001)
    assert d["step_time_s"] == pytest.approx(max(d["compute_time_s"], d["weight_time_s"] + d["kv_time_s"]))


def test_estimate_starts_light():
    """issue 12 (start-up): `chalk estimate` imports no other command module, no pydantic, pandas or matplotlib,
    no PyYAML (its catalog files come from the compiled catalog), and reads only the catalog files it needs (a
    chip, its system, the model's meta.yaml and config.json, the calibration, the kernel index, and energy.yaml
    for the answer's energy figures)."""
    code = ("import sys, runpy\n"
            "import chalk.specs.catalog as cat\n"
            "read = []\n"
            "load = cat._read_bytes\n"
            "cat._read_bytes = lambda path, where: read.append(str(path)) or load(path, where)\n"
            "sys.argv = ['chalk', 'estimate', '-m', 'llama-3.1-70b', '-H', 'h100-sxm', '-b', '64']\n"
            "try:\n    runpy.run_module('chalk', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "print(len(read), ' '.join(sorted(sys.modules)))")
    n_read, *loaded = last_line(code).split()
    assert [m for m in loaded if m.startswith("chalk.faces.cli_") and m != "chalk.faces.cli_common"] == []
    heavy = {"pandas", "matplotlib", "scipy", "chalk.specs.prices", "yaml"}
    import typer

    if not hasattr(typer.core.TyperOption, "display_type_rich"):  # typer 0.29 (outside the pin) imports pydantic
        heavy.add("pydantic")
    assert heavy & set(loaded) == set()
    assert int(n_read) <= 7, n_read  # not all 71 catalog files


def test_the_chalk_command_runs_the_cli_with_its_start_up_frozen():
    """issue 12 (start-up): the `chalk` console script and `python -m chalk` run `chalk.__main__.main`: the CLI with
    the cyclic garbage collector off while typer, numpy and the command line import, their objects frozen, and the
    collector on again for the command. Same answers, same one-line errors."""
    import tomllib
    from pathlib import Path

    scripts = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["chalk"] == "chalk.__main__:main"
    args = ["estimate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "-b", "8", "--json"]
    rc, out, err = run(*args, module="chalk")
    assert rc == 0, err
    assert json.loads(out) == json.loads(run(*args)[1])
    rc, _, err = run("estimate", "-m", "nope", "-H", "h100-sxm", module="chalk")
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err
    code = ("import gc, sys, chalk.__main__ as m\n"
            "sys.argv = ['chalk', 'estimate', '-m', 'llama-3.1-8b', '-H', 'h100-sxm', '--json']\n"
            "import chalk.faces.cli as cli\n"
            "seen = []\n"
            "real = cli.main\n"
            "cli.main = lambda: seen.append((gc.isenabled(), gc.get_freeze_count() > 0)) or real()\n"
            "try:\n    m.main()\nexcept SystemExit:\n    pass\n"
            "print(seen)")
    assert last_line(code) == "[(True, True)]"  # the command runs collected; start-up frozen


def test_estimate_ops_add_up_to_the_step():
    """The layout view: the ops sum to the step time, overhead is a visible row, and each op names its source."""
    rc, out, err = run("estimate", "-m", "deepseek-v3", "-H", "gb200-nvl72", "-b", "64", "-c", "4096",
                       "--layout", "tp=1,ep=8,pp=1,attn_dp=8", "--ops", "--json")
    assert rc == 0, err
    d = json.loads(out)
    assert d["layout"]["tp"] == 1 and d["layout"]["attn_dp"] == 8 and d["view"] == "layout"
    assert sum(o["time_s"] for o in d["ops"]) == pytest.approx(d["step_time_s"], rel=0.01)
    names = {o["name"] for o in d["ops"]}
    assert {"overhead", "experts", "attention_decode", "alltoall"} <= names
    for o in d["ops"]:
        assert set(o) >= {"name", "flops", "bytes", "time_s", "bound", "source"} and o["time_s"] >= 0


def test_estimate_prefill_and_strict_fit():
    rc, out, _ = run("estimate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--phase", "prefill", "-c", "8192",
                     "--ideal", "--json")
    assert rc == 0 and json.loads(out)["bound"] == "compute"
    rc, out, err = run("estimate", "-m", "llama-3.1-405b", "-H", "h100-sxm", "--chips", "1", "--strict-fit")
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1 and "does not fit" in err


def test_models_show_json():
    # the KV cache defaults to auto, as everywhere: FP8 (61 x 576 B/token of MLA latent) beside FP8 weights
    rc, out, _ = run("models", "show", "deepseek-v3", "--json")
    d = json.loads(out)
    assert rc == 0 and d["kv_bytes_per_token"] == 35136
    rc, out, _ = run("models", "show", "deepseek-v3", "--kv-precision", "bf16", "--json")
    d = json.loads(out)
    assert rc == 0 and d["kv_bytes_per_token"] == 70272
    assert d["total_params"] == pytest.approx(671.0e9, rel=0.001)
    assert 37e9 < d["active_params"] < 38e9


def test_lists_cover_catalog():
    from chalk.specs.catalog import chip_ids, model_ids

    rc, out, _ = run("models", "list", "--json")
    assert rc == 0 and {m["id"] for m in json.loads(out)["models"]} == set(model_ids())
    rc, out, _ = run("hardware", "list", "--json")
    assert rc == 0 and {c["id"] for c in json.loads(out)["chips"]} == set(chip_ids())


def test_sweep_json():
    rc, out, _ = run("sweep", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--batches", "1,8,64", "--contexts",
                     "1024,8192", "--json")
    rows = json.loads(out)["rows"]
    assert rc == 0 and len(rows) == 6


BAD = [
    (["estimate", "-m", "nope", "-H", "h100"], "unknown model"),
    (["estimate", "-m", "llama-3.1-8b", "-H", "h10"], "did you mean"),
    (["estimate", "-m", "llama-3.1-8b", "-H", "h100", "-b", "0"], "batch"),
    (["estimate", "-m", "llama-3.1-8b", "-H", "h100", "-b", "-3"], "batch"),
    (["estimate", "-m", "llama-3.1-8b", "-H", "h100", "-b", "nan"], "batch"),
    (["estimate", "-m", "llama-3.1-8b", "-H", "h100", "-c", "inf"], "context"),
    (["estimate", "-m", "llama-3.1-8b", "-H", "h100", "-p", "fp5"], "precision"),
    (["estimate", "-m", "llama-3.1-8b", "-H", "h100", "--kv-precision", "q3"], "precision"),
    (["estimate", "-m", "/nonexistent/config.json", "-H", "h100"], "no such file"),
    (["estimate", "-m", "llama-3.1-8b", "-H", "h100", "--phase", "both"], "phase"),
    (["estimate", "-m", "llama-3.1-8b", "-H", "h100", "--chips", "0"], "gpus"),
    (["estimate", "-m", "llama-3.1-8b", "-H", "h100", "--engine", "tgi"], "unknown engine"),
    (["estimate", "-m", "llama-3.1-8b", "-H", "h100", "--engine", "vllm@0.9"], "vllm version"),
    (["estimate", "-m", "llama-3.1-8b", "-H", "h100", "--engine", "vllm", "--aggregate"], "aggregate"),
    (["estimate", "-m", "llama-3.1-8b", "-H", "h100", "--engine", "vllm", "--plot", "/tmp/x.png"], "--plot"),
    (["hardware", "show", "tpu-v99"], "unknown hardware"),
    (["models", "show", "gpt-5"], "unknown model"),
    (["estimate", "--bogus"], "no such option"),
    (["simulate", "-m", "llama-3.1-8b", "-H", "h100", "--layout", "tp=1", "--concurrency", "8", "-n", "50",
      "--client-latency", "-1"], "client latency"),
    (["simulate", "-m", "llama-3.1-8b", "-H", "h100", "--layout", "tp=1", "--concurrency", "8", "-n", "50",
      "--client-latency", "nan"], "client latency"),
    (["simulate", "-m", "llama-3.1-8b", "-H", "h100", "-n", "50", "--client-latency", "-5ms"], "non-negative"),
]


@pytest.mark.parametrize("args,needle", BAD)
def test_bad_input_one_line_exit_2(args, needle):
    rc, out, err = run(*args)
    assert rc == 2
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and needle.lower() in err.lower()


@pytest.mark.parametrize("content,needle", [
    ("{bad", "malformed JSON"),
    ('{"model_type": "falcon", "hidden_size": 8}', "unsupported model_type"),
    ('{"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "vocab_size": 10}',
     "num_hidden_layers"),
    ('{"model_type": "llama", "hidden_size": -4096, "num_attention_heads": 32, "num_hidden_layers": 2, '
     '"vocab_size": 10, "intermediate_size": 5}', "hidden_size"),
    ("[1, 2]", "JSON object"),
])
def test_bad_config_files(tmp_path, content, needle):
    p = tmp_path / "config.json"
    p.write_text(content)
    rc, _, err = run("models", "show", str(p))
    assert rc == 2 and len(err.strip().splitlines()) == 1 and needle in err


@pytest.mark.parametrize("content,needle", [
    ("id: x\n dense_tflops: [1", "malformed YAML"),
    ("id: x\nname: y\nhbm_gb: 80\nhbm_tb_per_s: 3\n", "dense_tflops"),
    ("id: x\nname: y\ndense_tflops: {bf16: -5}\nhbm_gb: 80\nhbm_tb_per_s: 3\n", "bf16"),
    ("id: x\nname: y\ndense_tflops: {bf16: 100}\nhbm_gb: 0\nhbm_tb_per_s: 3\n", "hbm"),
])
def test_bad_hardware_yaml(tmp_path, content, needle):
    p = tmp_path / "chip.yaml"
    p.write_text(content)
    rc, _, err = run("estimate", "-m", "llama-3.1-8b", "-H", str(p))
    assert rc == 2 and len(err.strip().splitlines()) == 1 and needle in err


def test_custom_chip_yaml_works(tmp_path):
    p = tmp_path / "chip.yaml"
    p.write_text("id: mychip\nname: My chip\ndense_tflops: {bf16: 1000}\nhbm_gb: 100\nhbm_tb_per_s: 4\n"
                 "price_usd_per_hour: 2\n")
    rc, out, err = run("estimate", "-m", "llama-3.1-8b", "-H", str(p), "--ideal", "--json")
    assert rc == 0, err
    d = json.loads(out)
    assert d["chips"] == 1 and d["critical_batch"] == pytest.approx(1000 / 4 / 2 * 2 * 8.03 / 7.5, rel=0.1)


@pytest.mark.parametrize("args", [
    ["throughput", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--input-len", "1000", "--output-len", "500"],
    ["train", "-m", "llama-3.1-405b"],
])
def test_plot_option_writes_an_image(tmp_path, args):
    out = tmp_path / "fig.png"
    rc, stdout, err = run(*args, "--json", "--plot", str(out))
    assert rc == 0, err
    json.loads(stdout)  # stdout stays pure JSON; the "wrote" line goes to stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    assert f"wrote {out}" in err


def _command_leaves(cmd=None, path=()):
    """Every leaf command of the CLI as (path, click command)."""
    if cmd is None:
        import typer

        from chalk.faces import cli

        cmd = typer.main.get_command(cli.app)
    subs = getattr(cmd, "commands", None)
    if subs:
        for name, sub in subs.items():
            yield from _command_leaves(sub, path + (name,))
    else:
        yield path, cmd


def test_help_shows_no_type_on_flags_and_int_on_batch():
    """issue 12: `--help` showed `<bool>` beside flags that take no value, and `<float>` on a whole --batch."""
    from typer.testing import CliRunner

    from chalk.faces import cli

    runner = CliRunner()
    seen = 0
    for path, _ in _command_leaves():
        res = runner.invoke(cli.app, [*path, "--help"], env={"COLUMNS": "200"})
        assert res.exit_code == 0, (path, res.output)
        assert "<bool>" not in res.output, path
        if path == ("estimate",):
            assert "<int>" in next(ln for ln in res.output.splitlines() if "--batch" in ln)
        seen += 1
    assert seen > 15


@pytest.mark.parametrize("args, whole", [
    (("hardware", "list"), ["a100-sxm", "tpu-v5e", "mi355x", "2.04 TB/s"]),
    (("pricing",), ["claude-opus-4.1", "gemini-2.5-pro", "gpt-5-mini-priority", "200,000"]),
    (("layout", "-m", "deepseek-v3", "-H", "gb200-nvl72"), ["DP-attn8", "673 GB"]),
    (("validate",), ["dsv3-h800-decode-prod", "output_tokens/s/GPU"]),
])
def test_tables_stay_readable_at_80_columns(args, whole):
    """issue 12: at 80 columns tables wrapped mid-word ("claude-opus-4.\\n1", "200,00\\n0")."""
    import os

    p = subprocess.run([sys.executable, "-m", "chalk.faces.cli", *args], capture_output=True, text=True,
                       timeout=300, env={**os.environ, "COLUMNS": "80"})
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert max(len(ln) for ln in lines) <= 80
    for w in whole:
        assert any(w in ln for ln in lines), w


def test_one_name_and_one_default_across_commands():
    """issue 12: --gpus and --chips name the same idea everywhere (each an alias of the other), and every command's
    KV precision defaults to `auto`."""
    kv, counts = 0, 0
    for path, cmd in _command_leaves():
        for p in cmd.params:
            opts = set(getattr(p, "opts", []))
            if opts & {"--gpus", "--chips"}:
                assert {"--gpus", "--chips"} <= opts, (path, opts)
                counts += 1
            if "--kv-precision" in opts:
                assert p.default == "auto", path
                kv += 1
    assert counts >= 8 and kv >= 6


def _readme_commands():
    from pathlib import Path
    import shlex

    readme = Path(__file__).resolve().parents[1] / "README.md"
    if not readme.exists():
        return []
    text = readme.read_text()
    block = text[text.index("## Worked examples"):text.index("From Python")]
    lines, out = block.replace("\\\n", " ").splitlines(), []
    for ln in lines:
        ln = ln.split("  #")[0].strip()
        if not ln.startswith("chalk ") or ln.startswith(("chalk web", "chalk measure")) or "calib/" in ln:
            continue
        out.append(shlex.split(ln)[1:])
    return out


@pytest.mark.slow
@pytest.mark.parametrize("args", _readme_commands(), ids=lambda a: " ".join(a)[:60])
def test_readme_examples_run_as_written(args, tmp_path, monkeypatch):
    """issue 12: every worked example in the README runs as written (the chalk web / measure ones excepted: a
    server, and a minute-long measurement with the torch extra)."""
    from chalk.specs import catalog

    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    config = str(catalog._catalog_dir("models") / "llama-3.1-8b" / "config.json")
    args = [config if a == "path/to/config.json" else str(root / a)
            if a.startswith(("examples/", "../shared/", "tests/data/")) else a for a in args]
    if any(a.startswith(str(root / "../shared")) and not Path(a).exists() for a in args):
        pytest.skip("the public traces live in ../shared/traces, absent here")
    monkeypatch.chdir(tmp_path)
    p = subprocess.run([sys.executable, "-m", "chalk.faces.cli", *args], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, (args, p.stderr[-500:])


def test_readme_has_examples():
    assert len(_readme_commands()) >= 25


def test_throughput_gpus_row_names_the_pools_and_the_domains_a_replica_spans():
    """DeepSeek-R1 on H100 (two-node replicas, disaggregated): the GPUs row read '160 on 2 scale-up domains of 8',
    as if 160 GPUs fitted in 16; it now gives the two pools and what one replica spans. `_gpus_text` on the JSON."""
    from chalk.faces.cli_serving import _gpus_text

    code, out, err = run("throughput", "-m", "deepseek-r1", "-H", "h100", "--input-len", "1000", "--output-len",
                         "1000", "--json")
    assert code == 0, err
    r = json.loads(out)
    text = _gpus_text(r)
    assert r["replica_domains"] == 2 and r["gpus"] == r["decode_gpus"] + r["prefill_gpus"]
    assert text.startswith(f"{r['gpus']} ({r['decode_gpus']} decode + {r['prefill_gpus']} prefill); one replica "
                           "spans 2 scale-up domains of 8")
    # replicas inside one domain each, spread over two: no scale-out network inside a replica
    assert _gpus_text({"gpus": 16, "domains": 2, "replica_domains": 1, "domain_chips": 8}) == \
        "16 on 2 scale-up domains of 8"


def test_the_aggregate_calls_itself_a_bound_only_where_it_is_one():
    """QA sweep 2026-11-27: `estimate --aggregate` said 'a bound' while, calibrated, its roofline runs at the fitted
    fractions of the ops without kernel tables: a Llama-8B 8 x 2048 prefill on one H100 took 738 ms summed against
    372 ms on the real layout. Under --ideal it is a bound and says so; calibrated it says what it is."""
    from chalk.api import estimate

    q = dict(batch=8, context=2048, phase="prefill")
    cal = estimate("llama-3.1-8b", "h100-sxm", layout="tp=1", **q).step_time_s
    agg = estimate("llama-3.1-8b", "h100-sxm", aggregate=True, gpus=1, **q).step_time_s
    assert agg > cal  # why the calibrated header may not say 'bound'
    for extra, words in (((), "the lecture's roofline at the fitted fractions"), (("--ideal",), "a bound")):
        rc, out, err = run("estimate", "-m", "llama-3.1-8b", "-H", "h100", "--aggregate", "--gpus", "1", *extra)
        assert rc == 0, err
        assert words in " ".join(out.split())


def test_simulate_states_the_window_its_percentiles_cover():
    """issue 23: percentiles over a steady-state window, stated in every output: the table says which requests the
    closed loop's figures cover (the JSON's latency_window) and that a short open loop is measured whole."""
    base = ("simulate", "-m", "llama-3.1-8b", "-H", "h100", "--layout", "tp=1")
    rc, out, err = run(*base, "--concurrency", "16", "-n", "320")
    assert rc == 0, err
    flat = " ".join(out.split())
    assert "measured window steady state: requests 32 to 287 (256; the first 32 and last 32 left out)" in flat
    rc, out, err = run(*base, "--rate", "5", "-n", "100")
    assert rc == 0, err
    assert "the whole run (100 requests, cold start and ramp-down included)" in " ".join(out.split())


def test_measure_writes_nothing_to_stdout_when_it_fails():
    """Its spinner drew on stdout: a failed `measure --device cuda` (no GPU here) left a blank line there
    (QA 2026-11-28); every command's stdout stays empty on an error."""
    p = subprocess.run([sys.executable, "-m", "chalk", "measure", "--device", "cuda"], capture_output=True,
                       text=True, timeout=300)
    if p.returncode == 0:
        pytest.skip("a CUDA GPU is present")
    assert p.returncode == 2 and p.stdout == "" and len(p.stderr.strip().splitlines()) == 1, (p.stdout, p.stderr)


def test_a_local_configs_fixed_deployment_command_names_its_path(tmp_path):
    """QA: `throughput -m /path/llama-3.1-8b` (a 70B config in a folder named like the catalog's 8B) printed its
    fixed deployment as `throughput -m llama-3.1-8b ...`, which times the catalog's 8B model. The command names the
    path as given, and run as printed it replays the answer."""
    import shlex

    from chalk.specs.catalog import _catalog_dir

    d = tmp_path / "llama-3.1-8b"
    d.mkdir()
    (d / "config.json").write_text((_catalog_dir("models") / "llama-3.1-70b" / "config.json").read_text())
    rc, out, err = run("throughput", "-m", str(d), "-H", "h100-sxm", "--input-len", "1000", "--output-len", "200",
                       "--mode", "aggregated", "--json")
    assert rc == 0, err
    r = json.loads(out)
    cmd = shlex.split(r["fixed_command"])
    assert cmd[:3] == ["throughput", "-m", str(d)]
    rc, out, err = run(*cmd, "--json")
    assert rc == 0, err
    fixed = json.loads(out)
    assert fixed["gpus"] == r["gpus"]
    assert fixed["output_tokens_per_s_per_gpu"] == pytest.approx(r["output_tokens_per_s_per_gpu"], rel=0.01)
    rc, out, err = run(*cmd)  # the fixed answer's pure decode step: `estimate` on the same path
    assert rc == 0, err
    assert f"estimate -m {d} ".replace(" ", "") in "".join(out.split())  # a long path may fold across lines
