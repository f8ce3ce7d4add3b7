"""chalk: how fast and how cheaply an LLM can be trained and served on given hardware, and why."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["estimate", "sweep", "__version__"]


def __getattr__(name: str):  # lazy: keep `import chalk` and the CLI fast
    if name in ("estimate", "sweep"):
        from chalk import api

        return getattr(api, name)
    raise AttributeError(name)
