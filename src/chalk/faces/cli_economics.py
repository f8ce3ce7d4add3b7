"""Economics commands: `chalk pricing ...` and `chalk train`."""

from __future__ import annotations

import importlib

import typer


def register(app: typer.Typer) -> None:
    for name in ("cli_economics_pricing", "cli_economics_train", "cli_revnet"):
        try:
            importlib.import_module(f"chalk.faces.{name}").register(app)
        except ModuleNotFoundError as e:
            if e.name != f"chalk.faces.{name}":
                raise
