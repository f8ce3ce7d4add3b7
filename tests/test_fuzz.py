"""Fuzz every command and subcommand of the CLI with bad and extreme values (issue 11).

The commands are enumerated from the typer app at test time, so a command added later is covered without
editing this file. Each option gets values chosen by its type (whole numbers, numbers, names, paths); the
model and hardware options also get malformed config.json, meta.yaml, chip and system YAML files. Every
invocation runs in-process under a time guard and must keep the contract:

- exit code 0 or 2, never a traceback (an uncaught exception) and never a hang;
- on 2, exactly one line on stderr of at most 300 characters (`{"error": ...}` under --json);
- on 0 with --json, no NaN or inf anywhere in the result and no negative quantity;
- a value that can only be wrong (issue 26's classes: a contradiction or an empty list item, a device, FIFO or
  10 GB file read as input, a malformed or absurd config, an unknown or empty precision or engine, a count beyond
  int64, a NaN) is refused: exit 2, never a silent exit 0.

Deterministic: the cases are a fixed list, and where a list is sampled the seed is fixed.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import random
import re
import signal
import time
from pathlib import Path

import pytest
import typer

from chalk.faces import cli, cli_common

SEED = 11
TIME_GUARD_S = 30.0
#: Commands whose good input is a longer run, and their guard: `validate` answers every validation row, replaying
#: MLPerf's Server/Interactive searches under Poisson arrivals (~15 s alone on 2 cores, ~30 s beside another worker).
TIME_GUARD_BY_COMMAND = {"validate": 120.0}
#: Commands that take minutes or start a server when given good input: only their bad input is fuzzed
#: (each must be refused before the work starts).
ONLY_BAD = {"measure", "web", "lecture", "revnet", "calibrate"}
#: Flags that turn a quick command into a minutes-long one (leave-one-source-out refits): not fuzzed on their own.
SLOW_FLAGS = {("validate", "--cv")}

INTS = ["0", "-1", "1.5", "2147483648", "1000000000", "99999999999999999999", "abc", ""]
FLOATS = ["0", "-1", "nan", "inf", "-inf", "1e308", "1e-300", "abc", ""]
NAMES = ["", "nosuch", "x" * 400, "h100,nosuch", "../..", "null"]
NEGATIVE_OK = re.compile(r"error|residual|margin|signed|slope|log|delta|penalty|saving|change|diff|offset|gap", re.I)

#: A value known good for each required parameter (by its option or argument name), so that one bad
#: value at a time reaches the code under test.
GOOD = {"--model": "llama-3.1-8b", "--hardware": "h100-sxm", "--input-len": "1000", "--output-len": "200",
        "--output": "{tmp}/out.png", "kind": "latency-vs-batch", "name": "h100-sxm", "sheet": "deepseek-r1"}
GOOD_BY_COMMAND = {("models", "show"): {"name": "llama-3.1-8b"}, ("report",): {"--output": "{tmp}/r.html"}}
#: Optional parameters a command needs to reach its work (a plan needs a demand): part of its base case, so each
#: bad value of another option meets the code behind the demand check. Small, so each plan takes a fraction of a s.
BASE_OPTIONAL = {("plan",): {"--users": "20", "--hardware": "h100-sxm", "--sim-requests": "2000"}}
MOE_MODEL = "qwen3-30b-a3b"
PATH_OPTIONS = {"--csv", "--plot", "--output", "--output-dir", "--trace"}
#: Options that read a user file (issue 26): each also gets /dev/zero, a FIFO, a 10 GB sparse file and a folder,
#: refused by a stat before any read (a read would hang or run out of memory).
READ_OPTIONS = {"--model", "--hardware", "--trace", "--diurnal", "--input-len", "--output-len"}
#: Contradictions and empty list items (issue 26), each refused in one line: values added to these options.
CONTRADICTIONS = {"--hardware": ["h100-sxm,hgx-h100", "h200,h200", "h100-sxm,"],
                  "--price": ["h100-sxm=2,h100-sxm=3", "h100-sxm=2,", ",", "hgx-h100=2,h100-sxm=3"],
                  "--precision": ["bf16,,fp8", ",", "bf16,"], "--batches": ["1,,2", ","], "--contexts": ["1000,,2"],
                  "--speculative": ["", ",,", "eagle,3,0.7,"], "--draft-model": ["org/draft\nrm -rf /", "\x1b[2J"],
                  "--kv-precision": ["", " "]}
#: Options that act only with another one (issue 26: "flags that need another flag"): each bad value is given with
#: its partner too, so it reaches the code that reads it rather than the missing-partner check.
PARTNERS = {"--concurrency": {"--layout": "tp=1"}, "--acceptance": {"--mtp": "2"}}
#: Values no option of that kind may accept: each such case must exit 2 (silent acceptance is a failure).
ALWAYS_BAD = {"int": {"99999999999999999999", "abc"}, "float": {"nan", "abc"}}
#: Name options whose empty or unknown value must be refused, never read as the default.
NAMED = {"--precision", "--kv-precision", "--engine"}


# ------------------------------------------------------------------ malformed spec files
def _spec_files(root: Path) -> dict[str, list[str]]:
    """Malformed (and one valid-but-edge) model folders and hardware YAML files under `root`."""
    from chalk.specs import catalog

    base = json.loads((catalog._catalog_dir("models") / "llama-3.1-8b" / "config.json").read_text())
    moe = json.loads((catalog._catalog_dir("models") / "qwen3-30b-a3b" / "config.json").read_text())
    oss = json.loads((catalog._catalog_dir("models") / "gpt-oss-20b" / "config.json").read_text())
    mixtral = json.loads((catalog._catalog_dir("models") / "mixtral-8x7b" / "config.json").read_text())
    chip = (catalog._catalog_dir("chips") / "h100-sxm.yaml").read_text()
    system = (catalog._catalog_dir("systems") / "hgx-h100.yaml").read_text()
    models, hardware = [], []

    def model(name, cfg=None, text=None, meta=None):
        d = root / "models" / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(text if text is not None else json.dumps(cfg))
        if meta is not None:
            (d / "meta.yaml").write_text(meta)
        models.append(str(d))

    def edit(cfg, **kw):
        out = dict(cfg)
        out.update(kw)
        return out

    model("kv-not-divisor", edit(base, num_key_value_heads=5))
    model("quant-string", edit(base, quantization_config="fp8"))
    model("window-string", edit(mixtral, sliding_window="abc"))
    model("window-negative", edit(mixtral, sliding_window=-4096))
    model("mlp-only-int", edit(moe, mlp_only_layers=5))
    model("layer-types-int", edit(oss, layer_types=5))
    model("vocab-1e308", edit(base, vocab_size=1e308))
    model("hidden-string", edit(base, hidden_size="4096"))
    model("heads-zero", edit(base, num_attention_heads=0))
    model("deep-list", text="[" * 100_000 + "]" * 100_000)
    model("deep-object", text='{"a":' * 100_000 + "1" + "}" * 100_000)
    model("not-json", text="{not json")
    model("top-level-list", text="[1, 2]")
    model("empty", text="")
    model("meta-types", base, meta="aliases: 5\nname: [1, 2]\ncard_total_params_b: abc\n")
    model("meta-precision", base, meta="weights_precision: nosuch\n")
    model("meta-not-mapping", base, meta="- a\n- b\n")

    def hw(name, text):
        p = root / f"{name}.yaml"
        p.write_text(text)
        hardware.append(str(p))

    hw("chip-no-scaleup", "\n".join(ln for ln in chip.splitlines() if not ln.startswith("scaleup_gb_per_s")))
    hw("chip-no-scaleout", chip.replace("scaleout_gbit_per_s: 400", "scaleout_gbit_per_s: 0"))
    for i, v in enumerate(["0", "-8", '"eight"', "null", "[8]", "2.5"]):
        hw(f"chip-chips-{i}", f"chips: {v}\n" + chip)
        hw(f"system-chips-{i}", system.replace("chips: 8", f"chips: {v}"))
    hw("chip-sources-int", chip.replace("sources:", "sources: 5\nxsources:"))
    hw("chip-aliases-int", re.sub(r"(?m)^aliases: .*$", "aliases: 5", chip))
    hw("chip-hbm-huge", re.sub(r"(?m)^hbm_gb: .*$", "hbm_gb: 1e308", chip))
    hw("chip-tflops-string", chip.replace("bf16: 989.4", "bf16: fast"))
    hw("system-sources-list", system.replace("sources:", "sources: [a, b]\nxsources:"))
    hw("not-yaml", "chips: [\n")
    hw("yaml-list", "- 1\n- 2\n")
    # issue 26: zero steps and ranks, absurd quantisation bits, numbers too long or too deep to hold
    dsv3 = json.loads((catalog._catalog_dir("models") / "deepseek-v3" / "config.json").read_text())
    dsa = json.loads((catalog._catalog_dir("models") / "deepseek-v3.2" / "config.json").read_text())
    gptq = {"quant_method": "gptq", "group_size": 128, "desc_act": False, "sym": True}
    model("sparse-step-zero", edit(moe, decoder_sparse_step=0))
    model("moe-freq-zero", edit(dsv3, moe_layer_freq=0))
    model("dsa-topk-zero", edit(dsa, index_topk=0))
    model("kv-lora-zero", edit(dsv3, kv_lora_rank=0))
    model("bits-zero", edit(base, quantization_config={**gptq, "bits": 0}))
    model("bits-1e9", edit(base, quantization_config={**gptq, "bits": 1e9}))
    model("int-5001-digits", text=json.dumps(base).replace(f'"vocab_size": {base["vocab_size"]}',
                                                           '"vocab_size": ' + "7" * 5001))
    model("layers-2^31", edit(base, num_hidden_layers=2**31))
    hw("chip-5001-digits", re.sub(r"(?m)^hbm_gb: .*$", "hbm_gb: " + "9" * 5001, chip))
    model("every-expert", edit(moe, num_experts_per_tok=moe["num_experts"]))  # valid: k = E
    hw("chip-copy", chip)  # valid: must answer like the catalog id
    good_models, good_hardware = models[-1:] + [MOE_MODEL], hardware[-1:]
    # valid but far too big: a million layers (436 TB of weights); every command answers or refuses it fast
    # (issue 26 item 7: the fit is checked before any long work), so it is neither bad nor good
    model("layers-1e6", edit(base, num_hidden_layers=1_000_000))
    return {"models": models[:-2], "hardware": hardware[:-1], "good_models": good_models,
            "good_hardware": good_hardware, "huge_models": models[-1:],
            # a chip with no scale-out network is a single box, not a malformed file: answered where one box does
            "refused_hardware": [h for h in hardware[:-1] if "no-scaleout" not in h]}


# ------------------------------------------------------------------ the command tree
def _leaves(cmd, path=()):
    subs = getattr(cmd, "commands", None)
    if subs:
        for name, sub in sorted(subs.items()):
            yield from _leaves(sub, path + (name,))
    else:
        yield path, cmd


def _opt(param) -> str:
    opts = getattr(param, "opts", None) or []
    return max(opts, key=len) if opts else param.name


def _param_kind(param) -> str:
    """'flag', 'int', 'float', 'choice', 'path' or 'name' for an option or argument."""
    if getattr(param, "is_flag", False):
        return "flag"
    if _opt(param) in PATH_OPTIONS:
        return "path"
    if not hasattr(param, "display_type"):  # typer <= 0.28 (pyproject's pin): a click parameter type
        if hasattr(param.type, "choices"):
            return "choice"
        return {"IntParamType": "int", "FloatParamType": "float"}.get(type(param.type).__name__, "name")
    shown = str(param.display_type(typer.Context(typer.main.get_command(cli.app))))  # typer 0.29
    if "|" in shown:
        return "choice"
    return {"<int>": "int", "<float>": "float"}.get(shown, "name")


def _base(path, cmd, tmp: str) -> dict:
    """A valid value for each required parameter of `path`: {param: value}."""
    good = {**GOOD, **GOOD_BY_COMMAND.get(path, {}), **BASE_OPTIONAL.get(path, {})}
    out = {}
    for p in cmd.params:
        if p.required or _opt(p) in BASE_OPTIONAL.get(path, {}):
            value = good.get(_opt(p), good.get(p.name))
            if value is None:
                value = {"int": "1", "float": "1"}.get(_param_kind(p), "x")
            out[p] = value.format(tmp=tmp)
    return out


def _render(cmd, values: dict) -> list[str]:
    """Command-line tokens for {param: value}: arguments in order, then options."""
    args = [values[p] for p in cmd.params if p in values and getattr(p, "param_type_name", "") == "argument"]
    for p in cmd.params:
        if p in values and getattr(p, "param_type_name", "") != "argument":
            args += [_opt(p)] if values[p] is True else [_opt(p), values[p]]
    return args


def _cases(tmp: Path) -> list[tuple[tuple[str, ...], bool]]:
    """Every invocation, and whether it must be refused (exit 2): see ALWAYS_BAD, NAMED."""
    files = _spec_files(tmp / "specs")
    (tmp / "a-folder.png").mkdir(exist_ok=True)
    bad_paths = [str(tmp / "missing" / "x.png"), str(tmp / "a-folder.png"), "/proc/chalk-fuzz.png", "",
                 str(tmp / "x.nosuffix"), str(tmp / ("x" * 300 + ".png"))]
    (tmp / "a-file.txt").write_text("not a folder")
    import os

    hostile = tmp / "hostile"
    hostile.mkdir(exist_ok=True)
    if not (hostile / "fifo.png").exists():
        os.mkfifo(hostile / "fifo.png")  # as an output too: never opened, never renamed over
        with open(hostile / "sparse.csv", "wb") as f:
            f.truncate(10 * 10**9)
    hostile_reads = ["/dev/zero", str(hostile / "fifo.png"), str(hostile / "sparse.csv"), str(hostile)]
    #: output names that are valid but odd: bytes that are not UTF-8 (as a POSIX argv delivers them), a FIFO
    odd_outputs = [str(tmp / "out-\udcff\udcfe.png"), str(hostile / "fifo.png")]
    #: output folders that must be refused (an existing or creatable folder is a valid --output-dir)
    bad_dirs = [str(tmp / "missing" / "deeper" / "x"), str(tmp / "a-file.txt"), "/proc/chalk-fuzz", "",
                str(tmp / ("x" * 300))]
    app = typer.main.get_command(cli.app)
    rng = random.Random(SEED)
    cases: list[tuple[str, ...]] = []
    refused: set[tuple[str, ...]] = set()
    for path, cmd in _leaves(app):
        base = _base(path, cmd, str(tmp))
        js = [p for p in cmd.params if _opt(p) == "--json"]
        jsv = {js[0]: True} if js else {}
        only_bad = path[0] in ONLY_BAD
        cases.append(path + tuple(_render(cmd, base)) + ("--no-such-option",))
        if not only_bad:
            cases.append(path + tuple(_render(cmd, {**base, **jsv})))
        for p in cmd.params:
            key, kind = _opt(p), _param_kind(p)
            if kind == "flag":
                if not only_bad and (path[0], key) not in SLOW_FLAGS:
                    cases.append(path + tuple(_render(cmd, {**base, **jsv, p: True})))
                continue
            is_arg = getattr(p, "param_type_name", "") == "argument"
            values = {"int": INTS, "float": FLOATS, "path": bad_dirs if key == "--output-dir" else bad_paths,
                      "choice": ["nosuch", ""]}.get(kind, NAMES)
            if kind == "path" and key != "--output-dir" and key not in READ_OPTIONS:
                values = values + odd_outputs[0 if not only_bad else 1:]  # a valid odd name would run the work
            if key in READ_OPTIONS:
                values = values + hostile_reads
            values = values + CONTRADICTIONS.get(key, [])
            if key == "--model" or (is_arg and path == ("models", "show")):
                values = values + files["models"] + ([] if only_bad else files["good_models"])
            if key in ("--hardware", "--compare") or (is_arg and path == ("hardware", "show")):
                values = values + files["hardware"] + ([] if only_bad else files["good_hardware"])
            if key in ("--precision", "--kv-precision") and not only_bad:
                values = values + ["fp8", "fp4", "mxfp4", "auto"]
            if key in ("--batches", "--contexts"):
                values = values + ["1:1e12:100000000", "1,2,nan", "0:10:5", "1:1e308:3", "5:1:0"]
            if key in ("--model",) or (is_arg and path == ("models", "show")):
                values = values + files["huge_models"]
            must = set(ALWAYS_BAD.get(kind, ())) | set(CONTRADICTIONS.get(key, []))
            if key in READ_OPTIONS:
                must |= set(hostile_reads)
            if key == "--model" or (is_arg and path == ("models", "show")):
                must |= set(files["models"])
            if key == "--hardware" or (is_arg and path == ("hardware", "show")):
                must |= set(files["refused_hardware"])
            if key in NAMED:
                must |= {"", "nosuch"}
            partners = {q: PARTNERS[key][_opt(q)] for q in cmd.params if _opt(q) in PARTNERS.get(key, {})}
            for v in values:
                case = path + tuple(_render(cmd, {**base, **jsv, p: v}))
                cases.append(case)
                if v in must:
                    refused.add(case)
                if partners:  # the same value with the option it needs, so it reaches the code behind it
                    case = path + tuple(_render(cmd, {**base, **jsv, **partners, p: v}))
                    cases.append(case)
                    if v in must:
                        refused.add(case)
    # a sample of pairs of large values on the numeric options, the kind of case a single value misses
    for path, cmd in _leaves(app):
        if path[0] in ONLY_BAD:
            continue
        base = _base(path, cmd, str(tmp))
        js = {p: True for p in cmd.params if _opt(p) == "--json"}
        nums = [p for p in cmd.params if _param_kind(p) in ("int", "float") and not p.required]
        for _ in range(min(4, len(nums))):
            a, b = rng.sample(nums, 2) if len(nums) >= 2 else (nums[0], nums[0])
            vals = {**base, **js, a: rng.choice(["1e15", "1", "1e9"]), b: rng.choice(["1e15", "3"])}
            cases.append(path + tuple(_render(cmd, vals)))
    return [(c, c in refused) for c in dict.fromkeys(cases)]  # each distinct invocation once, in a fixed order


# ------------------------------------------------------------------ running one case
class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang()


def _invoke(args: tuple[str, ...], nonfinite: list) -> tuple[object, str, str, float]:
    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, TIME_GUARD_BY_COMMAND.get(args[0] if args else "", TIME_GUARD_S))
    nonfinite.clear()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            cli.main(list(args))
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except _Hang:
        code = "hang"
    except BaseException as e:  # an uncaught exception is a traceback for a user
        code = f"traceback: {type(e).__name__}: {str(e)[:200]}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    return code, out.getvalue(), err.getvalue(), time.perf_counter() - t0


def _negatives(obj, path="") -> list[str]:
    if isinstance(obj, dict):
        return [n for k, v in obj.items() for n in _negatives(v, f"{path}.{k}")]
    if isinstance(obj, list):
        return [n for i, v in enumerate(obj[:2000]) for n in _negatives(v, f"{path}[{i}]")]
    if isinstance(obj, (int, float)) and not isinstance(obj, bool) and obj < 0 and not NEGATIVE_OK.search(path):
        return [f"{path} = {obj}"]
    return []


def _problem(args, code, out, err, nonfinite, must_refuse: bool = False) -> str | None:
    if code not in (0, 2):
        return f"exit {code}"
    if must_refuse and code == 0:
        return "accepted a value that can only be wrong (exit 0, expected one line and exit 2)"
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if "Traceback" in err:
        return "traceback on stderr"
    if code == 2:
        if len(lines) != 1 or len(lines[0]) > 300:
            return f"exit 2 with {len(lines)} stderr lines / {max(map(len, lines), default=0)} chars: {err[:300]!r}"
        if "--json" in args and not lines[0].startswith('{"error": '):
            return f"--json error not JSON: {lines[0][:200]!r}"
        return None
    if "--json" in args:
        if nonfinite:
            return f"non-finite values in JSON: {nonfinite[:3]}"
        try:
            data = json.loads(out)
        except ValueError:
            return f"stdout is not JSON: {out[:200]!r}"
        neg = _negatives(data)
        if neg:
            return f"negative quantities: {neg[:3]}"
    elif re.search(r"\bnan\b", out, re.I):
        return "nan in the table"
    return None


@pytest.mark.slow
def test_fuzz_every_command(tmp_path, monkeypatch):
    nonfinite: list[str] = []
    clean = cli_common._clean

    def recording_clean(o, path=""):
        if isinstance(o, float) and not math.isfinite(o):
            nonfinite.append(path or "(top)")
        elif isinstance(o, dict):
            for k, v in o.items():
                recording_clean(v, f"{path}.{k}")
        elif isinstance(o, (list, tuple)):
            for i, v in enumerate(o):
                recording_clean(v, f"{path}[{i}]")
        return clean(o) if not path else o

    monkeypatch.setattr(cli_common, "_clean", recording_clean)
    monkeypatch.chdir(tmp_path)
    cases = _cases(tmp_path)
    t0 = time.perf_counter()
    failures, slow = [], []
    for args, must_refuse in cases:
        code, out, err, dt = _invoke(args, nonfinite)
        msg = _problem(args, code, out, err, nonfinite, must_refuse)
        if msg:
            failures.append(f"chalk {' '.join(a if len(a) < 80 else a[:77] + '...' for a in args)}\n    {msg}")
        if dt > 10:
            slow.append((round(dt, 1), args[:6]))
    wall = time.perf_counter() - t0
    print(f"\nfuzz: {len(cases)} invocations in {wall:.0f} s; slowest over 10 s: {sorted(slow)[-5:]}")
    assert len(cases) > 500
    assert not failures, f"{len(failures)} of {len(cases)} invocations broke the contract:\n" + "\n".join(
        failures[:60])


def test_the_fuzz_covers_issue_26s_classes(tmp_path):
    """The case list (no invocation: fast) holds each class the campaign of issue 26 found, each marked to be
    refused where only a refusal is right."""
    cases = dict(_cases(tmp_path))
    joined = {" ".join(c): must for c, must in cases.items()}

    def has(*parts, must=True):
        hits = [k for k, m in joined.items() if all(p in k.split(" ") or p in k for p in parts) and m == must]
        assert hits, parts
    has("throughput", "--layout tp=1", "--concurrency 99999999999999999999")  # with the option it needs
    has("throughput", "--mtp 2", "--acceptance nan")
    has("pricing", "--precision nosuch")
    has("pricing", "--precision  ")
    has("layout", "--kv-precision  ")
    for name in ("sparse-step-zero", "moe-freq-zero", "dsa-topk-zero", "kv-lora-zero", "bits-zero", "bits-1e9",
                 "int-5001-digits", "layers-2^31"):
        for command in ("estimate", "throughput", "models show"):
            has(command, f"/{name}")
    has("measure", "/layers-1e6", must=False)  # valid, refused by its fit before any measurement
    has("hardware show", "/chip-5001-digits.yaml")
    for option in ("--model", "--hardware", "--trace", "--diurnal", "--input-len"):
        for hostile in ("/dev/zero", "hostile/fifo.png", "hostile/sparse.csv"):
            has(f"{option} {hostile}" if hostile.startswith("/dev") else option, hostile)
    has("plan", "--draft-model org/draft\nrm -rf /")
    assert sum(cases.values()) > 900 and len(cases) > 2000
