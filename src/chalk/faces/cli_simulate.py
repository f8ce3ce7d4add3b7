"""`chalk simulate`: requests served by one replica, the lecture's train or continuous batching."""

from __future__ import annotations

from enum import Enum
from typing import Optional

import typer

from chalk.faces.cli_common import PLOT_FORMATS, console, emit_json, num, out_file, pct, seconds, table, wrote


class Scheduler(str, Enum):
    train = "train"
    continuous = "continuous"


def register(app: typer.Typer) -> None:
    @app.command()
    def simulate(
        model: str = typer.Option(..., "--model", "-m", help="Catalog id, config.json or folder."),
        hardware: str = typer.Option(..., "--hardware", "-H", help="Chip, system or YAML path."),
        chips: Optional[int] = typer.Option(None, "--gpus", "--chips"),
        precision: Optional[str] = typer.Option(None, "--precision", "-p"),
        kv_precision: str = typer.Option("auto", "--kv-precision"),
        ideal: bool = typer.Option(False, "--ideal", help="Pure roofline step times."),
        scheduler: Scheduler = typer.Option(Scheduler.continuous, "--scheduler",
                                            help="'train': a batch departs every --period-ms; 'continuous'."),
        rate: float = typer.Option(100.0, "--rate", help="Poisson arrival rate, requests/s."),
        requests: int = typer.Option(10_000, "--requests", "-n", help="Number of requests."),
        input_len: int = typer.Option(512, "--input-len", help="Prompt tokens per request."),
        output_len: int = typer.Option(128, "--output-len", help="Output tokens per request."),
        trace: Optional[str] = typer.Option(None, "--trace", help="CSV with arrival_s,input_len,output_len."),
        period_ms: float = typer.Option(20.0, "--period-ms", help="Train departure period, ms."),
        max_batch: int = typer.Option(256, "--max-batch", help="Seats per step."),
        kv_capacity_tokens: Optional[float] = typer.Option(None, "--kv-capacity-tokens",
                                                           help="KV cache capacity (default: HBM left by weights)."),
        prefill_chunk: Optional[int] = typer.Option(None, "--prefill-chunk",
                                                    help="Max prompt tokens per step (chunked prefill)."),
        seed: int = typer.Option(0, "--seed"),
        layout: Optional[str] = typer.Option(None, "--layout", help="One replica, e.g. tp=8: step times from the step "
                                             "model on that layout (default: the aggregate roofline)."),
        concurrency: Optional[int] = typer.Option(None, "--concurrency", help="Closed loop: this many requests in "
                                                  "flight (as serving benchmarks run); needs --layout."),
        client_latency: Optional[float] = typer.Option(None, "--client-latency", metavar="<s>",
                                                       help="Closed loop: seconds each request spends outside the "
                                                       "engine's steps, holding its seat (default: the calibrated "
                                                       "request latency, as throughput --concurrency uses)."),
        as_json: bool = typer.Option(False, "--json"),
        plot: Optional[str] = typer.Option(None, "--plot", callback=out_file("--plot", PLOT_FORMATS),
                                            help="Draw the simulated run to this .png/.svg."),
    ):
        """Simulate requests on one replica; TTFT, time per output token and latency percentiles."""
        from chalk.analyses import simulate as sim
        from chalk.api import closed_loop_client_latency, default_efficiency
        from chalk.specs.catalog import as_model, as_system

        if concurrency is not None and layout is None:
            from chalk.errors import InputError

            raise InputError("--concurrency needs --layout")
        if layout is not None:
            from chalk.analyses.serving import replica_step_cost

            sc = replica_step_cost(as_model(model), as_system(hardware), layout, concurrency or max_batch, input_len,
                                   output_len, precision=precision, kv_precision=kv_precision, ideal=ideal)
        else:
            sc = sim.StepCost.from_roofline(as_model(model), as_system(hardware), chips=chips, precision=precision,
                                            kv_precision=kv_precision, efficiency=default_efficiency(ideal, model))
        if concurrency is not None:
            from chalk.specs.workload import positive

            positive("concurrency", concurrency, integer=True)
            max_batch = concurrency
            reqs = sim.closed_loop_requests(concurrency, requests, input_len, output_len, seed)
        else:
            reqs = sim.load_trace(trace) if trace else sim.poisson_arrivals(rate, requests, input_len, output_len,
                                                                            seed)
        lat = closed_loop_client_latency(concurrency, client_latency, ideal)
        if scheduler is Scheduler.train:
            r = sim.simulate_train(reqs, sc, period_s=period_ms / 1e3, max_batch=max_batch)
        else:
            r = sim.simulate_continuous(reqs, sc, max_batch=max_batch, kv_capacity_tokens=kv_capacity_tokens,
                                        prefill_chunk_tokens=prefill_chunk, closed_loop=concurrency is not None,
                                        client_latency_s=lat)
        over = sim.overload(r)
        if plot:
            from chalk.faces.plots_simulate import plot_simulation

            wrote(plot_simulation(r, plot, title=f"{scheduler.value} scheduler: {model} on {hardware}"))
        if as_json:
            d = r.to_dict()
            d["overload"] = over
            emit_json(d)
            return
        s = r.summary()
        t = table(f"{scheduler.value} scheduler: {len(reqs)} requests on {model} / {hardware}", ["quantity", "value"])
        for label, key, fmt in (("TTFT p50 / p90 / p99", "ttft", seconds), ("time per output token p50 / p90 / p99",
                                                                            "tpot", seconds),
                                ("end-to-end p50 / p90 / p99", "e2e", seconds)):
            t.add_row(label, " / ".join(fmt(s.get(f"{key}_p{q}_s")) for q in (50, 90, 99)))
        t.add_row("output throughput", f"{num(s.get('output_tokens_per_s'))} tokens/s")
        t.add_row("input throughput", f"{num(s.get('input_tokens_per_s'))} tokens/s")
        t.add_row("mean batch", num(s.get("mean_batch")))
        if concurrency is not None:
            t.add_row("client latency per request", f"{seconds(lat)} (seat held outside the engine; in TTFT)")
        t.add_row("utilisation (busy fraction)", pct(s.get("utilisation")))
        t.add_row("steps / simulated time", f"{num(s.get('n_steps'))} / {seconds(s.get('simulated_time_s'))}")
        console().print(t)
        if over:
            console().print(
                f"[bold]warning: arrivals exceed capacity[/bold]: {num(over['offered_requests_per_s'])} requests/s "
                f"offered, {num(over['served_requests_per_s'])} served; the queue grows through the run (median wait "
                f"{seconds(over['median_wait_first_fifth_s'])} for the first fifth of arrivals, "
                f"{seconds(over['median_wait_last_fifth_s'])} for the last), so the latencies above measure the run's "
                f"length, not a steady state. Lower --rate, raise --max-batch or add replicas.")
