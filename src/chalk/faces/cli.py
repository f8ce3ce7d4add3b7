"""The `chalk` command line: a thin face on `chalk.api` and the analyses. No formulas here.

No `from __future__ import annotations` here: typer reads the commands' annotations, and as strings each one
is compiled again by `typing.get_type_hints` (~0.5 ms of `chalk estimate` start-up, issue 12)."""

import importlib
from typing import Optional

import typer
from typer.core import TyperGroup

from chalk.errors import ChalkError
from chalk.faces.cli_common import (ACCEPTANCE_OPT, EPLB_OPT, HW_OPT, MODEL_OPT, PLOT_FORMATS, Phase, acceptance_source,
                                    acceptance_text, console, emit_json, fail, num, out_file, pct, seconds, si,
                                    speculation_for, table, usd, whole, write_plot)
from chalk.faces.energy_text import PUE_OPT, USD_PER_KWH_OPT, energy_rows


def _flag_type_hidden() -> None:
    """--help shows no `<bool>` type beside a flag that takes no value.

    typer up to 0.28 (what pyproject pins) hides it itself; typer 0.29, still found where it was installed
    before the pin, shows the bool type of every option through `TyperOption.display_type_rich`."""
    from typer import core

    shown = getattr(core.TyperOption, "display_type_rich", None)
    if shown is None or getattr(shown, "_chalk", False):
        return

    def display_type_rich(self, ctx):
        return None if self.is_flag else shown(self, ctx)

    display_type_rich._chalk = True
    core.TyperOption.display_type_rich = display_type_rich


_flag_type_hidden()

#: The other commands' modules, each with a `register(app)`, in --help order; `_LazyGroup` imports them.
COMMAND_MODULES = ("cli_lecture", "cli_catalog", "cli_serving", "cli_simulate", "cli_economics", "cli_visual",
                   "cli_measure", "cli_plan")


class CommandModuleError(ChalkError):
    """A module of COMMAND_MODULES failed to import: chalk stops with one line naming it rather than run without its
    commands."""


class _LazyGroup(TyperGroup):
    """The `chalk` command group. The commands defined in this module are built at once; those of
    COMMAND_MODULES only when a command line names none of the former, or when anything reads the whole tree
    (`.commands`: --help, a mistyped command's suggestions). `chalk estimate` then neither imports nor builds
    the twenty other commands (issue 12: start-up time)."""

    @property
    def commands(self):
        if not self._all_loaded:
            self._load_command_modules()
        return self._commands

    @commands.setter
    def commands(self, value) -> None:
        self._commands, self._all_loaded = value, False

    def get_command(self, ctx, cmd_name):
        return self._commands.get(cmd_name) or super().get_command(ctx, cmd_name)

    def _load_command_modules(self) -> None:
        self._all_loaded = True
        more = typer.Typer()
        for mod in COMMAND_MODULES:
            name = f"chalk.faces.{mod}"
            try:
                module = importlib.import_module(name)
            except Exception as e:  # a broken or missing module is an error, never a silently missing command
                raise CommandModuleError(f"command module {name} failed to import ({type(e).__name__}: {e}); its "
                                         "commands would be missing") from e
            module.register(more)
        every = {**self._commands, **typer.main.get_group(more).commands}
        # commands before groups, the order typer lists them in when all are registered on one app
        self._commands = dict(sorted(every.items(), key=lambda kv: hasattr(kv[1], "list_commands")))


app = typer.Typer(cls=_LazyGroup, add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="chalk: how fast and how cheaply an LLM can be trained and served on given hardware, and why.")


def _version(value: bool) -> None:
    if value:
        from chalk import __version__

        typer.echo(f"chalk {__version__}")
        raise typer.Exit(0)


@app.callback()
def _group(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                        help="Print chalk's version and exit.")) -> None:
    # typer runs an app of one command as that command; the others are added later, by _LazyGroup
    pass


ESTIMATE_KEYS = ("step_time_s", "compute_time_s", "weight_time_s", "kv_time_s", "bound", "mfu", "tokens_per_s",
                 "user_tokens_per_s", "cost_per_mtok_usd", "critical_batch", "critical_batch_with_kv",
                 "balance_context", "weight_bytes", "kv_bytes_per_token", "total_params", "active_params", "fits")


@app.command()
def estimate(
    model: str = MODEL_OPT,
    hardware: str = HW_OPT,
    batch: float = typer.Option(1, "--batch", "-b", callback=whole("--batch"), metavar="<int>", help="Sequences in the step (per replica)."),
    context: float = typer.Option(4096, "--context", "-c", help="Context tokens (prompt length for prefill)."),
    phase: Phase = typer.Option(Phase.decode, "--phase", help="decode: one token per sequence; prefill: the "
                                "whole prompt of --context tokens."),
    layout: Optional[str] = typer.Option(None, "--layout", help="One replica, e.g. tp=8,ep=8,pp=1,attn_dp=8 "
                                         "(default: chosen within --gpus by --objective); etp=2 splits each "
                                         "expert 2 ways inside its EP group (ep x etp = tp x attn_dp)."),
    objective: Optional[str] = typer.Option(None, "--objective", metavar="cost|latency",
                                            help="What the default layout is chosen for (default: cost): cost = "
                                                 "the fewest GPUs that hold the weights and this batch's KV, the "
                                                 "faster layout of that many (a MoE model's TP group or its "
                                                 "attention-DP x EP); latency = the shortest step within --gpus. "
                                                 "The header says what the other would pick."),
    aggregate: bool = typer.Option(False, "--aggregate", help="The lecture's view: every chip summed into one "
                                   "communication-free chip, not a deployment. With --ideal a bound on speed; "
                                   "calibrated, its roofline runs at the fitted fractions of ops without kernel "
                                   "tables, so a layout timed by measured kernels can be faster."),
    gpus: Optional[int] = typer.Option(None, "--gpus", "--chips", help="GPUs available (default: the system's "
                                       "scale-up domain); with --aggregate, the chips summed."),
    precision: Optional[str] = typer.Option(None, "--precision", "-p", help="Weights/compute: bf16, fp8, fp4..."),
    kv_precision: str = typer.Option("auto", "--kv-precision", help="KV cache precision (auto: FP8 with 8-bit "
                                     "weights on chips with an FP8 rate, else BF16; with --engine, that engine's "
                                     "default)."),
    ideal: bool = typer.Option(False, "--ideal", help="Peak rates: the pure roofline, no calibration."),
    lecture_weights: bool = typer.Option(False, "--lecture-weights",
                                         help="Read all weights every step (the lecture's form; implies "
                                              "--aggregate) instead of only the experts a batch touches."),
    sparse_law: Optional[str] = typer.Option(None, "--sparse-law", help="'sqrt': the lecture's square-root law "
                                             "(implies --aggregate)."),
    mtp: Optional[int] = typer.Option(None, "--mtp", help="Draft tokens per step (speculative decoding / MTP)."),
    acceptance: Optional[float] = ACCEPTANCE_OPT,
    show_ops: bool = typer.Option(False, "--ops", help="Print the step op by op: FLOPs, bytes, intensity, bound, "
                                  "time and where the time came from."),
    strict_fit: bool = typer.Option(False, "--strict-fit", help="Exit 2 if it does not fit in HBM."),
    eplb: str = EPLB_OPT,
    engine: Optional[str] = typer.Option(None, "--engine", help="vllm | sglang | trtllm (@release): time the step "
                                         "with that engine's kernel tables and host time per step, its default KV "
                                         "cache for 'auto', as throughput --engine does."),
    usd_per_kwh: Optional[float] = USD_PER_KWH_OPT,
    pue: Optional[float] = PUE_OPT,
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    plot: Optional[str] = typer.Option(None, "--plot", callback=out_file("--plot", PLOT_FORMATS), help="Also write latency-vs-batch to this .png/.svg."),
):
    """One decode step (or prefill) on a real layout, timed op by op; --aggregate for the lecture's bound."""
    from chalk import api

    drafts = speculation_for(mtp, acceptance, model=model)

    if sparse_law not in (None, "sqrt"):
        fail(f"--sparse-law must be 'sqrt', got {sparse_law!r}")
    kw = dict(phase=phase.value, layout=layout, objective=objective, aggregate=aggregate, gpus=gpus,
              precision=precision,
              kv_precision=kv_precision, ideal=ideal, refined=not lecture_weights, sparse_law=sparse_law,
              strict_fit=strict_fit, eplb=eplb, usd_per_kwh=usd_per_kwh, pue=pue, engine=engine)
    if engine is not None and plot is not None:
        fail("--plot draws chalk's calibrated latency-vs-batch curve; it takes no --engine (drop one of them)")
    if "," in hardware:
        from chalk.analyses.planning.compare import compare, hardware_list

        rows = compare(lambda hardware: api.estimate(model, hardware, batch, context, **kw), hardware_list(hardware))
        if as_json:
            emit_json({"compare": [{**(_per(o["result"]) if o["result"] is not None else {}),
                                    "hardware": o["hardware"], "error": o["error"],
                                    "system": o["result"].hardware if o["result"] is not None else None}
                                   for o in rows]})
            return
        t = table(f"{model} · {phase.value} · batch {num(batch)} · context {num(context)} across chips "
                  "(tokens/s per replica, the layout's GPUs)",
                  ["hardware", "layout", "GPUs", "step", "tok/s/replica", "tok/s/user", "$/M tok", "bound"])
        for o in rows:
            r = o["result"]
            if r is None:
                t.add_row(o["hardware"], "-", "-", "-", "-", "-", "-", o["error"][:40])
                continue
            t.add_row(o["hardware"], r.layout["label"] if r.layout else "summed", str(r.chips), seconds(r.step_time_s),
                      num(r.tokens_per_s), num(r.user_tokens_per_s), usd(r.cost_per_mtok_usd), str(r.bound))
        console().print(t)
        return
    r = api.estimate(model, hardware, batch, context, **kw)
    spec = None
    if mtp:
        from chalk.analyses.step.speculative import speculative_estimate

        spec = speculative_estimate(r, model=model, hardware=hardware, draft_tokens=mtp, acceptance=drafts.acceptance,
                                    decay=drafts.decay, chips=gpus, precision=precision, kv_precision=r.kv_precision,
                                    ideal=ideal, layout=r.layout, aggregate=r.view == "aggregate", eplb=eplb,
                                    engine=engine)
    write_plot("latency-vs-batch", plot, model=model, hardware=hardware, context=context, chips=gpus,
                precision=precision, kv_precision=r.kv_precision, ideal=ideal)
    if as_json:
        d = _per(r)
        d["step_time_s"] = r.step_time_s
        if spec is not None:
            d["speculative"] = spec.to_dict()
        emit_json(d)
        return
    c = console()
    from chalk.faces.fmt import header, rate
    from chalk.specs.catalog import resolve_hardware

    chip = resolve_hardware(hardware).chip.id
    where = (layout_words(r) if r.view == "layout"
             else "aggregate (all GPUs summed into one communication-free chip: "
                  + ("a bound)" if r.efficiency == "ideal" else "the lecture's roofline at the fitted fractions)"))
    t = table(header(r.model, chip, r.chips, where, f"{r.precision} ({r.compute_precision} compute)",
                     r.kv_precision, r.engine, r.efficiency, r.phase, f"batch {num(r.batch)}",
                     f"context {num(r.context)}", system=r.hardware),
              ["quantity", "value"])
    unit = "replica" if r.view == "layout" else "fleet"
    spread = (f"  (range {seconds(r.range['step_time_s'][0])} to {seconds(r.range['step_time_s'][1])})"
              if r.range["step_time_s"][0] != r.range["step_time_s"][1] else "")
    rows = [("step time" + (" = the six rows below (the ops by what binds each)" if r.view == "layout" else
                            " = max(compute, weight read + KV read) + overhead (the lecture's roofline)"),
             seconds(r.step_time_s) + spread)]
    if r.view == "layout":
        kv = "KV read" if r.phase == "decode" else "KV write"
        rows += [("  compute (compute-bound GEMMs and attention)", seconds(r.compute_time_s)),
                 ("  weight read (memory-bound weight GEMMs, per GPU)",
                  seconds(r.weight_time_s) + f"  (lecture's bound, all weights over {r.chips} GPUs: "
                                             f"{seconds(r.weight_time_lecture_s)})"),
                 (f"  {kv} (memory-bound attention)", seconds(r.kv_time_s)),
                 ("  activations (elementwise, sampling, expert shuffles)", seconds(r.activation_time_s)),
                 ("  communication (exposed)", seconds(r.comm_time_s)),
                 ("  overhead (launches, scheduling, pipeline sync)", seconds(r.overhead_time_s)),
                 ("bound (the largest of compute, memory = weight + KV + activation reads, communication, overhead)",
                  str(r.bound))]
    else:
        rows += [("  compute (all FLOPs at the achieved rate)", seconds(r.compute_time_s)),
                 ("  weight read" + (" (all weights, the lecture's form)" if r.weights_read.startswith("all")
                                     else " (the experts this batch touches)"), seconds(r.weight_time_s)),
                 ("  KV read" if r.phase == "decode" else "  KV write", seconds(r.kv_time_s)),
                 ("  overhead", seconds(r.overhead_time_s)),
                 ("bound (compute or memory: the roofline's larger side)", str(r.bound))]
    rows += [
        ("MFU", pct(r.mfu)), ("memory-bandwidth utilisation", pct(r.mbu)),
        ("throughput", rate(r.tokens_per_s, "tokens/s", unit, r.chips)
                       + f" = {rate(r.tokens_per_s / r.chips, 'tokens/s', 'gpu')}"),
        ("per user", rate(r.user_tokens_per_s, "tokens/s", "user")),
        ("cost", f"{usd(r.cost_per_mtok_usd)} per M tokens" if r.cost_per_mtok_usd else  # not $0 (QA 2026-11-28)
         f"n/a: no price for {r.hardware}'s chip (price_usd_per_hour in its YAML)"),
        *energy_rows(r.energy),
        ("critical batch (eq. 5, weights only)", num(r.critical_batch)),
        ("critical batch with KV at this context", num(r.critical_batch_with_kv) if r.critical_batch_with_kv
         else "none: KV alone outweighs compute"),
        ("balance context (KV time = compute time)", f"{num(r.balance_context)} tokens"),
        ("weights", si(r.weight_bytes, "B")), ("KV per token", si(r.kv_bytes_per_token, "B")),
        ("memory needed / HBM", f"{si(r.memory_needed_bytes, 'B')} / {si(r.hbm_bytes, 'B')}"
                                f" ({'fits' if r.fits else 'DOES NOT FIT'}; max batch {num(r.max_batch_fit)})"),
        ("parameters total / active", f"{si(r.total_params)} / {si(r.active_params)}"),
    ]
    if getattr(r, "kernels", None):
        rows.append(("kernel tables", r.kernels))
    if spec is not None:
        rows.append((f"with {mtp} draft token{'s' if mtp != 1 else ''} at acceptance "
                     f"{acceptance_text(drafts.acceptance, drafts.decay)}",
                     f"{num(spec.tokens_per_step)} tokens/step, {num(spec.user_tokens_per_s)} tokens/s per user, "
                     f"{usd(spec.cost_per_mtok_usd)} per M tokens (acceptance: {acceptance_source(drafts.source)})"))
    for k, v in rows:
        t.add_row(k, v)
    c.print(t)
    if show_ops and r.ops:
        ot = table("the step op by op (times on the busiest GPU; they add up to the step time)",
                   ["op", "FLOPs", "bytes", "FLOP/B", "bound", "time", "source"])
        for o in r.ops:
            ai = o.get("intensity_flops_per_byte")
            ot.add_row(o["name"], si(o["flops"]), si(o["bytes"], "B"), num(ai) if ai is not None else "-",
                       o["bound"], seconds(o["time_s"]), o["source"])
        c.print(ot)
    elif show_ops:
        c.print("[dim]note: --ops needs the layout view (no --aggregate) and one batch and context[/dim]")
    for n in r.notes:
        c.print(f"[dim]note: {n}[/dim]")


def layout_words(r) -> str:
    """The header's layout: the one chosen, out of how many GPUs, by which objective, and what the other objective
    would pick ("TP2 of 8 GPUs (objective cost); latency would pick TP8: 9.1 ms/token"); a layout given: its
    label."""
    label = r.layout["label"]
    if r.objective is None:
        return f"{label} (given)"
    words = f"{label} of {r.layout.get('out_of_gpus', r.chips)} GPUs (objective {r.objective})"
    alt = r.alternative
    if not alt or alt.get("layout") is None:
        return words
    per = "token" if r.phase == "decode" else "prefill step"
    if alt["same"]:
        return words + f"; {alt['objective']} would pick it too"
    return (words + f"; {alt['objective']} would pick {alt['layout']['label']}: {seconds(alt['step_time_s'])}/"
            f"{per}, {usd(alt['cost_per_mtok_usd'])} per M tokens")


def _per(r) -> dict:
    """`r.to_dict()` with what its throughput is counted over: one replica of `chips` GPUs (the layout view), or
    every GPU given summed (the aggregate view: the fleet), and per GPU."""
    d = r.to_dict()
    over = "replica" if r.view == "layout" else "fleet"
    d.setdefault(f"tokens_per_s_per_{over}", r.tokens_per_s)
    d.setdefault("tokens_per_s_per_gpu", r.tokens_per_s_per_gpu)
    d.setdefault(f"gpus_per_{over}", r.chips)
    return d


def main(argv: list[str] | None = None) -> None:
    """Entry point: every ChalkError and usage error becomes one line on stderr and exit 2.

    Under --json that line is `{"error": "..."}`. numpy's RuntimeWarnings are silenced here: a non-finite
    value is caught where it enters (specs.workload, specs.validate), not announced by numpy first.
    """
    import sys
    import warnings

    import numpy as np

    from chalk.faces import cli_common

    args = list(sys.argv[1:] if argv is None else argv)
    cli_common.JSON_ERRORS = "--json" in args
    cli_common.PENDING_NOTES.clear()
    cli_common.degrade_to_ascii()
    # typer may vendor its own click: take the exception classes from typer itself
    usage_error = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
    click_error = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            app(args=args, standalone_mode=False)
            cli_common.flush_notes()  # deprecation notes after a success only: a failure is its one line
        except ChalkError as e:
            fail(str(e))
        except usage_error as e:
            if type(e).__name__ == "NoArgsIsHelpError":
                raise SystemExit(0)
            fail(e.format_message())
        except click_error as e:
            fail(e.format_message())
        except typer.Abort:
            fail("aborted")
        except typer.Exit as e:
            raise SystemExit(e.exit_code)
        except BrokenPipeError:
            raise SystemExit(0)


if __name__ == "__main__":
    main()
