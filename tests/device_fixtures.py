"""Fixtures the device-data tests share (tests/test_device_h100.py, tests/test_device_h200.py): scripts/
compare_device.py loaded as a module, the kernel rows of the test module's `DATA` folder, its `CHIP` from the catalog,
and the measured / table ratios per framework. A test module imports them by name and sets DATA and CHIP."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from chalk.analyses.step.kernels import FRAMEWORKS
from chalk.specs.catalog import load_chip

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cd():
    spec = importlib.util.spec_from_file_location("compare_device", ROOT / "scripts" / "compare_device.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def rows(cd, request):
    return cd.load_rows(request.module.DATA / "kernels.csv")


@pytest.fixture(scope="module")
def chip(request):
    return load_chip(request.module.CHIP)


@pytest.fixture(scope="module")
def ratios(cd, rows, chip):
    return {fw: {op: cd.summary(v) for op, v in cd.ratios(rows, chip, fw).items()} for fw in FRAMEWORKS}
