"""chalk: how fast and how cheaply an LLM can be trained and served on given hardware, and why.

The Python API is the first face; the CLI and the web explorer are thin faces on these functions (each takes
the options of the command of the same name, by the same names; see `help(chalk.estimate)`):

    chalk.estimate   one step on a real layout, op by op          -> RooflineResult (with .energy)
    chalk.Session    a model on hardware asked many questions      -> .estimate(...)
    chalk.sweep      estimate over batch x context                 -> SweepResult
    chalk.throughput the best (or a fixed) deployment              -> ServingResult (with ["energy"])
    chalk.layout     layouts, memory per GPU, MoE rack, pipelines  -> LayoutReport
    chalk.simulate   requests through continuous batching          -> SimulateRun
    chalk.plan       GPUs, layout, replicas and dollars for a demand -> PlanResult (each option with energy)
    chalk.portfolio  several models planned together under fleet limits -> PortfolioResult
    chalk.train      training time and cost                        -> TrainingResult
    chalk.pricing    API price sheets read back into hardware facts -> PricingReport
    chalk.validate   predicted vs measured on the validation set   -> ValidationReport
    chalk.hardware   the catalog's chips and systems               -> Catalog
    chalk.models     the catalog's models and their sizes          -> Catalog
    chalk.lecture    the lecture's deductions, computed            -> LectureResult
    chalk.report     the lecture replayed as one HTML page         -> str (or the path written)
    chalk.plot       one of the lecture's graphs                   -> Figure (or the path written)

Every result has `.to_dict()` (JSON-ready) and `.to_frame()` (a pandas DataFrame; pandas optional).
"""

from __future__ import annotations

__version__ = "0.1.0"

#: top-level name -> (module, attribute), imported on first use to keep `import chalk` and the CLI fast
_LAZY = {**{name: ("chalk.api", name) for name in (
    "estimate", "sweep", "Session", "throughput", "layout", "simulate", "plan", "portfolio", "train", "pricing",
    "validate",
    "hardware", "models", "lecture")},
    # faces built on the API: their own module, so chalk.api never imports a face
    "report": ("chalk.faces.notebook", "report"), "plot": ("chalk.faces.notebook", "plot")}

#: the errors the library raises, to catch (`except chalk.ChalkError`: each a subclass of it); not API calls
_ERRORS = ("ChalkError", "InputError", "FitError", "SpecError")

__all__ = [*_LAZY, "__version__"]


def __getattr__(name: str):
    if name == "errors" or name in _ERRORS:  # `chalk.errors.ChalkError` right after `import chalk`, as the
        import importlib  # README writes it, and `chalk.ChalkError`

        errors = importlib.import_module("chalk.errors")
        return errors if name == "errors" else getattr(errors, name)
    if name in _LAZY:
        import importlib

        mod, attr = _LAZY[name]
        return getattr(importlib.import_module(mod), attr)
    raise AttributeError(f"module 'chalk' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public names (notebook completion on `chalk.` offers the API) and the module's own."""
    return sorted(set(__all__) | {n for n in globals() if n.startswith("__")})
