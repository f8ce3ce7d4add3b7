"""A plan's demand read from a request trace (`chalk plan --trace`): what plan's demand model takes, and no more.

The trace gives the arrival rate to size for (the busiest `window_s` of it: a fleet sized for the mean queues
through every burst; the mean is reported beside it), the empirical prompt and output length distributions (cut
at the model's context, as `simulate` cuts them), and, where it has prefix-block ids (Mooncake), the share of
prompt tokens a prefix cache could serve: the trace's own reuse, with an unlimited cache. Plan's replay has no
prefix cache, so that share is reported, not used to shrink the fleet.

The fleet is sized in closed form for the busiest window's mean rate, but verified by replaying the trace's own
requests around that window (`TraceArrivals`): its arrivals as recorded, bursts inside the minute included, with
their own lengths, the p99s measured over the busiest window. (QA 2026-11-28: a fleet verified on Poisson arrivals at the busiest minute's rate passed a 1 s
p99 TTFT, and the Azure code trace replayed on it gave 3.8 s: ten-second bursts ran past its capacity.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from chalk.errors import InputError

#: Window the peak arrival rate is taken over (s): a minute, short enough to see a burst, long enough to hold
#: a few hundred requests at the public traces' rates (3-6 requests/s).
PEAK_WINDOW_S = 60.0
#: A plan's verifying replay of a trace: the windows before its busiest one (the ramp into it) and after it that
#: are replayed around it; its p99s are measured over the busiest window alone.
PEAK_LEAD_WINDOWS, PEAK_TAIL_WINDOWS = 2.0, 1.0


@dataclass(frozen=True, eq=False)
class TraceArrivals:
    """A trace's requests as recorded (arrival order; lengths cut at the model's context), with its busiest window:
    what a plan's verifying replay feeds its fleet (`fleet.replay(arrivals=...)`)."""

    arrival_s: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray
    peak_start_s: float
    window_s: float

    def __len__(self) -> int:
        return len(self.arrival_s)

    def around_peak(self, lead_windows: float = PEAK_LEAD_WINDOWS, tail_windows: float = PEAK_TAIL_WINDOWS,
                    most: int | None = None) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], tuple[float, float]]:
        """The requests from `lead_windows` windows before the busiest window to `tail_windows` after it (the fleet
        enters its peak with the queue the ramp left; at most `most`, the latest before the peak dropped first), and
        the busiest window's span within them: ((arrival_s from the first of them, input_len, output_len),
        (start, end) of the busiest window on that clock). A replay measures its p99s over that window alone: over
        the whole stretch the peak minute was a few percent of the requests behind a p99 (QA 2026-11-28: a fleet that
        passed over 12,000 requests of the Azure conversation trace missed its TPOT target over the peak minute)."""
        a = self.arrival_s
        t0, t1 = self.peak_start_s, self.peak_start_s + self.window_s
        i0 = int(np.searchsorted(a, t0 - lead_windows * self.window_s))
        i1 = int(np.searchsorted(a, t1 + tail_windows * self.window_s, side="right"))
        if most is not None and i1 - i0 > most:
            i0 = max(i1 - int(most), 0)
        i1 = max(i1, i0 + 1)
        sl = slice(i0, i1)
        first = float(a[i0])
        return (a[sl] - first, self.input_len[sl], self.output_len[sl]), (t0 - first, t1 - first)


def demand_from_trace(path, model, *, speedup: float = 1.0, window_s: float = PEAK_WINDOW_S) -> dict:
    """{'rate', 'input_len', 'output_len' (LengthDistributions), 'arrivals' (`TraceArrivals`: the requests a plan's
    replay verifies the fleet on), 'derived' (what was read, for the output), 'notes'} from the trace in `path` (any
    format `chalk.specs.traces` reads), arrivals sped up `speedup` times."""
    from chalk.analyses.traffic.prefix_hits import trace_prefix_hits
    from chalk.specs.demand import MAX_RATE, MIN_RATE
    from chalk.specs.lengths import empirical
    from chalk.analyses.traffic.simulate import truncate_to_context
    from chalk.specs.traces import read_trace

    from chalk.analyses.traffic.simulate import MAX_ARRIVAL_S

    t = read_trace(path, speedup=speedup)
    if len(t) < 2 or not t.span_s > 0:
        raise InputError(f"{t.source}: a trace needs requests at two different times to give a rate "
                         f"(it has {len(t)} over {t.span_s:g} s)")
    if t.span_s > MAX_ARRIVAL_S:  # as simulate refuses it (QA 2026-11-28: plan sized for one request a minute)
        raise InputError(f"{t.source}: sped up {t.speedup:g}x its arrivals span {t.span_s:.3g} s, past the "
                         f"{MAX_ARRIVAL_S:g} s (about 30 years) a replay takes; use a larger --speedup")
    (peak, start), mean = t.peak_window(window_s), t.mean_rate_per_s
    a_rel = np.asarray(t.arrival_s, dtype=float) - float(t.arrival_s[0])
    if not MIN_RATE <= peak <= MAX_RATE:
        raise InputError(f"{t.source}: its peak rate {peak:.3g} requests/s is outside what a plan takes "
                         f"({MIN_RATE:g} to {MAX_RATE:g}); use --speedup")
    i_len, o_len, cut = t.input_len, t.output_len, 0
    if model.max_context:
        i_len, o_len, cut = truncate_to_context(i_len, o_len, model.max_context)
    short = not t.span_s > window_s  # no whole window to find the busiest of (QA 2026-11-28: 2 requests 1 ms apart
    # were sized as 'its busiest 60 s' at 1,000 requests/s)
    notes = [f"demand from the trace {t.source} ({t.format}, {len(t):,} "
             + (f"requests over {t.span_s:,.0f} s" if t.span_s >= 10 else f"requests over {t.span_s:.3g} s")
             + (f", sped up {t.speedup:g}x" if t.speedup != 1 else "")
             + (f"): sized for its busiest {window_s:g} s (from {start:,.0f} s after its first request), "
                f"{peak:.3g} requests/s (mean {mean:.3g}); " if not short else
                f"): the trace spans less than the {window_s:g} s window a plan sizes for, so it is sized for the "
                f"rate over its own span, {peak:.3g} requests/s ({len(t) - 1:,} gap{'s' if len(t) > 2 else ''} between "
                f"arrivals in {t.span_s:.3g} s), "
                f"which so short a trace states loosely: give a trace longer than {window_s:g} s, or --speedup "
                "below 1 to stretch it; ")
             + f"lengths are its own (mean {i_len.mean():,.0f} in / {o_len.mean():,.0f} out)"]
    if cut:
        notes.append(f"{cut:,} trace requests longer than {model.id}'s {model.max_context:,}-token context were "
                     "cut to fit it (the output first, the prompt only where it alone fills the context)")
    # the busiest window's own requests' mean output: what the fleet serves there, per request (QA 2026-11-28: the
    # cost per token was the busiest minute's rate times the whole trace's mean output, 1,837 output tokens/s where
    # that minute's requests ask 1,120, its $ per M tokens ~36% low)
    inside = (a_rel >= start) & (a_rel < start + window_s) if not short else np.ones(a_rel.size, dtype=bool)
    o_peak = float(np.mean(o_len[inside])) if inside.any() else float(o_len.mean())
    hits = trace_prefix_hits(t, math.inf, input_len=i_len)
    if hits is not None:
        notes.append(f"the trace's prefix blocks repeat: an unlimited prefix cache would serve {hits.hit_rate:.1%} "
                     "of prompt tokens; the plan does not count on it (its replay has no prefix cache)")
    derived = {"path": t.source, "format": t.format, "requests": len(t), "span_s": t.span_s,
               "speedup": t.speedup, "peak_window_s": float(window_s), "peak_window_start_s": start,
               "peak_rate_per_s": peak, "shorter_than_window": short,
               "mean_rate_per_s": mean, "input_len_mean": float(i_len.mean()),
               "output_len_mean": float(o_len.mean()), "peak_window_output_len_mean": o_peak,
               "peak_output_tokens_per_s": peak * o_peak, "truncated_requests": cut,
               "prefix_cache_hit_rate_unlimited": None if hits is None else hits.hit_rate,
               "prefix_cache_applied": False}
    a0 = np.asarray(t.arrival_s, dtype=float)
    arrivals = TraceArrivals(a0 - a0[0], np.asarray(i_len, dtype=float),
                             np.asarray(o_len, dtype=float), float(start), float(window_s))
    return {"rate": peak, "input_len": empirical(i_len, "trace prompts"),
            "output_len": empirical(o_len, "trace outputs"), "peak_output_len": o_peak, "arrivals": arrivals,
            "derived": derived,
            "notes": notes}
