"""The `chalk` command (the console script) and `python -m chalk`: the CLI started as a short-lived process.

Starting, the CLI imports typer, numpy and chalk's command line: some hundred thousand objects that all live until
the process exits. Python's cyclic garbage collector, which runs every few hundred allocations, would walk them
again and again while they are made, and once more at exit: ~25 ms of a ~160 ms `chalk estimate` (issue 12,
`benchmarks/bench_startup.py`). So the collector is off while those imports run; what they made is then frozen
(`gc.freeze`: left out of every later collection, as CPython's documentation suggests for long-lived start-up
objects), and the collector is on again, as usual, for the command itself.
"""

import gc


def main() -> None:
    """Run the CLI (`chalk.faces.cli.main`) with its start-up objects frozen."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        from chalk.faces.cli import main as cli_main
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
    cli_main()


if __name__ == "__main__":
    main()
