"""`chalk revnet`: the reversible (Feistel/RevNet) stack's memory and compute, measured."""

from __future__ import annotations

import typer

from chalk.faces.cli_common import console, emit_json, num, progress, si, table, whole


def register(app: typer.Typer) -> None:
    @app.command()
    def revnet(max_depth: int = typer.Option(64, "--max-depth", help="Deepest stack measured (powers of two)."),
               batch: float = typer.Option(64, "--batch", "-b", callback=whole("--batch"), metavar="<int>",
                                           help="Rows of the input each stack runs forward and backward."),
               width: int = typer.Option(256, "--width", help="Width of the stack (even: a Feistel block splits it "
                                         "in two halves)."),
               as_json: bool = typer.Option(False, "--json", help="Print JSON.")):
        """Reversible networks: exact inverse, O(1) activation memory in depth, ~1 extra forward of compute."""
        from chalk.analyses.blackboard import reversible as rv
        from chalk.errors import InputError

        batch = int(batch)
        if not 1 <= max_depth <= 256 or batch < 1 or width < 2 or width % 2:
            raise InputError("--max-depth must be 1 to 256 (the deepest stack measured), --batch >= 1 and "
                             "--width an even number >= 2")
        depths = tuple(d for d in (1, 2, 4, 8, 16, 32, 64, 128, 256) if d <= max_depth)
        ms = []
        with progress(as_json, "measuring stack depths") as tick:  # deep, wide stacks run for minutes
            for i, d in enumerate(depths):  # one depth at a time: each is measured alone, as in one call
                if tick:
                    tick(i, len(depths))
                ms += rv.measure_memory(depths=(d,), batch=batch, width=width)
            if tick:
                tick(len(depths), len(depths))
        s = rv.summary(ms)
        if as_json:
            emit_json({"measurements": [m.__dict__ for m in ms], "summary": s.__dict__})
            return
        t = table(f"reversible vs standard stack (batch {batch}, width {width}, float64)",
                  ["depth", "standard peak", "reversible peak", "ratio"])
        for m in ms:
            t.add_row(str(m.depth), si(m.standard_peak_bytes, "B"), si(m.reversible_peak_bytes, "B"),
                      num(m.standard_peak_bytes / m.reversible_peak_bytes))
        console().print(t)
        console().print(f"slopes: standard {si(s.standard_slope_bytes_per_layer, 'B')}/layer, reversible "
                        f"{si(s.reversible_slope_bytes_per_layer, 'B')}/layer; extra training FLOPs "
                        f"x{num(s.extra_compute_ratio)}")
