"""`chalk simulate`: requests served by one replica, the lecture's train or continuous batching."""

from __future__ import annotations

from enum import Enum
from typing import Optional

import typer

from chalk.errors import InputError
from chalk.faces.cli_common import (HW_OPT, LENGTH_FORMS, MODEL_OPT, PLOT_FORMATS, busy, console, deprecated, duration,
                                    emit_json, length, num, out_file, pct, seconds, si, table, wrote)
from chalk.faces.fmt import header, rate as per


class Scheduler(str, Enum):
    train = "train"
    continuous = "continuous"



def _memory(requests: int) -> dict:
    """The process's peak resident memory so far (issue 23: a streamed run of 1e8 requests says what it held), and
    that over the requests replayed; None where the platform does not report it. Linux: /proc/self/status VmHWM,
    this process image's own peak (getrusage's ru_maxrss keeps the parent's at exec: a run started from a 1 GB
    test worker said 1.07 GB); elsewhere ru_maxrss."""
    import sys

    peak = None
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    peak = float(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    if peak is None:
        try:
            import resource
        except ImportError:  # not POSIX
            return {"peak_rss_bytes": None, "bytes_per_request": None}
        peak = float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * (1 if sys.platform == "darwin" else 1024)
    return {"peak_rss_bytes": peak, "bytes_per_request": peak / max(int(requests), 1)}

def register(app: typer.Typer) -> None:
    @app.command()
    def simulate(
        model: str = MODEL_OPT,
        hardware: str = HW_OPT,
        chips: Optional[int] = typer.Option(None, "--gpus", "--chips", help="GPUs the layout search may use "
                                            "(default: the system's); not used with --layout."),
        precision: Optional[str] = typer.Option(None, "--precision", "-p", help="Weights/compute precision "
                                                "(default: the checkpoint's)."),
        kv_precision: str = typer.Option("auto", "--kv-precision", help="KV cache precision; 'auto' = the "
                                         "engine's default with --engine (vLLM, SGLang: bf16; TensorRT-LLM: the "
                                         "checkpoint's), else fp8 when weights run at 8 bits or fewer, else bf16."),
        ideal: bool = typer.Option(False, "--ideal", help="Peak rates: the pure roofline, no calibration."),
        scheduler: Scheduler = typer.Option(Scheduler.continuous, "--scheduler",
                                            help="'train': a batch departs every --period; 'continuous': "
                                            "requests join and leave the batch at every step."),
        rate: Optional[float] = typer.Option(None, "--rate", help="Poisson arrival rate at this replica, requests/s "
                                             "(default 100; a --trace brings its own arrival times: --speedup)."),
        requests: Optional[int] = typer.Option(None, "--requests", "-n", help="Number of requests (default 10,000; "
                                               "with --trace: its first N, default all)."),
        input_len: Optional[str] = typer.Option(None, "--input-len", callback=length("--input-len"),
                                                help=f"Prompt tokens per request: {LENGTH_FORMS} (default 512; a "
                                                "--trace brings its own)."),
        output_len: Optional[str] = typer.Option(None, "--output-len", callback=length("--output-len"),
                                                 help="Output tokens per request: as --input-len (default 128)."),
        trace: Optional[str] = typer.Option(None, "--trace", help="Request trace: chalk CSV (arrival_s,input_len,"
                                            "output_len: a set of requests, rows in any order), Azure LLM trace "
                                            "CSV or Mooncake JSONL (logs: timestamps in order; auto-detected)."),
        speedup: float = typer.Option(1.0, "--speedup", help="Replay a trace this many times faster (rate x X)."),
        prefix_cache: bool = typer.Option(True, "--prefix-cache/--no-prefix-cache",
                                          help="Replay a trace's prefix-block ids (Mooncake) through an LRU cache "
                                          "of the replica's KV memory, and skip prefill of the hits."),
        period: Optional[str] = typer.Option(None, "--period", callback=duration("--period"),
                                             help="Train scheduler: time between departures, seconds or with a "
                                             "unit (default 20ms)."),
        period_ms: Optional[float] = typer.Option(None, "--period-ms", hidden=True,
                                                  help="Deprecated spelling of --period, in ms."),
        max_batch: Optional[int] = typer.Option(None, "--max-batch", help="Sequences per step (default: the "
                                                "engine's scheduler cap and KV room, as throughput replays it)."),
        kv_capacity_tokens: Optional[float] = typer.Option(None, "--kv-capacity-tokens",
                                                           help="KV cache capacity in tokens (default: what "
                                                           "--max-batch's default leaves room for)."),
        prefill_chunk: Optional[int] = typer.Option(None, "--prefill-chunk",
                                                    help="Max prompt tokens per step (default: the engine's "
                                                    "chunked-prefill budget)."),
        seed: int = typer.Option(0, "--seed", help="Seed of the arrivals and lengths."),
        engine: Optional[str] = typer.Option(None, "--engine", help="vllm | sglang | trtllm (@release): that "
                                             "engine's scheduler cap, KV memory fraction, prefill chunk and overhead "
                                             "(default: none), as throughput --engine."),
        layout: Optional[str] = typer.Option(None, "--layout", help="One replica, e.g. tp=8 (default: the layout "
                                             "throughput picks for these lengths on --gpus)."),
        concurrency: Optional[int] = typer.Option(None, "--concurrency", help="Closed loop: this many requests in "
                                                  "flight (as serving benchmarks run)."),
        client_latency: Optional[str] = typer.Option(None, "--client-latency", callback=duration("--client-latency"),
                                                     help="Time each request spends outside the engine's steps "
                                                       "(default: the calibrated request latency, as throughput "
                                                       "uses): a closed loop holds the seat; TTFT includes it."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON."),
        plot: Optional[str] = typer.Option(None, "--plot", callback=out_file("--plot", PLOT_FORMATS),
                                            help="Draw the simulated run to this .png/.svg."),
    ):
        """Simulate requests on one replica; TTFT, time per output token and latency percentiles."""
        from chalk.analyses.traffic import simulate as sim
        from chalk.analyses.traffic.simulate_run import simulate_requests
        from chalk.specs.workload import positive

        # checked as --period is (a NaN is one line), then against the scheduler, before any deprecation note
        ms = None if period_ms is None else positive("--period-ms", period_ms, scalar=True) / 1e3
        if (period is not None or ms is not None) and scheduler is not Scheduler.train:
            raise InputError("--period is the train scheduler's time between departures: give it with --scheduler "
                             "train (the continuous scheduler takes a step as soon as the last one ends)")
        period_s = period if ms is None else deprecated("--period-ms", "--period (e.g. 20ms)", ms, None)
        if rate is not None and trace is not None:
            raise InputError("--rate sets a Poisson rate, but a --trace brings its own arrival times: give "
                             "--speedup X to replay it X times faster")
        if trace is not None and (input_len is not None or output_len is not None):
            raise InputError("a --trace brings each request's own lengths: drop --input-len / --output-len")
        if concurrency is not None and rate is not None:
            raise InputError("--concurrency runs a closed loop (a request sent as each one finishes): --rate is an "
                             "open loop's Poisson rate; give one of the two")
        # (a rate or lengths not given stay None: the library's defaults, 100/s, 512 and 128, apply)

        with busy(as_json, "simulating the requests"):
            run = simulate_requests(model, hardware, rate=rate, requests=requests, input_len=input_len,
                                    output_len=output_len, trace=trace, speedup=speedup, layout=layout, gpus=chips,
                                    concurrency=concurrency, max_batch=max_batch,
                                    kv_capacity_tokens=kv_capacity_tokens, prefill_chunk=prefill_chunk,
                                    precision=precision, kv_precision=kv_precision, ideal=ideal, seed=seed,
                                    client_latency=client_latency, scheduler=scheduler.value,
                                    prefix_cache=prefix_cache, engine=engine,
                                    **({} if period_s is None else {"period_s": period_s}))
        r, st = run.result, run.setup
        over, gap = st["overload"], st["steady_state_gap"]
        if plot:
            from chalk.faces.plots_simulate import plot_simulation

            wrote(plot_simulation(r, plot, title=f"{scheduler.value} scheduler: {st['model']} on {st['layout']} "
                                                 f"of {st['chip']}"))
        if as_json:
            emit_json({**run.to_dict(), "process_memory": _memory(r.n_requests)})
            return
        s = r.summary()
        source = f"trace {st['trace']['path']} ({st['trace']['format']})" if st["trace"] else \
            (f"closed loop of {concurrency}" if concurrency is not None
             else f"Poisson {num(100.0 if rate is None else rate)}/s")
        g = st["replica_gpus"]
        t = table(header(st["model"], st["chip"], g, f"{st['layout']} (one replica)", st["precision"],
                         st["kv_precision"], st["engine"] and f"{st['engine']} {st['engine_release']}",
                         "ideal" if ideal else "calibrated",
                         f"{scheduler.value} scheduler", f"{r.n_requests:,} requests ({source})",
                         system=st["hardware"]),
                  ["quantity", "value"])
        for label, key, fmt in (("TTFT p50 / p90 / p99", "ttft", seconds), ("time per output token p50 / p90 / p99",
                                                                            "tpot", seconds),
                                ("end-to-end p50 / p90 / p99", "e2e", seconds)):
            t.add_row(label, " / ".join(fmt(s.get(f"{key}_p{q}_s")) for q in (50, 90, 99)))
        for what, key in (("output", "output_tokens_per_s"), ("input", "input_tokens_per_s")):
            v = s.get(key)
            # a window no request finished in measures no rate (QA 2026-11-28: '0 tokens/s' with 2 in flight)
            t.add_row(f"{what} throughput", "none measured: no request finished inside the window (raise -n)"
                      if st.get("shorter_than_a_request") else per(v, "tokens/s", "replica", g)
                      + (f" = {per(v / g, 'tokens/s', 'gpu')}" if v is not None else ""))
        t.add_row("mean batch", f"{num(s.get('mean_batch'))} sequences per step (per replica)")
        if s.get("mean_in_flight") is not None:
            t.add_row("requests in flight (mean)", f"{num(s['mean_in_flight'])} per replica (sent, not finished: "
                      f"{num(s.get('mean_concurrency'))} in the engine)")
        if st["prefix_cache"] is not None:
            pc = st["prefix_cache"]
            t.add_row("prefix-cache hit rate", f"{pct(pc['hit_rate'])} of prompt tokens ({num(pc['capacity_blocks'])} "
                      f"blocks of {pc['block_tokens']} tokens)")
        elif st.get("trace"):  # said, not left out (QA 2026-11-28: an Azure trace's run showed no row at all)
            t.add_row("prefix-cache hit rate", "off (--no-prefix-cache): every prompt token is prefilled"
                      if st["trace"].get("prefix_blocks") else f"n/a: the {st['trace']['format']} trace has no "
                      "prefix-block ids, so no hits are computed (every prompt token is prefilled)")
        if st["client_latency_s"]:
            t.add_row("client latency per request", f"{seconds(st['client_latency_s'])} (outside the engine; in "
                      "TTFT" + ("; seat held)" if concurrency is not None else ")"))
        if st.get("kernels"):
            t.add_row("kernel tables", st["kernels"])
        t.add_row("utilisation (busy fraction)", pct(s.get("utilisation")))
        t.add_row("steps / simulated time", f"{num(s.get('n_steps'))} / {seconds(s.get('simulated_time_s'))}")
        mem = _memory(r.n_requests)
        if mem["peak_rss_bytes"] is not None:
            t.add_row("memory (this process)", f"peak RSS {si(mem['peak_rss_bytes'], 'B')} for {r.n_requests:,} "
                      f"requests ({num(mem['bytes_per_request'])} bytes per request replayed, the interpreter and "
                      "catalog included)")
        w = r.latency_window
        if w:
            steady = {"steady": "steady state",
                      "overloaded": "window (no steady state: the queue grows, see the warning)"}.get(
                w["kind"], "window (not a steady state, see the warning)")
            t.add_row("measured window", (f"{steady}: requests {w['first_request']:,} to {w['last_request']:,} "
                                          f"({w['requests']:,}; the first {w['warmup_requests']:,} and last "
                                          f"{w['cooldown_requests']:,} left out)") if w["kind"] in
                      ("steady", "overloaded", "not steady") else
                      f"the whole run ({w['requests']:,} requests, cold start and ramp-down included)")
        console().print(t)
        for note in run.notes:
            console().print(f"[dim]note: {note}[/dim]")
        if st.get("shorter_than_a_request"):
            console().print(
                f"[bold]warning: no request finished inside the measured window[/bold] "
                f"({seconds((w or {}).get('end_s', 0.0) - (w or {}).get('start_s', 0.0))}) while "
                f"{num(s['mean_in_flight'])} were in flight: the run is "
                f"shorter than a request's life (end-to-end p50 {seconds(r.e2e_p50_s)}), so its rates are not a "
                "steady state's; raise -n.")
        elif not over and gap is not None and abs(gap) > sim.STEADY_GAP:
            console().print(
                f"[bold]warning: not a steady state[/bold]: {num(s['mean_in_flight'])} requests in flight against "
                f"{num(s['requests_per_s'] * s['mean_e2e_s'])} = requests/s x mean end-to-end ({gap:+.0%}): the queue "
                "builds and drains within the run, so its latencies describe this run, not a steady load. Lower "
                + ("--speedup" if trace else "--rate") + " or add replicas for one.")
        if over:
            console().print(
                f"[bold]warning: arrivals exceed capacity[/bold]: {num(over['offered_requests_per_s'])} requests/s "
                f"offered, {num(over['served_requests_per_s'])} served; the queue grows through the run (median wait "
                f"{seconds(over['median_wait_first_fifth_s'])} for the first fifth of arrivals, "
                f"{seconds(over['median_wait_last_fifth_s'])} for the last), so the latencies above measure the run's "
                f"length, not a steady state. Lower {'--speedup' if trace else '--rate'}, raise --max-batch or add "
                "replicas.")
