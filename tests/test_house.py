"""The house shows its layers: specs -> equations -> analyses -> faces, arrows pointing one way (issue 12).

Read from the source with `ast` (no imports run), so a new upward or circular import fails here by name.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import chalk

SRC = Path(chalk.__file__).parent


def _module(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Every chalk module a file imports, at top level or inside a function."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("chalk"):
            out.add(node.module)
            for a in node.names:  # `from chalk import api` names a module
                out.add(f"{node.module}.{a.name}")
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("chalk"))
    return out


GRAPH = {_module(p): _imports(p) for p in SRC.rglob("*.py")}
MODULES = set(GRAPH)


def _real(names: set[str]) -> set[str]:
    return {n for n in names if n in MODULES}


def test_graph_is_read():
    assert "chalk.faces.cli" in GRAPH and "chalk.faces.fmt" in GRAPH
    assert "chalk.faces.fmt" in GRAPH["chalk.faces.plots_common"]


def test_analyses_never_import_the_api_or_faces():
    bad = {m: sorted(n for n in _real(deps) if n == "chalk.api" or n.startswith("chalk.faces"))
           for m, deps in GRAPH.items() if m.startswith("chalk.analyses")}
    assert {m: v for m, v in bad.items() if v} == {}


#: The rooms of `chalk.analyses` (issue 29) and the rooms each may import: records at the bottom, the step-time
#: oracle above it, traffic (requests meeting steps) above that, and four rooms on top that never import each other.
ROOMS = {"records": set(), "step": {"records"}, "traffic": {"records", "step"},
         "planning": {"records", "step", "traffic"}, "economics": {"records", "step", "traffic"},
         "fidelity": {"records", "step", "traffic"}, "blackboard": {"records", "step", "traffic"}}


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["chalk", "analyses"] else None


def test_analyses_live_in_rooms_of_about_ten_modules():
    flat = sorted(p.name for p in (SRC / "analyses").glob("*.py") if p.name != "__init__.py")
    assert flat == []
    rooms = {p.name for p in (SRC / "analyses").iterdir() if (p / "__init__.py").exists()}
    assert rooms == set(ROOMS)
    for room in ROOMS:
        modules = [p for p in (SRC / "analyses" / room).glob("*.py") if p.name != "__init__.py"]
        assert len(modules) <= 10, (room, len(modules))


def test_rooms_import_only_the_rooms_below_them():
    bad = {}
    for m, deps in GRAPH.items():
        room = _room(m)
        if room is None:
            continue
        up = sorted(n for n in _real(deps) if _room(n) not in (None, room) and _room(n) not in ROOMS[room])
        if up:
            bad[m] = up
    assert bad == {}


def test_equations_and_specs_import_nothing_above_them():
    for m, deps in GRAPH.items():
        if m.startswith("chalk.equations"):
            assert not {n for n in _real(deps) if not n.startswith(("chalk.equations", "chalk.errors"))}, m
        if m.startswith("chalk.specs"):
            assert not {n for n in _real(deps) if n.startswith(("chalk.analyses", "chalk.faces", "chalk.api"))}, m


def test_no_face_imports_the_cli_helpers_except_the_cli():
    """Plots, report and web take their number formatting from faces/fmt.py; cli_common imports plots, so any
    plot importing cli_common would close a circle."""
    users = sorted(m for m, deps in GRAPH.items()
                   if "chalk.faces.cli_common" in deps and not m.startswith("chalk.faces.cli"))
    assert users == []
    assert _real(GRAPH["chalk.faces.fmt"]) == set()


def test_no_import_cycles():
    seen, stack, cycles = set(), [], []

    def visit(m):
        if m in stack:
            cycles.append(stack[stack.index(m):] + [m])
            return
        if m in seen:
            return
        seen.add(m)
        stack.append(m)
        for n in sorted(_real(GRAPH.get(m, set()))):
            if n != m and not n.startswith(m + "."):  # a package importing its own submodules is not a cycle
                visit(n)
        stack.pop()

    for m in sorted(GRAPH):
        visit(m)
    cycles = [c for c in cycles if not any(x == "chalk" for x in c)]
    assert cycles == []


def test_core_runs_without_pandas():
    """pandas is an optional extra: the roofline, a sweep and the CLI's estimate run with it unimportable."""
    code = ("import sys; sys.modules['pandas'] = None\n"
            "import chalk\n"
            "r = chalk.sweep('llama-3.1-8b', 'h100-sxm', batches=[1, 64], contexts=[4096])\n"
            "assert len(r) == 2 and r.rows()[1]['batch'] == 64.0, r.rows()\n"
            "try:\n    r.to_frame()\nexcept chalk.errors.ChalkError as e:\n    print('ok', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ok") and "pandas" in out.stdout


def test_pandas_streamlit_plotly_are_not_core_dependencies():
    import tomllib

    pyproject = SRC.parent.parent / "pyproject.toml"
    if not pyproject.exists():
        import pytest

        pytest.skip("not a source checkout")
    proj = tomllib.loads(pyproject.read_text())["project"]
    core = " ".join(proj["dependencies"]).lower()
    for name in ("pandas", "streamlit", "plotly", "aiconfigurator"):
        assert name not in core, name
    assert any("pandas" in d for d in proj["optional-dependencies"]["frames"])


def test_durations_read_naturally():
    from chalk.faces.fmt import seconds

    assert seconds(1530) == "25.5 min (1,530 s)"  # was "1.53e+03 s"
    assert seconds(2.53e-8) == "25.3 ns" and seconds(0.0253) == "25.3 ms" and seconds(7200) == "2 h"
    for v in (1e-9, 1e-5, 0.5, 99, 150, 5000, 3e5, 4e8):
        assert "e+" not in seconds(v) and "e-" not in seconds(v), v


def test_readme_file_tree_names_every_module():
    """issue 12: the README's file tree matches the code: every module and package is named in it."""
    readme = SRC.parent.parent / "README.md"
    if not readme.exists():
        import pytest

        pytest.skip("not a source checkout")
    text = readme.read_text()
    tree = text[text.index("## File tree"):text.index("## Conventions")]
    missing = []
    for p in sorted(SRC.rglob("*.py")):
        if p.name == "__init__.py":
            if p.parent != SRC and f"{p.parent.name}/" not in tree:
                missing.append(str(p.parent.relative_to(SRC)) + "/")
            continue
        if p.stem not in tree:
            missing.append(str(p.relative_to(SRC)))
    assert missing == []


# ------------------------------------------------------------------------------------- no branching on a name
#: Engines, model families and vendors (issue 29 item 3): a literal naming one of them may be data (a catalog key, a
#: default, a message), never the test of a branch. Matched as a word start, case-insensitive.
NAMED = ("vllm", "sglang", "trtllm", "tensorrt", "lmdeploy", "tgi",                      # engines
         "deepseek", "llama", "qwen", "kimi", "mixtral", "mistral", "gpt-oss", "gpt_oss", "gemma", "glm",
         "nvidia", "amd", "google", "intel", "rocm", "gaudi")                             # vendors
_NAMED = re.compile(r"(?<![a-z0-9])(" + "|".join(re.escape(n) for n in NAMED) + ")", re.I)

#: Where a name may be tested, and why: loading a Hugging Face config.json (specs/model.py), whose keys differ by
#: model_type, is reading a file format, not behaviour chosen by name; the catalog loader (specs/catalog.py).
NAME_TESTS_ALLOWED = {"specs/model.py", "specs/catalog.py"}
#: Single tests allowed elsewhere (file, the literal), each with its reason.
NAME_TESTS_EXCUSED = {
    ("faces/web_app.py", "deepseek-r1"): "the price sheet a select box opens on (a default, not behaviour)",
}


def _branch_tests(tree):
    """Every expression that decides something: if/while/ternary/assert/comprehension conditions, comparisons
    (==, !=, in, not in, is), str.startswith/endswith calls and match patterns."""
    for n in ast.walk(tree):
        if isinstance(n, (ast.If, ast.While, ast.IfExp, ast.Assert)):
            yield n.test
        elif isinstance(n, ast.comprehension):
            yield from n.ifs
        elif isinstance(n, ast.Compare):
            yield n
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("startswith",
                                                                                             "endswith"):
            yield n
        elif isinstance(n, ast.match_case):
            yield n.pattern


def named_branches(source: str, where: str) -> list[str]:
    """'where:line: literal' for each branch test in `source` that holds a string literal naming an engine, model
    family or vendor (`NAMED`)."""
    out = set()
    for t in _branch_tests(ast.parse(source)):
        for c in ast.walk(t):
            value = getattr(c, "value", None)
            if isinstance(c, (ast.Constant, ast.MatchValue)) and isinstance(value, ast.Constant):
                value = value.value
            if isinstance(value, str) and _NAMED.search(value) and (where, value) not in NAME_TESTS_EXCUSED:
                out.add(f"{where}:{t.lineno}: {value!r}")
    return sorted(out)


def test_the_name_scan_finds_what_it_looks_for():
    bad = ('if engine.id == "vllm":\n    pass\n'
           'x = 1 if spec.model_type.startswith(("deepseek", "kimi")) else 0\n'
           'y = [c for c in chips if c.vendor.lower() in {"amd", "intel"}]\n'
           'match e:\n    case "sglang":\n        pass\n')
    assert named_branches(bad, "x.py") == ["x.py:1: 'vllm'", "x.py:3: 'deepseek'", "x.py:3: 'kimi'",
                                           "x.py:4: 'amd'", "x.py:4: 'intel'", "x.py:6: 'sglang'"]
    fine = ('ENGINES = {"vllm": 1}\nif name == prof.id:\n    pass\nsrc = "vLLM docs"\n'
            'if device == "cuda":\n    pass\nif lam > 0:\n    pass\n')
    assert named_branches(fine, "y.py") == []


def test_no_branch_on_an_engine_model_or_vendor_name():
    """issue 29 item 3: engine behaviour, model capabilities and vendor factors come from catalog data; no code
    outside the config and catalog loaders tests a literal engine, model-family or vendor name."""
    found = []
    for p in sorted(SRC.rglob("*.py")):
        where = p.relative_to(SRC).as_posix()
        if where not in NAME_TESTS_ALLOWED:
            found += named_branches(p.read_text(), where)
    assert found == []


# ------------------------------------------------------------------------------------- one step-time oracle
#: Step-time arithmetic, by the module it comes from: the lecture's aggregate bound (`roofline`), and the
#: equations' roofline time functions (the max rule and its two terms).
STEP_TIME_CALLS = {
    "chalk.analyses.step.roofline": {"step", "step_fields", "aggregate_step_cost", "aggregate_verification"},
    "chalk.equations.roofline": {"compute_time_s", "memory_time_s", "step_time_s"},
    "chalk.equations.kernels": {"roofline_time_s"},
}
#: Methods that time a step on the aggregate bound, whatever object they are called on.
STEP_TIME_METHODS = {"from_roofline"}
#: Where step-time arithmetic may appear (beside `chalk.equations`, where it is written): the oracle and the one
#: module that computes the aggregate bound, and the few places that show the bound and say so, each with why.
STEP_TIME_ALLOWED = {
    "chalk.analyses.step.roofline": "the lecture's aggregate bound: the one module that computes it",
    "chalk.analyses.step.step_model": "the oracle: the step model, op by op",
    "chalk.analyses.step.kernels": "the oracle's kernel times: the measured tables over their roofline floors",
    "chalk.analyses.step.step_cost": "the oracle's linear form for the simulator (`from_roofline`: the bound's)",
    "chalk.analyses.step.estimate": "the oracle's door; `--aggregate` asks for the bound by name",
    "chalk.analyses.step.speculative": "`--aggregate --mtp`: verification on the bound (its `view` says so)",
    "chalk.analyses.step.measure.fit": "`chalk measure` fits one chip's whole-step roofline (`PREDICTED_BY` says so)",
    "chalk.analyses.economics.pricing": "the price sheets' mode curve, the lecture's hyperbola (its `view` says so)",
    "chalk.analyses.blackboard.lecture": "the lecture's claims, each saying in its assumptions that it is the bound",
}


def step_time_calls(source: str) -> list[tuple[int, str]]:
    """(line, what) of every call that times a step: a function of `STEP_TIME_CALLS` reached through any import
    alias (`from m import f as g`, `from pkg import m as M`, `import m as M`), or a `STEP_TIME_METHODS` method."""
    funcs, mods = {}, {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                full = f"{node.module}.{a.name}"
                if full in STEP_TIME_CALLS:
                    mods[a.asname or a.name] = full
                elif a.name in STEP_TIME_CALLS.get(node.module, ()):
                    funcs[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name in STEP_TIME_CALLS and a.asname:
                    mods[a.asname] = a.name
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and f.id in funcs:
            found.append((node.lineno, funcs[f.id]))
        elif isinstance(f, ast.Attribute):
            if isinstance(f.value, ast.Name) and f.value.id in mods and f.attr in STEP_TIME_CALLS[mods[f.value.id]]:
                found.append((node.lineno, f"{mods[f.value.id]}.{f.attr}"))
            elif f.attr in STEP_TIME_METHODS:
                found.append((node.lineno, f".{f.attr}"))
    return sorted(found)


def test_step_time_calls_are_found_through_any_alias():
    src = ("from chalk.analyses.step.roofline import step as bound\nfrom chalk.equations import roofline as R\n"
           "import chalk.equations.kernels as K\nfrom chalk.analyses.step import roofline\n"
           "bound(m, s, 1, 2)\nR.step_time_s(1.0, 2.0)\nK.roofline_time_s(1, 2, 3, 4)\nroofline.step(m, s, 1, 2)\n"
           "StepCost.from_roofline(m, s)\nR.critical_batch(1, 2, 3, 4, 5)\nsc.step_time_s(1, 2)\nstep(1)\n")
    assert step_time_calls(src) == [(5, "chalk.analyses.step.roofline.step"),
                                    (6, "chalk.equations.roofline.step_time_s"),
                                    (7, "chalk.equations.kernels.roofline_time_s"),
                                    (8, "chalk.analyses.step.roofline.step"), (9, ".from_roofline")]


def test_step_times_come_from_the_oracle_or_the_named_aggregate_bound():
    """issue 29 item 1: every step time comes from the step model; the lecture's aggregate bound is computed in
    `step/roofline.py` and called only where the output says it shows the bound (`STEP_TIME_ALLOWED`, with why).
    Each allowed module must still call it (no stale entry keeps a door open)."""
    found, used = [], set()
    for p in sorted(SRC.rglob("*.py")):
        mod = _module(p)
        if mod.startswith("chalk.equations."):
            continue
        calls = step_time_calls(p.read_text())
        if calls and mod in STEP_TIME_ALLOWED:
            used.add(mod)
        elif calls:
            found += [f"{p.relative_to(SRC).as_posix()}:{line}: {what}" for line, what in calls]
    assert found == []
    assert sorted(set(STEP_TIME_ALLOWED) - used) == []


# ------------------------------------------------------------------------------------- two test tiers, one install each
def test_the_fast_tier_installs_without_torch_or_transformers():
    """issue 29 item 5: `pip install -e ".[test]"` pulls no torch or transformers (a 13-minute install on a busy
    machine); the `measure` extra brings them, and .ci/run installs it before the slow tier."""
    import tomllib

    root = SRC.parent.parent
    if not (root / "pyproject.toml").exists() or not (root / ".ci" / "run").exists():
        import pytest

        pytest.skip("not a source checkout")
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {e: {re.split(r"[<>=!~\[ ;]", d, maxsplit=1)[0].lower() for d in deps} for e, deps in extras.items()}
    assert not {"torch", "transformers"} & names["test"], names["test"]
    assert {"torch", "transformers"} <= names["measure"]
    steps = [ln.split("#")[0].strip() for ln in (root / ".ci" / "run").read_text().splitlines()]
    steps = [s for s in steps if s]
    fast = next(i for i, s in enumerate(steps) if s.endswith("-m pytest"))
    slow = next(i for i, s in enumerate(steps) if "pytest -m slow" in s)
    measure = next(i for i, s in enumerate(steps) if "pip install" in s and "measure" in s)
    assert fast < measure < slow
    assert not any("pip install" in s and "measure" in s for s in steps[:fast])
    quick = (root / "README.md").read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert 'pip install -e ".[test]" && python -m pytest ' in quick and "-m slow" in quick and "measure" in quick


def test_a_command_module_that_fails_to_import_is_an_error(tmp_path):
    """issue 29 item 5: a command module that cannot be imported stops chalk with one line naming it (exit 2), never
    a CLI silently missing its commands; a missing module the same."""
    (tmp_path / "cli_broken.py").write_text("raise ImportError('a dependency went missing')\n")
    code = ("import sys\nimport chalk.faces\nfrom chalk.faces import cli\n"
            f"chalk.faces.__path__.append({str(tmp_path)!r})\n"
            "cli.COMMAND_MODULES = cli.COMMAND_MODULES + (sys.argv[1],)\ncli.main(['--help'])\n")
    for mod, why in (("cli_broken", "ImportError: a dependency went missing"), ("cli_gone", "ModuleNotFoundError")):
        out = subprocess.run([sys.executable, "-c", code, mod], capture_output=True, text=True, timeout=120)
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2 and len(lines) == 1, (out.returncode, out.stderr[-600:])
        assert f"chalk.faces.{mod} failed to import" in lines[0] and why in lines[0], lines
    ok = subprocess.run([sys.executable, "-m", "chalk", "--help"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and "plan" in ok.stdout and "calibrate" in ok.stdout


# ------------------------------------------------------------------------------------- an op's source is a field
def test_an_op_names_its_source_where_its_time_is_computed():
    """issue 29 item 4: an op's `source` (its category) is set where its time is computed, never parsed back out of
    its free-text `detail`: `_op` takes it as a required keyword, and the ideal roofline's MoE permute op, whose
    detail said "(calibrated)" and was labelled "calibrated roofline" for it, is a plain roofline op."""
    import pytest

    from chalk.analyses.step import step_model as S
    from chalk.analyses.step.calibration import calibration
    from chalk.analyses.step.kernels import kernel_profile
    from chalk.analyses.step.parallel import model_costs
    from chalk.specs.catalog import as_model, as_system

    with pytest.raises(TypeError):
        S._op("x", "gemm", 1.0, 1.0, 1.0, 1.0, 0.0, "measured: a table")
    assert not hasattr(S, "_short")
    kinds = {"roofline", "calibrated roofline", "measured table", "fitted curve", "fitted", "roofline (link)"}
    costs, system = model_costs(as_model("qwen3-30b-a3b"), "fp8", "fp8"), as_system("hgx-h100")
    for ideal in (True, False):
        ops = S.stage_ops(costs, system, 1.0, 1.0, 2.0, 1.0, 64.0, 0.0, 2048.0, 1.0, calibration(ideal=ideal),
                          overlap="none", kernels=None if ideal else kernel_profile(system.chip))["ops"]
        assert {o.source for o in ops.values()} <= kinds, {o.name: o.source for o in ops.values()}
        assert ops["pipeline_sync"].source == "fitted" and "hand-fitted" in ops["pipeline_sync"].detail
        if ideal:
            assert {o.source for o in ops.values()} <= {"roofline", "roofline (link)", "fitted"}
            assert ops["moe_permute"].source == "roofline"  # was "calibrated roofline", read off "(calibrated)"
        else:
            assert ops["experts"].source == "measured table" and ops["elementwise"].source == "calibrated roofline"
            assert ops["experts"].detail.startswith("measured:")
