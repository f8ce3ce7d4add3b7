"""`chalk layout`, `chalk throughput`, `chalk validate`: deployments at scale. A thin face, no formulas."""

from __future__ import annotations

import math
from typing import Optional

import typer

from chalk.faces.cli_common import (ACCEPTANCE_OPT, EPLB_OPT, LENGTH_FORMS, PLOT_FORMATS, acceptance_source,
                                    acceptance_text, busy, console, deprecated, duration, emit_json, fail, length, num,
                                    out_file, pct, progress, seconds, si, speculation_for, table, usd, write_plot)
from chalk.faces.fmt import header, rate

MODEL_OPT = typer.Option(..., "--model", "-m", help="Catalog id or alias, a config.json, or a folder holding one.")
HW_OPT = typer.Option(..., "--hardware", "-H", help="Chip id (its default system), system id, or a YAML path.")
GPUS_OPT = typer.Option(None, "--gpus", "--chips",
                        help="GPUs in the deployment, both pools of a disaggregated answer under --mode all "
                             "(with --disaggregated: the decode pool; default: searched within the system).")
PREC_OPT = typer.Option(None, "--precision", "-p", help="Weights/compute precision (default: the checkpoint's).")
KV_OPT = typer.Option("auto", "--kv-precision",
                      help="KV cache precision; 'auto' = fp8 when weights run at 8 bits or fewer, else bf16.")
ENGINE_KV_OPT = typer.Option("auto", "--kv-precision", help="KV cache precision; 'auto' = the engine's default with "
                             "--engine (vLLM, SGLang: bf16; TensorRT-LLM: the checkpoint's: what the model's own "
                             "quantised checkpoint declares, else bf16; fp8 beside another 8-bit checkpoint), "
                             "else fp8 when weights run at 8 bits or fewer, else bf16.")
from chalk.faces.energy_text import PUE_OPT, USD_PER_KWH_OPT, energy_rows


def _layout_text(r: dict) -> str:
    """An answer's replica as the --layout its printed commands take: tp, and each of ep, etp, pp and attention DP
    that is not 1."""
    par = r.get("parallelism") or {}
    return ",".join(f"{k}={par[k]}" for k in ("tp", "ep", "etp", "pp", "attn_dp")
                    if par.get(k) is not None and (k == "tp" or par[k] != 1))


def _estimate_command(r: dict, batch: int, model: str | None = None) -> str:
    """The `estimate` command that times a fixed answer's pure decode step: its model, system, layout, batch, mean
    decode context, precisions and engine release (QA 2026-11-28: the hint left out --engine, and without it estimate
    answered on other kernel tables and another KV precision)."""
    lay = _layout_text(r)
    eng = f" --engine {r['engine']}@{r['engine_release']}" if r.get("engine") else ""
    sp = r.get("speculative") or {}
    # with MTP the pure step verifies K + 1 tokens a sequence; estimate's speculative row times it with the K drafts
    # added (its tokens per step over tokens/s per user)
    given = "" if sp.get("source") else f" --acceptance {sp.get('acceptance', 0):g}"  # else the model's own rate
    k = sp.get("draft_tokens", 0)
    mtp = (f" --mtp {k}{given}: its 'with {k} draft token{'s' if k != 1 else ''}' row times the step with the drafts "
           "added" if sp.get("used") else "")
    # the efficiency and the expert-load balancer the answer ran on (QA 2026-11-28: --ideal and --eplb off were
    # dropped, and the command timed 33 ms against the answer's 20 ms)
    ideal = " --ideal" if r.get("efficiency") == "ideal" else ""
    eplb = f" --eplb {r['eplb']}" if r.get("eplb") not in (None, "auto") else ""
    from shlex import quote

    return (f"estimate -m {quote(model or r['model'])} -H {r['hardware']} --layout {lay} --batch {batch} "
            f"--context {r['mean_decode_context']:.0f} -p {r['precision']} --kv-precision {r['kv_precision']}{eng}"
            f"{ideal}{eplb}{mtp}")

def _times(x) -> str:
    """A slowdown factor in words: '1.27x slower', or '1.16x faster' for a factor below 1 (QA 2026-11-28: a step that
    spilling made faster, 76.4 -> 65.9 ms, was printed '0.8624x slower')."""
    return f"{num(x)}x slower" if x >= 1 else f"{num(1 / x)}x faster"


def _fixed_command(r: dict, asked: dict) -> str:
    """The search answer's deployment as a fixed one: the `throughput --layout --concurrency` command that replays it,
    the question's own settings carried over (`asked`: its lengths as given, --ideal, --eplb, the engine's limits, the
    prefix-cache share and the speculation asked) and the speculation the answer chose where none was asked
    (QA 2026-11-28: DeepSeek-V3's answer with its MTP head read 1,462 tokens/s per GPU as a fixed deployment without
    --mtp, 2,287 with it; a second sweep found --ideal, --eplb, --acceptance, --speculative, --max-tokens,
    --max-seqs and length distributions dropped). The model is the one asked (`asked['model']`): a local config's
    path, not its id (QA: `-m my70b` for /path/to/my70b, which names no model or times a catalog one)."""
    import shlex

    lay = _layout_text(r)
    words = ["throughput", "-m", asked.get("model") or r["model"], "-H", r["hardware"], "--layout", lay,
             "--gpus", str(r["gpus"]), "--concurrency", str(round(r["concurrency"])),
             "--input-len", f"{asked['input_len']:g}"
             if isinstance(asked["input_len"], float) else str(asked["input_len"]), "--output-len",
             f"{asked['output_len']:g}" if isinstance(asked["output_len"], float) else str(asked["output_len"]),
             "-p", r["precision"], "--kv-precision", r["kv_precision"]]
    if asked.get("engine"):
        words += ["--engine", str(asked["engine"])]
    elif r.get("engine"):
        words += ["--engine", f"{r['engine']}@{r['engine_release']}"]
    if asked.get("ideal"):
        words.append("--ideal")
    if asked.get("eplb") not in (None, "auto"):
        words += ["--eplb", str(asked["eplb"])]
    for flag, key in (("--max-seqs", "max_seqs"), ("--max-tokens", "max_tokens")):
        if asked.get(key) is not None:
            words += [flag, str(asked[key])]
    if asked.get("cache_hit"):
        words += ["--cache-hit", f"{asked['cache_hit']:g}"]
    sp = r.get("speculative") or {}
    if sp.get("used"):  # the speculation asked, as asked; else the model's own heads the search chose
        if asked.get("speculative"):
            words += ["--speculative", str(asked["speculative"])]
        else:
            words += ["--mtp", str(asked.get("mtp") or sp["draft_tokens"])]
            if asked.get("acceptance") is not None:
                words += ["--acceptance", f"{asked['acceptance']:g}"]
    return shlex.join(words)


def _gpus_text(r: dict) -> str:
    """The GPUs row of a searched answer: the deployment's GPUs (a disaggregated one's two pools), and the scale-up
    domains one replica spans where it crosses the scale-out network."""
    text = num(r["gpus"])
    if r.get("prefill_gpus"):
        text += f" ({num(r['decode_gpus'])} decode + {num(r['prefill_gpus'])} prefill)"
    if r.get("replica_domains", 1) > 1:
        return text + (f"; one replica spans {r['replica_domains']} scale-up domains of {r['domain_chips']} "
                       "(scale-out network between)")
    if r.get("domains", 1) > 1:
        return text + f" on {r['domains']} scale-up domains of {r['domain_chips']}"
    return text


def register(app: typer.Typer) -> None:
    app.command("layout")(layout)
    app.command("throughput")(throughput)
    app.command("validate")(validate)
    app.command("calibrate")(calibrate)


def _resolve(model: str, hardware: str):
    from chalk.specs.catalog import load_model, resolve_hardware

    return load_model(model), resolve_hardware(hardware)


def layout(
    model: str = MODEL_OPT,
    hardware: str = HW_OPT,
    gpus: Optional[int] = typer.Option(None, "--gpus", "--chips", help="GPUs to lay out (default: the scale-up domain)."),
    precision: Optional[str] = PREC_OPT,
    kv_precision: str = KV_OPT,
    context: float = typer.Option(4096, "--context", "-c", help="Tokens of context per sequence."),
    ideal: bool = typer.Option(False, "--ideal", help="Peak rates: the pure roofline, no calibration."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
):
    """Parallel layouts with memory per GPU, the MoE rack layout, and the pipeline analysis."""
    from chalk.analyses.step.parallel import layout_report

    if gpus is not None and gpus < 1:
        fail(f"--gpus must be a positive whole number, got {gpus}")
    if context <= 0:
        fail(f"--context must be positive, got {context}")
    m, system = _resolve(model, hardware)
    r = layout_report(m, system, gpus, precision, kv_precision, context, ideal)
    if as_json:
        emit_json(r)
        return
    c = console()
    t = table(header(r["model"], system.chip.id, r["gpus"], "each below", r["precision"], r["kv_precision"], None,
                     r.get("efficiency"), f"context {num(r['context'])}",
                     f"{si(r['usable_hbm_bytes_per_gpu'], 'B')} usable per GPU", system=system.id),
              ["layout", "TP", "EP", "PP", "DP", "weights / GPU", "KV / sequence / GPU", "max sequences per replica",
               "serves"])
    for row in r["layouts"]:
        # 'yes' only where a sequence of this context fits beside the weights ('weights only': it said 'fits' at
        # 0 sequences; QA 2026-11-28)
        serves = ("yes" if row["max_sequences_per_replica"] >= 1 else "weights only") if row["fits_weights"] else "no"
        t.add_row(row["label"], str(row["tp"]), str(row["ep"]), str(row["pp"]), str(row["dp"]),
                  si(row["weight_bytes_per_gpu"], "B"), si(row["kv_bytes_per_sequence_per_gpu"], "B"),
                  num(row["max_sequences_per_replica"]), serves)
    c.print(t)
    moe = r["moe_rack_layout"]
    if moe.get("applies"):
        ins, sp = moe["inside"], moe["spilled"]
        t = table(f"MoE rack layout: EP inside one {moe['domain_chips']}-GPU scale-up domain vs spilled across "
                  f"two · {num(moe['batch_per_gpu'])} sequences per GPU at {num(moe['context'])} tokens",
                  ["", f"EP{moe['ep_inside_domain']} (inside)", f"EP{moe['ep_spilled']} (spilled)"])
        for label, key, fmt in (("step time", "stage_time_s", seconds), ("all-to-all", "alltoall_time_s", seconds),
                                ("GEMMs (weights)", "gemm_time_s", seconds),
                                ("attention (KV)", "attention_time_s", seconds),
                                ("weights / GPU", "weight_bytes_per_gpu", lambda v: si(v, "B")),
                                ("output tokens/s per GPU", "output_tokens_per_s_per_gpu", num)):
            t.add_row(label, fmt(ins[key]), fmt(sp[key]))
        c.print(t)
        c.print(f"scale-up {si(moe['scaleup_bytes_per_s_one_way'], 'B/s')} vs scale-out "
                f"{si(moe['scaleout_bytes_per_s_one_way'], 'B/s')} per GPU, both one way: "
                f"{num(moe['scaleout_slowdown'])}x slower off the rack; spilling makes the all-to-all "
                f"{_times(moe['alltoall_slowdown_when_spilled'])} and the step "
                f"{_times(moe['step_slowdown_when_spilled'])}.")
    else:
        c.print(f"[dim]MoE rack layout: {moe.get('reason')}[/dim]")
    pa = r["pipeline"]
    t = table(f"Pipeline parallelism · TP{pa['tp']} per stage · {num(pa['batch_per_stage'])} sequences per stage "
              f"at {num(pa['context'])} tokens · training with M = {pa['microbatches']} micro-batches",
              ["PP", "GPUs", "weights / GPU", "KV / GPU", "token latency", "latency penalty", "output tok/s/GPU",
               "training bubble", "interleaved x2"])
    for row in pa["rows"]:
        t.add_row(str(row["pp"]), str(row["gpus"]), si(row["weight_bytes_per_gpu"], "B"),
                  si(row["kv_bytes_per_gpu"], "B"), seconds(row["token_latency_s"]), pct(row["latency_penalty"]),
                  num(row["output_tokens_per_s_per_gpu"]), pct(row["training_bubble"]),
                  pct(row["training_bubble_interleaved_2"]))
    c.print(t)


def _mode(mode: str, disaggregated: bool, concurrency):
    """throughput's `disaggregated` argument from --mode and --disaggregated."""
    from chalk.errors import InputError

    if mode not in ("all", "aggregated", "disaggregated"):
        raise InputError(f"--mode must be all, aggregated or disaggregated, got {mode!r}")
    if disaggregated:
        if mode == "aggregated":
            raise InputError("--disaggregated contradicts --mode aggregated")
        return True
    if mode == "all":
        return False if concurrency is not None else "auto"
    return mode == "disaggregated"


def throughput(
    model: str = MODEL_OPT,
    hardware: str = HW_OPT,
    gpus: Optional[int] = GPUS_OPT,
    precision: Optional[str] = PREC_OPT,
    kv_precision: str = ENGINE_KV_OPT,
    input_len: str = typer.Option(..., "--input-len", callback=length("--input-len"),
                                  help=f"Prompt tokens per request: {LENGTH_FORMS}."),
    output_len: str = typer.Option(..., "--output-len", callback=length("--output-len"),
                                   help="Output tokens per request: as --input-len."),
    min_user_tps: Optional[float] = typer.Option(None, "--min-user-tps", help="Minimum output tokens/s per user "
                                                 "(default: none, and the answer is the most-throughput point)."),
    ttft_mean: Optional[str] = typer.Option(None, "--ttft-mean", callback=duration("--ttft-mean"),
                                            help="Target mean time to first token: seconds, or 500ms."),
    max_ttft_s: Optional[float] = typer.Option(None, "--max-ttft-s", hidden=True,
                                               help="Deprecated spelling of --ttft-mean (seconds)."),
    tpot_p99: Optional[str] = typer.Option(None, "--tpot-p99", callback=duration("--tpot-p99"),
                                           help="Target p99 time per output token: seconds, or 20ms (checked by "
                                           "replaying the chosen point)."),
    ttft_p99: Optional[str] = typer.Option(None, "--ttft-p99", callback=duration("--ttft-p99"),
                                           help="Target p99 time to first token: seconds, or 500ms."),
    arrivals: str = typer.Option("poisson", "--arrivals", help="How requests arrive when p99 targets are checked: "
                                 "poisson (default: production traffic, MLPerf's Server scenario; the answer is the "
                                 "highest rate meeting them) | closed (a benchmark client holding the chosen "
                                 "concurrency in flight)."),
    max_seqs: Optional[int] = typer.Option(None, "--max-seqs", help="Sequences per scheduler (the engine's "
                                           "max_num_seqs / max_running_requests / max_batch_size), over its profile."),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", help="Prompt tokens per step (the engine's "
                                             "chunked-prefill budget: max_num_batched_tokens), over its profile."),
    disaggregated: bool = typer.Option(False, "--disaggregated",
                                       help="Separate prefill and decode pools (--gpus sizes the decode pool); the "
                                       "same as --mode disaggregated."),
    mode: str = typer.Option("all", "--mode", help="all (default: search aggregated and disaggregated serving, "
                             "answer aggregated unless disaggregated serves 5% more per GPU) | aggregated | "
                             "disaggregated, as plan takes it. A fixed deployment (--concurrency) is aggregated unless "
                             "--disaggregated."),
    layout: Optional[str] = typer.Option(None, "--layout", help="One replica, e.g. tp=1,ep=8,pp=1,attn_dp=8 (etp=2: "
                                         "experts split 2 ways in each EP group): search only the batch (with "
                                         "--concurrency: that exact deployment)."),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", help="Requests in flight across the deployment "
                                              "(closed loop, as serving benchmarks run): needs --layout."),
    prefill_gpus: Optional[int] = typer.Option(None, "--prefill-gpus", help="With --disaggregated --concurrency: "
                                               "GPUs of the prefill pool (--gpus: the decode pool)."),
    prefill_layout: Optional[str] = typer.Option(None, "--prefill-layout", help="With --prefill-gpus: the layout of "
                                                 "the prefill pool's workers, e.g. tp=1,attn_dp=4,ep=4 (default: "
                                                 "--layout)."),
    mtp: Optional[int] = typer.Option(None, "--mtp", help="Draft tokens per step (speculative decoding / MTP)."),
    acceptance: Optional[float] = ACCEPTANCE_OPT,
    speculative: Optional[str] = typer.Option(None, "--speculative", help="METHOD,K,A, e.g. eagle,3,0.7 "
                                              "(same as --mtp K --acceptance A)."),
    engine: Optional[str] = typer.Option(None, "--engine", help="vllm | sglang | trtllm (@release): that engine's "
                                         "scheduler cap, KV memory fraction, prefill chunk and overhead (default: "
                                         "none)."),
    cache_hit: float = typer.Option(0.0, "--cache-hit", help="Fraction of prompt tokens served from the prefix "
                                    "cache: no prefill compute, KV still read."),
    pareto: bool = typer.Option(False, "--pareto", help="Also print the latency-cost frontier."),
    ideal: bool = typer.Option(False, "--ideal", help="Peak rates: the pure roofline, no calibration."),
    eplb: str = EPLB_OPT,
    usd_per_kwh: Optional[float] = USD_PER_KWH_OPT,
    pue: Optional[float] = PUE_OPT,
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    plot: Optional[str] = typer.Option(None, "--plot", callback=out_file("--plot", PLOT_FORMATS),
                                      help="Also write the pareto frontier to this .png/.svg."),
):
    """Best output tokens/s per GPU over layouts x batch that fit and meet the constraints; with --layout and
    --concurrency, what that exact deployment does."""
    from chalk.analyses.traffic.serving import label_rates, throughput as run

    spec = _speculation(speculation_for(mtp, acceptance, speculative, model=model), speculative, model)
    from chalk.analyses.economics.energy import energy_settings, serving_energy

    energy_settings(usd_per_kwh, pue)  # a bad price or PUE fails before the search
    if max_ttft_s is not None:  # checked before the deprecation note, so a bad value is one line, not two
        from chalk.specs.workload import positive

        max_ttft_s = positive("--max-ttft-s", max_ttft_s, scalar=True)
    max_ttft_s = deprecated("--max-ttft-s", "--ttft-mean (e.g. 2s)", max_ttft_s, ttft_mean)
    kw = dict(input_len=input_len, output_len=output_len, gpus=gpus,
              precision=precision, kv_precision=kv_precision, min_user_tps=min_user_tps, max_ttft_s=max_ttft_s,
              disaggregated=_mode(mode, disaggregated, concurrency), pareto=pareto, ideal=ideal, layout=layout, concurrency=concurrency,
              speculative=spec, engine=engine, cache_hit=cache_hit, prefill_gpus=prefill_gpus, eplb=eplb,
              tpot_p99_s=tpot_p99, ttft_p99_s=ttft_p99, max_seqs=max_seqs, max_tokens=max_tokens,
              prefill_layout=prefill_layout, arrivals=arrivals)
    if "," in hardware:
        from chalk.analyses.planning.compare import compare, hardware_list

        with busy(as_json, "searching layouts and batches on each chip"):
            rows = compare(lambda hardware: run(model, hardware, **kw), hardware_list(hardware))
        if as_json:
            emit_json({"compare": [{**(o["result"] or {}), "hardware": o["hardware"], "error": o["error"],
                                    "system": (o["result"] or {}).get("hardware")} for o in rows]})
            return
        t = table(f"{model} · {num(kw['input_len']) if isinstance(kw['input_len'], float) else input_len} in / "
                  f"{num(kw['output_len']) if isinstance(kw['output_len'], float) else output_len} out across chips",
                  ["hardware", "layout", "out tok/s/GPU", "per user", "TTFT", "$/M out"])
        for o in rows:
            r = o["result"]
            if r is None:
                t.add_row(o["hardware"], o["error"][:48], "-", "-", "-", "-")
                continue
            t.add_row(o["hardware"], r["layout"], num(r["output_tokens_per_s_per_gpu"]), num(r["user_tokens_per_s"]),
                      seconds(r["ttft_s"]), usd(r["cost_per_mtok_output_usd"]))
        console().print(t)
        return
    m, system = _resolve(model, hardware)
    with busy(as_json, "searching layouts and batches" if concurrency is None else "replaying the deployment"):
        r = run(m, system, **kw)
    if r.get("mode") != "fixed" and min_user_tps is None and tpot_p99 is None:
        r["objective"] = NO_FLOOR.format(user=num(r["user_tokens_per_s"]))
    label_rates(r)
    r["energy"] = serving_energy(r, system.chip, usd_per_kwh=usd_per_kwh, pue=pue).to_dict()
    if r.get("mode") == "aggregated":  # the answer as a fixed deployment: the question's own settings carried over
        asked = dict(model=model, input_len=input_len, output_len=output_len, ideal=ideal, eplb=eplb,
                     max_seqs=max_seqs, max_tokens=max_tokens, cache_hit=cache_hit, engine=engine, mtp=mtp,
                     acceptance=acceptance, speculative=speculative)
        r["fixed_command"] = _fixed_command(r, asked)
    if r.get("mode") != "fixed":
        write_plot("pareto", plot, model=model, hardware=hardware, chips=gpus, precision=precision,
                   kv_precision=kv_precision, ideal=ideal, input_len=r["input_len"], output_len=r["output_len"])
    if as_json:
        emit_json(r)
        return
    c = console()
    if r.get("mode") == "fixed":
        _print_fixed(c, r, system, model)
        return
    lo, hi = r["range"]["output_tokens_per_s_per_gpu"]
    t = table(header(r["model"], system.chip.id, r["gpus"], f"{r['layout']} ({r['mode']})", r["precision"],
                     r["kv_precision"], _engine(r), r["efficiency"],
                     f"{num(r['input_len'])} in / {num(r['output_len'])} out", system=system.id),
              ["quantity", "value"])
    par = r["parallelism"]
    rows = [("output throughput", f"{num(r['output_tokens_per_s_per_gpu'])} tokens/s per GPU "
                                  f"(range {num(lo)} - {num(hi)})"),
            ("input throughput", f"{num(r['input_tokens_per_s_per_gpu'])} tokens/s per GPU"),
            ("per user", rate(r["user_tokens_per_s"], "tokens/s", "user")),
            *((("per replica", rate(r["output_tokens_per_s_per_replica"], "output tokens/s", "replica",
                                    r["gpus_per_replica"])
                   + f"; {rate(r['output_tokens_per_s_per_fleet'], 'output tokens/s', 'fleet', r['gpus'])}"),)
              if "output_tokens_per_s_per_replica" in r else
              (("per fleet", rate(r["output_tokens_per_s_per_fleet"], "output tokens/s", "fleet", r["gpus"])
                + (f" ({r['decode_gpus']} decode + {r['prefill_gpus']} prefill GPUs)"
                   if r.get("decode_gpus") and r.get("prefill_gpus") else "")),)
              if r.get("output_tokens_per_s_per_fleet") is not None else ()),
            ("time per output token", seconds(r["tpot_s"])),
            ("time to first token", seconds(r["ttft_s"]) + (" (closed form: a lone prompt's prefill + the request "
                                                             "latency)" if str(r.get("latency_source", "")).startswith(
                                                                 "closed form") else "")),
            *((("p99 TPOT / TTFT", f"{seconds(r['tpot_p99_s'])} / {seconds(r['ttft_p99_s'])}: "
                + r["tail_latency_source"]),) if r.get("tail_latency_source") else ()),
            ("concurrency", f"{num(r['concurrency'])} requests in flight "
                            f"({num(r['batch_per_replica'] * par['dp'])} decoding)"
             + (f"; as a fixed deployment: {r['fixed_command']}" if r.get("fixed_command") else "")),
            ("GPUs", _gpus_text(r)),
            ("layout", f"{r['layout']} (TP {par['tp']}, EP {par['ep']}, PP {par['pp']}, DP {par['dp']}); "
                       f"overlap: {r['overlap']}"),
            ("memory per GPU", f"{si(r['weight_bytes_per_gpu'], 'B')} weights + {si(r['kv_bytes_per_gpu'], 'B')} KV"),
            ("cost, all GPU time on output", f"{usd(r['cost_per_mtok_output_usd'])} per M output tokens"),
            ("cost, split by phase", f"{usd(r['cost_per_mtok_output_decode_share_usd'])} per M output tokens "
                                     f"(decode share) + {usd(r['cost_per_mtok_input_prefill_share_usd'])} per M "
                                     "input tokens (prefill share)")]
    rows += energy_rows(r["energy"])
    sp = r.get("speculative")
    if sp:
        gain = f", {sp['gain_vs_plain']:.2f}x the best plain point" if sp["used"] and sp.get("gain_vs_plain") else ""
        rows.append(("speculative decoding", (f"used: {sp['draft_tokens']} draft token(s) at acceptance "
                                              f"{acceptance_text(sp['acceptance'], sp['acceptance_decay'])} "
                                              f"({sp['tokens_per_step']:.2f} tokens per step"
                                              f"{gain})" if sp["used"] else
                                              f"considered ({sp['draft_tokens']} draft token(s) at acceptance "
                                              f"{acceptance_text(sp['acceptance'], sp['acceptance_decay'])}), "
                                              "not used: no gain at this point")
                     + f"; {sp['source'].split(';')[0]}"
                     + (f"; acceptance: {acceptance_source(sp['source'])}" if "acceptance: " in sp["source"] else "")))
    if r.get("kernels"):
        rows.append(("kernel tables", r["kernels"] + (f"; {r['engine']} {r['engine_release']} defaults"
                                                     if r.get("engine") else "")))
    if "prefill" in r:
        p = r["prefill"]
        rows.append(("prefill pool", f"{p['layout']}: {num(p['input_tokens_per_s_per_gpu'])} input tokens/s per "
                                     f"GPU, {num(p['gpus_per_decode_gpu'])} prefill GPUs per decode GPU needed"
                                     + (f" ({num(p['gpus_per_decode_gpu_deployed'])} deployed, whole workers)"
                                        if p.get("gpus_per_decode_gpu_deployed") is not None else "")))
    for k, v in rows:
        t.add_row(k, v)
    c.print(t)
    if r.get("objective"):
        c.print(r["objective"])
    c.print(modes_table(r["modes"]))
    if pareto:
        t = table("latency-cost frontier (tok/s per user; output tok/s per GPU; $ per M output tokens, all GPU "
                  "time)", ["tok/s/user", "out tok/s/GPU", "$/M out", "TTFT", "concurrency", "layout"])
        for f in r["frontier"]:
            t.add_row(num(f["user_tokens_per_s"]), num(f["output_tokens_per_s_per_gpu"]),
                      usd(f["cost_per_mtok_output_usd"]), seconds(f["ttft_s"]), num(f["concurrency"]), f["layout"])
        c.print(t)
    for n in r["notes"]:
        c.print(f"[dim]note: {n}[/dim]")


_progress = progress


def _engine(r: dict) -> str | None:
    """'vllm 0.11.x' when an engine profile sized the answer, else None (the header then says so)."""
    return f"{r['engine']} {r.get('engine_release') or ''}".strip() if r.get("engine") else None


#: What throughput says when no per-user floor was given (also in its JSON, as "objective").
NO_FLOOR = ("answered: the most output tokens/s per GPU, with no per-user speed floor ({user} tokens/s per user); "
            "give --min-user-tps N (or --tpot-p99) for the best point at which every user gets at least N tokens/s")


def modes_table(modes: list):
    """The fast and slow modes as a table that reads at 80 columns: short headers, and speed-ups that land on the
    same point (0.5x of the most-throughput point is that point again) merged into one row."""
    t = table("fast and slow modes: the price multiple of a per-user speed-up over this point ($/M out: all GPU "
              "time on output tokens)", ["speed-up", "tok/s/user", "price x", "$/M out", "layout"])
    rows: list = []
    for mo in modes:
        key = (mo["user_tokens_per_s"], mo["price_multiple"], mo.get("layout", ""))
        if rows and rows[-1][0] == key:
            rows[-1][1].append(mo["speedup"])
            continue
        rows.append((key, [mo["speedup"]], mo))
    for _, ups, mo in rows:
        t.add_row(", ".join(f"{u:g}x" for u in ups), num(mo["user_tokens_per_s"]),
                  "unreachable" if mo["price_multiple"] is None else f"{mo['price_multiple']:.2f}x",
                  usd(mo.get("cost_per_mtok_output_usd")), mo.get("layout", ""))
    return t


WORKERS_OPT = typer.Option(None, "--workers", help="With --cv (calibrate: always): processes answering the "
                           "validation rows (default: the usable CPUs; 1: this process only).")


def calibrate(
    rounds: int = typer.Option(2, "--rounds", help="Coordinate-descent rounds over the parameter grid."),
    write: Optional[str] = typer.Option(None, "--write", help="Write the fit to this YAML (the package reads "
                                        "src/chalk/catalog/calibration.yaml)."),
    range_only: bool = typer.Option(False, "--range-only", help="Keep the shipped fit; size only its range from "
                                    "leave-one-family-out cross-validation."),
    workers: Optional[int] = WORKERS_OPT,
    ray: bool = typer.Option(False, "--ray", help="Answer the rows on Ray actors: a local Ray (or $RAY_ADDRESS); the "
                             "same fit and range. Needs pip install 'chalk\\[ray]'."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="The Ray cluster to answer the rows on."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
):
    """Refit chalk's few global efficiency parameters on the validation set, families weighed equally, and size the
    range answers state from leave-one-family-out cross-validation (minutes)."""
    import yaml

    from chalk.analyses.fidelity import calibrate as C
    from chalk.analyses.step.calibration import CALIBRATION
    from chalk.specs.validate import output_path
    from chalk.specs.workload import count

    rounds = count("rounds", rounds, C.MAX_ROUNDS)
    if workers is not None:
        workers = count("workers", workers, 64)
    if write is not None:
        output_path(write, "--write", (".yaml", ".yml"))
    ex = None
    if ray or ray_address is not None:  # Ray actors answer the row shards (chalk.executor); ray shuts down at exit
        from chalk.faces.cli_portfolio import executor_for

        ex = workers = executor_for(ray, ray_address, workers)
    if range_only:
        cal, obj = CALIBRATION, None
    else:
        with _progress(as_json, "fit") as tick:
            cal, obj = C.fit(rounds=rounds, workers=workers, progress=tick)
    with _progress(as_json, "range (cross-validation)") as tick:
        cv = C.cross_validate(start=cal, workers=workers, progress=tick)
    if ex is not None:
        ex.close()
    lo, hi = cv["cv_range"]
    old = None
    if range_only and write:  # the fit as it was: an existing file keeps its record, only the range is new
        import os

        if os.path.isfile(write) and os.path.getsize(write):
            from chalk.specs.catalog import read_yaml

            old = read_yaml(write, f"--write {write}")
    out = C.record(cal, obj, cv, old=old)
    if write:
        from chalk.specs.catalog import in_catalog, write_compiled_catalog
        from chalk.specs.files import atomic_write

        atomic_write(write, C.dump_record(out) if "parameters" in out else yaml.safe_dump(out, sort_keys=False),
                     "--write")

        if in_catalog(write):  # the package's own calibration.yaml: its compiled entry follows it
            write_compiled_catalog()
    if as_json:
        emit_json(out)
        return
    title = "range only" if obj is None else f"objective {obj:.3f}"
    t = table(f"calibration · {len(C._rows())} rows · {title}", ["parameter", "value", "on the grid's edge"])
    for k, v in C.recorded(out).items():
        p = (out.get("parameters") or {}).get(k) or {}
        edge = p.get("edge") or (f"one step from {p['near_edge']}" if p.get("near_edge") else "")
        t.add_row(k, str(v), edge)
    console().print(t)
    console().print(f"range: x{math.exp(lo):.2f} to x{math.exp(hi):.2f} of each estimate, holding "
                    f"{pct(cv['cv_range_coverage'])} of held-out measured values over {cv['n_families']} families")


def _speculation(drafts, speculative, model=None):
    """--speculative METHOD,K,A as the search's Speculation; METHOD one chalk knows (`launch.SPECULATION_METHODS`),
    'mtp' only for a model that ships draft layers (QA 2026-11-28: 'foo,2,0.9', and 'mtp' on Llama-3.1-8B, were
    taken and used)."""
    from chalk.analyses.traffic.serving import Speculation
    from chalk.errors import InputError
    from chalk.specs.catalog import as_model
    from chalk.specs.launch import SPECULATION_METHODS

    if speculative is not None:
        parts = speculative.split(",")
        if len(parts) != 3:
            raise InputError(f"--speculative must be METHOD,K,A (e.g. eagle,3,0.7), got {speculative!r}")
        method = parts[0].strip().lower()
        if method not in SPECULATION_METHODS:
            raise InputError(f"--speculative METHOD must be one of {', '.join(SPECULATION_METHODS)}, got "
                             f"{parts[0].strip()!r}")
        if method == "mtp" and model is not None and not as_model(model).mtp_layers:
            raise InputError(f"--speculative mtp needs the model's own draft layers, and {as_model(model).id} ships "
                             "none (num_nextn_predict_layers / mtp_num_hidden_layers in its config): give eagle,K,A "
                             "for a separate draft head")
        try:
            k, a = float(parts[1]), float(parts[2])
        except ValueError:
            raise InputError(f"--speculative must be METHOD,K,A (e.g. eagle,3,0.7), got {speculative!r}") from None
        if k != int(k):
            raise InputError(f"draft tokens must be a whole number, got {parts[1]!r}")
        return Speculation(int(k), a, draft_layers=1.0)
    return "auto" if drafts is None else drafts  # "auto": the model's own MTP draft layers where its config ships them


def _print_fixed(c, r, system, model: str | None = None):
    n = r.get("gpus") or r.get("decode_gpus")
    t = table(header(r["model"], system.chip.id, n, f"{r['layout']} x {r['replicas']} replicas", r.get("precision"),
                     r.get("kv_precision"), _engine(r), r["efficiency"],
                     f"{r['concurrency']} requests in flight", f"{num(r['input_len'])} in / {num(r['output_len'])} out",
                     system=system.id),
              ["quantity", "value"])
    lo, hi = r["range"]["output_tokens_per_s_per_gpu"]
    rows = [("output throughput", f"{num(r['output_tokens_per_s_per_gpu'])} tokens/s per GPU "
                                  f"(range {num(lo)} - {num(hi)})"),
            ("input throughput", f"{num(r['input_tokens_per_s_per_gpu'])} tokens/s per GPU"),
            ("time per output token mean/p50/p99",
             f"{seconds(r['tpot_s'])} / {seconds(r['tpot_p50_s'])} / {seconds(r['tpot_p99_s'])}"),
            ("time to first token mean/p50/p99",
             f"{seconds(r['ttft_s'])} / {seconds(r['ttft_p50_s'])} / {seconds(r['ttft_p99_s'])}"),
            ("latencies from", r["latency_source"] + (" (its requests are alike: p50 = mean)"
                                                      if r["latency_source"].startswith("closed form") else "")),
            ("per user", rate(r["user_tokens_per_s"], "tokens/s", "user")),
            *((("per replica", rate(r["output_tokens_per_s_per_replica"], "output tokens/s", "replica",
                                    r["gpus_per_replica"])
                   + f"; {rate(r['output_tokens_per_s_per_fleet'], 'output tokens/s', 'fleet', r['gpus'])}"),)
              if "output_tokens_per_s_per_replica" in r else
              (("per fleet", rate(r["output_tokens_per_s_per_fleet"], "output tokens/s", "fleet", r["gpus"])
                + (f" ({r['decode_gpus']} decode + {r['prefill_gpus']} prefill GPUs)"
                   if r.get("decode_gpus") and r.get("prefill_gpus") else "")),)
              if r.get("output_tokens_per_s_per_fleet") is not None else ()),
            ("in the engine per replica", f"{num(r['decoding_per_replica'])} of {num(r['concurrency_per_replica'])} "
                                          f"in flight (cap {num(r['batch_cap_per_replica'])})"
             + (f"; {num(r['mean_step']['decode_sequences'])} decoding in a mean step, the rest prefilling"
                if (r.get("mean_step") or {}).get("source", "").startswith("replayed") else "")),
            ("cost", f"{usd(r['cost_per_mtok_output_usd'])} per M output tokens (all GPU time)")]
    ms = r.get("mean_step")
    if ms:  # what TPOT is made of, reconciled with `estimate` at the same batch
        top = sorted(ms["mean_mix_ops_s"].items(), key=lambda kv: -kv[1])[:4]
        rows.insert(-1, ("mean step per replica",
                         f"{seconds(ms['mean_step_s'])}: {num(ms['decode_sequences'])} decode + "
                         f"{num(ms['prefill_tokens_per_step'])} prompt tokens per step on average; a pure decode step "
                         f"{seconds(ms['pure_decode_step_s'])} "
                         f"({_estimate_command(r, max(round(ms['decode_sequences']), 1), model)}); at the mean mix "
                         + ", ".join(f"{k} {seconds(v)}" for k, v in top)))
    if r.get("kernels"):
        rows.append(("kernel tables", r["kernels"] + (f"; {r['engine']} {r['engine_release']} defaults"
                                                     if r.get("engine") else "")))
    if r.get("disaggregated"):
        pool = r["prefill_pool_requests_per_s"]
        rows.insert(0, ("GPUs", f"{num(r['decode_gpus'])} decode + {num(r['prefill_gpus'])} prefill "
                                + (f"on {r['prefill_layout']} " if r.get("prefill_layout") else "")
                                + f"(prefill pool admits {num(pool)} requests/s)"))
    if r.get("speculative"):
        sp = r["speculative"]
        drafts = "draft" if sp["draft_tokens"] == 1 else "drafts"
        rows.append(("speculative decoding", f"{sp['draft_tokens']} {drafts} at acceptance "
                                             f"{acceptance_text(sp['acceptance'], sp['acceptance_decay'])}: "
                                             f"{num(sp['tokens_per_step'])} tokens per step"
                                             + f" (acceptance: {acceptance_source(sp.get('source'))})"))
    for k, v in rows:
        t.add_row(k, v)
    c.print(t)
    for n in r["notes"]:
        c.print(f"[dim]note: {n}[/dim]")


def validate(
    ideal: bool = typer.Option(False, "--ideal", help="Validate the pure roofline instead."),
    cv: bool = typer.Option(False, "--cv", help="Leave-one-family-out cross-validation: each source family "
                            "predicted by a fit that never saw it (a minute or more)."),
    workers: Optional[int] = WORKERS_OPT,
    ray: bool = typer.Option(False, "--ray", help="With --cv: answer the rows on Ray actors, a local Ray (or "
                             "$RAY_ADDRESS); the same figures. Needs pip install 'chalk\\[ray]'."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="With --cv: the Ray cluster to use."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
):
    """Predicted vs measured for every row of chalk's validation set, with the median and p90 error."""
    from chalk.analyses.fidelity.validate import validate as run

    if not cv and (workers is not None or ray or ray_address is not None):  # never dropped in silence
        from chalk.errors import InputError

        raise InputError("--workers, --ray and --ray-address split --cv's fits: give --cv too")
    if cv:
        from chalk.analyses.fidelity.calibrate import cross_validate
        from chalk.specs.workload import count

        if workers is not None:
            workers = count("workers", workers, 64)
        with _progress(as_json, "cross-validation") as tick:
            if ray or ray_address is not None:  # Ray actors answer the row shards (chalk.executor)
                from chalk.faces.cli_portfolio import executor_for

                ex = executor_for(ray, ray_address, workers)
                try:
                    r = cross_validate(workers=ex, progress=tick)
                finally:
                    ex.close()
            else:
                r = cross_validate(workers=workers, progress=tick)
        if as_json:
            emit_json(r)
            return
        t = table(f"leave-one-family-out cross-validation · {r['n']} rows (throughput and TPOT) · "
                  f"{r['n_families']} families, each weighing the same",
                  ["held-out family", "rows", "median |error|", "p90 |error|", "median error", "in range"])
        for g, v in r["families"].items():
            t.add_row(g, num(v["n"]), pct(v["median_abs_error"]), pct(v["p90_abs_error"]),
                      pct(v["median_signed_error"]), pct(v["range_coverage"]))
        for g in ("dense", "moe"):
            v = r["groups"][g]
            t.add_row(f"({g}, all families)", num(v["n"]), pct(v["median_abs_error"]), pct(v["p90_abs_error"]),
                      pct(v["median_signed_error"]), "")
        c = console()
        c.print(t)
        lo, hi = r["cv_range"]
        ins = r["in_sample"]
        c.print(f"held out, families equal: median |error| {pct(r['cv_median_abs_error'])}, p90 "
                f"{pct(r['cv_p90_abs_error'])}; in-sample {pct(ins['median_abs_error'])} / "
                f"{pct(ins['p90_abs_error'])}. Range x{math.exp(lo):.2f} to x{math.exp(hi):.2f} holds "
                f"{pct(r['cv_range_coverage'])} of held-out measured values (target 80%). TTFT rows (their own "
                f"latency term, held out the same way): median {pct(r['groups']['ttft']['median_abs_error'])}, "
                f"p90 {pct(r['groups']['ttft']['p90_abs_error'])}")
        return

    with busy(as_json, "predicting every validation row"):
        r = run(ideal=ideal)
    if as_json:
        emit_json(r)
        return
    t = table(f"validation · {r['n']} measured rows · {r['efficiency']}",
              ["id", "family / source group", "engine as run -> profile answering", "model", "hardware", "metric",
               "measured", "predicted", "error"])
    for o in r["rows"]:
        # the engine and release the source states, then the profile chalk answered with (QA 2026-11-28: NIM and
        # LMDeploy rows showed no version, and the newest profile's release was not named)
        ran = " ".join(x for x in (o.get("engine"), o.get("engine_version")) if x) or "not stated"
        eng = f"{ran} -> {o['engine_profile_release']}" if o.get("engine_profile_release") else \
            f"{ran} -> {'no profile' if not r.get('ideal') else 'ideal'}: chalk's defaults"
        t.add_row(o["id"], f"{o['family']} / {o['group']}", eng, o["model"], f"{num(o['gpus'])} x {o['hardware']}",
                  o["metric"].replace("_per_s_per_gpu", "/s/GPU"), num(o["measured"]), num(o["predicted"]),
                  "failed: " + o["error_note"] if o["error"] is None else f"{100 * o['error']:+.0f}%")
    c = console()
    c.print(t)
    ft = table("by source family (throughput and TPOT rows)", ["family", "rows", "median |error|", "p90 |error|",
                                                                "median error"])
    for f, v in r["families"].items():
        ft.add_row(f, num(v["n"]), pct(v["median_abs_error"]), pct(v["p90_abs_error"]), pct(v["median_signed_error"]))
    c.print(ft)
    gt = table("by group (TTFT rows are their own groups)", ["group", "rows", "median |error|", "p90 |error|",
                                                             "families equal"])
    for g, v in r["groups"].items():
        gt.add_row(g, num(v["n"]), pct(v["median_abs_error"]), pct(v["p90_abs_error"]),
                   pct(v["family_weighted_median_abs_error"]))
    c.print(gt)
    c.print(f"over the {num(r['n_headline'])} throughput and TPOT rows: "
            f"median |error| {pct(r['median_abs_error'])} (bound {pct(r['median_error_bound'])}; families weighing "
            f"the same {pct(r['family_weighted_median_abs_error'])}), "
            f"p90 |error| {pct(r['p90_abs_error'])}, median signed error {pct(r['median_signed_error'])}; "
            f"residual log(measured/predicted) p10 {r['residual_p10']:+.2f}, p90 {r['residual_p90']:+.2f}")
