"""`chalk plot KIND`, `chalk web` and `chalk report`: the visual faces, registered on the main app."""

from __future__ import annotations

from typing import Optional

import typer

from chalk.faces.cli_common import (KV_PRECISION_OPT, PLOT_FORMATS, PRECISION_OPT, busy, fail, length, out_file, whole,
                                    write_plot, wrote)

PLOT_KINDS = ("latency-vs-batch", "cost-vs-batch", "cost-vs-context", "pareto", "hardware-ratio", "pipeline",
              "batch-train", "training-pools")


def register(app: typer.Typer) -> None:
    app.command("plot")(plot)
    app.command("web")(web)
    app.command("report")(report)


def plot(
    kind: str = typer.Argument(..., help="One of: " + ", ".join(PLOT_KINDS) + "."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Catalog id or alias, or a config.json."),
    hardware: Optional[str] = typer.Option(None, "--hardware", "-H",
                                           help="Chip or system id (pareto: a comma-separated list)."),
    output: str = typer.Option(..., "--output", "-o", callback=out_file("--output", PLOT_FORMATS),
                        help="Image file to write: .png or .svg."),
    context: float = typer.Option(4096, "--context", "-c", help="Context tokens."),
    batch: Optional[float] = typer.Option(None, "--batch", "-b", callback=whole("--batch"), metavar="<int>",
                                          help="cost-vs-context / batch-train: the batch (default: critical, "
                                               "rounded up to a power of two)."),
    chips: Optional[int] = typer.Option(None, "--gpus", "--chips", help="Chips (default: the system's scale-up domain)."),
    precision: Optional[str] = typer.Option(None, "--precision", "-p", help="Weights/compute precision."),
    kv_precision: str = typer.Option("auto", "--kv-precision", help="KV cache precision."),
    ideal: bool = typer.Option(False, "--ideal", help="Peak rates: the pure roofline, no calibration."),
    sparse_law: Optional[str] = typer.Option(None, "--sparse-law", help="'sqrt': the lecture's square-root law."),
    stages: int = typer.Option(4, "--stages", help="pipeline: PP stages."),
    microbatches: int = typer.Option(8, "--microbatches", help="pipeline: micro-batches per step."),
    schedule: str = typer.Option("gpipe", "--schedule", help="pipeline: gpipe or 1f1b."),
    compare: Optional[str] = typer.Option(None, "--compare", help="pareto: comma-separated hardware to compare."),
):
    """Draw one of the lecture's graphs to a PNG or SVG file."""
    if sparse_law not in (None, "sqrt"):
        fail(f"--sparse-law must be 'sqrt', got {sparse_law!r}")
    kw = dict(model=model, hardware=hardware, context=context, chips=chips, precision=precision,
              kv_precision=kv_precision, ideal=ideal)
    if kind in ("cost-vs-context", "batch-train") and batch is not None:
        kw["batch"] = batch
    if kind in ("latency-vs-batch", "cost-vs-batch") and sparse_law:
        kw["sparse_law"] = sparse_law
    if kind == "pipeline":
        kw.update(stages=stages, microbatches=microbatches, schedule=schedule)
    if kind == "pareto" and compare:
        kw["compare"] = compare
    with busy(False, f"drawing {kind}"):
        write_plot(kind, output, **kw)


def web(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (localhost unless told otherwise)."),
    port: Optional[int] = typer.Option(None, "--port", help="Port (default 8501, or the next free one)."),
    no_browser: bool = typer.Option(False, "--no-browser", help="Do not open a browser tab."),
):
    """Start the local web explorer (Streamlit): roofline, serving, layout, pricing, training, lecture."""
    from chalk.faces.web import launch

    raise typer.Exit(launch(host=host, port=port, open_browser=not no_browser))


def report(
    model: str = typer.Option(..., "--model", "-m", help="Catalog id or alias, a config.json, or a folder."),
    hardware: str = typer.Option(..., "--hardware", "-H", help="Chip id, system id, or a YAML path."),
    output: str = typer.Option("report.html", "--output", "-o", callback=out_file("--output"),
                        help="HTML file to write."),
    context: float = typer.Option(4096, "--context", "-c", help="Context tokens."),
    batch: Optional[float] = typer.Option(None, "--batch", "-b", callback=whole("--batch"), metavar="<int>",
                                          help="Operating batch (default: critical, rounded up to a power of 2)."),
    chips: Optional[int] = typer.Option(None, "--gpus", "--chips", help="GPUs (default: the system's scale-up "
                                        "domain)."),
    precision: Optional[str] = PRECISION_OPT,
    kv_precision: str = KV_PRECISION_OPT,
    ideal: bool = typer.Option(False, "--ideal", help="Peak rates: the pure roofline, no calibration."),
    input_len: Optional[str] = typer.Option(None, "--input-len", callback=length("--input-len"),
                                            help="The serving answer's prompt tokens per request: a mean (2000) or "
                                                 "a distribution (lognormal:mean=2000,p99=8000) (default: "
                                                 "--context)."),
    output_len: str = typer.Option("1024", "--output-len", callback=length("--output-len"),
                                   help="The serving answer's output tokens per request: as --input-len."),
    layout: Optional[str] = typer.Option(None, "--layout",
                                         help="One replica, e.g. tp=8,ep=8,pp=1,attn_dp=8: the serving answer and "
                                              "the decode table use it (default: searched / chosen)."),
):
    """Write one self-contained HTML page replaying the lecture for a model/hardware pair."""
    from chalk.faces.report import write_report

    with busy(False, "writing the report: the lecture's figures and the serving answer"):
        path = write_report(output, model=model, hardware=hardware, context=context, batch=batch, chips=chips,
                            precision=precision, kv_precision=kv_precision, ideal=ideal, input_len=input_len,
                            output_len=output_len, layout=layout)
    wrote(path)
