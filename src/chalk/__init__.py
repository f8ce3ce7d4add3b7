"""chalk: how fast and how cheaply an LLM can be trained and served on given hardware, and why.

The Python API is the first face; the CLI and the web explorer are thin faces on these functions:

    chalk.estimate   one step on a real layout, op by op          -> RooflineResult
    chalk.Session    a model on hardware asked many questions      -> .estimate(...)
    chalk.sweep      estimate over batch x context                 -> a table
    chalk.throughput the best (or a fixed) deployment              -> ServingResult
    chalk.layout     layouts, memory per GPU, MoE rack, pipelines  -> LayoutReport
    chalk.simulate   requests through continuous batching          -> SimulationResult
    chalk.train      training time and cost                        -> TrainingResult
    chalk.pricing    API price sheets read back into hardware facts -> dict report
    chalk.validate   predicted vs measured on the validation set   -> dict report
    chalk.plan       GPUs, layout, replicas and dollars for a demand
"""

from __future__ import annotations

__version__ = "0.1.0"

#: top-level name -> (module, attribute), imported on first use to keep `import chalk` and the CLI fast
_LAZY = {
    "estimate": ("chalk.api", "estimate"),
    "sweep": ("chalk.api", "sweep"),
    "Session": ("chalk.api", "Session"),
    "throughput": ("chalk.api", "throughput"),
    "layout": ("chalk.api", "layout"),
    "simulate": ("chalk.api", "simulate"),
    "train": ("chalk.api", "train"),
    "pricing": ("chalk.api", "pricing"),
    "validate": ("chalk.api", "validate"),
    "plan": ("chalk.api", "plan"),
}

__all__ = [*_LAZY, "__version__"]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        mod, attr = _LAZY[name]
        return getattr(importlib.import_module(mod), attr)
    raise AttributeError(name)
