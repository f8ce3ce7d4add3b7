"""The `chalk` command line: a thin face on `chalk.api` and the analyses. No formulas here."""

from __future__ import annotations

import importlib
from enum import Enum
from typing import Optional

import typer
from typer.core import TyperGroup

from chalk.errors import ChalkError
from chalk.faces.cli_common import (PLOT_FORMATS, console, emit_json, fail, num, out_file, pct, seconds, si, table,
                                    usd, whole, write_plot)

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

#: Command modules added by later issues, each with a `register(app)`; `_LazyGroup` imports them.
COMMAND_MODULES = ("cli_serving", "cli_simulate", "cli_economics", "cli_visual", "cli_measure", "cli_plan")


class _LazyGroup(TyperGroup):
    """The `chalk` command group. The commands defined in this module are built at once; those of
    COMMAND_MODULES only when a command line names none of the former, or when anything reads the whole tree
    (`.commands`: --help, a mistyped command's suggestions). `chalk estimate` then neither imports nor builds
    the fifty-odd other commands (issue 12: start-up time)."""

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
            try:
                importlib.import_module(f"chalk.faces.{mod}").register(more)
            except ModuleNotFoundError as e:
                if e.name != f"chalk.faces.{mod}":
                    raise
        every = {**self._commands, **typer.main.get_group(more).commands}
        # commands before groups, the order typer lists them in when all are registered on one app
        self._commands = dict(sorted(every.items(), key=lambda kv: hasattr(kv[1], "list_commands")))


app = typer.Typer(cls=_LazyGroup, add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="chalk: how fast and how cheaply an LLM can be trained and served on given hardware, and why.")
hardware_app = typer.Typer(no_args_is_help=True, help="The chip and system catalog.")
models_app = typer.Typer(no_args_is_help=True, help="The model catalog.")
app.add_typer(hardware_app, name="hardware")
app.add_typer(models_app, name="models")


class Phase(str, Enum):
    decode = "decode"
    prefill = "prefill"


ESTIMATE_KEYS = ("step_time_s", "compute_time_s", "weight_time_s", "kv_time_s", "bound", "mfu", "tokens_per_s",
                 "user_tokens_per_s", "cost_per_mtok_usd", "critical_batch", "critical_batch_with_kv",
                 "balance_context", "weight_bytes", "kv_bytes_per_token", "total_params", "active_params", "fits")

MODEL_OPT = typer.Option(..., "--model", "-m", help="Catalog id or alias, a config.json, or a folder holding one.")
HW_OPT = typer.Option(..., "--hardware", "-H", help="Chip id (its default system), system id, or a YAML path.")


@app.command()
def estimate(
    model: str = MODEL_OPT,
    hardware: str = HW_OPT,
    batch: float = typer.Option(1, "--batch", "-b", callback=whole("--batch"), metavar="<int>", help="Sequences in the step (per replica)."),
    context: float = typer.Option(4096, "--context", "-c", help="Context tokens (prompt length for prefill)."),
    phase: Phase = typer.Option(Phase.decode, "--phase"),
    layout: Optional[str] = typer.Option(None, "--layout", help="One replica, e.g. tp=8,ep=8,pp=1,attn_dp=8 "
                                         "(default: the smallest TP group in the scale-up domain that fits)."),
    aggregate: bool = typer.Option(False, "--aggregate", help="The lecture's view: every chip summed into one "
                                   "communication-free chip (an upper bound, not a deployment)."),
    gpus: Optional[int] = typer.Option(None, "--gpus", "--chips", help="GPUs available (default: the system's "
                                       "scale-up domain); with --aggregate, the chips summed."),
    precision: Optional[str] = typer.Option(None, "--precision", "-p", help="Weights/compute: bf16, fp8, fp4..."),
    kv_precision: str = typer.Option("auto", "--kv-precision", help="KV cache precision (auto: FP8 with 8-bit "
                                     "weights on chips with an FP8 rate, else BF16)."),
    ideal: bool = typer.Option(False, "--ideal", help="Peak rates: the pure roofline, no calibration."),
    lecture_weights: bool = typer.Option(False, "--lecture-weights",
                                         help="Read all weights every step (the lecture's form; implies "
                                              "--aggregate) instead of only the experts a batch touches."),
    sparse_law: Optional[str] = typer.Option(None, "--sparse-law", help="'sqrt': the lecture's square-root law "
                                             "(implies --aggregate)."),
    mtp: Optional[int] = typer.Option(None, "--mtp", help="Draft tokens per step (speculative decoding / MTP)."),
    acceptance: float = typer.Option(0.7, "--acceptance", help="Per-token draft acceptance rate with --mtp."),
    show_ops: bool = typer.Option(False, "--ops", help="Print the step op by op: FLOPs, bytes, intensity, bound, "
                                  "time and where the time came from."),
    strict_fit: bool = typer.Option(False, "--strict-fit", help="Exit 2 if it does not fit in HBM."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    plot: Optional[str] = typer.Option(None, "--plot", callback=out_file("--plot", PLOT_FORMATS), help="Also write latency-vs-batch to this .png/.svg."),
):
    """One decode step (or prefill) on a real layout, timed op by op; --aggregate for the lecture's bound."""
    from chalk import api

    if sparse_law not in (None, "sqrt"):
        fail(f"--sparse-law must be 'sqrt', got {sparse_law!r}")
    kw = dict(phase=phase.value, layout=layout, aggregate=aggregate, gpus=gpus, precision=precision,
              kv_precision=kv_precision, ideal=ideal, refined=not lecture_weights, sparse_law=sparse_law,
              strict_fit=strict_fit)
    if "," in hardware:
        from chalk.analyses.compare import compare, hardware_list

        rows = compare(lambda hardware: api.estimate(model, hardware, batch, context, **kw), hardware_list(hardware))
        if as_json:
            emit_json({"compare": [{**(o["result"].to_dict() if o["result"] is not None else {}),
                                    "hardware": o["hardware"], "error": o["error"],
                                    "system": o["result"].hardware if o["result"] is not None else None}
                                   for o in rows]})
            return
        t = table(f"{model} · {phase.value} · batch {num(batch)} · context {num(context)} across chips",
                  ["hardware", "layout", "step", "tokens/s", "per user", "$/M tok", "bound"])
        for o in rows:
            r = o["result"]
            if r is None:
                t.add_row(o["hardware"], "-", "-", "-", "-", "-", o["error"][:40])
                continue
            t.add_row(o["hardware"], r.layout["label"] if r.layout else f"{r.chips} summed", seconds(r.step_time_s),
                      num(r.tokens_per_s), num(r.user_tokens_per_s), usd(r.cost_per_mtok_usd), str(r.bound))
        console().print(t)
        return
    r = api.estimate(model, hardware, batch, context, **kw)
    spec = None
    if mtp:
        from chalk.analyses.speculative import speculative_estimate

        spec = speculative_estimate(r, model=model, hardware=hardware, draft_tokens=mtp, acceptance=acceptance,
                                    chips=gpus, precision=precision, kv_precision=r.kv_precision, ideal=ideal,
                                    layout=r.layout, aggregate=r.view == "aggregate")
    write_plot("latency-vs-batch", plot, model=model, hardware=hardware, context=context, chips=gpus,
                precision=precision, kv_precision=r.kv_precision, ideal=ideal)
    if as_json:
        d = r.to_dict()
        d["step_time_s"] = r.step_time_s
        if spec is not None:
            d["speculative"] = spec.to_dict()
        emit_json(d)
        return
    c = console()
    where = (f"{r.layout['label']} ({r.chips} GPUs) of {r.hardware}" if r.view == "layout"
             else f"{r.chips} x {r.hardware} summed into one chip (aggregate: communication-free bound)")
    t = table(f"{r.model} on {where} · {r.phase} · batch {num(r.batch)} · context {num(r.context)}"
              f" · {r.precision} weights ({r.compute_precision} compute), {r.kv_precision} KV · {r.efficiency}",
              ["quantity", "value"])
    rows = [
        ("step time", seconds(r.step_time_s) + (f"  (range {seconds(r.range['step_time_s'][0])} to "
                                                f"{seconds(r.range['step_time_s'][1])})"
                                                if r.range["step_time_s"][0] != r.range["step_time_s"][1]
                                                else "")),
        ("  compute (all FLOPs at achieved rate)", seconds(r.compute_time_s)),
        ("  weight read", seconds(r.weight_time_s) + f"  (lecture form, all weights: {seconds(r.weight_time_lecture_s)})"),
        ("  KV read" if r.phase == "decode" else "  KV write", seconds(r.kv_time_s)),
    ]
    if r.view == "layout":
        rows += [("  communication (exposed)", seconds(r.comm_time_s)),
                 ("  overhead (launches, scheduling, pipeline sync)", seconds(r.overhead_time_s))]
    else:
        rows += [("  overhead", seconds(r.overhead_time_s))]
    rows += [
        ("bound", str(r.bound)), ("MFU", pct(r.mfu)), ("memory-bandwidth utilisation", pct(r.mbu)),
        ("throughput", f"{num(r.tokens_per_s)} tokens/s"), ("per user", f"{num(r.user_tokens_per_s)} tokens/s"),
        ("cost", f"{usd(r.cost_per_mtok_usd)} per M tokens"),
        ("critical batch (eq. 5, weights only)", num(r.critical_batch)),
        ("critical batch with KV at this context", num(r.critical_batch_with_kv) if r.critical_batch_with_kv
         else "none: KV alone outweighs compute"),
        ("balance context (KV time = compute time)", f"{num(r.balance_context)} tokens"),
        ("weights", si(r.weight_bytes, "B")), ("KV per token", si(r.kv_bytes_per_token, "B")),
        ("memory needed / HBM", f"{si(r.memory_needed_bytes, 'B')} / {si(r.hbm_bytes, 'B')}"
                                f" ({'fits' if r.fits else 'DOES NOT FIT'}; max batch {num(r.max_batch_fit)})"),
        ("parameters total / active", f"{si(r.total_params)} / {si(r.active_params)}"),
    ]
    if spec is not None:
        rows.append((f"with {mtp} draft token{'s' if mtp != 1 else ''} at acceptance {acceptance}",
                     f"{num(spec.tokens_per_step)} tokens/step, {num(spec.user_tokens_per_s)} tokens/s per user, "
                     f"{usd(spec.cost_per_mtok_usd)} per M tokens"))
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


@app.command()
def sweep(
    model: str = MODEL_OPT,
    hardware: str = HW_OPT,
    batches: str = typer.Option("1,2,4,8,16,32,64,128,256,512,1024,2048,4096,8192", "--batches",
                                help="Comma-separated batch sizes, or start:stop:points for a log range."),
    contexts: str = typer.Option("4096", "--contexts", help="Comma-separated context lengths, or start:stop:points."),
    phase: Phase = typer.Option(Phase.decode, "--phase"),
    chips: Optional[int] = typer.Option(None, "--gpus", "--chips"),
    precision: Optional[str] = typer.Option(None, "--precision", "-p"),
    kv_precision: str = typer.Option("auto", "--kv-precision"),
    ideal: bool = typer.Option(False, "--ideal"),
    as_json: bool = typer.Option(False, "--json"),
    csv: Optional[str] = typer.Option(None, "--csv", callback=out_file("--csv"), help="Write the table to this CSV file."),
    plot: Optional[str] = typer.Option(None, "--plot", callback=out_file("--plot", PLOT_FORMATS),
                                        help="Also write cost-vs-batch to this .png/.svg."),
):
    """Sweep batch x context in one vectorised call: the lecture's latency and cost curves as a table."""
    from chalk import api

    res = api.sweep(model, hardware, _parse_grid(batches, "batches"), _parse_grid(contexts, "contexts"),
                    phase=phase.value, chips=chips, precision=precision, kv_precision=kv_precision, ideal=ideal)
    if csv:
        res.to_csv(csv)
    write_plot("cost-vs-batch", plot, model=model, hardware=hardware, context=float(res["context"][0]),
                chips=chips, precision=precision, kv_precision=kv_precision, ideal=ideal)
    if as_json:
        emit_json(res.to_dict())
        return
    a = res.meta
    t = table(f"{a['model']} on {a['chips']} x {a['hardware']} · {a['phase']} · critical batch "
              f"{num(a['critical_batch'])} · balance context {num(a['balance_context'])} tokens · {a['efficiency']}",
              ["batch", "context", "step", "bound", "MFU", "tokens/s", "tokens/s/user", "$/M tokens", "fits"])
    for row in res.rows():
        t.add_row(num(row["batch"]), num(row["context"]), seconds(row["step_time_s"]), row["bound"], pct(row["mfu"]),
                  num(row["tokens_per_s"]), num(row["user_tokens_per_s"]), usd(row["cost_per_mtok_usd"]),
                  "yes" if row["fits"] else "no")
    console().print(t)


def _parse_grid(text: str, name: str):
    import numpy as np

    from chalk.specs.workload import MAX_GRID_POINTS

    text = text.strip()
    try:
        if ":" in text:
            a, b, n = text.split(":")
            points = int(n)
            if not 1 <= points <= MAX_GRID_POINTS:
                fail(f"--{name}: points must be between 1 and {MAX_GRID_POINTS:,}, got {n}")
            return np.unique(np.round(np.geomspace(float(a), float(b), points)))
        values = [float(x) for x in text.split(",") if x.strip()]
    except (ValueError, OverflowError):
        fail(f"--{name} must be comma-separated numbers or start:stop:points, got {text!r}")
    if name == "batches" and values:
        from chalk.specs.workload import positive

        positive("--batches", values, integer=True)  # sequences are whole; a range is rounded above
    return values


# ------------------------------------------------------------------ catalogs
@hardware_app.command("list")
def hardware_list(as_json: bool = typer.Option(False, "--json")):
    """Every chip and system in the catalog."""
    from chalk.specs import catalog

    chips = [catalog.load_chip(c) for c in catalog.chip_ids()]
    systems = [catalog.load_system(s) for s in catalog.system_ids()]
    if as_json:
        emit_json({"chips": [_chip_dict(c) for c in chips],
                   "systems": [{"id": s.id, "name": s.name, "chip": s.chip.id, "chips": s.chips, "kind": s.kind}
                               for s in systems]})
        return
    t = table("chips (dense peaks)", ["id", "name", "precisions (dense)", "HBM", "HBM bandwidth",
                                      "scale-up (one way)", "$/chip-h"])
    for c in chips:
        t.add_row(c.id, c.name, ", ".join(f"{p} {si(v, 'FLOP/s')}" for p, v in c.flops_per_s.items()),
                  si(c.hbm_bytes, "B"), si(c.hbm_bandwidth_bytes_per_s, "B/s"),
                  si(c.scaleup_bandwidth_bytes_per_s, "B/s"),
                  f"{c.price_usd_per_hour:.2f}" + (" (assumed)" if c.price_is_assumption else ""))
    console().print(t)
    t = table("systems (scale-up domains)", ["id", "name", "chip", "chips", "kind"])
    for s in systems:
        t.add_row(s.id, s.name, s.chip.id, str(s.chips), s.kind)
    console().print(t)


def _chip_dict(c) -> dict:
    from dataclasses import asdict

    from chalk.analyses.hardware_facts import chip_facts

    d = asdict(c)
    d.update(chip_facts(c))
    return d


@hardware_app.command("show")
def hardware_show(name: str = typer.Argument(..., help="Chip or system id, alias, or YAML path."),
                  as_json: bool = typer.Option(False, "--json")):
    """One chip or system, with its derived ratios."""
    from chalk.specs.catalog import resolve_hardware

    s = resolve_hardware(name)
    d = {"system": {"id": s.id, "name": s.name, "chips": s.chips, "kind": s.kind, "sources": s.sources},
         "chip": _chip_dict(s.chip)}
    if as_json:
        emit_json(d)
        return
    c = s.chip
    t = table(f"{s.name}: {s.chips} x {c.name}", ["quantity", "value", "source"])
    src = c.sources
    for p, v in c.flops_per_s.items():
        t.add_row(f"dense {p}", si(v, "FLOP/s"), src.get("dense_tflops", ""))
    cf = d["chip"]
    rows = [("HBM", si(c.hbm_bytes, "B"), src.get("hbm_gb", "")),
            ("HBM bandwidth", si(c.hbm_bandwidth_bytes_per_s, "B/s"), src.get("hbm_tb_per_s", "")),
            ("scale-up, bidirectional (vendor)", si(c.scaleup_bandwidth_bytes_per_s_bidir, "B/s"),
             src.get("scaleup_gb_per_s_bidir", "")),
            ("scale-up, one way", si(c.scaleup_bandwidth_bytes_per_s, "B/s"), "half the vendor figure"),
            ("scale-out NIC", si(c.scaleout_bandwidth_bytes_per_s, "B/s"), src.get("scaleout_gbit_per_s", "")),
            ("TDP", f"{c.tdp_w} W" if c.tdp_w else "n/a", src.get("tdp_w", "")),
            ("price", f"${c.price_usd_per_hour:.2f}/chip-hour" + (" (assumption)" if c.price_is_assumption else ""),
             src.get("price_usd_per_hour", "") or c.price_note),
            (f"FLOP/s per byte/s ({cf['native_precision']})", num(cf["flops_per_byte"]), "derived"),
            ("critical batch, dense (eq. 5)", num(cf["dense_critical_batch"]), "derived"),
            ("HBM drain time", seconds(cf["hbm_drain_time_s"]), "derived"),
            ("system HBM", si(s.hbm_bytes, "B"), "derived")]
    for r in rows:
        t.add_row(*r)
    console().print(t)


@models_app.command("list")
def models_list(as_json: bool = typer.Option(False, "--json")):
    """Every model in the catalog with its sizes."""
    from chalk.analyses.model_sizes import ModelSizes
    from chalk.specs import catalog

    rows = [ModelSizes(catalog.load_model(m)).summary() for m in catalog.model_ids()]
    if as_json:
        emit_json({"models": rows})
        return
    t = table("models", ["id", "type", "total params", "active params", "weights", "KV/token (bf16)", "attention"])
    for r in rows:
        t.add_row(r["id"], r["model_type"], si(r["total_params"]), si(r["active_params"]),
                  f"{si(r['weight_bytes'], 'B')} {r['weights_precision']}", si(r["kv_bytes_per_token"], "B"),
                  r["attention"] + (f", window {r['sliding_window']}" if r["sliding_window"] else "")
                  + (f", DSA top-{r['dsa_topk']}" if r["dsa_topk"] else ""))
    console().print(t)


@models_app.command("show")
def models_show(name: str = typer.Argument(..., help="Catalog id, alias, config.json path or folder."),
                kv_precision: str = typer.Option("auto", "--kv-precision"),
                precision: Optional[str] = typer.Option(None, "--precision", "-p"),
                as_json: bool = typer.Option(False, "--json")):
    """One model's derived sizes."""
    from chalk.analyses.model_sizes import ModelSizes
    from chalk.specs import catalog
    from chalk.specs.precision import canonical

    from chalk.analyses.parallel import resolve_kv_precision

    sz = ModelSizes(catalog.load_model(name))
    prec = canonical(precision) if precision is not None else None
    kvp = resolve_kv_precision(kv_precision, prec or sz.default_precision())
    d = sz.summary(kv_precision=kvp, precision=prec)
    if as_json:
        emit_json(d)
        return
    t = table(f"{d['name']} ({d['model_type']})", ["quantity", "value"])
    for k, v in d.items():
        if k in ("name",):
            continue
        if isinstance(v, float) and ("params" in k or "flops" in k):
            v = si(v)
        elif isinstance(v, float) and "bytes" in k:
            v = si(v, "B")
        t.add_row(k, str(v))
    console().print(t)


@app.command()
def lecture(as_json: bool = typer.Option(False, "--json", help="Print {\"claims\": [...]} as JSON.")):
    """Replay the lecture's deductions, each computed by chalk."""
    from chalk.analyses.lecture import all_claims
    from chalk.faces.lecture_text import render

    claims = all_claims()
    if as_json:
        emit_json({"claims": [c.to_dict() for c in claims]})
        return
    render(claims, console())


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
    # typer may vendor its own click: take the exception classes from typer itself
    usage_error = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
    click_error = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            app(args=args, standalone_mode=False)
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
