"""The house shows its layers: specs -> equations -> analyses -> faces, arrows pointing one way (issue 12).

Read from the source with `ast` (no imports run), so a new upward or circular import fails here by name.
"""

from __future__ import annotations

import ast
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
