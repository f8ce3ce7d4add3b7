"""`chalk measure`: calibrate the roofline on the machine at hand and check it on real model steps."""

from __future__ import annotations

from typing import Optional

import typer

from chalk.faces.cli_common import PLOT_FORMATS, console, emit_json, out_dir, out_file, pct, seconds, si, table, wrote


def register(app: typer.Typer) -> None:
    @app.command()
    def measure(
        device: str = typer.Option("cpu", "--device", help="cpu or cuda."),
        quick: bool = typer.Option(False, "--quick", help="A small model and grid (about two minutes on a CPU)."),
        model: Optional[str] = typer.Option(None, "--model", "-m", help="config.json path or catalog id to time."),
        out_dir: Optional[str] = typer.Option(None, "--output-dir", "-o", callback=out_dir("--output-dir"),
                                              help="Write calibrated-chip.yaml and cases.csv here."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON."),
        plot: Optional[str] = typer.Option(None, "--plot", callback=out_file("--plot", PLOT_FORMATS),
                                            help="Overlay measured steps on the predicted curve."),
    ):
        """Measure FLOP/s and memory bandwidth, time real decode/prefill steps, fit and check the roofline."""
        from chalk.errors import InputError

        if device not in ("cpu", "cuda"):
            raise InputError(f"--device must be cpu or cuda, got {device!r}")
        from chalk.analyses.step.measure import run_measure  # torch is imported lazily inside

        if as_json:
            r = run_measure(device=device, quick=quick, model=model, out_dir=out_dir, progress=None)
        else:
            from rich.console import Console
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            # the spinner on stderr, as every command's progress: on stdout it left a blank line before an error
            # and before the answer (QA 2026-11-28)
            with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                          console=Console(stderr=True), transient=True) as bar:
                task = bar.add_task("measuring ceilings", total=None)
                r = run_measure(device=device, quick=quick, model=model, out_dir=out_dir,
                                progress=lambda msg: bar.update(task, description=str(msg)))
        if plot:
            from chalk.faces import plots

            wrote(plots.plot_measured(r, output=plot))
        if as_json:
            emit_json(r.to_dict())
            return
        d = r.to_dict()
        t = table(f"chalk measure on {d['device']} ({d['dtype']}), model {d['model']}", ["quantity", "value"])
        t.add_row("peak matmul", si(d["peak_flops_per_s"], "FLOP/s"))
        t.add_row("memory bandwidth (read + write)", si(d["mem_bandwidth_bytes_per_s"], "B/s"))
        e = d["efficiency"]
        t.add_row("fitted efficiency", f"compute {pct(e['compute'])}, memory {pct(e['memory'])}, overhead "
                                       f"{seconds(e['overhead_s'])}")
        t.add_row("predicted by", d["predicted_by"])
        t.add_row("held-out error", f"median {pct(d['median_abs_error_held_out'])}, p90 "
                                    f"{pct(d['p90_abs_error_held_out'])} over {d['n_held_out']} steps")
        console().print(t)
        c = table("steps", ["phase", "batch", "context", "measured", "predicted", "error", "held out"])
        for case in d["cases"]:
            err = case["predicted_s"] / case["measured_s"] - 1
            c.add_row(case["phase"], str(case["batch"]), str(case["context"]), seconds(case["measured_s"]),
                      seconds(case["predicted_s"]), f"{100 * err:+.0f}%", "yes" if case["held_out"] else "")
        console().print(c)
        if out_dir:
            console().print(f"calibrated chip spec: {d['files'].get('calibrated_chip')} (use it as --hardware)")
