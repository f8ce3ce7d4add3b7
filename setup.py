"""Compile chalk's bytecode when it is installed editable, as pip does for a regular install.

pip writes `.pyc` files for every module of a regular install; an editable install (`pip install -e .`, the
README's quick start) leaves them to the first import. Where PYTHONDONTWRITEBYTECODE is set, that first import
never writes them, and every `chalk` command compiles the ~6,000 lines it imports again: about 40 ms of each
start, a third of what chalk adds to `python -c "import numpy"` (issue 12; `benchmarks/bench_startup.py`).
Writing them once at install time, beside the sources in `__pycache__/` (git-ignored), is what a regular
install does; Python still checks each `.pyc` against its source and recompiles an edited module in memory.
"""

import compileall
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPy(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            compileall.compile_dir(str(Path(__file__).parent / "src" / "chalk"), quiet=1)


setup(cmdclass={"build_py": BuildPy})
