"""`chalk train`: pretraining time, GPU-hours and cost; Chinchilla; eq. 7's pools. No formulas here."""

from __future__ import annotations

import math
import re
from typing import Optional

import typer

from chalk.errors import InputError
from chalk.faces.cli_common import (PLOT_FORMATS, console, emit_json, num, out_file, pct, seconds, si, table, usd,
                                    write_plot)

_SUFFIX = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12, "p": 1e15}
_COUNT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmbgtp]?)\s*$", re.IGNORECASE)


def parse_count(text: str | None, name: str) -> float | None:
    """'15T', '14.8t', '800B', '50M', '1.5e13' -> float (decimal prefixes; B = billion)."""
    if text is None:
        return None
    m = _COUNT.match(str(text))
    if not m:
        raise InputError(f"--{name} must be a number with an optional k/M/B/T suffix (e.g. 15T), got {text!r}")
    v = float(m.group(1)) * _SUFFIX[m.group(2).lower()]
    if not math.isfinite(v) or v <= 0:
        raise InputError(f"--{name} must be positive, got {text!r}")
    return v


def _flop(v) -> str:
    return f"{float(v):.3g} FLOP"


def register(app: typer.Typer) -> None:
    """Add the `train` command to `app`."""

    @app.command()
    def train(
        model: str = typer.Option(..., "--model", "-m", help="Catalog id or alias, a config.json, or its folder."),
        hardware: Optional[str] = typer.Option(
            None, "--hardware", "-H", help="Chip or system id (default: the model's published run, else h100-sxm)."),
        gpus: Optional[int] = typer.Option(
            None, "--gpus", "--chips", help="GPUs (default: the published run's count, else 16384)."),
        tokens: Optional[str] = typer.Option(
            None, "--tokens", "-D", help="Pretraining tokens, e.g. 15T (default: the published run's, else 15T)."),
        precision: Optional[str] = typer.Option(
            None, "--precision", "-p", help="bf16 or fp8 (default: the published run's, else fp8 only for FP8 "
                                            "checkpoints)."),
        seq_len: Optional[int] = typer.Option(None, "--seq-len", help="Training sequence length (default 8192)."),
        batch_tokens: Optional[str] = typer.Option(
            None, "--batch-tokens", help="Global batch in tokens, e.g. 16M (default 16M)."),
        pp: Optional[int] = typer.Option(None, "--pp", help="Pipeline stages (default: fewest that fit)."),
        interleave: Optional[int] = typer.Option(
            None, "--interleave", help="Virtual stages per GPU (default: one layer per virtual stage; 1 = 1F1B)."),
        inference_tokens_per_s: Optional[str] = typer.Option(
            None, "--inference-tokens-per-s", help="Served output tokens/s for eq. 7, e.g. 50M."),
        deployment_days: Optional[float] = typer.Option(
            None, "--deployment-days", help="Deployment window in days (default 60 with a rate)."),
        obsolescence: float = typer.Option(
            0.0, "--obsolescence", help="Chance the model stops being best-in-class in the window (discounts "
                                        "inference volume by 1 - p)."),
        rl_tokens: Optional[str] = typer.Option(None, "--rl-tokens", help="RL tokens (default: the eq. 7 balance)."),
        rl_flops_per_param: float = typer.Option(
            3.0, "--rl-flops-per-param", help="RL FLOPs per parameter per token, 2 (rollouts only) to 6."),
        rl_inefficiency: float = typer.Option(3.0, "--rl-inefficiency", help="Pretraining MFU / RL MFU."),
        inference_inefficiency: float = typer.Option(
            3.0, "--inference-inefficiency", help="Pretraining MFU / serving MFU."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON."),
        plot: Optional[str] = typer.Option(None, "--plot", callback=out_file("--plot", PLOT_FORMATS),
                                            help="Also write the training pools to this .png/.svg."),
    ):
        """Pretraining time, GPU-hours and cost at a calibrated MFU; Chinchilla; eq. 7's pools."""
        from chalk.analyses.blackboard.training import train_estimate

        e = train_estimate(
            model, hardware, gpus, parse_count(tokens, "tokens"), precision, seq_len=seq_len,
            global_batch_tokens=parse_count(batch_tokens, "batch-tokens"), pipeline_stages=pp,
            interleave=interleave, inference_tokens_per_s=parse_count(inference_tokens_per_s, "inference-tokens-per-s"),
            deployment_days=deployment_days, obsolescence_probability=obsolescence,
            rl_tokens=parse_count(rl_tokens, "rl-tokens"), rl_flops_per_param=rl_flops_per_param,
            rl_inefficiency=rl_inefficiency, inference_inefficiency=inference_inefficiency)
        write_plot("training-pools", plot, model=model, hardware=hardware, gpus=gpus,
                   tokens=parse_count(tokens, "tokens"), precision=precision,
                   inference_tokens_per_s=parse_count(inference_tokens_per_s, "inference-tokens-per-s"),
                   deployment_days=deployment_days, obsolescence_probability=obsolescence,
                   rl_flops_per_param=rl_flops_per_param, rl_inefficiency=rl_inefficiency,
                   inference_inefficiency=inference_inefficiency)
        if as_json:
            emit_json(e)
            return
        _print(e)


def _print(e) -> None:
    c = console()
    lay = e.layout
    from chalk.faces.fmt import gpus

    t = table(f"{e.model} pretraining on {gpus(e.gpus, e.chip)} · {si(e.tokens)} tokens of {num(e.seq_len)} · "
              f"{e.precision}", ["quantity", "value"])
    rows = [
        ("work (3 x forward, causal attention)", f"{_flop(e.flops)}  (6ND: {_flop(e.flops_6nd)}, "
                                                 f"attention {pct(e.attention_share)} of forward)"),
        ("efficiency", f"bubble-free BF16 MFU {pct(e.kernel_mfu)} x FP8 {num(e.fp8_speedup, 3)} x MoE "
                       f"{num(e.moe_efficiency, 3)}"),
        ("layout", f"TP {lay.tensor_parallel} x PP {lay.pipeline_stages} x DP {num(lay.data_parallel)}"
                   + (f" (EP {lay.expert_parallel})" if lay.expert_parallel > 1 else "")
                   + f", interleave {lay.interleave}, {num(lay.microbatches)} micro-batches"),
        ("pipeline bubble", pct(e.bubble_fraction)),
        ("gradient reduction per step", f"{seconds(e.dp_reduction_s)} ({seconds(e.dp_exposed_s)} exposed)"),
        ("step time", f"{seconds(e.step_time_s)} per {si(e.global_batch_tokens)} tokens"),
        ("achieved per GPU", si(e.achieved_flops_per_s_per_gpu, "FLOP/s")),
        ("MFU", f"{pct(e.mfu)} of {e.compute_precision} peak"
                + (f" ({pct(e.mfu_bf16_peak)} of BF16 peak)" if e.compute_precision != "bf16" else "")),
        ("GPU-hours", si(e.gpu_hours)),
        ("wall clock", f"{num(e.wall_clock_days, 3)} days"),
        ("cost", f"{usd(e.cost_usd)} at ${e.price_usd_per_gpu_hour:.2f}/GPU-h"),
        ("Chinchilla tokens (20 x N_active)",
         f"{si(e.chinchilla_tokens)}  (overtrained {num(e.overtraining_factor, 3)}x)"),
    ]
    if e.equilibrium_pretrain_tokens is not None:
        rows.append(("eq. 7 pretraining tokens for this inference volume",
                     f"{si(e.equilibrium_pretrain_tokens)} (inference {si(e.inference_tokens)} tokens; "
                     f"{num(e.equilibrium_overtraining_factor, 3)}x Chinchilla)"))
    for k, v in rows:
        t.add_row(k, v)
    c.print(t)
    t = table("eq. 7 compute pools (GPU-hours at this run's achieved rate, on its work per token: 6N plus "
              "causal attention, as the run's own)", ["pool", "tokens", "from", "FLOPs (6ND)", "GPU-hours", "cost"])
    for name, p in e.pools.items():
        t.add_row(name, si(p["tokens"]), p["tokens_source"], _flop(p["flops"]), si(p["gpu_hours"]),
                  usd(p["cost_usd"]))
    c.print(t)
    pub = e.published
    if pub:
        if pub["same_run_shape"]:
            ratio = pub["predicted_over_pretrain"] or pub["predicted_over_total"]
            which = "pretraining" if pub["predicted_over_pretrain"] else "all stages"
            figure = pub["gpu_hours_pretrain"] or pub["gpu_hours_total"]
            c.print(f"published: {si(figure)} GPU-hours ({which}); chalk / published = {num(ratio, 3)}. "
                    f"[dim]{pub['source']}[/dim]")
            if pub.get("notes"):
                c.print(f"[dim]published-run note: {pub['notes']}[/dim]")
            if pub.get("calibrated_on_this_run"):
                c.print(f"[bold]not a check:[/bold] chalk's {pub['calibrated_on_this_run']} was calibrated on this "
                        f"run, so it reproduces it by construction.")
            held = pub.get("held_out_check")
            if held:
                c.print(f"held-out check (a MoE run not fitted on): {held['model']} on {held['hardware']} in "
                        f"{held['precision']}: published {si(held['published_gpu_hours'])} GPU-hours per "
                        f"{si(held['tokens'])} tokens, chalk {si(held['predicted_gpu_hours'])}; chalk / published = "
                        f"{num(held['predicted_over_published'], 3)}. [dim]{held['source']}; {held['notes']}[/dim]")
        else:
            c.print(f"[dim]published run: {si(pub['tokens'])} tokens on {num(pub['gpus'])} x {pub['hardware']}, "
                    f"{si(pub['gpu_hours_total'])} GPU-hours in all ({pub['source']})[/dim]")
    for n in e.notes:
        c.print(f"[dim]note: {n}[/dim]")
