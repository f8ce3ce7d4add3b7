"""Shared pieces of the CLI: output, formatting with units, and mapping errors to exit code 2.

Command modules (`cli_*.py`) each define `register(app)` and use these helpers; they hold no formulas.
"""

from __future__ import annotations

import json
import math
import sys
from contextlib import contextmanager
from enum import Enum
from functools import lru_cache
from typing import Any

import numpy as np
import typer


EXIT_BAD_INPUT = 2

MODEL_OPT = typer.Option(..., "--model", "-m", help="Catalog id or alias, a config.json, or a folder holding one.")
HW_OPT = typer.Option(..., "--hardware", "-H", help="Chip id (its default system), system id, or a YAML path.")
EPLB_OPT = typer.Option("auto", "--eplb", metavar="auto|on|off", help="MoE: an expert-load balancer (redundant "
                        "experts placed by load) on the EP group. auto: from the calibrated EP width, as wide-EP "
                        "deployments run one; off: served traffic's uneven expert loads.")


def duration(option: str):
    """A typer callback for a time option: seconds (0.5), or with a unit (500ms, 0.5s, 200us). Every time an option
    takes reads this one way (`--ttft-p99 2s`, `--period 20ms`), so no option carries its unit in its name."""
    def check(value):
        if value is None:
            return None
        from chalk.specs.workload import duration_s

        return duration_s(value, option)  # its range is checked where the value is used, in its own words
    return check


#: What every --input-len / --output-len takes (specs.lengths.parse_lengths reads it).
LENGTH_FORMS = "a mean (2000), a distribution (lognormal:mean=2000,p99=8000; uniform:min=100,max=900) or a file " \
               "of lengths (FILE:COLUMN names a CSV's column)"


def length(option: str):
    """A typer callback for a request-length option: a number stays a number (float); a distribution or a file is
    checked here, before the command works, and passed on as typed."""
    def check(value):
        if value is None:
            return None
        try:
            return float(value)
        except (TypeError, ValueError):
            pass
        from chalk.specs.lengths import parse_lengths

        parse_lengths(value)  # a bad form is refused here, in one line
        return value
    return check


#: Deprecation notes of this invocation, written to stderr once the command succeeds (`cli.main`): a command
#: that fails says one line, its error, never a note before it.
PENDING_NOTES: list[str] = []


def deprecated(old: str, new: str, value, replacement):
    """A hidden old spelling of an option: say once on stderr (after the answer) which spelling replaces it, and
    use its value where the new option was not given (both given: the new one wins)."""
    if value is None:
        return replacement
    PENDING_NOTES.append(f"chalk: note: {old} is deprecated; use {new}")
    return value if replacement is None else replacement


def flush_notes() -> None:
    """Write the pending deprecation notes to stderr."""
    for note in dict.fromkeys(PENDING_NOTES):
        sys.stderr.write(note + "\n")
    PENDING_NOTES.clear()


PRECISION_OPT = typer.Option(None, "--precision", "-p", help="Weights/compute precision (default: the checkpoint's).")
KV_PRECISION_OPT = typer.Option("auto", "--kv-precision", help="KV cache precision; 'auto' = fp8 when weights run at "
                                "8 bits or fewer, else bf16.")

ACCEPTANCE_OPT = typer.Option(None, "--acceptance", help="Per-token draft acceptance rate with --mtp, the same for "
                              "every draft (default: the model's own MTP layers' sourced rate for the first draft, "
                              "falling by their sourced factor per further draft; a model without draft layers needs "
                              "it).")


def acceptance_source(source: str) -> str:
    """Where an acceptance rate comes from, short: the citation in a `Speculation.source` ('acceptance: CITE: ...'),
    its first clause where it names none, or 'given' where the user gave it."""
    src = str(source or "")
    if "acceptance: " in src:
        return src.split("acceptance: ", 1)[1].split(":", 1)[0].split(";", 1)[0].strip().rstrip(".")
    return src.split(";", 1)[0].strip() or "given"


def speculation_for(mtp, acceptance, speculative=None, model=None):
    """What `--mtp K` runs (a `serving.Speculation`, None without --mtp): K drafts at `--acceptance`, else at the
    model's own MTP layers' sourced rate and fall per further draft (`serving.mtp_speculation`, the API's rule too);
    `--acceptance` without `--mtp`, or `--speculative` with `--mtp` or `--acceptance` (it carries its own K and A),
    is a contradiction refused in one line, not a flag dropped."""
    from chalk.errors import InputError

    if speculative is not None and (mtp is not None or acceptance is not None):
        raise InputError("--speculative METHOD,K,A gives the draft tokens and the acceptance: drop --mtp and "
                         "--acceptance, or drop --speculative")
    if acceptance is not None and mtp is None:
        raise InputError("--acceptance is the acceptance rate of --mtp's draft tokens: give --mtp K too")
    if mtp is None:
        return None
    from chalk.analyses.traffic.serving import mtp_speculation

    return mtp_speculation(model, mtp, acceptance)


def acceptance_text(acceptance, decay=1.0) -> str:
    """'0.85', or '0.85 falling x0.85 per further draft' where each further draft is accepted less often."""
    return f"{acceptance:g}" if decay >= 1.0 else f"{acceptance:g} falling x{decay:g} per further draft"


class Phase(str, Enum):
    decode = "decode"
    prefill = "prefill"


def _default(o: Any):
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (np.floating,)):
        f = float(o)
        return f if math.isfinite(f) else None
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.bool_,)):
        return bool(o)
    if hasattr(o, "to_dict"):
        return o.to_dict()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _clean(o: Any):
    """Replace non-finite floats by None so the output is strict JSON."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    return o


def emit_json(obj: Any) -> None:
    """Print pure, strict JSON to stdout."""
    if hasattr(obj, "to_dict"):
        obj = obj.to_dict()
    text = json.dumps(_clean(json.loads(json.dumps(obj, default=_default, allow_nan=True))), indent=2,
                      allow_nan=False)
    sys.stdout.write(text + "\n")


#: Longest error line printed: a message that names a long value is cut, never dumped.
MAX_ERROR_CHARS = 280

#: Set by `chalk.faces.cli.main` when the command line asks for --json: errors are then JSON too.
JSON_ERRORS = False


def error_line(message) -> str:
    """A message as one line of at most MAX_ERROR_CHARS characters."""
    first = " ".join(str(message).split()) or "error"
    return first if len(first) <= MAX_ERROR_CHARS else first[: MAX_ERROR_CHARS - 3] + "..."


def fail(message: str) -> None:
    """One line on stderr and exit 2 (`{"error": "..."}` under --json)."""
    line = error_line(message)
    if JSON_ERRORS:
        sys.stderr.write(json.dumps({"error": line}) + "\n")
    else:
        sys.stderr.write(f"chalk: error: {line}\n")
    raise SystemExit(EXIT_BAD_INPUT)


#: ASCII for the symbols chalk's text uses, where the output stream cannot encode them (PYTHONIOENCODING=ascii,
#: a latin-1 terminal): the text degrades, it never stops on a UnicodeEncodeError.
ASCII_FOR = {"\u00b7": "-", "\u00d7": "x", "\u2248": "~", "\u2014": "-", "\u2013": "-", "\u2212": "-",
             "\u221a": "sqrt", "\u00f7": "/", "\u2605": "*", "\u00b5": "u", "\u03bc": "u", "\u201c": '"',
             "\u201d": '"', "\u2018": "'", "\u2019": "'", "\u2264": "<=", "\u2265": ">=", "\u2192": "->",
             "\u2026": "...", "\u00b1": "+/-", "\u2260": "!=", "\u00b2": "^2", "\u00b3": "^3", "\u2500": "-",
             "\u2502": "|", "\u2501": "-", "\u2503": "|", "\u2588": "#", "\u00a0": " "}


def _ascii_errors(e: UnicodeEncodeError):
    """A codec error handler ("chalk-ascii"): each character the stream cannot encode as its ASCII stand-in
    (ASCII_FOR, else its accent-free form, else '?')."""
    import unicodedata

    out = []
    for ch in e.object[e.start:e.end]:
        alt = ASCII_FOR.get(ch)
        if alt is None:
            alt = unicodedata.normalize("NFKD", ch).encode("ascii", "ignore").decode() or "?"
        out.append(alt)
    return "".join(out), e.end


def degrade_to_ascii() -> None:
    """Let stdout and stderr write what their encoding cannot hold in ASCII stand-ins instead of raising
    (a stream that can encode chalk's symbols is left alone)."""
    import codecs

    try:
        codecs.lookup_error("chalk-ascii")
    except LookupError:
        codecs.register_error("chalk-ascii", _ascii_errors)
    for stream in (sys.stdout, sys.stderr):
        enc = getattr(stream, "encoding", None)
        if not enc or not hasattr(stream, "reconfigure"):
            continue
        try:
            "".join(ASCII_FOR).encode(enc)
        except UnicodeEncodeError:
            try:
                stream.reconfigure(errors="chalk-ascii")
            except (ValueError, OSError):  # a closed or detached stream
                pass
        except LookupError:
            pass


def console():
    """A rich Console for chalk's output, which is figures, names and notes: no emoji codes (a `:name:` in a name
    stays as typed) and no repr highlighting (numbers in a note are not coloured, as in the tables). Both also
    spare `chalk estimate` ~2 ms of start-up: rich's emoji table and highlighter regexes are never loaded."""
    from rich.console import Console

    return Console(emoji=False, highlight=False)


@lru_cache(maxsize=1)
def _readable_table_class():
    """The rich Table subclass `table` builds (made once; rich is imported only when a table is printed)."""
    from rich.table import Table

    class _Readable(Table):
        def __rich_console__(self, console, options):
            from rich.text import Text

            title, self.title = self.title, None
            if title:  # the answer's header: wrapped at the terminal's width, not the table's
                yield Text(str(title), style="bold")
            try:
                yield from self._body(console, options)
            finally:
                self.title = title

        def _body(self, console, options):
            def words(c):
                return getattr(c, "plain", str(c)).split()

            def lines(c):
                return getattr(c, "plain", str(c)).splitlines() or [""]

            cols = self.columns
            longest = [max((len(w) for c in (col.header, *col._cells) for w in words(c)), default=1) for col in cols]
            widest = [max(max((len(ln) for c in col._cells for ln in lines(c)), default=1), lo)
                      for col, lo in zip(cols, longest)]
            room = options.max_width - 3 * (len(cols) - 1)
            if sum(longest) <= room:
                width = list(widest)
                spare = room - sum(width)
                for i, col in enumerate(cols):  # room left over: headers on one line, the cells wrap no sooner
                    grow = min(max(len(getattr(col.header, "plain", str(col.header))) - width[i], 0), max(spare, 0))
                    width[i], spare = width[i] + grow, spare - grow
                while sum(width) > room:  # the widest column that can give way wraps at a space
                    i = max((j for j in range(len(width)) if width[j] > longest[j]), key=lambda j: width[j])
                    width[i] -= 1
                for col, w in zip(cols, width):
                    col.width = w
                yield from super().__rich_console__(console, options)
                return
            from rich.text import Text

            heads = [getattr(c.header, "plain", str(c.header)) for c in self.columns]
            for i in range(self.row_count):
                cells = [getattr(col._cells[i], "plain", str(col._cells[i])) for col in self.columns]
                yield Text(cells[0], style="bold")
                for h, v in zip(heads[1:], cells[1:]):
                    yield Text(f"  {h}: {v}")

    return _Readable


def table(title: str, columns: list[str]):
    """A rich table that stays readable at any width: no cell breaks mid-word ("claude-opus-4.\n1", "200,00\n0").
    Every column is at least as wide as its longest word; when the words alone do not fit the terminal, each row
    prints as a block of `column: value` lines instead."""
    from rich import box

    t = _readable_table_class()(title=title, title_justify="left", header_style="bold", box=box.SIMPLE_HEAD,
                                pad_edge=False, show_edge=False)
    for c in columns:
        t.add_column(c, overflow="fold")
    return t


# formatting lives in faces/fmt.py; re-exported so `from chalk.faces.cli_common import si` keeps working
from chalk.faces.fmt import num, pct, seconds, si, usd  # noqa: E402,F401


def wrote(path) -> None:
    """Say on stderr which file a command wrote (stdout stays clean for --json)."""
    from chalk.specs.files import shown

    sys.stderr.write(f"wrote {shown(path)}\n")  # undecodable bytes in a name shown as escapes


def out_file(option: str, suffixes: tuple[str, ...] | None = None):
    """A typer callback checking an output file option (`--csv`, `--plot`, `-o`) before the command works:
    its folder exists and is writable, it is not a folder, and it has one of `suffixes`."""
    def check(value):
        if value is not None:
            from chalk.specs.validate import output_path

            output_path(value, option, suffixes)
        return value

    return check


def out_dir(option: str):
    """A typer callback checking an output folder option before the command works."""
    def check(value):
        if value is not None:
            from chalk.specs.validate import output_dir

            output_dir(value, option)
        return value

    return check


def whole(option: str):
    """A typer callback for a count given as a number (`--batch 64`, `--batch 1e3`): positive and whole."""
    def check(value):
        if value is not None:
            from chalk.specs.workload import positive

            positive(option, value, integer=True)
        return value

    return check


@contextmanager
def progress(quiet: bool, what: str):
    """A progress callback `tick(done, total)` drawing a bar on stderr for work that can run past a few seconds;
    None (nothing drawn) under --json or when stderr is not a terminal, so piped output stays clean."""
    if quiet or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn(what), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(what, total=None)

        def tick(done, total):
            bar.update(task, completed=done, total=total)

        yield tick


@contextmanager
def busy(quiet: bool, what: str):
    """A spinner with the elapsed time on stderr while one call that reports no steps works (a plan's search and
    replays); silent under --json or when stderr is not a terminal."""
    if quiet or not sys.stderr.isatty():
        yield
        return
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn(what), TimeElapsedColumn(), console=Console(stderr=True),
                  transient=True) as bar:
        bar.add_task(what, total=None)
        yield


PLOT_FORMATS = (".png", ".svg")


def write_plot(kind: str, output, **kwargs) -> None:
    """The `--plot FILE` option of a command: draw plot `kind` to `output` when one was given."""
    if output:
        from chalk.faces import plots

        wrote(plots.plot(kind, output=output, **kwargs))
