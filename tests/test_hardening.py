"""Hardening, round two (issue 26): atomic writes, bounded reads, odd paths and encodings, contradictions refused.

Each command runs as a real process (`python -m chalk`), as a user meets it: a full disk is a file-size limit
(RLIMIT_FSIZE: every write past it fails with EFBIG, as a full disk fails with ENOSPC) or, where this machine lets
a test mount one, a small tmpfs filled to the last byte.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chalk.errors import InputError, SpecError
from chalk.specs.files import atomic_path, atomic_write, read_bounded

M, H = ["-m", "llama-3.1-8b"], ["-H", "h100-sxm"]
OLD = b"an existing output that a failed write must leave byte-identical\n" * 40  # 2,640 bytes


def _chalk(args, *, fsize: int | None = None, env: dict | None = None, cwd=None, timeout=120):
    """Run `chalk args` (str or bytes items); `fsize`: no file may grow past that many bytes."""
    def limit():
        if fsize is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG), no signal kill
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    argv = [sys.executable.encode(), b"-m", b"chalk"] + [a if isinstance(a, bytes) else str(a).encode() for a in args]
    return subprocess.run(argv, capture_output=True, timeout=timeout, preexec_fn=limit, cwd=cwd,
                          env={**os.environ, **(env or {})})


def _one_error_line(r) -> str:
    err = r.stderr.decode("utf-8", "replace")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert r.returncode == 2 and "Traceback" not in err and len(lines) == 1, (r.returncode, err[-2000:])
    return lines[0]


# ------------------------------------------------------------------ 1. atomic writes
FULL_DISK = {  # command, the output option's value as a file name
    "sweep --csv": (["sweep", *M, *H, "--batches", "1,2,4,8,16,32,64,128", "--contexts", "1000,2000,4000,8000",
                     "--csv"], "out.csv"),
    "plot -o": (["plot", "cost-vs-batch", *M, *H, "-o"], "out.png"),
    "sweep --plot": (["sweep", *M, *H, "--plot"], "out.svg"),
    "report -o": (["report", *M, *H, "-o"], "out.html"),
}


@pytest.mark.parametrize("name", sorted(FULL_DISK))
def test_a_full_disk_leaves_an_existing_output_byte_identical(tmp_path, name):
    args, fname = FULL_DISK[name]
    out = tmp_path / fname
    out.write_bytes(OLD)
    r = _chalk(args + [out], fsize=len(OLD) // 2)  # the new file cannot grow past half the old one
    line = _one_error_line(r)
    assert "cannot write" in line and "File too large" in line and "left as it was" in line, line
    assert out.read_bytes() == OLD
    assert sorted(p.name for p in tmp_path.iterdir()) == [fname]  # no temporary left behind
    ok = _chalk(args + [out])  # and without the limit the same command replaces it
    assert ok.returncode == 0, ok.stderr[-500:]
    assert out.read_bytes() != OLD and out.stat().st_size > len(OLD) // 2


def test_calibrate_write_on_a_full_disk_keeps_the_old_file(tmp_path):
    """calibrate takes minutes: its fit and cross-validation are replaced by a fixed answer, the write is real."""
    out = tmp_path / "cal.yaml"
    out.write_bytes(OLD)
    script = (
        "import sys\n"
        "from chalk.analyses.fidelity import calibrate as C\n"
        "C.cross_validate = lambda **kw: {'cv_range': (0.8, 1.3), 'range_quantiles': [0.1, 0.9],\n"
        "    'cv_range_coverage': 0.8, 'n_families': 5, 'n': 40}\n"
        "from chalk.faces.cli import main\n"
        "main(sys.argv[1:])\n")

    def run(fsize):
        def limit():
            if fsize:
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
                resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        return subprocess.run([sys.executable, "-c", script, "calibrate", "--range-only", "--json",
                               "--write", str(out)],
                              capture_output=True, timeout=120, preexec_fn=limit)

    out.write_text("fitted: {residual_low: 0.5}\nrows: 3\n" + "# padding\n" * 200)
    before = out.read_bytes()
    line = _one_error_line(run(100))
    assert "--write: cannot write" in line and "left as it was" in line
    assert out.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["cal.yaml"]
    r = run(None)
    assert r.returncode == 0, r.stderr[-800:]
    assert b"residual_low: 0.8" in out.read_bytes()


def _can_mount_tmpfs() -> bool:
    if not shutil.which("unshare") or sys.platform != "linux":
        return False
    try:
        return subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
                              capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(not _can_mount_tmpfs(), reason="no user namespace to mount a tmpfs in")
def test_a_really_full_tmpfs_leaves_the_old_csv(tmp_path):
    """A 256 kB tmpfs (in a private mount namespace) with an old CSV, then filled to the last byte."""
    script = tmp_path / "full.sh"
    script.write_text(
        "set -e\n"
        f"mount -t tmpfs -o size=256k tmpfs {tmp_path}/mnt\n"
        f"cp {tmp_path}/old.csv {tmp_path}/mnt/out.csv\n"
        f"dd if=/dev/zero of={tmp_path}/mnt/fill bs=4k 2>/dev/null || true\n"
        f"{sys.executable} -m chalk sweep -m llama-3.1-8b -H h100-sxm --batches 1,2,4,8 --contexts 1000,2000 "
        f"--csv {tmp_path}/mnt/out.csv 2>{tmp_path}/err || echo rc=$? >{tmp_path}/rc\n"
        f"cmp {tmp_path}/old.csv {tmp_path}/mnt/out.csv && echo same >{tmp_path}/same\n"
        f"ls -a {tmp_path}/mnt >{tmp_path}/ls\n")
    (tmp_path / "mnt").mkdir()
    (tmp_path / "old.csv").write_bytes(OLD)
    r = subprocess.run(["unshare", "-rm", "sh", str(script)], capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "rc").read_text().strip() == "rc=2"
    err = (tmp_path / "err").read_text()
    assert len(err.splitlines()) == 1 and "No space left on device" in err, err
    assert (tmp_path / "same").exists()
    assert sorted((tmp_path / "ls").read_text().split()) == [".", "..", "fill", "out.csv"]


def test_atomic_write_keeps_mode_and_refuses_devices(tmp_path):
    p = tmp_path / "x.txt"
    p.write_text("old")
    p.chmod(0o640)
    atomic_write(p, "new")
    assert p.read_text() == "new" and (p.stat().st_mode & 0o777) == 0o640
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="not a regular file"):
        atomic_write(fifo, "x")  # never renamed over a FIFO or a device
    assert fifo.is_fifo()
    fifo.unlink()
    with pytest.raises(RuntimeError), atomic_path(p) as tmp:  # an error while writing: old file, no temporary
        tmp.write_text("partial")
        raise RuntimeError
    assert p.read_text() == "new" and [q.name for q in tmp_path.iterdir()] == ["x.txt"]


def test_output_on_dev_full_is_one_line():
    for args in (["sweep", *M, *H, "--csv", "/dev/full"], ["plot", "cost-vs-batch", *M, *H, "-o", "/dev/full"],
                 ["report", *M, *H, "-o", "/dev/full"]):
        line = _one_error_line(_chalk(args))
        assert "/dev/full" in line
    assert Path("/dev/full").is_char_device()


# ------------------------------------------------------------------ 2. bounded reads
@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """/dev/zero, a FIFO, a 10 GB sparse file, a folder, and a model folder whose config.json is /dev/zero."""
    d = tmp_path_factory.mktemp("hostile")
    os.mkfifo(d / "fifo")
    with open(d / "sparse.csv", "wb") as f:
        f.truncate(10 * 10**9)
    (d / "zero-model").mkdir()
    os.symlink("/dev/zero", d / "zero-model" / "config.json")
    (d / "fifo-model").mkdir()
    os.mkfifo(d / "fifo-model" / "config.json")
    return d


SIM = ["simulate", *M, *H, "--requests", "100", "--rate", "1"]
PLAN = ["plan", *M, *H, "--users", "20", "--input-len", "1000", "--output-len", "200"]
FILE_OPTIONS = {  # option: (command before the value, command after the value)
    "model config": (["estimate", *H, "-m"], []),
    "hardware YAML": (["estimate", *M, "-H"], []),
    "lengths file": (SIM + ["--output-len", "100", "--input-len"], []),
    "trace": (["simulate", *M, *H, "--trace"], []),
    "plan trace": (["plan", *M, *H, "--trace"], []),
    "diurnal curve": (PLAN + ["--diurnal"], []),
}


@pytest.mark.parametrize("option,what", [(o, w) for o in sorted(FILE_OPTIONS)
                                          for w in ("/dev/zero", "fifo", "sparse.csv", "folder", "model-folder")
                                          if w != "model-folder" or o == "model config"])
def test_every_file_option_refuses_devices_fifos_and_huge_files_fast(hostile, option, what):
    before, after = FILE_OPTIONS[option]
    value = {"/dev/zero": "/dev/zero", "fifo": hostile / "fifo", "sparse.csv": hostile / "sparse.csv",
             "folder": hostile, "model-folder": hostile / "zero-model"}[what]
    t0 = time.perf_counter()
    r = _chalk(before + [value] + after, timeout=20)
    dt = time.perf_counter() - t0
    line = _one_error_line(r)
    assert dt < 3.0, dt  # the process start is ~0.4 s of it; the refusal itself is a stat
    if what != "folder":  # (a folder given as a model is read as a model folder without a config.json)
        assert "at most" in line and ("not a regular file" in line or "10 GB" in line), line  # the limit named


def test_a_fifo_model_folder_does_not_hang(hostile):
    line = _one_error_line(_chalk(["estimate", *H, "-m", hostile / "fifo-model"], timeout=20))
    assert "not a regular file" in line


def test_read_bounded_names_its_limit(tmp_path):
    p = tmp_path / "x"
    p.write_bytes(b"a" * 2000)
    with pytest.raises(SpecError, match=r"2,000 bytes; a thing must be a regular file of at most 1,000 bytes"):
        read_bounded(p, "x", 1000, what="a thing")
    assert read_bounded(p, "x", 2000) == b"a" * 2000
    with pytest.raises(InputError, match="not a regular file"):
        read_bounded("/dev/zero", "z", 10, error=InputError)


# ------------------------------------------------------------------ 3. paths and encodings
@pytest.mark.parametrize("args,name", [
    (["sweep", *M, *H, "--csv"], b"out\xff.csv"),
    (["plot", "cost-vs-batch", *M, *H, "-o"], b"p\xfe.png"),
    (["report", *M, *H, "-o"], b"r\xfe\x80.html"),
    (["estimate", *M, *H, "--plot"], b"e\xff.svg"),
])
def test_undecodable_output_names_are_written(tmp_path, args, name):
    r = _chalk(args + [name], cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-800:]
    assert os.listdir(bytes(tmp_path)) == [name]
    assert b"Traceback" not in r.stderr and os.path.getsize(bytes(tmp_path) + b"/" + name) > 100


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
@pytest.mark.parametrize("args", [["lecture"], ["estimate", *M, *H, "--ops"], PLAN + ["--sim-requests", "2000"]],
                         ids=["lecture", "estimate-ops", "plan"])
def test_text_degrades_to_what_the_stream_can_encode(args, encoding):
    from chalk.faces.cli_common import degrade_to_ascii

    degrade_to_ascii()  # registers the "chalk-ascii" error handler here too
    r = _chalk(args, env={"PYTHONIOENCODING": encoding}, timeout=240)
    assert r.returncode == 0, r.stderr[-1500:]
    text = r.stdout.decode(encoding)
    assert len(text) > 200 and "Traceback" not in r.stderr.decode(encoding, "replace")
    if encoding == "ascii":
        assert "?" not in text  # every symbol has a stand-in (x, ~, -, sqrt ...), none is lost
    ref = _chalk(args, env={"PYTHONIOENCODING": "utf-8"}, timeout=240).stdout.decode()
    ref = ref.encode(encoding, "chalk-ascii").decode(encoding)  # its symbols as the stream's stand-ins
    words = re.compile(r"[A-Za-z]{2,}")
    assert words.findall(text) == words.findall(ref)  # the same words in the same order (boxes drawn in ASCII)


def test_ascii_stand_ins():
    from chalk.faces.cli_common import _ascii_errors, degrade_to_ascii

    degrade_to_ascii()
    assert "2×8 ≈ 16 · 3–4 µs — √x ★ é".encode("ascii", "chalk-ascii") == b"2x8 ~ 16 - 3-4 us - sqrtx * e"
    assert _ascii_errors is not None


# ------------------------------------------------------------------ 6. contradictions refused
LENS = ["--input-len", "1000", "--output-len", "200"]
THR = ["throughput", *M, *H, *LENS]
PLAN_ALL = ["plan", *M, "--users", "20", *LENS, "--sim-requests", "2000"]
CONTRADICTIONS = {  # invocation: a phrase its one line must hold
    "-H by id and system": (["estimate", *M, "-H", "h100-sxm,hgx-h100"], "'h100-sxm' and 'hgx-h100' are both hgx-h100"),
    "-H twice in plan": (PLAN_ALL + ["-H", "h100-sxm,hgx-h100"], "names one system twice"),
    "-H same id twice": (PLAN_ALL + ["-H", "h200,h200"], "'h200' is both"),
    "--price twice": (PLAN_ALL + [*H, "--price", "h100-sxm=2,h100-sxm=3"], "h100-sxm two prices"),
    "--price by alias": (PLAN_ALL + [*H, "--price", "h100-sxm=2", "--price", "hgx-h100=3"], "two prices"),
    "--price empty item": (PLAN_ALL + [*H, "--price", "h100-sxm=2,"], "empty item"),
    "--precision bf16,,fp8": (PLAN_ALL + [*H, "--precision", "bf16,,fp8"], "empty item"),
    "--precision ,": (PLAN_ALL + [*H, "--precision", ","], "at least one item"),
    "--batches 1,,2": (["sweep", *M, *H, "--batches", "1,,2"], "--batches has an empty item"),
    "--contexts 1,": (["sweep", *M, *H, "--contexts", "1000,"], "--contexts has an empty item"),
    "--kv-precision '' estimate": (["estimate", *M, *H, "--kv-precision", ""], "kv_precision must be a name"),
    "--kv-precision '' layout": (["layout", *M, *H, "--kv-precision", ""], "kv_precision must name"),
    "--kv-precision '' throughput": (THR + ["--kv-precision", ""], "kv_precision must name"),
    "--speculative ''": (THR + ["--speculative", ""], "--speculative must be METHOD,K,A"),
    "--speculative with --mtp": (THR + ["--speculative", "eagle,3,0.7", "--mtp", "2"], "drop --speculative"),
    "--speculative with --acceptance": (THR + ["--speculative", "eagle,3,0.7", "--acceptance", "0.5"],
                                        "drop --speculative"),
    "--acceptance alone estimate": (["estimate", *M, *H, "--acceptance", "0.5"], "give --mtp K too"),
    "--acceptance alone throughput": (THR + ["--acceptance", "0.5"], "give --mtp K too"),
    "--acceptance alone plan": (PLAN_ALL + [*H, "--acceptance", "0.5"], "give --mtp K too"),
    "--draft-model newline": (PLAN_ALL + [*H, "--draft-model", "org/draft\nrm -rf /"], "one line of printable"),
    "simulate --precision ''": (["simulate", *M, *H, "--precision", ""], "unknown precision ''"),
    "--period-ms nan": (["simulate", *M, *H, "--period-ms", "nan"], "--period-ms must be finite"),
    "--max-ttft-s nan": (THR + ["--max-ttft-s", "nan"], "--max-ttft-s must be finite"),  # no deprecation note
    "validate --workers without --cv": (["validate", "--workers", "99999999999999999999"], "give --cv too"),
    "validate --ray without --cv": (["validate", "--ray"], "give --cv too"),
}


def _invoke(args, _unused=None):
    """`chalk args` in this process: (exit code, stdout, stderr, seconds)."""
    import contextlib
    import io

    from chalk.faces import cli

    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli.main(list(args))
            code = 0
        except SystemExit as e:
            code = e.code
    return code, out.getvalue(), err.getvalue(), time.perf_counter() - t0


@pytest.mark.parametrize("case", sorted(CONTRADICTIONS))
def test_contradictions_are_refused_in_one_line(case):
    args, phrase = CONTRADICTIONS[case]
    code, out, err, dt = _invoke(tuple(args), [])
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and phrase in lines[0], (code, err)
    assert dt < 5, dt  # refused before the work


@pytest.mark.parametrize("args", [
    ["estimate", *M, *H, "--mtp", "2", "--acceptance", "0.5"],
    THR + ["--speculative", "eagle,3,0.7"],
    ["sweep", *M, *H, "--batches", "1,2", "--contexts", "1000,2000"],
    PLAN_ALL + ["-H", "h100-sxm,h200", "--precision", "bf16,fp8", "--price", "h100-sxm=2,h200=3"],
], ids=["mtp+acceptance", "speculative", "sweep-lists", "plan-lists"])
def test_the_consistent_forms_still_answer(args):
    code, out, err, _ = _invoke(tuple(args), [])
    assert code == 0, err


def test_prices_and_hardware_lists_through_the_api():
    from chalk.specs.demand import candidate_list, parse_prices

    assert parse_prices({"h100-sxm": 2.5, "h200": 3}) == {"h100-sxm": 2.5, "h200": 3.0}
    with pytest.raises(InputError, match="two prices"):
        parse_prices({"h100-sxm": 2.5, "hgx-h100": 3})
    assert candidate_list("h100-sxm,h200") == ["h100-sxm", "h200"]
    with pytest.raises(InputError, match="twice"):
        candidate_list(["h100-sxm", "hgx-h100"])


def test_plan_emit_on_a_full_disk_leaves_the_folder_as_it_was(tmp_path):
    """plan --emit (issue 25) fills a temporary sibling folder and renames it: a write that fails leaves the empty
    target folder as it was and no temporary behind."""
    dest = tmp_path / "out"
    dest.mkdir()
    args = PLAN_ALL + [*H, "--emit", "k8s", dest]
    line = _one_error_line(_chalk(args, fsize=100))
    assert "--emit" in line and "File too large" in line
    assert [p.name for p in tmp_path.iterdir()] == ["out"] and list(dest.iterdir()) == []
    ok = _chalk(args)
    assert ok.returncode == 0 and len(list(dest.iterdir())) >= 2
    assert b"fill in ENGINE_TAG" in ok.stderr  # the manifests' unfilled image tag is said (QA 2026-11-28)


# ------------------------------------------------------------------ 5. big and odd numbers in configs and flags
def _config(tmp_path, name, base_id, text=None, **edits) -> Path:
    """A model folder holding catalog model `base_id`'s config.json with `edits` (or `text` as the whole file)."""
    import json

    from chalk.specs import catalog

    cfg = json.loads((catalog._catalog_dir("models") / base_id / "config.json").read_text())
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(text if text is not None else json.dumps({**cfg, **edits}))
    return d


GPTQ = {"quant_method": "gptq", "group_size": 128, "desc_act": False, "sym": True}
ODD_CONFIGS = {  # folder: (catalog model it edits, edits, a phrase the one line must hold)
    "sparse-step-zero": ("qwen3-30b-a3b", {"decoder_sparse_step": 0}, "decoder_sparse_step must be between 1"),
    "moe-freq-zero": ("deepseek-v3", {"moe_layer_freq": 0}, "moe_layer_freq must be between 1"),
    "dsa-topk-zero": ("deepseek-v3.2", {"index_topk": 0}, "index_topk must be between 1"),
    "dsa-heads-zero": ("deepseek-v3.2", {"index_n_heads": 0}, "index_n_heads must be between 1"),
    "kv-lora-zero": ("deepseek-v3", {"kv_lora_rank": 0}, "kv_lora_rank must be between 1"),
    "v-head-zero": ("deepseek-v3", {"v_head_dim": 0}, "v_head_dim must be between 1"),
    "bits-zero": ("llama-3.1-8b", {"quantization_config": {**GPTQ, "bits": 0}}, "bits must be one of"),
    "bits-1e9": ("llama-3.1-8b", {"quantization_config": {**GPTQ, "bits": 1e9}}, "bits must be one of"),
    "layers-2^31": ("llama-3.1-8b", {"num_hidden_layers": 2**31}, "num_hidden_layers must be between 0 and 1000000"),
}


@pytest.mark.parametrize("command", [["estimate", *H], ["throughput", *H, "--input-len", "1000", "--output-len", "200"],
                                     ["models", "show"]], ids=["estimate", "throughput", "models show"])
@pytest.mark.parametrize("name", sorted(ODD_CONFIGS))
def test_odd_config_values_are_one_line(tmp_path, name, command):
    base, edits, phrase = ODD_CONFIGS[name]
    d = _config(tmp_path, name, base, **edits)
    args = command + ([str(d)] if command[0] == "models" else ["-m", str(d)])
    code, out, err, dt = _invoke(tuple(args))
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and phrase in lines[0], (code, err[-600:])
    assert dt < 5, dt


@pytest.mark.parametrize("where", ["config.json", "a chip YAML"])
def test_an_integer_of_5001_digits_is_one_line(tmp_path, where):
    if where == "config.json":
        d = _config(tmp_path, "digits", "llama-3.1-8b", text='{"model_type": "llama", "vocab_size": ' + "1" * 5001 + "}")
        args = ["models", "show", str(d)]
    else:
        from chalk.specs import catalog

        chip = (catalog._catalog_dir("chips") / "h100-sxm.yaml").read_text()
        p = tmp_path / "chip.yaml"
        p.write_text(re.sub(r"(?m)^hbm_gb: .*$", "hbm_gb: " + "9" * 5001, chip))
        args = ["estimate", *M, "-H", str(p)]
    code, out, err, _ = _invoke(tuple(args))
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "a number of more than 4,300 digits" in lines[0], (code, err[-600:])


@pytest.mark.parametrize("value,phrase", [("99999999999999999999", "at most 1,000,000,000"),
                                          ("9" * 400, "at most 1,000,000,000"), ("0", "positive")])
def test_concurrency_beyond_int64_is_one_line(value, phrase):
    code, out, err, _ = _invoke(tuple(THR + ["--layout", "tp=1", "--concurrency", value]))
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and phrase in lines[0] and len(lines[0]) < 200, (code, err[-600:])


def test_counts_beyond_int64_through_the_library():
    from chalk.specs.workload import count, positive

    for v, phrase in ((10**20, "at most"), (-10**20, "positive"), (10**5000, "over 4,000 digits")):
        with pytest.raises(InputError, match=phrase):
            count("concurrency", v)
    assert positive("x", 10**20, maximum=1e300) == 1e20  # within a stated bound it is a number like any other
    import chalk

    with pytest.raises(InputError, match="at most"):
        chalk.throughput("llama-3.1-8b", "h100-sxm", input_len=100, output_len=10, layout="tp=1", concurrency=10**20)


@pytest.mark.parametrize("args,phrase", [
    (["pricing", "--hardware", "h100-sxm", "--precision", "no-such"], "unknown precision 'no-such'"),
    (["pricing", "--hardware", "h100-sxm", "--precision", ""], "unknown precision ''"),
    (["pricing", "--precision", "no-such"], "unknown precision"),
    (["pricing", "--precision", "bf16"], "give --hardware"),
    (["pricing", "--hardware", "h100-sxm", "--ratio", "300", "--precision", "bf16"], "and no --ratio"),
    (["pricing", "--precision", "", "show", "deepseek-r1"], "unknown precision ''"),
])
def test_pricing_precision_is_never_dropped(args, phrase):
    code, out, err, _ = _invoke(tuple(args))
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and phrase in lines[0], (code, err[-600:])
    code, out, err, _ = _invoke(("pricing", "--hardware", "h100-sxm", "--precision", "bf16", "--json"))
    assert code == 0 and "h100-sxm at bf16" in out


# ------------------------------------------------------------------ 7. cheap checks first
def test_measure_refuses_a_model_too_big_before_torch_or_any_measurement(tmp_path):
    """A config of a million layers (436 TB of bf16 weights) is refused from its size alone: no torch import, no
    ceiling measured (before, `measure --quick` measured for minutes first)."""
    d = _config(tmp_path, "deep", "llama-3.1-8b", num_hidden_layers=1_000_000)
    script = ("import sys\n"
              "from chalk.faces.cli import main\n"
              "try:\n"
              "    main(sys.argv[1:])\n"
              "finally:\n"
              "    print('torch imported' if 'torch' in sys.modules else 'no torch', file=sys.stderr)\n")
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", script, "measure", "--quick", "-m", str(d)], capture_output=True,
                       timeout=120)
    dt = time.perf_counter() - t0
    err = r.stderr.decode()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert r.returncode == 2 and "Traceback" not in err and len(lines) == 2, err[-1500:]
    assert "needs 436226.1 GB of bf16 weights" in lines[0] and "use a smaller config" in lines[0], lines
    assert lines[1] == "no torch" and dt < 20, (lines, dt)


@pytest.mark.parametrize("args", [
    ["throughput", "-H", "h100-sxm", *LENS],
    ["simulate", "-H", "h100-sxm", "--rate", "1", "--requests", "100000", *LENS],
    ["plan", "-H", "h100-sxm,b200", "--users", "20", *LENS],
], ids=["throughput", "simulate", "plan"])
def test_a_model_that_cannot_fit_is_refused_before_any_step_is_timed(tmp_path, monkeypatch, args):
    """Weights alone beyond the most GPUs searched: refused before the search times a single step (a million-layer
    config took 15 s to refuse in plan on one chip, minutes on every chip)."""
    from chalk.analyses.traffic import serving

    d = _config(tmp_path, "deep", "llama-3.1-8b", num_hidden_layers=1_000_000)
    calls = []
    real = serving._evaluate
    monkeypatch.setattr(serving, "_evaluate", lambda *a, **k: calls.append(1) or real(*a, **k))
    code, out, err, dt = _invoke(tuple(args[:1] + ["-m", str(d)] + args[1:]))
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "does not fit any layout" in lines[0], (code, err[-600:])
    assert calls == [], f"{len(calls)} searches evaluated"


def test_per_layer_counts_are_computed_once():
    """The step model asks a spec for its MoE and sliding-layer counts on every layout and batch: cached."""
    from chalk.specs.catalog import load_model

    m = load_model("gpt-oss-20b")
    assert (m.n_moe_layers, m.n_sliding_layers, m.n_full_layers) == (24, 12, 12)  # config.json: 24 layers, alternating
    assert "n_moe_layers" in m.__dict__ and "n_sliding_layers" in m.__dict__
    import dataclasses

    dense = dataclasses.replace(m, moe_layers=(False,) * m.num_layers)
    assert dense.n_moe_layers == 0 and not dense.is_moe and m.is_moe


DIGITS = "7" * 5001


@pytest.mark.parametrize("kind,phrase", [
    ("lengths file", "must be a positive length"), ("diurnal curve", "must be finite"),
    ("chalk trace", "must be a positive integer"), ("mooncake trace", "a number of more than 4,300 digits"),
    ("--price", "must be a number of $ per GPU-hour"), ("--input-len", "must be finite"),
])
def test_a_5001_digit_number_in_any_user_input_is_one_short_line(tmp_path, kind, phrase):
    files = {"lengths file": "100\n" + DIGITS + "\n200\n", "diurnal curve": "1\n" * 23 + DIGITS + "\n",
             "chalk trace": f"arrival_s,input_len,output_len\n0,100,10\n1,{DIGITS},10\n",
             "mooncake trace": '{"timestamp": 0, "input_length": ' + DIGITS + ', "output_length": 10, '
                               '"hash_ids": [1]}\n'}
    p = tmp_path / "input"
    if kind in files:
        p.write_text(files[kind])
    args = {"lengths file": SIM + ["--output-len", "100", "--input-len", p],
            "diurnal curve": PLAN + ["--sim-requests", "2000", "--diurnal", p],
            "chalk trace": ["simulate", *M, *H, "--trace", p], "mooncake trace": ["simulate", *M, *H, "--trace", p],
            "--price": PLAN + ["--sim-requests", "2000", "--price", f"h100-sxm={DIGITS}"],
            "--input-len": ["throughput", *M, *H, "--input-len", DIGITS, "--output-len", "10"]}[kind]
    code, out, err, _ = _invoke(tuple(map(str, args)))
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and phrase in lines[0] and len(lines[0]) <= 300, (code, err[-400:])


# ------------------------------------------------------------------ 8. bad input that reached the math
BIG = "1" * 200_000  # one field past csv's 131,072-character limit
LENGTH_FILES = {"1e300": "100\n1e300\n", "half": "100\n0.5\n", "huge-field": "100\n" + BIG + "\n"}
BAD_LENGTHS = {  # --output-len (a file: LENGTH_FILES' key): a phrase the one line must hold
    "lognormal:mean=100,sigma=20": "its mean lies in a tail past the context",  # E[min(L, context)] is 0: 1 / 0
    "lognormal:mean=100,median=1e-300": "too far below the mean",
    "uniform:min=1,max=1e19": "uniform max must be at most 1,000,000,000,000,000",  # past int64: numpy's ValueError
    "constant:mean=1e300": "length must be at most 1,000,000,000,000,000",
    "lognormal:mean=1e300,sigma=1": "lognormal mean must be at most 1,000,000,000,000,000",
    "lognormal:mean=100,sigma=1e300": "lognormal sigma must be at most 26",  # was 'L must be finite ... nan'
    "lognormal:mean=100,p99=1e300": "lognormal p99 must be at most 1,000,000,000,000,000",
    "constant:0.5": "length must be at least 1 token",  # as --output-len 0.5
    "file:1e300": "row 2 must be at most 1,000,000,000,000,000",
    "file:half": "row 2 must be at least 1 token",
    "file:huge-field": "malformed CSV (field larger than field limit",
}


@pytest.mark.parametrize("command", ["throughput", "simulate", "plan"])
@pytest.mark.parametrize("spec", sorted(BAD_LENGTHS))
def test_length_distributions_out_of_range_are_one_line(tmp_path, command, spec):
    """QA 2026-11-28: each was a traceback (ZeroDivisionError, numpy's ValueError) or a 300-digit number, or (a
    lengths file of 0.5) accepted where --output-len 0.5 is refused."""
    value = spec
    if spec.startswith("file:"):
        value = tmp_path / "lengths.txt"
        value.write_text(LENGTH_FILES[spec[5:]])
    head = {"throughput": ["throughput", *M, *H], "simulate": ["simulate", *M, *H, "--rate", "10", "-n", "100"],
            "plan": ["plan", *M, *H, "--rate", "10"]}[command]
    line = _one_error_line(_chalk(head + ["--input-len", "1000", "--output-len", value]))
    assert BAD_LENGTHS[spec] in line and len(line) < 300, line


def test_a_lognormal_sigma_of_minus_zero_is_sigma_zero():
    """-0.0 passed `sigma >= 0`, then numpy's sampler refused it ('sigma < 0') in a traceback."""
    import numpy as np

    from chalk.specs.lengths import parse_lengths

    d = parse_lengths("lognormal:mean=100,sigma=-0")
    assert d.sigma == 0.0 and list(d.sample(3, np.random.default_rng(0))) == [100, 100, 100]
    r = _chalk(["simulate", *M, *H, "--rate", "10", "-n", "100", "--output-len", "lognormal:mean=100,sigma=-0"])
    assert r.returncode == 0 and b"Traceback" not in r.stderr, r.stderr[-800:]


@pytest.mark.parametrize("command", ["simulate", "plan"])
def test_a_mooncake_timestamp_past_float_range_is_one_line(tmp_path, command):
    p = tmp_path / "big.jsonl"
    p.write_text('{"timestamp": 1' + "0" * 400 + ', "input_length": 10, "output_length": 5}\n')
    line = _one_error_line(_chalk([command, "--trace", p, *M, *H]))
    assert "line 1: timestamp must be a time >= 0 in ms" in line and len(line) < 200, line


def test_plan_emit_to_a_name_past_255_bytes_is_one_line(tmp_path):
    line = _one_error_line(_chalk(["plan", *M, *H, "--rate", "10", *LENS, "--emit", "k8s", tmp_path / ("a" * 300)]))
    assert "--emit" in line and "longer than 255 bytes" in line, line


def test_azure_timestamps_with_a_zone_are_read_in_utc_and_out_of_range_years_refused(tmp_path):
    """numpy reads a zone with a UserWarning on stderr; a year past 2261 wrapped round nanoseconds (12345: 1823)."""
    from chalk.specs.traces import read_trace

    p = tmp_path / "az.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16T18:15:46Z,374,44\n2023-11-16T18:15:50Z,396,109\n")
    r = _chalk(["simulate", "--trace", p, *M, *H])
    assert r.returncode == 0 and r.stderr.count(b"Warning") == 0, r.stderr[-800:]
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16T18:15:46+01:00,374,44\n"
                 "2023-11-16 17:15:50.5Z,396,109\n2023-11-16T12:16:00-0500,1,1\n2023-11-16 17:16:10.25,1,1\n")
    assert read_trace(p).arrival_s.tolist() == [0.0, 4.5, 14.0, 24.25]  # +01:00 is an hour ahead of UTC
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16,374,44\n12345,396,109\n")
    line = _one_error_line(_chalk(["simulate", "--trace", p, *M, *H]))
    assert "line 3: TIMESTAMP must be a date between the years 1678 and 2261, got '12345'" in line, line


def test_plan_takes_a_system_yaml_path_as_estimate_does():
    import chalk
    from chalk.specs import catalog
    from chalk.specs.demand import candidate_list

    path = catalog._catalog_dir("systems") / "hgx-h100.yaml"
    assert candidate_list(path) == [path]
    r = chalk.plan("llama-3.1-8b", path, rate=10, input_len=100, output_len=100)  # was TypeError: not iterable
    assert r["options"] and r["options"][0]["system"] == "hgx-h100"


def test_library_bad_values_raise_typed_errors():
    """QA 2026-11-28: an object as `speculative` was an AttributeError, a list or array batch or context in the report
    and plots a TypeError, a diurnal multiplier past float range an OverflowError."""
    import numpy as np

    import chalk
    from chalk.errors import ChalkError

    calls = {
        "throughput speculative": lambda: chalk.throughput("llama-3.1-8b", "h100-sxm", input_len=100, output_len=100,
                                                           speculative=object()),
        "report batch list": lambda: chalk.report("llama-3.1-8b", "h100-sxm", batch=[1, 2]),
        "report context array": lambda: chalk.report("llama-3.1-8b", "h100-sxm", context=np.array([1024, 2048])),
        "plot batch array": lambda: chalk.plot("batch-train", model="llama-3.1-8b", hardware="h100-sxm",
                                               batch=np.array([1, 2])),
        "plan diurnal 10**400": lambda: chalk.plan("llama-3.1-8b", "h100-sxm", rate=10, input_len=100, output_len=100,
                                                   diurnal=[10**400] * 24),
        "throughput sigma 1e300": lambda: chalk.throughput("llama-3.1-8b", "h100-sxm", input_len=100,
                                                           output_len="lognormal:mean=100,sigma=1e300"),
    }
    for name, call in calls.items():
        with pytest.raises(ChalkError) as e:
            call()
        assert "\n" not in str(e.value) and len(str(e.value)) < 300, (name, str(e.value))


def test_a_layout_of_numpy_integers_gives_a_json_ready_answer():
    import json

    import numpy as np

    import chalk

    d = chalk.simulate("llama-3.1-8b", "h100-sxm", rate=10, requests=200, layout={"tp": np.int64(2)}).to_dict()
    assert json.loads(json.dumps(d))["layout_text"] == {"tp": 2}
