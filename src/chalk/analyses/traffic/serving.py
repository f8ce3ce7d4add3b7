"""Serving throughput: a vectorised search over layouts x batch for the most output tokens/s per GPU that
fits memory and meets the latency constraints; aggregated or disaggregated; the latency-cost frontier and
the price of fast and slow modes.

Aggregated serving (prefill and decode share GPUs, chunked prefill): every decode step of B sequences also
carries B * I / O prompt tokens on average, so prompts cost compute inside the decode step. Decode context
averages I + O / 2. Disaggregated: a decode pool runs pure decode steps; a prefill pool, sized by the ratio
of work, runs prompt chunks; output per GPU counts both pools.
"""

from __future__ import annotations

import math
from functools import lru_cache
import dataclasses
from dataclasses import dataclass

import numpy as np

from chalk.analyses.step.calibration import Calibration, calibration, with_eplb
from chalk.analyses.records.claims import Claim
from chalk.analyses.step.parallel import (Layout, check_reach, domains_to_hold, engine_kernels, engine_overhead_s,
                                     engine_provenance, enumerate_layouts, layout_arrays, layout_spec, memory_per_chip,
                                     stage_step, step_costs)
from chalk.analyses.records.results import ServingResult
from chalk.analyses.traffic import simulate as sim_mod
from chalk.analyses.traffic.simulate import MAX_REQUESTS
from chalk.equations import fleet as FL
from chalk.equations import parallel as P
from chalk.equations import speculative as S
from chalk.errors import FitError, InputError
from chalk.specs.catalog import as_model, as_system
from chalk.specs.demand import MAX_USERS
from chalk.specs.hardware import System
from chalk.specs.workload import MAX_GPUS, count, positive, short, tokens

#: Prompt tokens per prefill step per attention rank in a disaggregated prefill pool (SGLang's large-scale
#: EP blog runs 16,384 tokens per device).
PREFILL_CHUNK_TOKENS = 16384
SPEEDUPS = (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0)


def deployment_sizes(system: System, weight_bytes: float = 0.0, usable_bytes_per_chip: float | None = None
                     ) -> list[int]:
    """Deployment sizes searched when none is given: powers of two and the whole scale-up domain; and, when
    `weight_bytes` do not fit one domain's usable memory (`usable_bytes_per_chip` each, default the whole HBM) and
    the chip has a scale-out network, the fewest domains that hold them (2, 4, ... nodes: pipeline stages over
    nodes, or EP over the scale-out network, as DeepSeek-V3/R1 is served on two 8-GPU H100 nodes). Wider
    deployments are searched when asked (`gpus`)."""
    d = system.chips
    out = {n for n in (1, 2, 4, 8, 16, 32, 64, 128, 256) if n <= d} | {d}
    usable = system.chip.hbm_bytes if usable_bytes_per_chip is None else usable_bytes_per_chip
    out.add(d * domains_to_hold(system, weight_bytes, usable))
    return sorted(out)


def search_sizes(system: System, costs, cal: Calibration) -> list[int]:
    """`deployment_sizes` for a model at these precisions (`costs`) under a calibration's memory reserve."""
    return deployment_sizes(system, costs.dense_weight_bytes + costs.expert_weight_bytes,
                            system.chip.hbm_bytes * (1 - cal.memory_reserve))


#: The standard normal's 99th percentile: p99 TPOT in the search (`_evaluate`).
P99_Z = 2.326
#: Replays of the chosen point a search under p99 targets makes before it gives up on the replayed check.
TAIL_REPLAYS = 16
#: A replay missing a p99 target at B in flight rules its replica layout out from this fraction of B up
TAIL_STEP_DOWN = 0.6
#: Tail targets under Poisson arrivals (`arrivals='poisson'`): the best layouts of the closed-form screen tried (those
#: within ARRIVAL_SCREEN_SHARE of the best's output per GPU), the requests replayed per rate tried (a shorter run
#: does not reach its steady state near saturation: its batch is still filling), and the bisection on a log scale
#: per layout: between the rate the screen's point serves and the layout's saturation rate, or below the screen's
#: rate down to 1/ARRIVAL_BRACKET of it (ARRIVAL_STEPS halvings: ~2-4% apart).
ARRIVAL_LAYOUTS = 3
ARRIVAL_SCREEN_SHARE = 0.7
ARRIVAL_REQUESTS = 16000
ARRIVAL_STEPS = 5
ARRIVAL_BRACKET = 8.0
#: The winner's refinement: replayed again with its step cost linear around the batch its open loop settled at (the
#: linear form is exact at its reference batch only: 3-8% on the p99 TPOT of MLPerf's cases), bisecting within this
#: factor of the rate found.
ARRIVAL_REFINE = 1.25
#: ... and the share of the offered rate a replica must serve over the replay's steady-state window to count as
#: keeping up (the rate measured over 16,000 Poisson arrivals scatters by ~1%; a replica that falls behind serves less)
ARRIVAL_SERVED = 0.95
ARRIVALS = ("poisson", "closed")

#: Geometric step of the batch grid (sequences per scheduler): 15% apart, from 1 to the scheduler cap.
BATCH_GRID_STEP = 1.15


def _grid(layouts: list[Layout], cap: int, points: int | None = None):
    """Flattened (layout, batch) grid: batch per replica = s * attn_dp * pp, s per scheduler micro-batch."""
    points = points or max(40, int(np.ceil(np.log(max(cap, 2)) / np.log(BATCH_GRID_STEP))) + 1)
    s = np.unique(np.round(np.geomspace(1, cap, points)))
    la = layout_arrays(layouts)
    n, k = len(layouts), len(s)
    idx = np.repeat(np.arange(n), k)
    g = {key: v[idx] for key, v in la.items()}
    g["idx"] = idx
    g["B"] = np.tile(s, n) * g["attn_dp"] * g["pp"]
    return g


@dataclass(frozen=True)
class Speculation:
    """Speculative decoding or MTP: `draft_tokens` drafts per step, the first accepted with probability `acceptance`
    and each further one (given the ones before it) at `decay` times the rate of the one before (1: every draft at
    `acceptance`); one draft costs `draft_layers` of the main model's layers (an MTP module is one block)."""

    draft_tokens: int
    acceptance: float
    draft_layers: float = 1.0
    #: where the acceptance comes from ('' where the caller gave it)
    source: str = ""
    decay: float = 1.0

    def __post_init__(self):
        k, a, d = self.draft_tokens, self.acceptance, self.decay
        _check_draft_tokens(k)
        if not (isinstance(a, (int, float)) and np.isfinite(a) and 0 < a < 1):
            raise InputError(f"acceptance must be in (0, 1), got {a!r}")
        if isinstance(d, bool) or not (isinstance(d, (int, float)) and np.isfinite(d) and 0 < d <= 1):
            raise InputError(f"acceptance decay must be in (0, 1], got {d!r}")

    @property
    def tokens_per_step(self) -> float:
        return float(S.expected_tokens_per_step(self.acceptance, self.draft_tokens, self.decay))


def _catalog_speculation() -> dict:
    from chalk.specs.catalog import package_path, read_yaml
    from chalk.specs.validate import spec_number, spec_str

    d = read_yaml(package_path("catalog", "speculation.yaml"), "catalog speculation.yaml")
    where = "catalog speculation.yaml"
    return {"acceptance": spec_number(d["default_mtp_acceptance"], f"{where}: default_mtp_acceptance", maximum=1.0),
            "source": spec_str(d["source"], f"{where}: source"),
            "decay": spec_number(d["default_mtp_acceptance_decay"], f"{where}: default_mtp_acceptance_decay",
                                 maximum=1.0),
            "decay_source": spec_str(d["decay_source"], f"{where}: decay_source")}


def model_speculation(model, draft_tokens: int | None = None) -> Speculation | None:
    """The model's own multi-token-prediction draft layers as a `Speculation`: `draft_tokens` drafts (default one per
    layer the checkpoint ships, `ModelSpec.mtp_layers` from config.json), the first accepted at the catalog's sourced
    rate (`ModelSpec.mtp_acceptance`) and each further one at its sourced fall per draft (`mtp_acceptance_decay`),
    the catalog's speculation.yaml defaults where the model states none; None for a model without draft layers. What
    `throughput` and `plan` search with when not told otherwise (speculative='auto')."""
    m = as_model(model)
    if m.mtp_layers <= 0:
        return None
    acc, src, dec, dsrc = m.mtp_acceptance, m.mtp_acceptance_source, m.mtp_acceptance_decay, \
        m.mtp_acceptance_decay_source
    if acc is None or dec is None:  # no stated figure for this model: the catalog's sourced default
        cat = _catalog_speculation()
        lead = "chalk default for draft layers without a stated "
        if acc is None:
            acc, src = cat["acceptance"], lead + "rate: " + cat["source"]
        if dec is None:
            dec, dsrc = cat["decay"], lead + "fall per draft: " + cat["decay_source"]
    k = int(min(m.mtp_layers, 64)) if draft_tokens is None else draft_tokens
    return Speculation(k, float(acc), draft_layers=1.0, decay=float(dec),
                       source=f"the model's own MTP layers ({m.mtp_layers} in its config); acceptance: {src}; "
                              f"fall per further draft: {dsrc}")


#: Most draft counts 'auto' searches for a model that ships several draft layers (1 to this many).
MAX_AUTO_DRAFTS = 4


def draft_counts(model) -> tuple[int, ...]:
    """The draft counts speculative='auto' searches: 1 to the draft layers the model ships (at most
    MAX_AUTO_DRAFTS); () for a model without. Each further draft is accepted less often and costs a verification
    token on every sequence, so the most drafts need not serve most (QA 2026-11-28: a 3-layer DeepSeek-R1 config
    used 3 drafts at 1,872 tokens/s per GPU where 1 served 1,931)."""
    n = as_model(model).mtp_layers
    return tuple(range(1, min(n, MAX_AUTO_DRAFTS) + 1)) if n > 0 else ()


def _best_draft_count(model, hardware, kw: dict) -> dict:
    """`throughput` at each of `draft_counts` (and none, as every search also tries), the answer serving the most
    output tokens/s per GPU (the fewest drafts on a tie); the FitError of the last where none answers."""
    best, err, tried = None, None, []
    for k in draft_counts(model):
        try:
            r = throughput(model, hardware, speculative=model_speculation(model, k), **kw)
        except FitError as e:
            err = e
            continue
        out = float(r["output_tokens_per_s_per_gpu"])
        tried.append(f"{k}: {out:.4g}")
        if best is None or out > float(best["output_tokens_per_s_per_gpu"]):
            best = r
    if best is None:
        raise err
    used = best.get("speculative") or {}
    best["notes"] = list(best.get("notes", [])) + [
        f"draft tokens searched 1 to {len(tried)} of the model's {as_model(model).mtp_layers} draft layers (output "
        f"tokens/s per GPU at each, the best with or without speculation: {', '.join(tried)}); "
        + (f"{used.get('draft_tokens')} served most" if used.get("used") else "none served more than no drafts")]
    return best


def _check_draft_tokens(k) -> None:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1 or k > 64:
        raise InputError(f"draft tokens (--mtp) must be a whole number from 1 to 64, got {k!r}")


def mtp_speculation(model, draft_tokens: int, acceptance=None) -> Speculation:
    """What `--mtp K` (or `mtp=`) runs: K drafts at `acceptance` as given (every draft at that rate), else at the
    model's own MTP draft layers' sourced first-draft rate and fall per further draft (`model_speculation`: its
    catalog meta.yaml, else catalog/speculation.yaml's defaults). A model without draft layers has no sourced rate to
    assume: InputError (give the acceptance). One rule for the CLI and the API."""
    if acceptance is not None:
        return Speculation(draft_tokens, acceptance)
    _check_draft_tokens(draft_tokens)  # a bad K says so before the missing rate does
    own = model_speculation(model, draft_tokens)
    if own is None:
        m = as_model(model)
        raise InputError(f"{m.id} has no MTP draft layers, so chalk has no sourced acceptance rate for its drafts: "
                         "give the acceptance (--acceptance A, acceptance=A) with the draft tokens")
    return own


def resolve_speculation(speculative, model) -> Speculation | None:
    """`speculative` as given (a Speculation, or None: none), or with 'auto' the model's own draft layers
    (`model_speculation`)."""
    check_speculation(speculative)
    return model_speculation(model) if isinstance(speculative, str) else speculative


def check_speculation(speculative) -> None:
    """Refuse, as `plan` does, a `speculative` that is not a Speculation, None or 'auto' (an object without
    draft_tokens was an AttributeError deep in the search)."""
    if isinstance(speculative, str) and speculative != "auto":
        raise InputError(f"speculative must be a Speculation, None or 'auto', got {short(speculative)}")
    if speculative is not None and not isinstance(speculative, (Speculation, str)):
        raise InputError(f"speculative must be a Speculation(draft_tokens, acceptance), got {short(speculative)}")


def rank_chunk_tokens(eng, chunk, attn_dp=1.0):
    """Prompt tokens per step on each attention-DP rank from an engine's chunked-prefill budget `chunk` (None: no
    budget): the budget itself, or where the engine splits it over the ranks (`chunk_split_over_attention_dp`:
    SGLang's chunked_prefill_size //= dp_size) its share, at least one token. Numbers or arrays of `attn_dp`."""
    if not chunk or not getattr(eng, "chunk_split_over_attention_dp", False):
        return chunk
    return np.maximum(np.floor_divide(float(chunk), np.maximum(np.asarray(attn_dp, dtype=float), 1.0)), 1.0)


def prefill_piece(prompt_tokens: float, chunk=None) -> float:
    """Prompt tokens one prefill step takes of a prompt: all of it, or the engine's chunked-prefill budget."""
    return prompt_tokens if not chunk else min(prompt_tokens, float(chunk))


def prefill_step_tokens(B, e, Ip, O, piece, attn_dp=1.0, alignment=1.0):
    """(prompt tokens a step carries when it carries prefill, fraction of steps that do, prompt tokens on the
    busiest attention-DP rank of such a step) in aggregated serving with chunked prefill. B decoding sequences
    emitting e tokens per step need B e Ip / O prompt tokens per step on average (Ip: uncached prompt tokens,
    O: output tokens); engines run them as whole chunks of `piece` tokens (a prompt, or the chunked-prefill budget)
    in some steps, not as a trickle in every step; when even every step carrying a chunk is not enough, every step
    carries the average. Each of the replica's `attn_dp` attention-DP ranks schedules its own sequences with its
    own chunk budget; the ranks meet at every MoE layer, so a step is paced by any rank carrying a chunk. A share
    `alignment` of the chunks is lined up across ranks (all ranks prefill in the same steps), the rest falls in
    steps of its own rank's choosing.

    Formula: c_r = max(piece, c_avg / a), f_r = c_avg / (a c_r) per rank (c_avg = B e Ip / O);
             F = alignment f_r + (1 - alignment) (1 - (1 - f_r)^a) (steps where some rank carries a chunk);
             c = c_avg / F (the replica's prompt tokens in such a step).
    Assumes: sequences balanced over the ranks; unaligned chunks placed independently.
    """
    a = np.maximum(np.asarray(attn_dp, dtype=float), 1.0)
    c_avg = np.asarray(B, dtype=float) * e * Ip / max(O, 1e-9)
    c_r = np.maximum(piece, c_avg / a)
    f_r = np.minimum(np.where(c_r > 0, c_avg / (a * np.where(c_r > 0, c_r, 1.0)), 0.0), 1.0)
    independent = -np.expm1(a * np.log1p(-np.minimum(f_r, 1.0 - 1e-15)))
    F = np.where(f_r >= 1.0, 1.0, alignment * f_r + (1.0 - alignment) * independent)
    c = np.where(F > 0, c_avg / np.where(F > 0, F, 1.0), c_r)
    return c, F, c_r


def p99_request_step(pure, chunk, F, O):
    """The mean step of the p99 request's decode over its O - 1 decode steps (`fleet.p99_request_mean_step`)."""
    return FL.p99_request_mean_step(pure, chunk, F, max(O - 1.0, 1.0), z=P99_Z)


def mixed_step_s(costs, system, tp, a, pp, ep, B, e, Ip, O, L, I, piece, cal, **kw):
    """(mean stage step (s), the `stage_step` of a step carrying a prefill chunk, pure decode step (s), fraction of
    steps carrying a chunk): B decoding
    sequences of context L while prompts of I tokens (Ip uncached) are prefilled in chunks of `piece` on each
    attention-DP rank (`prefill_step_tokens`); the mean is (1 - F) pure + F chunk, a chunk's weight and expert
    reads counted once."""
    c, f, c_r = prefill_step_tokens(B, e, Ip, O, piece, a, cal.dp_prefill_alignment)
    pure = np.asarray(stage_step(costs, system, tp, a, pp, ep, B, 0.0, L, I, cal, **kw)["stage_time_s"], dtype=float)
    chunk = stage_step(costs, system, tp, a, pp, ep, B, c, L, I, cal, prefill_rank_tokens=c_r, **kw)
    return (1 - f) * pure + f * np.asarray(chunk["stage_time_s"], dtype=float), chunk, pure, f


def _evaluate(costs, system: System, g: dict, I: float, O: float, cal: Calibration, disaggregated: bool,
              spec: Speculation | None = None, L: float | None = None, overhead_s=None, chunk=None, kernels=None,
              cap_prefill: bool = False, eng=None):
    """Per-point metrics of the flattened grid (arrays). `L`: mean context held by a decoding sequence
    (default I + O / 2); with `spec`, each step verifies K + 1 tokens per sequence and emits E on average.
    Aggregated serving's TTFT and prefill share come from the step carrying a chunk and the pure decode step that
    the mean step (`mixed_step_s`) ran; a disaggregated search takes its TTFT from the prefill pool.
    `cap_prefill`: `chunk` is a hard budget of prompt tokens per step (the user's `--max-tokens`): batches needing
    more are infeasible. An engine profile's budget is not applied so (the V0 vLLM default is recalled, not read;
    applied, it moved 6 validation rows: TensorRT-LLM Qwen3-30B-A3B 2k/128 on B200 +37% -> +17%, AMD's vLLM 0.6
    Llama-3.1-405B 2048/128 on MI300X +1% -> -24%)."""
    L = I + O / 2 if L is None else L
    B = g["B"]
    tp, a, pp, ep, G = g["tp"], g["attn_dp"], g["pp"], g["ep"], g["replica_gpus"]
    w, kv = memory_per_chip(costs, tp, a, pp, ep, B, L + cal.kv_reserve_output_fraction * O / 2)
    usable = system.chip.hbm_bytes * (1 - cal.memory_reserve)
    fits = (w + kv) <= usable
    q, e = (1.0, 1.0) if spec is None else (spec.draft_tokens + 1.0, spec.tokens_per_step)
    kw = dict(overhead_s=overhead_s, kernels=kernels, query_tokens=q)
    per_rank = rank_chunk_tokens(eng, chunk, a)  # each attention-DP rank's budget (`eng`: the engine's split)
    piece = prefill_piece(I, chunk) if per_rank is chunk else np.minimum(I, per_rank)
    if disaggregated:
        dec = stage_step(costs, system, tp, a, pp, ep, B, 0.0, L, I, cal, **kw)
        st = np.asarray(dec["stage_time_s"], dtype=float)
    else:
        st, dec, pure, F = mixed_step_s(costs, system, tp, a, pp, ep, B, e, I, O, L, I, piece, cal, **kw)
        first = np.asarray(dec["stage_time_s"], dtype=float)  # the step carrying a new prompt's chunk
        if chunk and cap_prefill:  # a step's prompt tokens are capped by the budget on each attention-DP rank: a
            # batch whose completions need more prompt tokens per step than that cannot be held (`--max-tokens 1`
            # gave 27,401 prompt tokens/s per GPU at 16 steps/s)
            need = np.asarray(B, dtype=float) * e * I / max(O, 1e-9)  # prompt tokens per step the batch needs
            budget = need <= per_rank * a * (1 + 1e-9)
            if np.any(fits) and not np.any(fits & budget):
                raise FitError(f"a prefill budget of {chunk:,} prompt tokens per step (per attention-DP rank) "
                               f"cannot keep a batch decoding: each request needs {I:,.0f} prompt tokens per "
                               f"{O:,.0f} output tokens, so the largest batch that fits memory would need "
                               f"{float(np.max(np.where(fits, need, 0))):,.0f} per step; raise --max-tokens")
            fits = fits & budget
    if spec is not None:  # the MTP head drafts K tokens, one block each, before the verify step
        st = st + S.mtp_draft_time_s(st, spec.draft_tokens, costs.model.num_layers, spec.draft_layers)
    tpot = P.pipeline_token_latency_s(st, pp) / e
    out = {"fits": fits, "tpot_s": tpot, "user_tokens_per_s": 1 / tpot, "output_per_gpu": B / tpot / G,
           "weight_bytes_per_gpu": w, "kv_bytes_per_gpu": kv, "overlap": dec["overlap"], "step": dec}
    if disaggregated:  # TTFT comes from the prefill pool; decode GPUs spend nothing on prefill
        out["tpot_p99_s"] = tpot
        return out
    tail = p99_request_step(pure, first, F, O)
    if spec is not None:
        tail = tail + S.mtp_draft_time_s(tail, spec.draft_tokens, costs.model.num_layers, spec.draft_layers)
    out["tpot_p99_s"] = np.maximum(P.pipeline_token_latency_s(tail, pp) / e, tpot)
    mean = st if spec is None else st - S.mtp_draft_time_s(st, spec.draft_tokens, costs.model.num_layers,
                                                           spec.draft_layers)
    out["ttft_s"] = P.pipeline_token_latency_s(first, pp) * np.ceil(I / piece)
    out["prefill_share"] = np.clip(1 - pure / mean, 0.0, 1.0)
    return out


def _prefill_rate(costs, system: System, tp, a, pp, ep, G, Ip, I, cal: Calibration, max_tokens=None, **kw):
    """(prompt tokens one prefill step of a replica carries, prompt tokens/s per GPU) of a prefill pool on a layout
    (numbers or arrays) running full prefill steps: a chunk of max(PREFILL_CHUNK_TOKENS, Ip) uncached prompt
    tokens per attention rank (at most `max_tokens`, the engine's budget per step where given), of prompts `I`
    tokens long; `kw` goes to `stage_step` (kernels, overhead_s).

    Formula: c = min(max(chunk, Ip), max_tokens) * attn_dp; rate = c / (pp * t_stage(c)) / G."""
    per_rank = np.maximum(PREFILL_CHUNK_TOKENS, Ip)
    if max_tokens is not None:
        per_rank = np.minimum(per_rank, float(max_tokens))
    chunk = per_rank * a
    t = stage_step(costs, system, tp, a, pp, ep, 0.0, chunk, I, I, cal, **kw)["stage_time_s"]
    with np.errstate(divide="ignore"):
        return chunk, chunk / pp / t / G


def _pick_prefill_pool(layouts: list[Layout], ok, rate, ttft):
    """Best prefill layout among `layouts` (input tokens/s per GPU, TTFT of one prompt, and the layout): the most
    input tokens/s per GPU among those that fit and meet the TTFT (`ok`, `_prefill_pool_points`), or None."""
    if not np.any(ok):
        return None
    i = int(np.argmax(np.where(ok, rate, -np.inf)))
    return {"layout": layouts[i], "input_tokens_per_s_per_gpu": float(rate[i]), "ttft_s": float(ttft[i])}


def _prefill_pool_points(costs, system: System, layouts: list[Layout], I: float, cal: Calibration, max_ttft_s,
                         max_tokens=None):
    """Per prefill layout (arrays): whether it fits and meets the TTFT, its input tokens/s per GPU, one prompt's
    TTFT."""
    la = layout_arrays(layouts)
    tp, a, pp, ep, G = la["tp"], la["attn_dp"], la["pp"], la["ep"], la["replica_gpus"]
    chunk, rate = _prefill_rate(costs, system, tp, a, pp, ep, G, I, I, cal, max_tokens=max_tokens)
    seqs = np.maximum(chunk / I, 1.0)
    w, kv = memory_per_chip(costs, tp, a, pp, ep, seqs, I)
    fits = (w + kv) <= system.chip.hbm_bytes * (1 - cal.memory_reserve)
    piece = prefill_piece(I, max_tokens)  # a prompt longer than the budget: ceil(I / budget) steps of the budget
    one = math.ceil(I / piece) * P.pipeline_token_latency_s(
        stage_step(costs, system, tp, a, pp, ep, 0.0, piece, I, I, cal)["stage_time_s"], pp)
    # the prompt's KV goes to the decode pool: over NVLink inside a rack-scale domain, else over the NIC
    chip = system.chip
    link = chip.scaleup_bandwidth_bytes_per_s if system.kind == "rack" else chip.scaleout_bandwidth_bytes_per_s
    link = link or chip.scaleup_bandwidth_bytes_per_s or chip.hbm_bandwidth_bytes_per_s
    ttft = one + float(costs.kv_bytes(I)) / (link * cal.link)
    return fits & (ttft <= (max_ttft_s if max_ttft_s else np.inf)), rate, ttft


def _pareto(user, thr):
    """Indices of the points not beaten on both per-user speed and throughput per GPU."""
    order = np.argsort(-user, kind="stable")
    best = -np.inf
    keep = []
    for i in order:
        if thr[i] > best * (1 + 1e-9):
            keep.append(i)
            best = thr[i]
    return np.array(keep[::-1], dtype=int)


def _length(name: str, spec):
    """A length argument: a number (the mean) or a distribution (`chalk.specs.lengths.parse_lengths`)."""
    if isinstance(spec, (int, float, np.integer, np.floating)) and not isinstance(spec, bool):
        return float(tokens(name, spec)), None
    from chalk.specs.lengths import parse_lengths

    d = parse_lengths(spec)
    return float(d.mean), d


def context_note(m, I: float, O: float, cut: bool = True) -> str | None:
    """A note where requests of `I` prompt and `O` output tokens (means, as asked) run past `m`'s context (its
    config's max_position_embeddings): `cut` (every door's default, `within_context`): they were sized and replayed
    cut to it; else (a measured run's answer, `validate`: TensorRT-LLM built with a longer max_seq_len ran Llama-2-70B
    at 128 + 4,096 on H200) timed as asked."""
    if m.max_context and I + O > m.max_context:
        head = (f"input {I:,.0f} + output {O:,.0f} = {I + O:,.0f} tokens per request is beyond {m.id}'s "
                f"{m.max_context:,}-token context (max_position_embeddings)")
        if cut:
            return head + (": sized and replayed as cut to it (the output first, the prompt only where it alone "
                           "fills the context), as vLLM and SGLang refuse longer requests")
        return head + ": timed as asked (an engine built for a longer sequence extrapolates the position encoding)"
    return None


#: Lengths drawn to see whether a length distribution reaches past the model's context before anything is sized.
CONTEXT_PROBE = 4096


def within_context(m, din, dout, seed: int = 0) -> tuple:
    """(input, output, share of requests cut: 0 for none, 1 for a mean past the context): lengths (numbers or length
    distributions) as sized and replayed, cut to `m`'s context first (`simulate.truncate_to_context`: the output
    first, down to one token, then the prompt): a mean past it is cut as one request would be; a distribution that
    reaches past it is replaced by a sample of it (CONTEXT_PROBE draws), cut pair by pair. Every door cuts the same
    way, so the same request is the same everywhere (QA 2026-11-28: `throughput` timed 200,000 prompt tokens on a
    131,072-token model that `simulate` cut). Lengths that fit come back as given."""
    from chalk.specs.lengths import empirical

    if not m.max_context:
        return din, dout, 0.0
    if not hasattr(din, "sample") and not hasattr(dout, "sample"):
        P, O, cut = sim_mod.truncate_to_context(np.array([round(din)]), np.array([round(dout)]), m.max_context)
        return (float(P[0]), float(O[0]), 1.0) if cut else (din, dout, 0.0)
    rng = np.random.default_rng(seed)
    draw = (lambda d: d.sample(CONTEXT_PROBE, rng) if hasattr(d, "sample")  # noqa: E731
            else np.full(CONTEXT_PROBE, max(int(round(d)), 1)))
    P, O, cut = sim_mod.truncate_to_context(draw(din), draw(dout), m.max_context)
    if not cut:
        return din, dout, 0.0
    return (empirical(P, "prompts cut to the context"), empirical(O, "outputs cut to the context"),
            cut / CONTEXT_PROBE)


def cut_lengths(model, input_len, output_len, cut: bool = True) -> tuple:
    """(input spec, output spec, context note or None): a door's length arguments parsed (`_length`) and, with `cut`,
    cut to `model`'s context (`within_context`), with the note on the means as asked (`context_note`)."""
    m = as_model(model)
    (I, di), (O, do) = _length("input_len", input_len), _length("output_len", output_len)
    note = context_note(m, I, O, cut=cut)
    if not cut:
        return input_len, output_len, note
    a, b, _ = within_context(m, di if di is not None else I, do if do is not None else O)
    return a, b, note


def _engine(engine):
    if engine is None:
        return None
    from chalk.specs.engine import load_engine

    return load_engine(engine) if isinstance(engine, str) else engine


def engine_kv_precision(engine, kv_precision, model=None, precision=None):
    """`kv_precision` as `engine` runs it: 'auto' is that engine's own default KV-cache dtype
    (`EngineProfile.kv_precision`); an engine that follows the checkpoint, loading `model`'s own quantised one at
    `precision`, stores what that checkpoint declares (`native_kv_cache`); without an engine, 'auto' stays chalk's
    reading of the checkpoint."""
    eng = _engine(engine)
    return eng.kv_precision(kv_precision, model, precision) if eng is not None else kv_precision


def _serving_setup(model, hardware, input_len, output_len, precision, kv_precision, ideal, calibration_override,
                   engine, cache_hit, eplb=None, max_seqs=None, max_tokens=None):
    m, system = as_model(model), as_system(hardware)
    I, di = _length("input_len", input_len)
    O, do = _length("output_len", output_len)
    F = 0.0 if cache_hit is None else float(cache_hit)
    if not (np.isfinite(F) and 0 <= F < 1):
        raise InputError(f"cache hit fraction must be in [0, 1), got {cache_hit!r}")
    cal = with_eplb(calibration_override or calibration(ideal, system.chip), eplb)
    eng = _engine(engine)
    fmt = getattr(m, "weight_format", None)
    if eng is not None:
        eng.check_chip(system.chip.vendor, fmt.method if fmt is not None else None)
    if eng is not None and hasattr(eng, "for_gpu"):  # the engine's own GPU-dependent defaults
        eng = eng.for_gpu(system.chip.hbm_bytes, chip=system.chip.id)
    if eng is not None and cal.label != "ideal":
        cal = dataclasses.replace(cal, max_seqs_per_scheduler=int(eng.max_num_seqs),
                                  memory_reserve=1 - float(eng.kv_cache_memory_fraction),
                                  label=f"{cal.label}, {eng.id} {eng.version} profile")
    if max_tokens is not None and max_seqs is None and eng is not None and eng.seqs_capped_by_chunk \
            and cal.label != "ideal":  # the default cap follows a budget the user set too (QA 2026-11-28: vLLM at
        # --max-tokens 100 ran 1,024 sequences where its own min(max_num_seqs, max_num_batched_tokens) gives 100)
        n = min(int(cal.max_seqs_per_scheduler), int(positive("max_tokens", max_tokens, integer=True, scalar=True)))
        cal = dataclasses.replace(cal, max_seqs_per_scheduler=n, label=f"{cal.label}, max_num_seqs {n} (at most "
                                                                      "--max-tokens)")
    if max_seqs is not None:  # the user's scheduler cap, over the engine's and the fitted one
        n = int(positive("max_seqs", max_seqs, integer=True, scalar=True))
        cal = dataclasses.replace(cal, max_seqs_per_scheduler=n, label=f"{cal.label}, --max-seqs {n}")
    costs = step_costs(m, system, precision, engine_kv_precision(eng, kv_precision, m, precision))[2]
    # a decoding sequence holds its prompt plus the output so far; with spread-out output lengths, long outputs hold
    # their slots longer (length-biased): mean context = E[I] + E[O^2] / (2 E[O]), over the outputs as served: none
    # runs past the context, so a tail beyond it holds no KV (lognormal mean 200, sigma 3 on a 128K model: 810,000
    # tokens uncut, QA 2026-11-28)
    O1, o2 = O, O * O
    if do is not None and hasattr(do, "clipped_moments"):
        O1, o2 = do.clipped_moments(max(m.max_context - I, 1.0)) if m.max_context else (O, do.second_moment)
    L = I + o2 / (2 * O1)
    kern = engine_kernels(system.chip, cal, eng)
    return m, system, I, O, L, F, cal, eng, costs, kern


def _kernel_answer(res: dict, system, cal, eng, m) -> None:
    """Say in an answer which engine release it models and which framework version its kernel tables come from
    (`kernels`, `engine_release`; a note where the tables are another version's or framework's than asked)."""
    kp = engine_provenance(system.chip, cal, eng, m)
    res["kernels"] = kp["kernels"]
    res["engine_release"] = getattr(eng, "release", None) if eng is not None else None
    res["notes"] = list(res.get("notes") or []) + kp["notes"]


def throughput(model, hardware, *, input_len, output_len, gpus: int | None = None,
               precision: str | None = None, kv_precision: str | None = "auto", min_user_tps: float | None = None,
               max_ttft_s: float | None = None, disaggregated: bool = False, pareto: bool = False,
               ideal: bool = False, calibration_override: Calibration | None = None, layout=None,
               concurrency: int | None = None, speculative: Speculation | str | None = "auto", engine=None,
               cache_hit: float | None = None, prefill_gpus: int | None = None, eplb: str | None = None,
               tpot_p99_s: float | None = None, ttft_p99_s: float | None = None, max_seqs: int | None = None,
               max_tokens: int | None = None, prefill_layout=None, arrivals: str = "poisson",
               replay_latency: bool = True, cut_to_context: bool = True) -> dict:
    """Highest output tokens/s per GPU over layouts x batch that fits and meets the constraints; or, with both
    `layout` and `concurrency`, what exactly that deployment does (`fixed_deployment`); `disaggregated` with them
    decodes on `gpus` (default one replica) and prefills on `prefill_gpus` more.

    input_len / output_len: means, or distributions ('lognormal:mean=3790,p99=15000', a lengths file).
    speculative: also search with speculative decoding / MTP, and keep it where it serves more per GPU; 'auto'
    (default): the model's own MTP draft layers where its config ships them (`model_speculation`), none
    otherwise; None: none. A fixed deployment (`concurrency`) speculates only when given a Speculation.
    engine: 'vllm' | 'sglang' | 'trtllm': that engine's scheduler cap, KV memory fraction and kernels.
    cache_hit: fraction of prompt tokens served from the prefix cache (no prefill compute; KV still read).
    `calibration_override` replaces the efficiency constants (used when fitting them).
    eplb: whether the MoE layers run an expert-load balancer: 'auto' (default: from the calibrated EP width,
    `Calibration.eplb_min_ep`), 'on' (every expert-parallel group) or 'off'.
    tpot_p99_s / ttft_p99_s: tail-latency targets (what benchmarks and SLOs hold deployments to): points are
    screened with a closed-form p99 (`_evaluate`) and the chosen one is replayed in the request simulator
    (`fixed_deployment`) until its replayed p99s meet the targets; `min_user_tps` stays the mean form.
    arrivals: how requests arrive when p99 targets are checked: 'poisson' (default: an SLO on production traffic, or a
    server benchmark such as MLPerf's Server scenario: the answer is the highest Poisson rate at which the replayed
    p99s meet the targets, `_arrival_tail`) or 'closed' (a benchmark client holding the chosen concurrency in flight).
    max_seqs / max_tokens: the engine's sequences per scheduler and prompt tokens per step (its chunked-prefill
    budget), overriding the engine profile (`--max-seqs`, `--max-tokens`).
    prefill_layout: a fixed disaggregated deployment's prefill workers (default: `layout`).
    replay_latency (default): an aggregated answer's TTFT and p99s are its deployment's replayed closed loop, as
    `--layout --concurrency` gives them (`_with_replayed_latency`); False keeps the search's closed form (callers that
    read only its throughput, or replay it themselves).
    cut_to_context (default): lengths past the model's context are sized and replayed cut to it, as every door cuts
    them (`within_context`); False times them as asked (`validate`: a measured run's engine ran what it ran).
    """
    check_speculation(speculative)  # before the mode search and a fixed deployment, which take it as given
    if isinstance(speculative, str) and concurrency is None and len(draft_counts(model)) > 1:
        # a model shipping several draft layers: each draft count searched, the one that serves most answers
        return _best_draft_count(model, hardware, dict(
            input_len=input_len, output_len=output_len, gpus=gpus, precision=precision, kv_precision=kv_precision,
            min_user_tps=min_user_tps, max_ttft_s=max_ttft_s, disaggregated=disaggregated, pareto=pareto,
            ideal=ideal, calibration_override=calibration_override, layout=layout, engine=engine,
            cache_hit=cache_hit, eplb=eplb, tpot_p99_s=tpot_p99_s, ttft_p99_s=ttft_p99_s, max_seqs=max_seqs,
            max_tokens=max_tokens, arrivals=arrivals, prefill_gpus=prefill_gpus, prefill_layout=prefill_layout,
            replay_latency=replay_latency, cut_to_context=cut_to_context))
    input_len, output_len, ctx = cut_lengths(model, input_len, output_len, cut_to_context)

    def noted(r):  # the context note, once, on the lengths as asked
        if ctx and isinstance(r, dict) and ctx not in r.get("notes", []):
            r["notes"] = [ctx] + list(r.get("notes", []))
        return r

    if disaggregated is True and engine is not None:  # a release without the pools' KV connector runs none
        why = _engine(engine).refuses_disaggregation()
        if why:
            raise FitError(why)
    if prefill_layout is not None and prefill_gpus is None:
        raise InputError("--prefill-layout is the layout of a fixed disaggregated deployment's prefill pool: add "
                         "--disaggregated --prefill-gpus N --layout and --concurrency")
    if prefill_gpus is not None and not (disaggregated is True and concurrency is not None):
        raise InputError("--prefill-gpus sizes the prefill pool of a fixed disaggregated deployment: add "
                         "--disaggregated, --layout and --concurrency")
    if isinstance(disaggregated, str):
        if disaggregated != "auto":
            raise InputError(f"disaggregated must be True, False or 'auto', got {disaggregated!r}")
        if concurrency is not None:  # a fixed deployment is what it is: aggregated unless told
            disaggregated = False
        else:
            kw = dict(input_len=input_len, output_len=output_len, gpus=gpus, precision=precision,
                      kv_precision=kv_precision, min_user_tps=min_user_tps, max_ttft_s=max_ttft_s, pareto=pareto,
                      ideal=ideal, calibration_override=calibration_override, layout=layout,
                      speculative=speculative, engine=engine, cache_hit=cache_hit, eplb=eplb, tpot_p99_s=tpot_p99_s,
                      ttft_p99_s=ttft_p99_s, max_seqs=max_seqs, max_tokens=max_tokens, arrivals=arrivals,
                      cut_to_context=cut_to_context)
            return noted(_better_mode(model, hardware, kw))
    if concurrency is not None:
        if layout is None:
            raise InputError("--concurrency needs --layout: a fixed deployment is one layout at one concurrency")
        decode_gpus = None
        if disaggregated:
            if prefill_gpus is None:
                raise InputError("a fixed disaggregated deployment needs --prefill-gpus (the prefill pool); "
                                 "--gpus sizes the decode pool")
            from chalk.analyses.step.estimate import make_layout

            decode_gpus = count("gpus", gpus, MAX_GPUS) if gpus is not None else \
                make_layout(as_model(model), layout).replica_gpus
            gpus = decode_gpus + count("prefill_gpus", prefill_gpus, MAX_GPUS)
        return noted(fixed_deployment(model, hardware, layout=layout, concurrency=concurrency, input_len=input_len,
                                      output_len=output_len, gpus=gpus, precision=precision,
                                      kv_precision=kv_precision, ideal=ideal,
                                      calibration_override=calibration_override,
                                      speculative=None if isinstance(speculative, str) else speculative,
                                      engine=engine, cache_hit=cache_hit, decode_gpus=decode_gpus, eplb=eplb,
                                      max_seqs=max_seqs, max_tokens=max_tokens, prefill_layout=prefill_layout,
                                      cut_to_context=cut_to_context))
    spec = resolve_speculation(speculative, model)

    def answer(n):
        return _select(_search(model, hardware, input_len=input_len, output_len=output_len, gpus=n,
                               precision=precision, kv_precision=kv_precision, speeds=(min_user_tps,),
                               max_ttft_s=max_ttft_s, disaggregated=disaggregated, ideal=ideal,
                               calibration_override=calibration_override, layout=layout,
                               speculative=spec, engine=engine, cache_hit=cache_hit,
                               eplb=eplb, tpot_p99_s=tpot_p99_s, ttft_p99_s=ttft_p99_s, max_seqs=max_seqs,
                               max_tokens=max_tokens, arrivals=arrivals), min_user_tps, pareto)

    if gpus is None or layout is not None or disaggregated:
        res = answer(gpus)
        if layout is not None and gpus is not None and not disaggregated and res["gpus"] < gpus:
            res["notes"] = list(res.get("notes", [])) + [
                f"{gpus} GPUs given: {res['layout']} uses {res['gpus']} of them ({gpus - res['gpus']} idle)"]
    else:
        res = _aggregated_within(model, hardware, answer, count("gpus", gpus, MAX_GPUS), precision, kv_precision,
                                 ideal, calibration_override)
    if not replay_latency or "latency_window" in res:
        return noted(res)
    if res.get("mode") != "aggregated":
        # a disaggregated answer's TTFT is a lone prompt's prefill in closed form, blind to the queue for the prefill
        # pool: where a TTFT target binds it, the answer is its deployment as replayed (QA 2026-11-28: Llama-3.1-70B
        # on H100, 2,000 / 500 at >= 30 tokens/s per user and a 300 ms TTFT: the search said 238 ms at 596 in
        # flight, the same pools replayed 593 ms mean and 1.34 s p99, the prefill pool 95% busy)
        if not (max_ttft_s or (ttft_p99_s and arrivals == "closed")) or not res.get("prefill"):
            return noted(res)
        if (res.get("speculative") or {}).get("used"):
            # the request simulator runs no draft tokens: a speculating deployment is answered in closed form, and
            # its TTFT target is met by a lone prompt's prefill; say how busy the prefill pool it queues for is
            # (QA 2026-11-28: a 671B MoE on H200 at a 350 ms p99 TTFT, the pool 93% busy, TTFT 301 ms as the mean)
            pre = res["prefill"]
            asked = float(res["output_tokens_per_s_per_gpu"]) * float(res["gpus"]) / float(res["output_len"])
            pool = float(pre["input_tokens_per_s_per_gpu"]) * float(pre["parallelism"]["gpus"]) / max(
                float(res["input_len"]) * (1.0 - float(res.get("cache_hit") or 0.0)), 1.0)
            res = dict(res)
            res["notes"] = list(res.get("notes") or []) + [
                f"TTFT is the closed form's, a lone prompt's prefill: the request simulator runs no draft tokens, so "
                f"the queue for the prefill pool is not in it; the pool admits {pool:.3g} requests/s for the "
                f"{asked:.3g} asked ({asked / pool:.0%} busy), and a busy pool's prompts wait"]
            return noted(res)
    return noted(_with_replayed_latency(res, model, hardware, max_ttft_s, spec, dict(
        input_len=input_len, output_len=output_len, ideal=ideal, calibration_override=calibration_override,
        engine=engine, cache_hit=cache_hit, eplb=eplb, max_seqs=max_seqs, max_tokens=max_tokens,
        cut_to_context=cut_to_context), ttft_p99_s=ttft_p99_s if arrivals == "closed" else None))


#: A mean TTFT target (`max_ttft_s`) the chosen deployment misses when replayed: it is replayed at fewer in flight,
#: each try TTFT_STEP_DOWN of the last, at most TTFT_STEPS times.
TTFT_STEP_DOWN, TTFT_STEPS = 0.8, 12


#: The figures an aggregated search answer takes from its deployment's replay (`_with_replayed_latency`); the
#: search's own closed-form values stay beside them as `<key>_closed_form`.
REPLAYED_FIGURES = ("output_tokens_per_s_per_gpu", "input_tokens_per_s_per_gpu", "user_tokens_per_s", "tpot_s",
                    "ttft_s", "tpot_p99_s", "ttft_p99_s", "concurrency", "cost_per_mtok_output_usd")

#: The cost split by phase (decode share per output token, prefill share per input token): on a replayed answer the
#: closed form's phase shares at the replay's rates, so the split still adds up to the replayed total (`_split_at`).
COST_SPLIT = ("cost_per_mtok_output_decode_share_usd", "cost_per_mtok_input_prefill_share_usd")


def _split_at(out: dict, closed: dict) -> None:
    """Move `out`'s cost split by phase onto its (replayed) total: both shares scale with 1 / output rate, as the
    total does, the time shares the closed form's (QA 2026-11-28: the split of a replayed answer summed to the
    closed form's total, 0.1% to 7% off the one printed)."""
    was, now = closed.get("cost_per_mtok_output_usd"), out.get("cost_per_mtok_output_usd")
    if not was or now is None:
        return
    for k in COST_SPLIT:
        if k in closed:
            out[k] = float(closed[k]) * float(now) / float(was)


def _with_replayed_latency(res: dict, model, hardware, max_ttft_s, spec, kw: dict, ttft_p99_s=None) -> dict:
    """An aggregated search answer as its deployment does: the layout and concurrency the search chose (screened on
    its closed form, whose TTFT is a lone prompt's prefill) replayed in the request-level engine model as a closed
    loop (`fixed_deployment`), so `throughput` and `throughput --layout --concurrency` give one deployment the same
    figures (Llama-3.1-70B TP4 on H100 at 196 in flight, 2,000 in / 300 out: the search said a 0.35 s TTFT, the
    replay of the same deployment 0.67 s mean, 1.32 s p99) and Little's law holds on them. The closed form's figures
    stay beside them (`<key>_closed_form`: what `chalk validate` judges a search row by). Where a mean TTFT target is
    given and the replay misses it, the layout is replayed at fewer in flight until it meets it, and that deployment,
    as `--layout --concurrency` gives it, is the answer. `spec`: the search's speculation, replayed where the
    answer uses it; `kw`: the question's other `fixed_deployment` arguments. A disaggregated answer is replayed with
    its two pools (the decode replicas of its layout, the prefill pool's workers); `ttft_p99_s`: a p99 TTFT target
    its closed loop must meet as well (`--arrivals closed`)."""
    par = res["parallelism"]
    lay = layout_spec(par)
    R = max(int(par.get("dp") or 1), 1)  # replicas of the layout: each at the search's point, rounded alike
    conc = R * max(int(round(float(res["concurrency"]) / R)), 1)
    fixed = dict(kw, layout=lay, gpus=int(res["gpus"]), precision=res["precision"], kv_precision=res["kv_precision"],
                 speculative=spec if (res.get("speculative") or {}).get("used") else None)
    if res.get("mode") == "disaggregated":
        fixed.update(decode_gpus=int(res["decode_gpus"]), prefill_layout=layout_spec(res["prefill"]["parallelism"]))

    speed = res.get("min_user_tps")  # the per-user floor the screen held in closed form; the replay is held to it
    # too (QA 2026-11-28: gpt-oss-120b on H200 answered 17.8 tokens/s per user under a floor of 20, the closed form's
    # 20.05 screened, the replay's mixed steps slower)

    def missed(r) -> bool:
        return bool((max_ttft_s and r["ttft_s"] > max_ttft_s) or (ttft_p99_s and r["ttft_p99_s"] > ttft_p99_s)
                    or (speed and r["user_tokens_per_s"] < speed * (1 - 1e-9)))

    def target() -> str:
        return " and ".join(t for t in (f"a mean TTFT of {max_ttft_s * 1e3:.0f} ms" if max_ttft_s else "",
                                        f"a p99 TTFT of {ttft_p99_s * 1e3:.0f} ms" if ttft_p99_s else "",
                                        f"{speed:g} tokens/s per user" if speed else "") if t)

    def replayed(r) -> str:
        return (f"a mean TTFT of {r['ttft_s'] * 1e3:.0f} ms (p99 {r['ttft_p99_s'] * 1e3:.0f} ms)"
                + (f" at {r['user_tokens_per_s']:.4g} tokens/s per user" if speed else ""))

    r = fixed_deployment(model, hardware, concurrency=conc, **fixed)
    if missed(r):
        first, replicas = replayed(r), max(int(r.get("replicas") or 1), 1)
        for _ in range(TTFT_STEPS):
            if conc <= replicas:
                break
            conc = max(int(conc * TTFT_STEP_DOWN), replicas)
            r = fixed_deployment(model, hardware, concurrency=conc, **fixed)
            if not missed(r):
                r["notes"] = list(r.get("notes") or []) + [
                    f"the search's best point ({res['layout']} at {res['concurrency']:.0f} in flight) replayed "
                    f"{first} against {target()}: the same deployment at {conc} in flight meets it"]
                r["max_ttft_s"], r["min_user_tps"] = max_ttft_s, speed
                return r
        raise FitError(f"{res['layout']} of {res['model']}, the search's best point under {target()} by its closed "
                       f"form, replays {first} and no fewer in flight down to {conc} meets it")
    out = dict(res)
    for k in REPLAYED_FIGURES:
        out[f"{k}_closed_form"] = res[k]
        out[k] = r[k]
    _split_at(out, res)
    for k in ("latency_window", "ttft_p50_s", "tpot_p50_s", "mean_step", "decoding_per_replica", "range"):
        if k in r:
            out[k] = r[k]
    # the modes table's rows at the chosen point (price multiple 1) are this answer
    out["modes"] = [dict(mo, cost_per_mtok_output_usd=r["cost_per_mtok_output_usd"],
                         user_tokens_per_s=r["user_tokens_per_s"])
                    if mo.get("price_multiple") == 1.0 and mo.get("user_tokens_per_s") == res["user_tokens_per_s"]
                    else mo for mo in (res.get("modes") or [])]
    out["latency_source"] = (f"the chosen deployment ({res['layout']}, {conc} in flight) as `--layout --concurrency` "
                             f"gives it: {r['latency_source']}")
    return ServingResult(out) if isinstance(res, ServingResult) else out


def _question_sizes(model, hardware, precision, kv_precision, ideal, calibration_override=None) -> list[int]:
    """`search_sizes` for a question's model, hardware and precisions (the sizes a search without --gpus tries), under
    the question's calibration (its memory reserve decides what fits)."""
    m, system = as_model(model), as_system(hardware)
    return search_sizes(system, step_costs(m, system, precision, kv_precision)[2],
                        calibration_override or calibration(ideal, system.chip))


def _aggregated_within(model, hardware, answer, given: int, precision, kv_precision, ideal,
                       calibration_override=None) -> dict:
    """The aggregated answer on `given` GPUs, or on fewer where that serves more: `given` GPUs are split into equal
    replicas of one layout, so a size whose layouts divide it badly (6 H100s hold Llama-3.1-70B only as TP2 x 3, its
    weights leaving little KV) can serve less than a smaller natural size on the same GPUs (TP4 on 4 of the 6, two
    idle). The search's own sizes below `given` that do not divide it are answered too (those that divide it are
    among `given`'s own layouts, as replicas), and the answer serving the most output tokens/s in all wins; it says
    how many of the GPUs given it uses."""
    sizes = [n for n in _question_sizes(model, hardware, precision, kv_precision, ideal, calibration_override)
             if n < given and given % n]
    found, err = [], None
    for n in [given, *sizes]:
        try:
            found.append(answer(n))
        except FitError as e:
            err = err or e
    if not found:
        raise err
    best = max(found, key=lambda r: r["output_tokens_per_s_per_gpu"] * r["gpus"])
    if best["gpus"] < given:
        split = ("than one that splits all of them into equal replicas" if found[0]["gpus"] == given else
                 "where no split of all of them into equal replicas fits")
        best["notes"] = list(best.get("notes", [])) + [
            f"{given} GPUs given: the best aggregated deployment uses {best['gpus']} of them ({best['layout']}; "
            f"{given - best['gpus']} idle), serving more in all {split}"]
    return best


#: How much more output per GPU a disaggregated answer must serve than the aggregated one for `throughput`'s mode
#: search (disaggregated='auto') to choose it: a second pool, and every prompt's KV moved between pools, are not worth
#: a tie inside the step model's own resolution (QA 2026-11-28: llama-3.1-8b on H200, 200K in / 1 out, answered with
#: 9,820 GPUs in two pools for 0.35% more per GPU than one GPU aggregated)
DISAGGREGATION_MARGIN = 0.05


def _better_mode(model, hardware, kw) -> dict:
    """`throughput` with disaggregated='auto': both modes searched under the same constraints, the one serving more
    output tokens/s per GPU (whole deployments: a disaggregated answer counts its prefill pool's GPUs) answers, and
    the other's figure is stated beside it."""
    found, why = {}, {}
    for mode in ("aggregated", "disaggregated"):
        try:
            found[mode] = throughput(model, hardware, disaggregated=mode == "disaggregated", **kw)
        except FitError as e:
            why[mode] = str(e)
    dis, given = found.get("disaggregated"), kw.get("gpus")
    if dis is not None and given is not None and (dis.get("gpus") or 0) > given:
        # --gpus is the deployment's size: pools that need more GPUs than that are not an answer to it; a smaller
        # decode pool whose prefill pool fits beside it within the GPUs given is (16 H100s answered aggregated at
        # 59.6k tokens/s where 14 of them, disaggregated, serve 71.9k)
        smaller = _disaggregated_within(model, hardware, kw, int(given), dis)
        if smaller is not None:
            found["disaggregated"] = smaller
        else:
            why["disaggregated"] = (f"its pools need {dis['gpus']} GPUs ({dis.get('decode_gpus')} decode + "
                                    f"{dis.get('prefill_gpus')} prefill), more than the {given} given, and no "
                                    "smaller decode pool's fit beside it; --mode disaggregated sizes the decode pool "
                                    "with --gpus")
            del found["disaggregated"]
    if not found:
        raise FitError(f"neither aggregated nor disaggregated serving meets the constraints: {why['aggregated']}")
    # per GPU given where --gpus sizes the deployment (a disaggregated answer within it may leave GPUs idle), else per
    # GPU of each answer's own deployment
    per = (lambda r: r["output_tokens_per_s_per_gpu"] * r["gpus"] / given) if given is not None else \
        (lambda r: r["output_tokens_per_s_per_gpu"])
    # two pools where they serve clearly more, one where it is a tie (DISAGGREGATION_MARGIN)
    best = "disaggregated" if "disaggregated" in found and (
        "aggregated" not in found
        or per(found["disaggregated"]) > per(found["aggregated"]) * (1 + DISAGGREGATION_MARGIN)) else "aggregated"
    res = found[best]
    other = "disaggregated" if best == "aggregated" else "aggregated"
    res["mode_search"] = {"chosen": best, "searched": ["aggregated", "disaggregated"],
                          other: ({"output_tokens_per_s_per_gpu": found[other]["output_tokens_per_s_per_gpu"],
                                   "layout": found[other]["layout"], "gpus": found[other]["gpus"]}
                                  if other in found else {"error": why[other]})}
    tie = other in found and per(found[other]) >= per(res)

    def rate(r):  # the figure compared, as compared: per GPU given where --gpus sized the deployment (QA 2026-11-28:
        # the note printed 3,252 per GPU used as 'within 5%' of 2,374, compared as 2,439 per GPU given)
        own = r["output_tokens_per_s_per_gpu"]
        return f"{own:.4g}" if given is None or r["gpus"] == given else \
            f"{per(r):.4g} per GPU of the {given} given, {own:.4g} per GPU used"

    res["notes"] = list(res.get("notes", [])) + [
        ((f"{best} serving answers: " + (
            f"disaggregated serving's output tokens/s per GPU, {rate(found[other])} "
            f"({found[other]['gpus']} GPUs, {found[other]['layout']}), is within {DISAGGREGATION_MARGIN:.0%} of its "
            f"{rate(res)}, not worth a second pool" if tie else
            f"it serves more output tokens/s per GPU than {other} "
            f"({rate(found[other])} on {found[other]['layout']})")) if other in found
         else f"{best} serving answers; {other} serving does not: {why[other]}") + "; --mode sets one"]
    return res


#: Most decode-pool sizes `_disaggregated_within` answers per replica size
WITHIN_TRIES = 4


def _disaggregated_within(model, hardware, kw, given: int, first: dict | None = None):
    """The disaggregated answer whose decode and prefill pools together fit in `given` GPUs and serve the most. Decode
    pools of k whole replicas, for each replica size (the layout given, else each deployment size the search
    considers): the first k tried where the GPUs per decode GPU of `first` (the answer whose decode pool alone is
    `given`) say the pools fit, then toward a fit (one replica fewer while the pools need more GPUs, one more while
    no layout of that pool serves) and one more while they still fit. (A bisection over multiples of the smallest
    size read a pool no layout of which serves as too large: it answered 4 decode GPUs of Llama-3.1-70B on 72 H100s
    at a 30 ms p99 TPOT, 3.5k tokens/s against 17.6k on 64.) None where no pool fits."""
    if kw.get("layout") is not None:  # the decode replica given: pools of whole replicas of it
        from chalk.analyses.step.estimate import make_layout

        units = [make_layout(as_model(model), kw["layout"]).replica_gpus]
    else:
        units = sorted(set(_question_sizes(model, hardware, kw.get("precision"), kw.get("kv_precision", "auto"),
                                           kw.get("ideal", False), kw.get("calibration_override"))))
    per = float(first["gpus"]) / float(first["decode_gpus"]) if first is not None and first.get("decode_gpus") \
        else 2.0
    answers: dict = {}  # decode GPUs -> answer (None: no layout of that pool serves)

    def at(d) -> str:  # 'ok' (fits in `given`), 'big' (its pools need more) or 'small' (no layout of it serves)
        if d not in answers:
            try:
                answers[d] = throughput(model, hardware, disaggregated=True, **{**kw, "gpus": d})
            except FitError:
                answers[d] = None
        r = answers[d]
        return "small" if r is None else "ok" if (r.get("gpus") or 0) <= given else "big"

    for unit in units:
        top = (given - 1) // unit  # k replicas of `unit` GPUs, k in [1, top]
        if top < 1:
            continue
        k = min(max(int(given / per // unit), 1), top)
        state, tries = at(unit * k), 1
        step = -1 if state == "big" else 1  # toward a fit; from a fit, one more while it still fits
        while tries < WITHIN_TRIES and 1 <= k + step <= top:
            nxt, tries = at(unit * (k + step)), tries + 1
            if nxt != "ok" and (state == "ok" or nxt != state):  # past the last fit, or from too small to too large
                break
            k, state = k + step, nxt
            if state == "ok":
                step = 1
    fits = [r for r in answers.values() if r is not None and (r.get("gpus") or 0) <= given]
    return max(fits, key=lambda r: r["output_tokens_per_s_per_gpu"] * r["gpus"]) if fits else None


@dataclass(frozen=True)
class _Setup:
    """What every serving question starts from (`_serving_setup`'s first nine answers): the model, the system,
    the mean input, output and decode-context lengths, the prefix-cache hit share, the calibration, the engine
    profile and the model's costs."""

    m: object
    system: System
    I: float
    O: float
    L: float
    F: float
    cal: Calibration
    eng: object
    costs: object


@dataclass(frozen=True)
class _Search(_Setup):
    """Every (layout, batch) point of one serving search, evaluated once: `_select` picks from it under a per-user
    speed constraint, so several constraints cost one evaluation of the step model."""

    sizes: list
    layouts: list
    g: dict
    Ip: float
    ev: dict
    ev_spec: dict | None
    speculative: Speculation | None
    pool: dict | None
    max_ttft_s: float | None
    disaggregated: bool
    tpot_p99_s: float | None = None
    ttft_p99_s: float | None = None
    ttft_p99_ratio: float = 1.0  # p99 prompt / mean prompt: a p99 TTFT is the p99 prompt's
    args: dict | None = None  # what a replay of a chosen point needs (`fixed_deployment`'s arguments)
    pool_points: tuple | None = None  # per layout, what `pool` was picked from (`_prefill_pool_points`)
    arrivals: str = "poisson"  # how requests arrive when p99 targets are checked (`throughput`)
    gpus_given: bool = False  # --gpus sized the decode pool: its layouts fill it, and no whole-pool multiple is added


def _search(model, hardware, *, input_len, output_len, gpus=None, precision=None, kv_precision="auto", speeds=(),
            max_ttft_s=None, disaggregated=False, ideal=False, calibration_override=None, layout=None,
            speculative=None, engine=None, cache_hit=None, eplb=None, tpot_p99_s=None, ttft_p99_s=None,
            max_seqs=None, max_tokens=None, arrivals="poisson") -> _Search:
    """The layouts x batch grid of `throughput` and its metrics, with and without `speculative`; `speeds`: the
    min_user_tps values the caller will select at (checked here, where `throughput` has always checked them)."""
    m, system, I, O, L, F, cal, eng, costs, kern = _serving_setup(model, hardware, input_len, output_len, precision,
                                                                  kv_precision, ideal, calibration_override,
                                                                  engine, cache_hit, eplb, max_seqs, max_tokens)
    for v in speeds:
        if v is not None:
            positive("min_user_tps", v, scalar=True)
    if max_ttft_s is not None:
        positive("max_ttft_s", max_ttft_s, scalar=True)
    for name, v in (("tpot_p99_s", tpot_p99_s), ("ttft_p99_s", ttft_p99_s)):
        if v is not None:
            positive(name, v, scalar=True)
    if not isinstance(arrivals, str) or arrivals not in ARRIVALS:
        raise InputError(f"arrivals must be one of {', '.join(ARRIVALS)}, got {short(arrivals)}")
    if gpus is not None:
        gpus = count("gpus", gpus, MAX_GPUS)
        check_reach(system, gpus)
    if layout is not None:
        from chalk.analyses.step.estimate import make_layout

        lay = make_layout(m, layout)
        engine_runs(eng, lay)
        if gpus is not None and lay.replica_gpus > gpus:
            raise InputError(f"layout {lay.label()} needs {lay.replica_gpus} GPUs, more than the --gpus {gpus} given")
        if gpus is not None:  # the GPUs given hold as many replicas of the layout as fit
            lay = dataclasses.replace(lay, dp=gpus // lay.replica_gpus)
        layouts = [lay]
        sizes = [lay.gpus]
    else:
        sizes = [gpus] if gpus else search_sizes(system, costs, cal)
        layouts = [lay for n in sizes for lay in enumerate_layouts(m, n, system.chips)
                   if eng is None or eng.attention_dp_with_tp or lay.attn_dp == 1 or lay.tp == 1]
    _check_fit(m, costs, system, cal, sizes, layouts)
    g = _grid(layouts, cal.max_seqs_per_scheduler)
    Ip = I * (1 - F)  # prompt tokens that need prefill compute
    ovh = engine_overhead_s(eng, cal)
    chunk = _chunk(eng, max_tokens)
    kw = dict(L=L, overhead_s=ovh, chunk=chunk, kernels=kern or False, cap_prefill=max_tokens is not None, eng=eng)
    ev = _evaluate(costs, system, g, Ip, O, cal, disaggregated, **kw)
    ev_s = None
    if speculative is not None:  # search with and without speculation; `_select` keeps the better per point
        ev_s = _evaluate(costs, system, g, Ip, O, cal, disaggregated, spec=speculative, **kw)
    pool = pool_points = None
    p99_ratio = p99_prompt_ratio(input_len, I)
    if disaggregated:
        # a prefill worker must prefill the p99 prompt alone within the p99 TTFT (less the request latency; prefill
        # time grows at least linearly with the prompt), else the pool's fastest-per-GPU layout answered every p99
        # target with narrow workers (Llama-3.1-70B, 85k-token prompts: TP2 workers at 19 s a prompt, no answer
        # for a 15 s p99 that TP8 meets; QA 2026-11-28)
        pool_ttft = max_ttft_s
        if ttft_p99_s:
            per_mean = (ttft_p99_s - cal.request_latency_s) / p99_ratio
            pool_ttft = min(pool_ttft, per_mean) if pool_ttft else per_mean
        pool_points = _prefill_pool_points(costs, system, layouts, max(Ip, 1.0), cal, pool_ttft, max_tokens)
        pool = _prefill_pool_or_fail(m, system, layouts, pool_points, pool_ttft)
    args = dict(input_len=input_len, output_len=output_len, precision=precision, kv_precision=kv_precision,
                ideal=ideal, calibration_override=calibration_override, engine=engine, cache_hit=cache_hit,
                eplb=eplb, max_seqs=max_seqs, max_tokens=max_tokens)
    return _Search(m, system, I, O, L, F, cal, eng, costs, sizes, layouts, g, Ip, ev, ev_s, speculative, pool,
                   max_ttft_s, disaggregated, tpot_p99_s, ttft_p99_s, p99_ratio, args,
                   pool_points, arrivals, gpus is not None)


def _check_fit(m, costs, system, cal, sizes, layouts) -> None:
    """FitError where `sizes` hold no valid layout, or where the weights alone overflow the most GPUs searched (the
    cheap check, before any step is timed)."""
    if not layouts:
        raise FitError(f"no valid layout of {m.id} on {sizes} x {system.chip.id}")
    total = costs.dense_weight_bytes + costs.expert_weight_bytes
    if total / max(sizes) > system.chip.hbm_bytes * (1 - cal.memory_reserve):
        raise FitError(_no_fit(m, costs, sizes, system, cal))


def _prefill_pool_or_fail(m, system, layouts, points, max_ttft_s) -> dict:
    """The prefill pool picked from `points` (`_prefill_pool_points` over `layouts`), or FitError saying none fits."""
    pool = _pick_prefill_pool(layouts, *points)
    if pool is None:
        raise FitError(f"no prefill layout of {m.id} on {system.chip.id} fits"
                       + (f" and prefills a prompt alone within {duration_text(max_ttft_s)} (the TTFT target, at "
                          "the p99 prompt where a p99 is asked)" if max_ttft_s else ""))
    return pool


def _no_fit(m, costs, sizes, system, cal, context=None) -> str:
    """Why nothing fits: the weights alone, or, where they fit the most GPUs searched, one request's KV cache of
    `context` tokens beside them."""
    total = costs.dense_weight_bytes + costs.expert_weight_bytes
    usable = system.chip.hbm_bytes * (1 - cal.memory_reserve)
    on = f"any layout on {'/'.join(map(str, sizes))} x {system.chip.id} ({usable / 1e9:.0f} GB usable per chip)"
    if context is not None and total / max(sizes) <= usable:
        kv = float(costs.kv_bytes(float(context)))
        return (f"{m.id}'s {total / 1e9:.0f} GB of {costs.precision} weights fit, but one request's KV cache of "
                f"{float(context):,.0f} tokens ({kv / 1e9:,.3g} GB of {costs.kv_precision}) does not fit beside them "
                f"on {on}")
    return f"{m.id} ({total / 1e9:.0f} GB of {costs.precision} weights) does not fit {on}"


def _chunk(eng, max_tokens=None):
    """Prompt tokens per step (the chunked-prefill budget): `max_tokens` if given, else the engine's, else the
    budget engines default to (`default_chunk_tokens`)."""
    if max_tokens is not None:
        return int(positive("max_tokens", max_tokens, integer=True, scalar=True))
    return getattr(eng, "chunked_prefill_tokens", None) if eng is not None else default_chunk_tokens()


def engine_rank_chunk(eng, attn_dp=1.0, max_tokens=None):
    """Each attention-DP rank's prompt tokens per step (`rank_chunk_tokens` of the budget `_chunk` gives): a whole
    number, or None where the engine prefills whole prompts."""
    chunk = rank_chunk_tokens(eng, _chunk(eng, max_tokens), attn_dp)
    return int(chunk) if chunk else chunk


@lru_cache(maxsize=1)
def default_chunk_tokens() -> int:
    """Prompt tokens per step when no engine is named: the median of the catalog's engine profiles' own defaults
    (their newest releases: vLLM's max_num_batched_tokens on >= 70 GiB GPUs, SGLang's chunked_prefill_size on
    80-160 GB GPUs, TensorRT-LLM's max_num_tokens; each sourced in catalog/engines/). An engine never prefills a
    burst of prompts in one unbounded step, so neither does chalk's engine-agnostic default."""
    from chalk.specs.engine import ENGINES, load_engine

    return int(np.median([load_engine(e).chunked_prefill_tokens for e in ENGINES]))


def _select(s: _Search, min_user_tps: float | None = None, pareto: bool = False) -> dict:
    """`throughput`'s answer from an evaluated search: the most output tokens/s per GPU at >= `min_user_tps`."""
    m, system, I, O, cal, costs, g, Ip = s.m, s.system, s.I, s.O, s.cal, s.costs, s.g, s.Ip
    max_ttft_s, speculative, disaggregated, pool = s.max_ttft_s, s.speculative, s.disaggregated, s.pool
    ev = dict(s.ev)  # the search's arrays are shared between selections: replace them here, never write into them
    spec_used = None
    n = len(g["B"])
    better = np.zeros(n, dtype=bool)
    if s.ev_spec is not None:  # keep the better of with and without speculation per point
        ev_s = s.ev_spec
        better = ev_s["output_per_gpu"] > ev["output_per_gpu"]
        if min_user_tps:
            better = (ev_s["user_tokens_per_s"] >= min_user_tps) & ((ev["user_tokens_per_s"] < min_user_tps)
                                                                  | better)
        keys = ("tpot_s", "tpot_p99_s", "user_tokens_per_s", "output_per_gpu") + (() if disaggregated else
                                                                   ("ttft_s", "prefill_share"))
        for key in keys:
            ev[key] = np.where(better, ev_s[key], ev[key])
        spec_used = speculative
    ev["speculative"] = better
    def pool_ratio(out):  # prefill-pool GPUs per decode GPU at `out` output tokens/s per decode GPU
        return out * Ip / O / pool["input_tokens_per_s_per_gpu"]

    if disaggregated:
        ratio = pool_ratio(ev["output_per_gpu"])
        per_gpu = ev["output_per_gpu"] / (1 + ratio)
        ev["ttft_s"], ev["prefill_share"] = np.full_like(per_gpu, pool["ttft_s"]), np.zeros_like(per_gpu)
    else:
        ratio = np.zeros_like(ev["output_per_gpu"])
        per_gpu = ev["output_per_gpu"]
    lat = cal.request_latency_s

    def meets(e, engine_ttft):
        """Where evaluation `e` (engine TTFT `engine_ttft`) fits and meets every constraint asked: TTFT on the client's
        clock, as a fixed deployment and every replay report it (the engine's plus the calibrated per-request latency
        outside its steps), its p99 at the p99 prompt."""
        ok = e["fits"].copy()
        if min_user_tps:
            ok &= e["user_tokens_per_s"] >= min_user_tps
        if max_ttft_s:
            ok &= engine_ttft + lat <= max_ttft_s
        if s.tpot_p99_s:
            ok &= e["tpot_p99_s"] <= s.tpot_p99_s
        if s.ttft_p99_s:
            ok &= engine_ttft * s.ttft_p99_ratio + lat <= s.ttft_p99_s
        return ok

    engine_ttft = ev["ttft_s"]
    ev["ttft_s"], ev["ttft_p99_s"] = engine_ttft + lat, engine_ttft * s.ttft_p99_ratio + lat
    feasible = ev["fits"].copy()
    if not np.any(feasible):
        raise FitError(_no_fit(m, costs, s.sizes, system, cal, context=I + O))
    ok = meets(ev, engine_ttft)
    if not np.any(ok):
        raise FitError(_unmet_constraints(m, system, cal, ev, feasible, min_user_tps, max_ttft_s, s, speculative))
    plain = None
    if s.ev_spec is not None:  # the best point without speculation under the same constraints (where MTP won at
        # every point, the merged arrays held no plain point and the gain over plain read null)
        e0 = s.ev
        ok0 = meets(e0, np.full_like(e0["output_per_gpu"], pool["ttft_s"]) if disaggregated else e0["ttft_s"])
        pg0 = e0["output_per_gpu"] / (1 + pool_ratio(e0["output_per_gpu"])) if disaggregated else e0["output_per_gpu"]
        plain = float(np.max(np.where(ok0, pg0, -np.inf))) if np.any(ok0) else None
    i = int(np.argmax(np.where(ok, per_gpu, -np.inf)))
    tail = replayed_in_flight = None  # (the open loop's requests in flight per replica, where one was replayed)
    screen = dict(ev), per_gpu  # every point on the screen's footing (a replayed tail below replaces the chosen one)
    if (s.tpot_p99_s or s.ttft_p99_s) and not disaggregated:
        arrived = _arrival_tail(s, ok, per_gpu, ev["speculative"], min_user_tps) if s.arrivals == "poisson" \
            else None
        if arrived is None:  # a closed loop, or every point passing the screen speculates (replayed closed)
            i, tail = _replayed_tail(s, ok, per_gpu, i, ev["speculative"])
        else:  # the open loop's figures are the chosen point's: its grid point is the one nearest its mean batch
            i, out, tail, sim = arrived
            g = dict(g, B=g["B"].copy())
            per_gpu = per_gpu.copy()
            for k in ("tpot_s", "ttft_s", "user_tokens_per_s"):
                ev[k] = ev[k].copy()
            per_gpu[i] = out
            ev["tpot_s"][i], ev["ttft_s"][i] = float(sim.mean_tpot_s), float(sim.mean_ttft_s)  # client's clock
            ev["user_tokens_per_s"][i] = 1.0 / float(sim.mean_tpot_s)
            g["B"][i] = float(sim.mean_batch)
            replayed_in_flight = float(sim.mean_in_flight)
    elif (s.tpot_p99_s or s.ttft_p99_s) and s.arrivals == "poisson":  # disaggregated: the pools replayed open loop
        f, tail, rep = _disagg_tail(s, i, ev, ratio)
        g, per_gpu = dict(g, B=g["B"].copy()), per_gpu.copy()
        for k in ("output_per_gpu", "tpot_s", "ttft_s", "user_tokens_per_s"):
            ev[k] = ev[k].copy()
        ev["output_per_gpu"][i] *= f  # decode output per decode GPU at the rate the replay held the targets at, on
        per_gpu[i] = ev["output_per_gpu"][i] / (1 + ratio[i])  # the pools it replayed (`_point`'s whole deployment)
        ev["tpot_s"][i], ev["ttft_s"][i] = rep.mean_tpot_s, rep.mean_ttft_s  # the replay's means, client's clock
        ev["user_tokens_per_s"][i], g["B"][i] = 1.0 / rep.mean_tpot_s, rep.mean_batch
        replayed_in_flight = math.nan  # Little's law from the answer's own rate and latencies (below): the fleet
        # replay's in-flight count estimates its prefill queue's share (`fleet.replay`) and read 2.3% under it
    idx = np.flatnonzero(feasible & ((ev["ttft_s"] <= max_ttft_s) if max_ttft_s else True))
    front = idx[_pareto(ev["user_tokens_per_s"][idx], per_gpu[idx])]
    res = _point(i, g, ev, per_gpu, ratio, s.layouts, system, costs, cal, I, O, pool, disaggregated, s.gpus_given)
    res.update(model=m.id, hardware=system.id, precision=costs.precision, kv_precision=costs.kv_precision,
               input_len=I, output_len=O, efficiency=cal.label, min_user_tps=min_user_tps, max_ttft_s=max_ttft_s,
               notes=_notes(system, cal, m, res["parallelism"]),
               engine=s.eng.id if s.eng is not None else None, cache_hit=s.F,
               mean_decode_context=s.L)
    if replayed_in_flight is not None:  # the open loop's own requests in flight (waiting for a prefill chunk
        # included), not the closed form's from its mean decode batch (QA 2026-11-28: 64.8 against 69.2 by Little's
        # law from the answer's own rate and latencies)
        res["concurrency"] = replayed_in_flight * max(int(res["parallelism"].get("dp") or 1), 1) \
            if math.isfinite(replayed_in_flight) else float(res["output_tokens_per_s_per_gpu"]) * res["gpus"] / O * \
            (float(res["ttft_s"]) + float(res["tpot_s"]) * max(O - 1.0, 0.0))
    res["tpot_p99_s"], res["ttft_p99_s"] = float(ev["tpot_p99_s"][i]), float(ev["ttft_p99_s"][i])
    res["tpot_p99_s_max"], res["ttft_p99_s_max"] = s.tpot_p99_s, s.ttft_p99_s
    _kernel_answer(res, system, cal, s.eng, m)
    if tail is not None:  # the replayed tail is the answer's; the screen's closed form stays beside it
        res["tpot_p99_s_closed_form"], res["ttft_p99_s_closed_form"] = res["tpot_p99_s"], res["ttft_p99_s"]
        ans = tail.pop("replayed_answer", None)
        res.update(tail)
        res["tpot_p99_s"], res["ttft_p99_s"] = tail["tpot_p99_s_replayed"], tail["ttft_p99_s_replayed"]
        if ans is not None:  # a closed loop's replay: its means and rates are the answer's as its p99s are (QA
            # 2026-11-28: --arrivals closed gave p99s from the replay at 147 in flight beside a closed-form mean TTFT
            # 18% under the same replay's), the closed form's beside them
            dp = max(int(res["parallelism"].get("dp") or 1), 1)
            closed = dict(res)
            for k in REPLAYED_FIGURES:
                res[f"{k}_closed_form"] = res[k]
                res[k] = float(ans[k]) * (dp if k == "concurrency" else 1)
            _split_at(res, closed)
            for k in ("ttft_p50_s", "tpot_p50_s", "mean_step", "decoding_per_replica"):
                if k in ans:
                    res[k] = ans[k]
        if tail["tail_latency_source"].startswith("closed form"):  # not a replay: its fewer decoding sequences at
            # the same in-flight count put its TPOT below the search point's mean; a p99 is at least the mean
            res["tpot_p99_s"] = max(res["tpot_p99_s"], float(res["tpot_s"]))
            res["ttft_p99_s"] = max(res["ttft_p99_s"], float(res["ttft_s"]))
    else:
        res["latency_source"] = ("closed form: a lone prompt's prefill plus the calibrated per-request latency, "
                                 "as `--layout --concurrency` gives with simulate=False; the replayed closed loop "
                                 "(prompts queueing for their prefill chunks) is that command's answer")
    res["speculative"] = _spec_report(spec_used, bool(ev["speculative"][i]), per_gpu, i, plain)
    # the modes' rates on the answer's footing: a disaggregated answer counts whole prefill workers (`_point`), the
    # grid a fractional pool, which put its own 1x row at 0.95x its price (DeepSeek-R1 on H100)
    whole = float(res["output_tokens_per_s_per_gpu"]) / float(per_gpu[i]) if per_gpu[i] > 0 else 1.0
    if tail is None:
        res["modes"] = _modes(front, ev, per_gpu * whole, s.layouts, g, res, system)
    else:  # the replayed answer beside neighbours screened in closed form read faster and cheaper than itself
        # (QA 2026-11-28: a 1x row at 0.94x its price): the multiples on the screen's footing, moved onto the answer's
        e0, pg0 = screen
        f0 = float(res["output_tokens_per_s_per_gpu"]) / float(pg0[i]) if pg0[i] > 0 else 1.0
        front0 = idx[_pareto(e0["user_tokens_per_s"][idx], pg0[idx])]
        base = dict(res, user_tokens_per_s=float(e0["user_tokens_per_s"][i]))
        rows = _modes(front0, e0, pg0 * f0, s.layouts, g, base, system)
        fu = float(res["user_tokens_per_s"]) / float(e0["user_tokens_per_s"][i])
        res["modes"] = [dict(mo, user_tokens_per_s=mo["user_tokens_per_s"] * fu) for mo in rows]
    if pareto:
        res["frontier"] = [_frontier_point(j, g, ev, per_gpu, s.layouts, system, O) for j in front]
    return ServingResult(res)


def throughput_by_size(model, hardware, sizes, *, input_len, output_len, precision=None, kv_precision="auto",
                       min_user_tps=None, max_ttft_s=None, disaggregated=False, ideal=False, speculative="auto",
                       engine=None, eplb=None, ttft_p99_s=None) -> list:
    """`throughput(model, hardware, gpus=n, ...)` at each deployment size n of `sizes` (the search's own,
    `search_sizes`): [(n, its answer, or the FitError it raises)], from one evaluation of the step model over every
    size's layouts, each size then selected from its own points (and its own prefill pool); the very answers of one
    call per size (`chalk plan`'s shortlist, issue 28 item 3), at about the cost of one. `ttft_p99_s`: a p99 TTFT
    screened in closed form at the p99 prompt (`_select`'s check; no replay)."""
    if isinstance(speculative, str) and len(draft_counts(model)) > 1:  # each draft count, the best per size
        per_k = [throughput_by_size(model, hardware, sizes, input_len=input_len, output_len=output_len,
                                    precision=precision, kv_precision=kv_precision, min_user_tps=min_user_tps,
                                    max_ttft_s=max_ttft_s, disaggregated=disaggregated, ideal=ideal,
                                    speculative=model_speculation(model, k), engine=engine, eplb=eplb,
                                    ttft_p99_s=ttft_p99_s) for k in draft_counts(model)]
        out = []
        for answers in zip(*per_k):
            ok = [(n, r) for n, r in answers if not isinstance(r, FitError)]
            out.append(max(ok, key=lambda a: float(a[1]["output_tokens_per_s_per_gpu"])) if ok else answers[-1])
        return out
    sizes = [count("gpus", n, MAX_GPUS) for n in sizes]
    kw = dict(input_len=input_len, output_len=output_len, precision=precision, kv_precision=kv_precision,
              speeds=(min_user_tps,), max_ttft_s=max_ttft_s, disaggregated=disaggregated, ideal=ideal,
              speculative=resolve_speculation(speculative, model), engine=engine, eplb=eplb, ttft_p99_s=ttft_p99_s)
    try:
        found = _search(model, hardware, **kw)
    except FitError:  # no size fits: each says why in its own words
        found = None
    if found is None or found.sizes != sizes:
        out = []
        for n in sizes:
            try:
                out.append((n, _select(_search(model, hardware, gpus=n, **kw), min_user_tps)))
            except FitError as e:
                out.append((n, e))
        return out
    m, system, costs, cal = found.m, found.system, found.costs, found.cal
    N = len(found.g["B"])
    pool = found.pool_points  # per layout, over every size's: each size picks its own pool from its layouts

    def rows(x, keep):  # an evaluation's arrays over the grid's points (in dicts, at any depth) at the points kept
        if isinstance(x, dict):
            return {k: rows(v, keep) for k, v in x.items()}
        return x[keep] if isinstance(x, np.ndarray) and x.ndim >= 1 and x.shape[0] == N else x

    out, lo = [], 0
    for n in sizes:  # `_search`'s checks for one size, in its order, then `_select` over that size's points
        check_reach(system, n)
        k = len(enumerate_layouts(m, n, system.chips))
        lays, span = found.layouts[lo:lo + k], slice(lo, lo + k)
        keep = (found.g["idx"] >= lo) & (found.g["idx"] < lo + k)
        try:
            _check_fit(m, costs, system, cal, [n], lays)
            p = _prefill_pool_or_fail(m, system, lays, [a[span] for a in pool], max_ttft_s) if disaggregated \
                else None
            g = {key: v[keep] for key, v in found.g.items()}
            g["idx"] = g["idx"] - lo
            one = dataclasses.replace(found, sizes=[n], layouts=lays, g=g, ev=rows(found.ev, keep),
                                      ev_spec=None if found.ev_spec is None else rows(found.ev_spec, keep), pool=p,
                                      gpus_given=True)
            out.append((n, _select(one, min_user_tps)))
        except FitError as e:
            out.append((n, e))
        lo += k
    return out


def _p99s_met(s: _Search, r) -> bool:
    """Whether a replay `r` (a SimulationResult or a FleetReplay) meets the search's p99 targets; a NaN p99 TPOT (no
    request had a second token) does not miss."""
    return (not s.tpot_p99_s or not float(r.tpot_p99_s) > s.tpot_p99_s) and \
        (not s.ttft_p99_s or float(r.ttft_p99_s) <= s.ttft_p99_s)


def _highest_rate(run, lo: float, hi: float, at_lo: tuple) -> tuple:
    """Bisect [lo, hi) for the highest arrival rate whose replay `run(rate)` meets (its first item true), given
    the replay at `lo` (`at_lo`), ARRIVAL_STEPS times in log space: (*the last replay that met, its rate), or
    (*at_lo, lo) where that did not meet."""
    best, rate = at_lo, lo
    for _ in range(ARRIVAL_STEPS if at_lo[0] else 0):
        mid = math.sqrt(lo * hi)
        m = run(mid)
        if m[0]:
            lo, rate, best = mid, mid, m
        else:
            hi = mid
    return (*best, rate)


def _arrival_tail(s: _Search, ok, per_gpu, speculating, min_user_tps: float | None = None):
    """(grid point, its output tokens/s per GPU, tail report, SimulationResult) of a search under p99 targets with
    Poisson arrivals, or None where every point passing the closed-form screen speculates. The ARRIVAL_LAYOUTS
    layouts whose best plain point passes the screen with the most output per GPU are each replayed open loop
    (`poisson_requests`, the request simulator on the layout's step cost, at most the scheduler cap / KV room in the
    engine, the calibrated request latency added to TTFT) at the highest arrival rate whose replayed p99 TPOT and
    TTFT meet the targets (and the mean forms asked beside them: `min_user_tps`, `max_ttft_s`) while the replica
    keeps up (a bisection below the layout's saturation rate: the closed form at the cap); one replay per replica
    shape (more replicas of it answer the same per GPU); the layout serving the most output per GPU at its rate
    answers, replayed once more with its step cost linear around the batch its open loop settled at
    (ARRIVAL_REFINE). Raises FitError where no layout meets the targets at any rate tried."""
    from chalk.analyses.traffic import simulate as sim

    plain = ok & ~speculating
    if not np.any(plain):
        return None
    best, shapes = {}, {}  # layout index -> its best plain point passing the screen; replica shape -> layout index
    for j in np.flatnonzero(plain):
        k = int(s.g["idx"][j])
        if k not in best or per_gpu[j] > per_gpu[best[k]]:
            best[k] = int(j)
    for k in sorted(best, key=lambda k: -per_gpu[best[k]]):  # one replay per replica shape: more replicas of it
        shapes.setdefault(dataclasses.replace(s.layouts[k], dp=1), k)  # answer the same per GPU
    best = {k: best[k] for k in shapes.values()}
    top = sorted(best, key=lambda k: -per_gpu[best[k]])[:ARRIVAL_LAYOUTS]
    top = [k for k in top if per_gpu[best[k]] >= ARRIVAL_SCREEN_SHARE * per_gpu[best[top[0]]]]
    setups = {}  # layout index -> (its fixed setup, its saturation rate): a refinement replays a layout again
    loop = sim.loop_for(ARRIVAL_REQUESTS * ARRIVAL_LAYOUTS * (ARRIVAL_STEPS + 2))  # the search's replays in all

    def meets(r, rate):  # the replay kept up with `rate` and met the targets (a NaN TPOT: no second token)
        kept_up = sim.overload(r) is None and float(r.requests_per_s) >= ARRIVAL_SERVED * rate
        return kept_up and _p99s_met(s, r) and \
            (not min_user_tps or not float(r.mean_tpot_s) * min_user_tps > 1.0) and \
            (not s.max_ttft_s or float(r.mean_ttft_s) <= s.max_ttft_s)

    def replays(k, batch):  # (saturation rate, a replay at a rate) of layout k, its step cost linear around `batch`
        lay = s.layouts[k]
        if k not in setups:
            fx = _fixed_setup(s.m, s.system, layout=lay, **s.args)
            setups[k] = fx, float(_closed_form(fx, np.array([float(fx.cap)]))[4][0])  # requests/s per replica, cap
        fx, x_max = setups[k]
        sc = open_loop_step_cost(fx, batch)

        def run(rate):  # (met, result, p99 TPOT, p99 TTFT on the client's clock)
            r = open_loop_replay(fx, sim.poisson_requests(rate, ARRIVAL_REQUESTS, *fx.lengths), sc, loop=loop)
            return meets(r, rate), r, float(r.tpot_p99_s), float(r.ttft_p99_s)

        return x_max, run

    tried, found = [], None
    for k in top:
        lay = s.layouts[k]
        x_max, run = replays(k, float(s.g["B"][best[k]]))
        if found is None:  # the layout's saturation rate, else up from the rate its best screened point serves
            screen = min(float(per_gpu[best[k]]) * lay.replica_gpus / s.O, x_max)
            at = run(x_max)
            if at[0]:
                met, r, tp99, tt99, rate = *at, x_max
            else:
                at = run(screen) if screen < x_max else at
                met, r, tp99, tt99, rate = _highest_rate(run, screen, x_max, at) if at[0] else \
                    _highest_rate(run, screen / ARRIVAL_BRACKET, screen, run(screen / ARRIVAL_BRACKET))
        else:  # a later layout must serve more per GPU than the best found: one replay at that rate rules it out
            need = found[0] * lay.replica_gpus / s.O
            if need >= x_max:  # not even saturated
                continue
            at = run(need)
            if at[0]:
                top_run = run(x_max)
                met, r, tp99, tt99, rate = (*top_run, x_max) if top_run[0] else _highest_rate(run, need, x_max, at)
            else:
                met, r, tp99, tt99, rate = *at, need
        out = float(r.output_tokens_per_s) / lay.replica_gpus if met else 0.0
        tried.append({"layout": lay.label(), "arrival_rate_per_replica": rate if met else None,
                      "output_tokens_per_s_per_gpu": out, "tpot_p99_s": tp99, "ttft_p99_s": tt99})
        if met and (found is None or out > found[0]):
            found = (out, k, r, rate, tp99, tt99)
    if found is not None:  # the step cost is exact at its reference batch: near its rate, the winner is replayed
        out, k, r, rate, tp99, tt99 = found  # again with it linear around the batch its open loop settled at
        x_max, run = replays(k, max(float(r.mean_batch), 1.0))
        at = run(rate)
        hi = min(rate * ARRIVAL_REFINE, x_max)
        if at[0]:
            ref = _highest_rate(run, rate, hi, at) if hi > rate * (1 + 1e-9) else (*at, rate)
        else:
            at_lo = run(rate / ARRIVAL_REFINE)
            ref = _highest_rate(run, rate / ARRIVAL_REFINE, rate, at_lo)
        if ref[0]:  # the answer is the settled replay at its rate (`settled_replay`, as `chalk simulate --rate`
            fx, rate = setups[k][0], ref[4]  # replays this layout), lower where settling moves it past a target

            def settled(x):
                res = settled_replay(fx, lambda c: open_loop_replay(
                    fx, sim.poisson_requests(x, ARRIVAL_REQUESTS, *fx.lengths), c, loop=loop), x)[0]
                return meets(res, x), res, float(res.tpot_p99_s), float(res.ttft_p99_s)

            at = settled(rate)
            if at[0]:
                ref = (*at, rate)
            else:  # else the replay linear around its start answers: no settled replay near it meets the targets
                at_lo = settled(rate / ARRIVAL_REFINE)
                ref = _highest_rate(settled, rate / ARRIVAL_REFINE, rate, at_lo) if at_lo[0] else ref
            met, r, tp99, tt99, rate = ref
            found = (float(r.output_tokens_per_s) / s.layouts[k].replica_gpus, k, r, rate, tp99, tt99)
            tried.append({"layout": s.layouts[k].label() + " (refined)", "arrival_rate_per_replica": rate,
                          "output_tokens_per_s_per_gpu": found[0], "tpot_p99_s": tp99, "ttft_p99_s": tt99})
    if found is None:  # (a p99 TTFT at or below the latency never gets here: the screen rules it out, saying why)
        raise FitError(f"no layout of {s.m.id} on {s.system.chip.id} met the p99 targets under Poisson arrivals at "
                       f"any rate tried (down to 1/{ARRIVAL_BRACKET:g} of what the closed-form screen's point "
                       f"serves; tried " + "; ".join(f"{t['layout']}: TPOT p99 {t['tpot_p99_s'] * 1e3:.1f} ms, "
                                                     f"TTFT p99 {t['ttft_p99_s'] * 1e3:.0f} ms" for t in tried) + ")")
    out, k, r, rate, tp99, tt99 = found
    pts = np.flatnonzero(s.g["idx"] == k)
    i = int(pts[np.argmin(np.abs(s.g["B"][pts] - float(r.mean_batch)))])
    return i, out, {"tail_latency_source": f"replayed open loop: Poisson arrivals at {rate:.3g} requests/s per "
                                           f"replica, the highest rate tried at which the p99s meet the targets "
                                           f"({r.n_requests:,} requests, steady-state window)",
               "arrivals": "poisson", "arrival_rate_per_replica": rate, "tpot_p99_s_replayed": tp99,
               "ttft_p99_s_replayed": tt99, "latency_window": r.latency_window, "tail_replays": tried}, r


def _disagg_tail(s: _Search, i: int, ev, ratio):
    """(fraction of the screened rate, tail report, FleetReplay) of the disaggregated point `i` under p99 targets
    with Poisson arrivals: its smallest whole deployment (`whole_pools`: k decode replicas of its layout, p prefill
    workers of the pool's layout) replayed as `plan` replays a disaggregated fleet (`fleet.replay`: prompts queue
    FCFS for the prefill workers, then decode on the replicas behind a least-loaded router; each decode replica the
    engine model `settled_replay` settles, prompt tokens free; TTFT on the client's clock), at the rate the closed
    form's point serves and, where a p99 misses or the fleet falls behind, at the highest rate below it that meets
    both (a bisection down to 1/ARRIVAL_BRACKET of it). Raises FitError where none does."""
    from chalk.analyses.traffic import fleet
    from chalk.analyses.traffic import simulate as sim

    lay, pre = s.layouts[int(s.g["idx"][i])], s.pool["layout"]
    fx = _fixed_setup(s.m, s.system, layout=lay, **s.args)
    k, p = whole_pools(lay.replica_gpus, pre.replica_gpus, float(ratio[i]))
    top = float(ev["output_per_gpu"][i]) * lay.replica_gpus / s.O * k  # requests/s the k decode replicas serve
    prefill = {"servers": p, "tokens_per_s": s.pool["input_tokens_per_s_per_gpu"] * pre.replica_gpus,
               "lone_prompt_s": s.pool["ttft_s"]}
    loop = sim.loop_for(ARRIVAL_REQUESTS * (ARRIVAL_STEPS + 2) * SETTLE_ROUNDS)
    in_flight = max(float(s.g["B"][i]), 1.0)

    def run(rate):  # (met, FleetReplay)
        r = settled_replay(fx, lambda c: fleet.replay(
            fleet.decode_only(c), replicas=k, max_batch=max(int(fx.cap), 1), rate_per_s=rate,
            n_requests=ARRIVAL_REQUESTS, input_len=fx.lengths[0], output_len=fx.lengths[1],
            est_ttft_s=s.pool["ttft_s"], est_tpot_s=float(ev["tpot_s"][i]), prefill=prefill,
            warmup_s=2.0 * in_flight * k / rate, loop=loop, client_latency_s=fx.lat), rate / k)[0]
        # the decode replicas keep up, no queue grows through the replay, and the prefill pool is loaded no more
        # than plan loads one (a pool at 99.97% met a TPOT-only target with a TTFT that grew with the replay's
        # length: QA 2026-11-28)
        kept_up = r.output_tokens_per_s_per_replica * k >= ARRIVAL_SERVED * rate * s.O and r.overload is None \
            and rate * s.I <= fleet.PREFILL_MAX_UTILISATION * p * prefill["tokens_per_s"]
        return kept_up and _p99s_met(s, r), r

    met, r, rate = *run(top), top
    if not met:
        lo = top / ARRIVAL_BRACKET
        at = run(lo)
        if not at[0]:
            raise FitError(f"no rate down to 1/{ARRIVAL_BRACKET:g} of what the closed form's disaggregated point "
                           f"serves ({lay.label()} decode x{k}, {pre.label()} prefill x{p}) met the p99 targets "
                           f"under Poisson arrivals (TPOT p99 {at[1].tpot_p99_s * 1e3:.1f} ms, TTFT p99 "
                           f"{at[1].ttft_p99_s * 1e3:.0f} ms at {lo:.3g} requests/s)")
        met, r, rate = _highest_rate(run, lo, top, at)
    return rate / top, {
        "tail_latency_source": f"replayed open loop: Poisson arrivals at {rate:.3g} requests/s over {k} decode "
                               f"replica{'s' if k > 1 else ''} and {p} prefill worker{'s' if p > 1 else ''} (the "
                               f"smallest whole deployment), the highest rate tried at which the p99s meet the "
                               f"targets ({r.n_measured:,} of {r.n_requests:,} requests measured)",
        "arrivals": "poisson", "arrival_rate_per_replica": rate / k, "tpot_p99_s_replayed": r.tpot_p99_s,
        "ttft_p99_s_replayed": r.ttft_p99_s, "latency_window": r.latency_window, "tail_replays": [{
            "layout": f"{lay.label()} decode x{k} + {pre.label()} prefill x{p}", "arrival_rate_per_replica": rate / k,
            "tpot_p99_s": r.tpot_p99_s, "ttft_p99_s": r.ttft_p99_s}]}, r


def _replayed_tail(s: _Search, ok, per_gpu, i: int, speculating):
    """(chosen point, its replayed tail) under p99 targets: the best point passing the closed-form screen is replayed
    as a closed loop at its concurrency (`fixed_deployment`, the request-level engine model); while its replayed p99
    TPOT or TTFT misses a target, the next best point is tried (at most TAIL_REPLAYS)."""
    ok = ok.copy()
    tried = []
    rep = [(lay.tp, lay.attn_dp, lay.pp, lay.ep, getattr(lay, "etp", 1)) for lay in s.layouts]
    key = np.array([rep.index(r) for r in rep])[np.asarray(s.g["idx"], dtype=int)]  # each point's replica layout

    def same_replica(j):
        return key == key[j]

    for _ in range(TAIL_REPLAYS):
        lay = s.layouts[int(s.g["idx"][i])]
        conc = max(int(round(float(s.g["B"][i]))), 1)
        r = fixed_deployment(s.m, s.system, layout=lay, concurrency=conc,
                             speculative=s.speculative if speculating[i] else None, **s.args)
        tp99, tt99 = float(r["tpot_p99_s"]), float(r["ttft_p99_s"])
        tried.append({"layout": lay.label(), "concurrency_per_replica": conc, "tpot_p99_s": tp99, "ttft_p99_s": tt99})
        if (not s.tpot_p99_s or tp99 <= s.tpot_p99_s) and (not s.ttft_p99_s or tt99 <= s.ttft_p99_s):
            src = (f"closed form at the chosen point's {conc} in flight, not replayed: the request simulator runs no "
                   "MTP draft tokens" if r["latency_source"].startswith("closed form") else
                   f"replayed closed loop at the chosen point ({r['latency_source']})")
            return i, {"tail_latency_source": src,
                       "tpot_p99_s_replayed": tp99, "ttft_p99_s_replayed": tt99,
                       "latency_window": r["latency_window"], "tail_replays": tried,
                       # the replay's other figures, one replica's: the answer's means come from it too
                       "replayed_answer": None if r["latency_source"].startswith("closed form") else r}
        # a replay that misses rules out its replica layout (at any replica count) from TAIL_STEP_DOWN of its in
        # flight up, so the next try is another replica layout or 40% fewer in flight (trying the next best
        # point alone replayed TP4 at 194, 194, 169, 169 ... in flight for a 1 s p99 TTFT that 43 meet)
        ok &= ~(same_replica(i) & (s.g["B"] >= TAIL_STEP_DOWN * s.g["B"][i]))
        if not np.any(ok):
            break
        i = int(np.argmax(np.where(ok, per_gpu, -np.inf)))
    raise FitError(f"no point of {s.m.id} on {s.system.chip.id} met the p99 targets when replayed "
                   f"(tried {len(tried)}: " + "; ".join(f"{t['layout']} x{t['concurrency_per_replica']}: TPOT p99 "
                                                       f"{t['tpot_p99_s'] * 1e3:.1f} ms, TTFT p99 "
                                                       f"{t['ttft_p99_s'] * 1e3:.0f} ms" for t in tried) + ")")


def _spec_report(spec: Speculation | None, used: bool, per_gpu, i, best_plain: float | None) -> dict | None:
    """Whether the chosen point speculates, and what it bought over `best_plain`, the best point without speculation
    under the same constraints (None: none meets them)."""
    if spec is None:
        return None
    return {"used": used, "draft_tokens": spec.draft_tokens, "acceptance": spec.acceptance,
            "acceptance_decay": spec.decay, "tokens_per_step": spec.tokens_per_step, "source": spec.source or "given",
            "best_plain_output_tokens_per_s_per_gpu": best_plain,
            "gain_vs_plain": (float(per_gpu[i]) / best_plain) if best_plain else None}


def _prefill_pool_requests_per_s(costs, system: System, lay: Layout, pool_gpus: int, Ip: float, I: float,
                                 cal: Calibration, kernels, overhead_s) -> float:
    """Requests per second a disaggregated deployment's prefill pool admits: its `pool_gpus` GPUs at the per-GPU
    prompt rate of `lay` running full prefill steps (`_prefill_rate`), over `Ip` uncached prompt tokens per request.

    Formula: X_pool = pool_gpus * rate / Ip.
    Assumes: the pool runs the decode replica's layout (the one chalk is given); requests beyond it wait for
    their prompt, which lengthens TTFT and takes them out of the decoding batch."""
    Ip = max(Ip, 1.0)
    _, rate = _prefill_rate(costs, system, lay.tp, lay.attn_dp, lay.pp, lay.ep, lay.replica_gpus, Ip, max(I, 1.0),
                            cal, kernels=kernels or False, overhead_s=overhead_s)
    return pool_gpus * float(rate) / Ip


#: Points of the decoding-batch grid (1 to the batch cap, geometric) on which a fixed deployment solves Little's law
FIXED_GRID_POINTS = 48
#: Regula falsi steps on the exact step times that pull an interpolated decoding count back where it holds more
#: requests than are in flight (`_closed_form`)
REFINE_STEPS = 4


@dataclass(frozen=True)
class _Fixed(_Setup):
    """A fixed deployment's setup, the same at every concurrency: model, system, lengths, calibration, layouts, the
    batch cap per replica, and `times(B)`, the (TPOT, TTFT of a lone prompt, p99 request's TPOT: `p99_request_step`)
    at B decoding sequences per replica (numbers or arrays). Built by `_fixed_setup`; read by `_closed_form`."""

    kern: object
    di: object
    do: object
    lay: Layout
    pre: Layout
    G: int
    gpus: int
    disagg: bool
    decode_gpus: int | None
    R: int
    cap: float
    q: float
    e: float
    Ip: float
    ovh: object
    chunk: object
    piece: float
    lat: float
    x_pool: float
    times: object
    grid: np.ndarray
    held: np.ndarray
    x_grid: np.ndarray
    kv_tokens: float = math.inf  # KV tokens a replica's memory holds beside its weights (`open_loop_replay`)

    @property
    def scheduler_cap(self) -> float:
        """Sequences a replica's schedulers run at most, KV room aside (one scheduler per attention-DP rank and
        pipeline stage)."""
        return float(self.cal.max_seqs_per_scheduler * self.lay.attn_dp * self.lay.pp)

    @property
    def lengths(self) -> tuple:
        """(input, output) as a replay draws them: the length distributions where given, else the means."""
        return self.di or self.I, self.do or self.O


def engine_runs(eng, lay) -> None:
    """Refuse a layout the engine cannot launch: attention-DP ranks that are themselves tensor-parallel where the
    engine's attention DP means attention TP 1 (`EngineProfile.attention_dp_with_tp`: TensorRT-LLM)."""
    if eng is not None and not eng.attention_dp_with_tp and lay.attn_dp > 1 and lay.tp > 1:
        raise InputError(f"{eng.label} runs attention DP with attention TP 1: "
                         f"{lay.label()} cannot be launched on it (use tp=1,attn_dp={lay.tp * lay.attn_dp}, or "
                         f"tp={lay.tp * lay.attn_dp} without attention DP)")


def _fixed_setup(model, hardware, *, layout, input_len, output_len, gpus=None, precision=None, kv_precision="auto",
                 ideal=False, calibration_override=None, speculative=None, engine=None, cache_hit=None,
                 decode_gpus=None, eplb=None, max_seqs=None, max_tokens=None, prefill_layout=None) -> _Fixed:
    """What `fixed_deployment` needs before it is told the concurrency (its arguments, checked the same way)."""
    from chalk.analyses.step.estimate import make_layout

    # a length given as a distribution or a file is read once: the closed-loop replay samples the same object
    di, do = _length("input_len", input_len)[1], _length("output_len", output_len)[1]
    m, system, I, O, L, F, cal, eng, costs, kern = _serving_setup(model, hardware, di or input_len, do or output_len,
                                                                  precision, kv_precision, ideal,
                                                                  calibration_override, engine, cache_hit, eplb,
                                                                  max_seqs, max_tokens)
    lay = make_layout(m, layout)
    engine_runs(eng, lay)
    G = lay.replica_gpus
    gpus = G if gpus is None else int(positive("gpus", gpus, integer=True, scalar=True))
    disagg = decode_gpus is not None
    if gpus % G and not disagg:
        raise InputError(f"{gpus} GPUs do not divide into replicas of {G} ({lay.label()})")
    if disagg:
        decode_gpus = int(positive("decode_gpus", decode_gpus, integer=True, scalar=True))
        if decode_gpus % G or decode_gpus > gpus:
            raise InputError(f"{decode_gpus} decode GPUs do not divide into replicas of {G} within {gpus} GPUs")
    R = (decode_gpus if disagg else gpus) // G
    if prefill_layout is not None and not disagg:
        raise InputError("a prefill layout sizes the prefill pool of a disaggregated deployment: give decode_gpus "
                         "(--disaggregated --prefill-gpus) with it")
    pre = make_layout(m, prefill_layout) if prefill_layout is not None else lay
    if disagg and (gpus - decode_gpus) % pre.replica_gpus:  # the default prefill worker is a decode replica's layout
        raise InputError(f"{gpus - decode_gpus} prefill GPUs do not divide into prefill workers of "
                         f"{pre.replica_gpus} ({pre.label()}" + ("" if prefill_layout is not None else
                                                               ", the decode layout: give --prefill-layout") + ")")
    tp, a, pp, ep = lay.tp, lay.attn_dp, lay.pp, lay.ep
    usable = system.chip.hbm_bytes * (1 - cal.memory_reserve)

    def weights(lo: Layout, where: str) -> float:  # per GPU on a layout, which must hold them
        w = float(memory_per_chip(costs, lo.tp, lo.attn_dp, lo.pp, lo.ep, 0.0, L)[0])
        if w >= usable:
            raise FitError(f"{m.id} weights ({w / 1e9:.0f} GB per GPU on {where}{lo.label()}) do not fit the "
                           f"{usable / 1e9:.0f} GB usable on {system.chip.id}")
        return w

    if disagg and pre is not lay:  # a prefill worker holds the weights too (its KV is one prompt's at a time)
        weights(pre, "the prefill layout ")
    kv1 = float(memory_per_chip(costs, tp, a, pp, ep, float(a * pp), L + cal.kv_reserve_output_fraction * O / 2)[1])
    w = weights(lay, "")
    fit = float(P.max_sequences_fit(usable, w, kv1)) * a * pp if kv1 > 0 else float("inf")
    cap = min(float(cal.max_seqs_per_scheduler * a * pp), fit)
    if cap < 1:
        raise FitError(f"not one sequence of {L:.0f} tokens fits beside the weights on {lay.label()}")
    q, e = (1.0, 1.0) if speculative is None else (speculative.draft_tokens + 1.0, speculative.tokens_per_step)
    Ip = I * (1 - F)
    ovh = engine_overhead_s(eng, cal)
    chunk = engine_rank_chunk(eng, a, max_tokens)  # per attention-DP rank
    piece = prefill_piece(Ip, chunk)
    n_chunks = max(1.0, np.ceil(Ip / max(piece, 1.0)))

    def times(B):
        B = np.asarray(B, dtype=float)
        kw = dict(kernels=kern or False, overhead_s=ovh, query_tokens=q)
        if disagg:  # one prompt alone through a prefill worker of the same layout, then the first decode step
            st = np.asarray(stage_step(costs, system, tp, a, pp, ep, B, 0.0, L, max(I, 1.0), cal,
                                       **kw)["stage_time_s"], dtype=float)
            st_chunk = st_tail = st
        else:  # prompts prefilled as whole chunks in some steps (`prefill_step_tokens`), the same as the search
            st, ch, pure, F = mixed_step_s(costs, system, tp, a, pp, ep, B, e, Ip, O, L, max(I, 1.0), piece, cal,
                                           **kw)
            st_chunk = np.asarray(ch["stage_time_s"], dtype=float)
            # the p99 request's mean step, as the search screens it (QA 2026-11-28: plan held its cap to the mean
            # TPOT, 105 in flight on B200 where the replayed p99 TPOT then missed 50 ms; every step carrying a chunk
            # read 98 ms)
            st_tail = p99_request_step(pure, st_chunk, F, O)
        if speculative is not None:
            st, st_chunk, st_tail = (x + S.mtp_draft_time_s(x, speculative.draft_tokens, m.num_layers,
                                                            speculative.draft_layers) for x in (st, st_chunk, st_tail))
        tpot = P.pipeline_token_latency_s(st, pp) / e
        if disagg:
            one = float(stage_step(costs, system, pre.tp, pre.attn_dp, pre.pp, pre.ep, 0.0, max(Ip, 1.0), L,
                                   max(I, 1.0), cal, kernels=kern or False, overhead_s=ovh)["stage_time_s"])
            return tpot, float(P.pipeline_token_latency_s(one, pre.pp)) + tpot * e, tpot
        return tpot, P.pipeline_token_latency_s(st_chunk, pp) * n_chunks, P.pipeline_token_latency_s(st_tail, pp) / e

    x_pool = _prefill_pool_requests_per_s(costs, system, pre, gpus - decode_gpus, Ip, I, cal, kern, ovh) / R \
        if disagg and gpus > decode_gpus else float("inf")
    # Little's law: N = B + X * (TTFT0 + lat) with X = B / (O * TPOT): the requests in flight that B decoding imply,
    # on a grid of B from 1 to the cap, the same for every concurrency (`_closed_form` solves it for B)
    lat = cal.request_latency_s
    grid = np.geomspace(1.0, cap, FIXED_GRID_POINTS)
    tp_g, tt_g, _ = (np.broadcast_to(np.asarray(v, dtype=float), grid.shape) for v in times(grid))
    held = np.maximum.accumulate(grid * (1 + (tt_g + lat) / (O * tp_g)))
    x_grid = np.maximum.accumulate(grid / (O * tp_g))  # requests/s per replica at B decoding
    return _Fixed(m=m, system=system, I=I, O=O, L=L, F=F, cal=cal, eng=eng, costs=costs, kern=kern, di=di, do=do,
                  lay=lay, pre=pre, G=G, gpus=gpus, disagg=disagg, decode_gpus=decode_gpus,
                  R=R, cap=cap, q=q, e=e, Ip=Ip, ovh=ovh, chunk=chunk, piece=piece, lat=lat, x_pool=x_pool,
                  times=times, grid=grid, held=held, x_grid=x_grid,
                  kv_tokens=fit * (L + cal.kv_reserve_output_fraction * O / 2))


def _unmet_constraints(m, system, cal, ev, feasible, min_user_tps, max_ttft_s, s, speculative) -> str:
    """One line: no layout meets the constraints. Each target with the best any layout that fits reaches on its own,
    the ones no layout meets first (the binding ones), else that each is met alone but not together. Each point
    counts with or without speculation, whichever reaches further (QA 2026-11-28: the best speed quoted left MTP out,
    102.6 tokens/s per user where 168.9 was reached with it)."""
    if s.ev_spec is not None:
        es = s.ev_spec
        ev = dict(ev, **{k: (np.fmax if k == "user_tokens_per_s" else np.fmin)(ev[k], es[k])
                         for k in ("user_tokens_per_s", "tpot_p99_s", "ttft_s", "ttft_p99_s")
                         if k in ev and k in es and not (s.disaggregated and k.startswith("ttft"))})

    def best(values, better) -> float:
        v = np.where(feasible, values, np.nan)
        return float(np.nanmax(v) if better == "high" else np.nanmin(v))

    checks = []  # (target, met alone by some layout, best reached)
    if min_user_tps:
        checks.append((f"mean speed >= {min_user_tps:g} tokens/s per user",
                       ev["user_tokens_per_s"] >= min_user_tps,
                       f"{best(ev['user_tokens_per_s'], 'high'):.1f} tokens/s per user"))
    if max_ttft_s:
        checks.append((f"mean TTFT <= {duration_text(max_ttft_s)}", ev["ttft_s"] <= max_ttft_s,
                       duration_text(best(ev["ttft_s"], "low"))))
    if s.tpot_p99_s:
        checks.append((f"p99 TPOT <= {duration_text(s.tpot_p99_s)}", ev["tpot_p99_s"] <= s.tpot_p99_s,
                       duration_text(best(ev["tpot_p99_s"], "low"))))
    if s.ttft_p99_s:
        checks.append((f"p99 TTFT <= {duration_text(s.ttft_p99_s)}", ev["ttft_p99_s"] <= s.ttft_p99_s,
                       duration_text(best(ev["ttft_p99_s"], "low"))))
    failing = [c for c in checks if not np.any(feasible & c[1])]
    shown = failing or checks
    what = "; ".join(f"{t} (best {b})" for t, _, b in shown)
    head = (f"no layout of {m.id} on {system.chip.id} reaches {what}" if failing else
            f"no layout of {m.id} on {system.chip.id} meets every constraint at once, though each alone is met: "
            f"{what}")
    lat = cal.request_latency_s
    if (s.ttft_p99_s and s.ttft_p99_s <= lat) or (max_ttft_s and max_ttft_s <= lat):
        head += f": every TTFT includes the calibrated {lat * 1e3:.0f} ms per request outside the engine's steps"
    return head + ("" if speculative else "; --mtp may reach further")


def p99_prompt_ratio(lengths, mean: float) -> float:
    """The prompts' p99 length over their mean, at least 1 (1 for a length given as a number, or None): a p99 TTFT
    is the p99 prompt's."""
    p99 = float(lengths.quantile(0.99)) if hasattr(lengths, "quantile") else mean
    return max(p99 / max(mean, 1.0), 1.0)


def duration_text(seconds) -> str:
    """A duration as a person reads it in a message: ms below 1 s, else s ('n/a' for none or not finite)."""
    if seconds is None or not math.isfinite(seconds):
        return "n/a"
    return f"{seconds * 1e3:.3g} ms" if seconds < 1 else f"{seconds:.3g} s"


def _pool_share(fx: _Fixed, seats: float, lone_s: float) -> tuple:
    """One decode replica's share of a fixed disaggregated deployment's prefill pool, as the request simulator takes
    it (servers, prompt tokens/s per server, seconds per prompt token of a prompt alone): its workers (the prefill
    GPUs over the prefill layout's) spread over the R decode replicas, at least one, sharing the pool's rate
    (`x_pool` requests/s per replica of Ip-token prompts); a prompt alone takes `lone_s` (one prompt through one
    worker). A pool with no rate limit gives every seat a server."""
    workers = (fx.gpus - fx.decode_gpus) / max(fx.pre.replica_gpus, 1)
    if not np.isfinite(fx.x_pool):
        return max(int(round(seats)), 1), 1e30, max(lone_s, 0.0) / max(fx.Ip, 1.0)
    servers = max(int(round(workers / fx.R)), 1)
    return servers, fx.x_pool * max(fx.Ip, 1.0) / servers, max(lone_s, 0.0) / max(fx.Ip, 1.0)


def _fixed_concurrency(concurrency, R: int) -> int:
    """Requests in flight, checked: a whole number >= 1 and at least one per replica."""
    if isinstance(concurrency, bool):
        raise InputError(f"concurrency must be a whole number >= 1, got {concurrency!r}")
    # one line for a float, NaN, < 1 or beyond the users a plan sizes for (1e12 gave a TTFT of 1,930,233 days)
    N = count("concurrency", concurrency, MAX_USERS)
    if N < R:
        raise InputError(f"concurrency {N} is below the {R} replicas: each replica needs a request in flight")
    return N


def _closed_form(fx: _Fixed, Nr):
    """The fixed deployment's steady state at `Nr` requests in flight per replica (1-D array), arrays of
    (B decoding, TPOT, TTFT of a lone prompt, p99 request's TPOT, requests/s X, requests waiting).

    Little's law: N = B + X * (TTFT0 + lat) with X = B / (O * TPOT), solved for the decoding count B by
    interpolating the grid `_fixed_setup` made (`fx.held`); lat: the calibrated time a request spends outside the
    GPU steps (in TTFT): its client seat is held, nothing of it decodes. Past the cap's in-flight count, B is the
    cap and the rest wait. A disaggregated prefill pool admits at most x_pool requests/s per decode replica: the
    rest queue. A few concurrencies are timed one by one (one number is looked up faster than a short array),
    more as one array."""
    Nr = np.asarray(Nr, dtype=float)
    O, lat, x_pool, grid, held = fx.O, fx.lat, fx.x_pool, fx.grid, fx.held

    def timed(B):
        if B.size <= 4:
            return (np.array(v, dtype=float) for v in zip(*(
                tuple(float(np.asarray(t)) for t in fx.times(float(b))) for b in B)))
        return (np.broadcast_to(np.asarray(v, dtype=float), B.shape) for v in fx.times(B))

    inside = Nr < held[-1]
    B = np.where(inside, np.interp(Nr, held, grid), grid[-1])
    tpot, ttft0, tpot_tail = timed(B)
    # the grid's straight lines miss where the step time bends between two of its points (a kernel table's step):
    # where the interpolated B holds more requests than Nr, regula falsi against the grid point below it, on the
    # exact times, until none does (Little's law then holds to rounding; a B that holds fewer leaves the rest
    # waiting, which keeps the law exact)
    for _ in range(REFINE_STEPS):
        h_b = B * (1 + (ttft0 + lat) / (O * tpot))  # requests in flight that B decoding hold
        over = inside & (h_b > Nr * (1 + 1e-12))
        if not over.any():
            break
        i = np.clip(np.searchsorted(grid, B, side="left") - 1, 0, len(grid) - 1)
        lo, h_lo = grid[i], held[i]
        f = np.where(h_b > h_lo, (Nr - h_lo) / np.where(h_b > h_lo, h_b - h_lo, 1.0), 0.0)
        B = np.where(over, lo + np.clip(f, 0.0, 1.0) * (B - lo), B)
        tpot, ttft0, tpot_tail = timed(B)
    if np.isfinite(x_pool) and x_pool < fx.x_grid[-1]:
        cap = float(np.interp(x_pool, fx.x_grid, grid))
        if (B > cap).any():
            B = np.minimum(B, cap)
            tpot, ttft0, tpot_tail = timed(B)
    X = B / (O * tpot)                                      # requests completed per second per replica
    waiting = np.maximum(Nr - B - X * (ttft0 + lat), 0.0)   # requests held back by the cap or the prefill pool
    return B, tpot, ttft0, tpot_tail, X, waiting


def _ttft_p99_closed(fx: _Fixed, ttft0, waiting, X):
    """The closed form's p99 TTFT on the engine's clock: the p99 prompt's prefill plus the mean wait. The prompt
    lengths are the parsed distribution (`fx.di`), so a spec string and its parsed object give the same p99."""
    return ttft0 * p99_prompt_ratio(fx.di, fx.I) + waiting / X


class FixedCurve:
    """`fixed_deployment`'s closed form (`simulate=False`) of one deployment, asked at many concurrencies at once:
    `curve(ns)` gives arrays of TPOT, mean and p99 TTFT (on the client's clock), decoding sequences and output
    tokens/s per GPU, each equal to what `fixed_deployment(..., concurrency=n, simulate=False)` gives for that n.
    Built with `fixed_deployment`'s arguments (not `concurrency`, `simulate`, `requests`, `replay`); the setup is
    done once."""

    def __init__(self, model, hardware, *, layout, input_len, output_len, **kw):
        self._fx = _fixed_setup(model, hardware, layout=layout, input_len=input_len, output_len=output_len, **kw)
        self.batch_cap_per_replica = self._fx.cap

    def __call__(self, concurrencies) -> dict:
        fx = self._fx
        N = np.array([_fixed_concurrency(n, fx.R) for n in np.atleast_1d(concurrencies).tolist()], dtype=float)
        B, tpot, ttft0, tpot_tail, X, waiting = _closed_form(fx, N / fx.R)
        return {"concurrency": N, "decoding_per_replica": B, "tpot_s": tpot,
                "ttft_s": ttft0 + waiting / X + fx.lat,
                "ttft_p99_s": _ttft_p99_closed(fx, ttft0, waiting, X) + fx.lat,
                "tpot_p99_s": np.maximum(tpot_tail, tpot), "user_tokens_per_s": 1 / tpot,
                "output_tokens_per_s_per_gpu": X * fx.O * fx.R / fx.gpus}


def fixed_deployment(model, hardware, *, layout, concurrency, input_len, output_len, gpus: int | None = None,
                     precision: str | None = None, kv_precision: str | None = "auto", ideal: bool = False,
                     calibration_override: Calibration | None = None, speculative: Speculation | None = None,
                     engine=None, cache_hit: float | None = None, decode_gpus: int | None = None,
                     simulate: bool = True, eplb: str | None = None, max_seqs: int | None = None,
                     max_tokens: int | None = None, replay: dict | None = None,
                     requests: int | None = None, prefill_layout=None, warm_engine: bool = False,
                     cut_to_context: bool = True) -> dict:
    """What one deployment does at a fixed number of requests in flight (closed loop, like `conc` in vLLM/SGLang
    benchmarks): `concurrency` requests across `gpus` GPUs (default: one replica of `layout`).

    Steady state of aggregated serving with chunked prefill: each replica's N requests are either decoding (B of
    them, one token each per step; their prompts prefilled as whole chunks in some of the steps, `mixed_step_s`) or
    waiting for their prompt to be prefilled; B is capped by the scheduler and by KV memory; by Little's law
    N = B + X * (TTFT + latency), with X = B / (O * TPOT) requests per second: `request_latency_s`, the calibrated
    time a request spends outside the GPU steps (added to TTFT), holds its client's seat without decoding (the
    replayed closed loop hands each freed seat on that much later). Mean TTFT adds the wait of requests beyond
    the cap.
    `simulate` (default): mean TTFT and the p99s of TTFT and TPOT come from replaying the closed loop in the request
    simulator (`closed_loop_latencies`), which sees requests arriving in waves behind each other's prefill (a
    disaggregated deployment's behind its prefill pool's queue, `_pool_share`); without it (or with speculation) they
    are the closed forms: TTFT of the p99 prompt, TPOT of the p99 request's share of chunk steps. TTFT adds the
    calibrated per-request latency outside the GPU steps.
    `decode_gpus`: a disaggregated deployment: the `concurrency` requests decode on `decode_gpus` GPUs of replicas
    of `layout` (pure decode steps); the other GPUs prefill, and admit at most what they can prefill
    (`_prefill_pool_requests_per_s`): requests beyond it wait for their prompt; TTFT is one prompt's prefill on the
    layout plus that wait; output per GPU counts all `gpus`.
    `prefill_layout`: the layout of the disaggregated prefill pool's workers (default: `layout`): the pool's rate
    and the one prompt's prefill in TTFT are timed on it (disaggregated deployments size their prefill workers on
    their own, e.g. TP4 with attention-DP for prefill beside DEP16 decode).
    `eplb`: as `throughput`'s.
    `requests`: a benchmark's whole run rather than its steady state: this many requests in all, `concurrency` of
    them sent at t = 0 and one more as each finishes (vLLM's `benchmark_serving --num-prompts P --max-concurrency
    N`). Throughput (output over the run's span), mean TTFT and mean TPOT are then the run's own, its cold start
    (the first wave's prompts queue behind each other's prefill) and ramp-down included, as the benchmark reports
    them; the closed form (speculation) adds the first wave's queue to the mean TTFT. The run starts on a cold
    engine, whose first step takes the calibrated `warmup_s` longer, unless `warm_engine` (its harness ran warm-up
    requests on the same engine before the timed run, as vLLM's benchmark_latency does).
    `cut_to_context`: as `throughput`'s.
    """
    input_len, output_len, ctx = cut_lengths(model, input_len, output_len, cut_to_context)
    fx = _fixed_setup(model, hardware, layout=layout, input_len=input_len, output_len=output_len, gpus=gpus,
                      precision=precision, kv_precision=kv_precision, ideal=ideal,
                      calibration_override=calibration_override, speculative=speculative, engine=engine,
                      cache_hit=cache_hit, decode_gpus=decode_gpus, eplb=eplb, max_seqs=max_seqs,
                      max_tokens=max_tokens, prefill_layout=prefill_layout)
    m, system, I, O, L, F, cal, eng, costs, kern = (fx.m, fx.system, fx.I, fx.O, fx.L, fx.F, fx.cal, fx.eng,
                                                    fx.costs, fx.kern)
    di, do, lay, pre, gpus, disagg, decode_gpus, R = (fx.di, fx.do, fx.lay, fx.pre, fx.gpus, fx.disagg,
                                                      fx.decode_gpus, fx.R)
    cap, q, e, Ip, ovh, chunk, piece, lat, x_pool = (fx.cap, fx.q, fx.e, fx.Ip, fx.ovh, fx.chunk, fx.piece, fx.lat,
                                                     fx.x_pool)
    N = _fixed_concurrency(concurrency, R)
    Nr = N / R
    B, tpot, ttft0, tpot_tail, X, waiting = (float(v[0]) for v in _closed_form(fx, np.array([Nr])))
    ttft = ttft0 + waiting / X
    n_run = None
    cold = 0.0 if warm_engine else fx.cal.warmup_s  # a whole run's first step on a cold engine takes this longer
    if requests is not None:
        n_all = float(positive("requests", requests, integer=True, scalar=True))
        if n_all < N:
            raise InputError(f"a run of {n_all:.0f} requests cannot keep {N} in flight: requests must be >= "
                             "concurrency")
        n_run = n_all / R
        # the first wave: Nr prompts sent at once, each prefilled after those ahead of it (a prefill pool admits
        # x_pool per second; a replica's own chunks take ttft0 per prompt); Nr of the run's n_run requests
        each = 1.0 / x_pool if np.isfinite(x_pool) else ttft0
        ttft += (Nr / n_run) * (max(Nr - 1.0, 0.0) / 2.0 * each + cold)
    out_gpu = X * O * R / gpus
    ttft_p99 = float(_ttft_p99_closed(fx, np.array([ttft0]), np.array([waiting]), np.array([X]))[0])
    tpot_p99 = max(tpot_tail, tpot)
    ttft_p50 = tpot_p50 = None  # the closed form's requests are all alike: its medians are its means (below)
    window = sim = None
    too_many = n_run is None and Nr > CLOSED_LOOP_MAX_SEATS and not (replay or {}).get("requests") \
        and not (replay or {}).get("result_only")  # chalk simulate asks for the replay itself
    if simulate and speculative is None and not too_many:
        # the request-level engine model answers: the replayed closed loop's steady state gives throughput and
        # every latency, so in flight = throughput x time per request (Little's law) holds as measured; a
        # disaggregated replica's prompts first queue for its share of the prefill pool
        run = {} if n_run is None else {"requests": int(round(n_run)), "window": "all", "warmup_s": cold}

        def replica(seats, batch, n=None):  # one replica's closed loop at `seats` in flight
            pool = {"prefill_pool": _pool_share(fx, seats, float(ttft0 - tpot * e))} if disagg else {}
            more = {"requests": n} if n else {}
            return closed_loop_latencies(m, system, lay, seats, cap, batch, L, costs, cal, ovh, chunk, di or I,
                                         do or O, kernels=kern, cache_hit=F,
                                         **{**run, **pool, **(replay or {}), **more})

        lo, uneven = math.floor(Nr), None
        if lo == Nr or n_run is not None or (replay or {}).get("result_only"):
            sim = replica(Nr, B)
            # a steady state the caller did not size: replayed longer until its window has settled (`settled`)
            doublings = 0
            while (n_run is None and not (replay or {}).get("requests") and doublings < SETTLE_DOUBLINGS
                   and not sim_mod.settled(sim) and 2 * sim.n_requests <= sim_mod.MAX_REQUESTS):
                sim, doublings = replica(Nr, B, 2 * sim.n_requests), doublings + 1
        else:  # N over R replicas unevenly: N mod R of them carry one request more (a balancer's round robin)
            busy = N - lo * R
            uneven = (R - busy, lo, busy, lo + 1)
            B_lo, B_hi = (float(v) for v in _closed_form(fx, np.array([lo, lo + 1.0]))[0])
            sim = _uneven_replicas(replica(lo, B_lo), replica(lo + 1, B_hi), R - busy, busy)
        if replay is not None and replay.get("result_only"):
            return sim
        X, B = float(sim.requests_per_s), float(sim.mean_batch)
        out_gpu = float(sim.output_tokens_per_s) * R / gpus
        tpot, ttft = float(sim.mean_tpot_s), float(sim.mean_ttft_s)  # TTFT on the client's clock: holds `lat`
        ttft_p99, tpot_p99 = float(sim.ttft_p99_s), float(sim.tpot_p99_s)
        ttft_p50, tpot_p50 = float(sim.ttft_p50_s), float(sim.tpot_p50_s)
        waiting = max(Nr - float(sim.mean_concurrency) - X * lat, 0.0)
        window = sim.latency_window
        latency_source = (f"simulated closed loop ({sim.n_requests:,} requests, steady-state window of "
                          f"{window['requests']:,}" + ("" if sim_mod.settled(sim) else
                                                       "; not settled: its TTFT still drifts across the window")
                          + ")") if n_run is None else \
            (f"simulated benchmark run ({sim.n_requests:,} requests per replica, cold start and ramp-down included; "
             + ("a warmed engine)" if warm_engine else f"a cold engine's first step {cold:g} s longer)"))
        if uneven:
            (nl, kl, nb, kb), many = uneven, lambda n: f"{n} replica" + ("s" if n != 1 else "")  # noqa: E731
            latency_source = (f"simulated closed loops of {many(nl)} at {kl} in flight and {many(nb)} at {kb} "
                              f"({sim.n_requests:,} requests; means over both, percentiles the busier replicas')")
    else:  # the closed forms on the engine's clock, moved to the client's
        ttft, ttft_p99 = ttft + lat, ttft_p99 + lat
        latency_source = "closed form" + (f" ({Nr:,.0f} requests in flight per replica: a replay of "
                                          f"{CLOSED_LOOP_MIN_ROUNDS} rounds of them would pass "
                                          f"{CLOSED_LOOP_MAX_SEATS * CLOSED_LOOP_MIN_ROUNDS:,} requests)"
                                          if too_many and simulate else "")
    res = {"mode": "fixed", "model": m.id, "hardware": system.id, "precision": costs.precision,
           "kv_precision": costs.kv_precision, "layout": lay.label(), "parallelism": lay.to_dict(),
           "gpus": gpus, "replicas": R, "concurrency": N, "concurrency_per_replica": Nr,
           "disaggregated": disagg, "decode_gpus": decode_gpus if disagg else gpus,
           "prefill_gpus": gpus - decode_gpus if disagg else 0,
           "prefill_pool_requests_per_s": x_pool * R if disagg else None,
           "prefill_layout": pre.label() if disagg else None,
           "decoding_per_replica": B, "batch_cap_per_replica": cap,
           "output_tokens_per_s_per_gpu": out_gpu, "input_tokens_per_s_per_gpu": out_gpu * I / O,
           "ttft_s": ttft, "tpot_s": tpot, "user_tokens_per_s": 1 / tpot,
           "ttft_p50_s": ttft if ttft_p50 is None else ttft_p50, "tpot_p50_s": tpot if tpot_p50 is None else tpot_p50,
           "ttft_p99_s": ttft_p99, "tpot_p99_s": tpot_p99, "latency_source": latency_source,
           "latency_window": window, "mean_step": None if disagg else _mean_step(
               costs, system, lay, B, e, Ip, O, L, I, piece, cal, kern, ovh, q, speculative, sim),
           "input_len": I, "output_len": O, "mean_decode_context": L, "cache_hit": F,
           "engine": eng.id if eng is not None else None, "efficiency": cal.label,
           "eplb": eplb,  # the expert-load balancer as asked (None / 'auto': from the calibrated EP width)
           "speculative": None if speculative is None else {
               "used": True, "draft_tokens": speculative.draft_tokens, "acceptance": speculative.acceptance,
               "acceptance_decay": speculative.decay, "tokens_per_step": e, "source": speculative.source},
           "cost_per_mtok_output_usd": float(_cost_per_mtok(system, out_gpu)),
           "notes": ([ctx] if ctx else []) + _notes(system, cal, m, {"ep": lay.ep, "attn_dp": lay.attn_dp})
           + ([f"{waiting:,.0f} of {Nr:,.0f} requests per replica wait on average: "
               + ("for the prefill pool (queued or being prefilled; the decode scheduler / KV memory allows "
                  f"{cap:,.0f} in flight)" if disagg else f"the scheduler cap / KV memory allows {cap:,.0f} in flight")]
              # aggregated, only where the cap binds: below it nothing waits for a slot (QA 2026-11-28: a note blamed
              # a cap of 224 at 64 in flight)
              if waiting >= max(0.5, LITTLE_TOLERANCE * Nr) and (disagg or Nr > cap) else [])
           + ([f"TTFT is on the benchmark client's clock: it includes the calibrated {lat * 1e3:.0f} ms per request "
               "outside the engine's steps (HTTP, tokenisation, queueing), a time each request holds its seat "
               "without decoding"] if lat > 0 else [])}
    res["range"] = {"output_tokens_per_s_per_gpu": [out_gpu * np.exp(cal.residual_low),
                                                    out_gpu * np.exp(cal.residual_high)]}
    _kernel_answer(res, system, cal, eng, m)
    return ServingResult(res)


#: How far the steady-state window's in-flight count may sit from Little's law (in flight = throughput x time in
#: system) before a gap between the seats and the requests in the engine is reported as requests waiting: the
#: window's edges and its rate estimate leave ~1% (tests/test_serving_dynamics.py holds the law to 2%).
LITTLE_TOLERANCE = 0.02
#: A steady closed loop whose window has not settled (`simulate.settled`) is replayed with twice the requests, at
#: most this many times (within simulate.MAX_REQUESTS).
SETTLE_DOUBLINGS = 3

#: Requests replayed per replica in a closed-loop latency check: this many times the concurrency, within the bounds
#: below. A closed loop started at t = 0 moves in waves that fade slowly; with 8 rounds the window's rate aliased
#: against them (Little's law off by up to 25% on gpt-oss-20b / MI300X at 256 in flight), with 32 within ~2%.
CLOSED_LOOP_ROUNDS = 32
CLOSED_LOOP_REQUESTS = (400, 20_000)
#: ... and never fewer than CLOSED_LOOP_MIN_ROUNDS rounds of the seats, whatever the bound above: the steady-state
#: window skips two rounds at each end (`simulate.CLOSED_LOOP_EDGE_ROUNDS`), and a run with fewer requests than
#: seats sends them all at t = 0 and never reaches a steady state (100,000 in flight on llama-3.1-8b / H100 replayed
#: 20,000 requests: TTFT 682 s where Little's law needs 6,860 s). Past CLOSED_LOOP_MAX_SEATS seats per replica
#: (those rounds would pass `simulate.MAX_REQUESTS`) the closed form answers.
CLOSED_LOOP_MIN_ROUNDS = 6
CLOSED_LOOP_MAX_SEATS = MAX_REQUESTS // CLOSED_LOOP_MIN_ROUNDS


def closed_loop_requests_for(concurrency: float) -> int:
    """Requests a closed-loop replay of `concurrency` seats per replica replays by default: CLOSED_LOOP_ROUNDS rounds
    of its seats within CLOSED_LOOP_REQUESTS, and at least CLOSED_LOOP_MIN_ROUNDS rounds."""
    c = max(int(round(float(concurrency))), 1)
    return int(max(min(max(CLOSED_LOOP_ROUNDS * c, CLOSED_LOOP_REQUESTS[0]), CLOSED_LOOP_REQUESTS[1]),
                   CLOSED_LOOP_MIN_ROUNDS * c))


def _mean_step(costs, system, lay, B, e, Ip, O, L, I, piece, cal, kern, ovh, q, speculative, sim=None) -> dict:
    """What a fixed deployment's TPOT is made of: its mean step mixes pure decode steps (what `estimate --batch`
    times) with steps carrying a prompt's prefill chunk. From the replayed closed loop (`sim`) where there is one:
    the decoding sequences and prompt tokens its steps carried on average; else the closed form
    (`prefill_step_tokens`, `mixed_step_s`). Every step is a token's, through all `lay.pp` pipeline stages
    (`pipeline_token_latency_s`), as `estimate` times it and the replay runs it; the op table is the token's too
    (QA 2026-11-28: at TP2 x PP2 the pure decode step printed 25.2 ms, one stage, where the estimate command it
    printed beside it gave 50.5 ms)."""
    kw = dict(kernels=kern or False, overhead_s=ovh, query_tokens=q)
    tok = lambda x: float(np.asarray(P.pipeline_token_latency_s(np.asarray(x, dtype=float), lay.pp)))  # noqa: E731
    if sim is not None:
        dec, pf, mean = float(sim.mean_decode_batch), float(sim.mean_prefill_tokens_per_step), float(sim.mean_step_s)
        # (at the whole number of sequences `estimate --batch` takes)
        pure = tok(stage_step(costs, system, lay.tp, lay.attn_dp, lay.pp, lay.ep, max(round(dec), 1.0),
                              0.0, L, max(I, 1.0), cal, **kw)["stage_time_s"])
        d = {"source": "replayed closed loop (steady-state window)", "decode_sequences": dec,
             "prefill_tokens_per_step": pf, "mean_step_s": mean, "pure_decode_step_s": pure}
        mix = stage_step(costs, system, lay.tp, lay.attn_dp, lay.pp, lay.ep, max(dec, 1.0), pf, L, max(I, 1.0),
                         cal, **kw)
    else:
        c = prefill_step_tokens(max(B, 1.0), e, Ip, O, piece, lay.attn_dp, cal.dp_prefill_alignment)[0]
        mean, chunk, pure, F = mixed_step_s(costs, system, lay.tp, lay.attn_dp, lay.pp, lay.ep, max(B, 1.0), e, Ip,
                                            O, L, max(I, 1.0), piece, cal, **kw)
        d = {"source": "closed form", "decode_sequences": float(B), "prefill_tokens_per_step": float(c * F),
             "mean_step_s": tok(mean), "pure_decode_step_s": tok(pure),
             "chunk_step_s": tok(chunk["stage_time_s"]), "chunk_step_fraction": float(F)}
        mix = stage_step(costs, system, lay.tp, lay.attn_dp, lay.pp, lay.ep, max(B, 1.0), float(c * F), L,
                         max(I, 1.0), cal, **kw)
    # the op table of one step carrying the mean mix (its steps vary around it: a chunk comes whole or not at all)
    d["mean_mix_step_s"] = tok(mix["stage_time_s"])
    d["mean_mix_ops_s"] = {k: lay.pp * float(np.asarray(o.time_s)) for k, o in mix["ops"].items()
                           if float(np.asarray(o.time_s))}
    d["pipeline_stages"] = lay.pp
    d["note"] = ("a step carries decode_sequences tokens plus prefill_tokens_per_step prompt tokens on average; "
                 "`estimate --batch <decode_sequences, rounded> --context <mean_decode_context>` at this layout (and "
                 "--engine, --precision, --kv-precision) times the pure decode step (pure_decode_step_s); TPOT "
                 "averages the steps of each request's own decode (times the pipeline factor, over tokens per step), "
                 "so it sits between the pure decode step and the mean step when prompts arrive in bursts"
                 + ("; the MTP draft adds its layers to each step" if speculative is not None else ""))
    return d


def _uneven_replicas(light, busy, n_light: int, n_busy: int):
    """One replica's figures for a fleet of `n_light` replicas replayed as `light` and `n_busy` carrying one request
    more, replayed as `busy` (two `SimulationResult`s): rates, batches and requests in flight averaged over the
    replicas, mean latencies weighted by each group's requests served, so Little's law holds for the fleet as for
    each group. Percentiles are the busier replicas' (an upper bound on the fleet's: their requests wait at least
    as long).

    Formula: X = (n_l X_l + n_b X_b) / (n_l + n_b); mean T = (n_l X_l T_l + n_b X_b T_b) / (n_l X_l + n_b X_b).
    Assumes: a balancer that spreads the requests in flight round robin, so replicas differ by at most one."""
    n = float(n_light + n_busy)
    wl, wb = n_light / n, n_busy / n
    xl, xb = light.requests_per_s * n_light, busy.requests_per_s * n_busy
    served = lambda k: (xl * getattr(light, k) + xb * getattr(busy, k)) / (xl + xb)  # noqa: E731
    mean = lambda k: wl * getattr(light, k) + wb * getattr(busy, k)  # noqa: E731
    return dataclasses.replace(
        busy, **{k: mean(k) for k in ("requests_per_s", "output_tokens_per_s", "input_tokens_per_s", "mean_batch",
                                      "mean_decode_batch", "mean_concurrency", "mean_in_flight", "utilisation")},
        **{k: served(k) for k in ("mean_ttft_s", "mean_tpot_s", "mean_e2e_s")},
        n_requests=light.n_requests + busy.n_requests)  # the requests the two replays passed


def closed_loop_latencies(m, system, lay, concurrency, seats, batch, context, costs, cal, overhead_s, chunk,
                          input_len, output_len, seed: int = 0, requests: int | None = None,
                          client_latency_s: float | None = None, window: str = "steady", result_only: bool = False,
                          prefill_pool: tuple | None = None, kernels=None, warmup_s: float | None = None,
                          cache_hit: float = 0.0):
    """One replica's closed loop replayed in the request simulator: `concurrency` client seats (requests in
    flight), at most `seats` of them running in the engine (the scheduler cap and KV room; the rest wait in its
    queue), step times from the step model's linear form at `batch` decoding sequences of `context` tokens
    (`replica_step_cost`: through a pure decode step and one carrying a chunk).
    Returns the `SimulationResult` (latencies counted from each request's send, over its steady-state window).
    `requests`, `client_latency_s`, `window`: a caller's own (`chalk simulate --concurrency` replays through here,
    so it answers as `throughput --layout --concurrency` does); defaults: CLOSED_LOOP_ROUNDS per seat, the
    calibrated request latency, the steady state. A run measured whole (`window='all'`, cold start included) starts
    on a cold engine: its first step takes `warmup_s` longer (default: the calibrated delay; 0: a warmed engine).
    `prefill_pool`: a disaggregated decode replica's share of its prefill pool (`simulate_continuous`'s): prompts are
    prefilled there first, and the replica's steps charge nothing for them (`fleet.decode_only`). `cache_hit`: the
    share of each prompt's tokens the prefix cache serves (their KV read, not computed), as the closed form counts it
    (QA 2026-11-28: the replay ignored it, 3,679 tokens/s per GPU for Llama-3.1-8B at 8,000 / 100 and 0.9 where the
    search's closed form said 5,369)."""
    from chalk.analyses.traffic import fleet
    from chalk.analyses.traffic import simulate as sim

    sc = replica_step_cost(m, system, lay, batch, input_len, output_len, context=context, chunk=chunk,
                           precision=costs.precision, kv_precision=costs.kv_precision, cal=cal, overhead_s=overhead_s,
                           kernels=kernels)
    if prefill_pool is not None:
        sc, chunk = fleet.decode_only(sc), None
    n = int(requests) if requests is not None else closed_loop_requests_for(concurrency)
    clients = max(int(round(concurrency)), 1)
    reqs = sim.closed_loop_requests(clients, n, input_len, output_len, seed)
    if cache_hit and prefill_pool is None:  # at least one prompt token of each is prefilled
        hit = np.minimum(np.floor(float(cache_hit) * reqs.input_len), reqs.input_len - 1).astype(np.int64)
        reqs = sim.Requests.from_arrays(reqs.arrival_s, reqs.input_len, reqs.output_len, cached_len=hit)
    return sim.simulate_continuous(reqs, sc, max_batch=max(int(min(seats, clients)), 1), kv_capacity_tokens=math.inf,
                                   prefill_chunk_tokens=int(chunk) * lay.attn_dp if chunk else None,
                                   closed_loop=True,  # each attention-DP rank has its own chunk budget
                                   concurrency=clients, window=window,
                                   client_latency_s=cal.request_latency_s if client_latency_s is None
                                   else client_latency_s, prefill_pool=prefill_pool,
                                   warmup_s=0.0 if window != "all" else cal.warmup_s if warmup_s is None else warmup_s)


def open_loop_step_cost(fx: _Fixed, batch: float):
    """The step cost of one replica of a fixed deployment's setup (`_fixed_setup`) for an open-loop replay: the step
    model on its layout, linear around `batch` decoding sequences, with its engine's step overhead and chunk."""
    return replica_step_cost(fx.m, fx.system, fx.lay, batch, *fx.lengths, context=fx.L,
                             chunk=fx.chunk, precision=fx.costs.precision, kv_precision=fx.costs.kv_precision,
                             cal=fx.cal, overhead_s=fx.ovh, kernels=fx.kern)


def replica_chunk_tokens(fx: _Fixed) -> int | None:
    """Prompt tokens a replica of `fx` prefills per step: the engine's chunk on every attention-DP rank (None: whole
    prompts)."""
    return int(fx.chunk) * fx.lay.attn_dp if fx.chunk else None


def open_loop_replay(fx: _Fixed, requests, step_cost, *, max_batch: int | None = None,
                     prefill_chunk: int | None = None, kv_capacity_tokens=None, client_latency_s: float | None = None,
                     loop: str = "auto", window: str = "steady"):
    """One replica of a fixed deployment's setup (`_fixed_setup`) serving open-loop arrivals, the one replay
    `throughput --tpot-p99/--ttft-p99` (Poisson) and `chalk simulate --rate/--trace` answer from: `requests`
    (`poisson_requests`, a `PoissonStream` or a trace's) through the request simulator on `step_cost`
    (`open_loop_step_cost`), at most the engine's sequences in flight (its scheduler cap and the KV room at the
    mean lengths, `fx.cap`) whose whole KV fits the replica's memory beside its weights (`fx.kv_tokens`: a
    heavy-tailed or traced workload's long requests wait for room rather than overfill it), prompts prefilled in its
    chunks (per attention-DP rank); TTFT and end-to-end on the client's clock (`on_client_clock`: the calibrated
    request latency outside the engine's steps added).
    `max_batch`, `prefill_chunk`, `kv_capacity_tokens`: a caller's own limits in place of the engine's (None: the
    engine's); `client_latency_s`: in place of the calibrated latency;
    `loop`: `simulate_continuous`'s (`simulate.loop_for` picks it for many runs); `window`: its measured window."""
    from chalk.analyses.traffic import simulate as sim

    chunk = prefill_chunk if prefill_chunk is not None else replica_chunk_tokens(fx)
    r = sim.simulate_continuous(requests, step_cost, max_batch=max_batch or max(int(fx.cap), 1),
                                kv_capacity_tokens=fx.kv_tokens if kv_capacity_tokens is None else kv_capacity_tokens,
                                prefill_chunk_tokens=chunk, loop=loop, window=window)
    return sim.on_client_clock(r, fx.lat if client_latency_s is None else client_latency_s)


#: An open-loop replay's step cost is linear around the batch the replay settles at: replayed again around a
#: batch nearer the replay's own until the two differ by less than SETTLE_TOLERANCE (at most SETTLE_ROUNDS replays).
SETTLE_TOLERANCE = 0.002
SETTLE_ROUNDS = 8


def settled_replay(fx: _Fixed, replay, rate: float):
    """(SimulationResult, its step cost, the batch it is linear around) of an open-loop replay at `rate` requests/s
    per replica whose step cost is linear around the batch the replay itself settles at: `replay(step_cost)` first
    around the batch at which the closed form serves `rate` (`fx.x_grid`; the cap past its reach), then around the
    next guess at the batch b whose replay's mean batch g(b) is b, until |g(b) - b| <= SETTLE_TOLERANCE * b (at most
    SETTLE_ROUNDS replays). The step model is exact at its reference batch; the start depends on the deployment and
    the rate alone, so every door that replays a deployment's open loop at a rate (`throughput`'s Poisson tail
    search, `chalk simulate --rate/--trace`, `plan`'s replay of a replica) walks the same replays to the same
    answer.
    The guess is g(b) itself until two replays bracket the root (one with g(b) > b, one below), then the secant of
    log g(b) - log b inside the bracket (Illinois): near the replica's capacity the mean batch swings further than
    the reference moved (a cheaper step drains the batch), so plain iteration oscillated with a growing swing
    (DeepSeek-R1 on DEP32 at 5 requests/s: 576, 658, 277, 3347, 2, 5103 sequences) and answered from the last,
    unsettled replay. Returns the replay nearest its own reference batch."""
    x = float(rate)
    start = float(np.interp(x, fx.x_grid, fx.grid)) if x < fx.x_grid[-1] else float(fx.cap)
    top = max(float(fx.cap), 1.0)
    b = float(min(max(round(start), 1), top))  # a whole number of sequences
    ends = {}  # the bracket: +1 -> [log b, gap] of a replay whose batch grew, -1 -> one whose batch fell
    last = 0  # the side the previous replay replaced
    best = None
    for _ in range(SETTLE_ROUNDS):
        sc = open_loop_step_cost(fx, b)
        r = replay(sc)
        g = float(min(max(round(float(r.mean_batch)), 1), top))
        gap = math.log(g) - math.log(b)
        if best is None or abs(gap) < best[0]:
            best = (abs(gap), r, sc, b)
        if abs(g - b) <= SETTLE_TOLERANCE * b:
            break
        side = 1 if gap > 0 else -1
        if side == last and -side in ends:  # Illinois: the other end stayed twice, its weight halves
            ends[-side][1] *= 0.5
        ends[side], last = [math.log(b), gap], side
        if len(ends) < 2:
            nb = g
        else:  # the secant of the gap in log b between the bracket's ends, kept inside it
            (l0, g0), (l1, g1) = ends[1], ends[-1]
            nb = math.exp(l0 + min(max(g0 / (g0 - g1), 0.05), 0.95) * (l1 - l0))
        nb = float(min(max(round(nb), 1), top))
        if nb == b:
            break
        b = nb
    return best[1], best[2], best[3]


def replica_step_cost(model, system, layout, batch, input_len, output_len, *, context=None, chunk=None, **kw):
    """The request simulator's step cost (`StepCost.from_step_model`) of one replica `layout` at `batch` decoding
    sequences serving prompts of `input_len` tokens (a number or a length distribution: its mean) prefilled in
    chunks (`prefill_piece`, `prefill_step_tokens`): exact for a pure decode step and for one carrying a chunk.
    `context` defaults to I + O / 2; `kw` goes to `from_step_model` (precision, kv_precision, cal, ideal, ...)."""
    from chalk.analyses.step.step_cost import StepCost

    I = float(getattr(input_len, "mean", input_len))
    O = float(getattr(output_len, "mean", output_len))
    b = max(float(batch), 1.0)
    from chalk.analyses.step.estimate import make_layout
    from chalk.specs.catalog import as_model

    model = as_model(model)
    lay = make_layout(model, layout)  # parsed once: from_step_model takes the Layout as it is
    cal = kw.get("cal") or calibration(kw.get("ideal", False))
    c, _, c_r = prefill_step_tokens(b, 1.0, I, O, prefill_piece(I, chunk), lay.attn_dp, cal.dp_prefill_alignment)
    if chunk:  # a replayed step never carries more than its ranks' chunk budgets: the secant is taken within them
        # (QA 2026-11-28: at one output token the closed form's 128,000 prompt tokens a step, 15x the 8,192 budget,
        # priced the replay's chunk steps 6% dear, and 10 output tokens made a request shorter than 1 did)
        c, c_r = min(float(c), float(chunk) * lay.attn_dp), min(float(c_r), float(chunk))
    # the most prompt tokens one replayed step can carry: every decoding sequence's prompt at once, within the
    # ranks' chunk budgets (the compute side of the step cost is priced there)
    high = b * max(I, 1.0) if not chunk else min(b * max(I, 1.0), float(chunk) * lay.attn_dp)
    return StepCost.from_step_model(model, system, lay, batch=b, context=I + O / 2 if context is None else context,
                                    prompt_len=max(I, 1.0), prefill_tokens=float(c), prefill_rank_tokens=float(c_r),
                                    prefill_tokens_high=max(high, float(c)), **kw)


def label_rates(r: dict) -> None:
    """Add what the per-GPU rate comes to per replica and per fleet (all `gpus` of the answer), with the replica's
    GPUs, where the answer is one pool of identical replicas (aggregated serving); a disaggregated answer's per fleet
    (its decode and prefill pools), which has no one replica."""
    if not r.get("gpus"):
        return
    if r.get("disaggregated") or r.get("mode") == "disaggregated" or "prefill" in r:
        r.setdefault("output_tokens_per_s_per_fleet", r["output_tokens_per_s_per_gpu"] * r["gpus"])
        return
    reps = r.get("replicas") or (r.get("parallelism") or {}).get("dp") or 1
    per_gpu, g = r["output_tokens_per_s_per_gpu"], r["gpus"]
    r.setdefault("gpus_per_replica", g // reps if g % reps == 0 else g / reps)
    r.setdefault("output_tokens_per_s_per_replica", per_gpu * g / reps)
    r.setdefault("output_tokens_per_s_per_fleet", per_gpu * g)


def _cost_per_mtok(system: System, per_gpu_rate):
    with np.errstate(divide="ignore"):
        return system.chip.price_usd_per_s / np.asarray(per_gpu_rate, dtype=float) * 1e6


def _in_flight(decoding, ttft, O, tpot) -> float:
    """Requests in flight at `decoding` sequences decoding (Little's law, as a fixed deployment holds them): those and
    the ones waiting for their first token, X * TTFT with X = decoding / (O * TPOT) requests/s."""
    return float(decoding) * (1.0 + float(ttft) / (O * float(tpot)))


def _point(i, g, ev, per_gpu, ratio, layouts, system, costs, cal, I, O, pool, disaggregated, sized=False) -> dict:
    lay = layouts[int(g["idx"][i])]
    out_gpu = float(per_gpu[i])
    in_gpu = out_gpu * I / O
    share = float(ev["prefill_share"][i])
    price = system.chip.price_usd_per_s
    # two costs, two keys: all GPU time charged to output tokens (what a price per output token must cover), and
    # the decode share alone with prefill's share charged to input tokens
    if disaggregated:
        cost_out_decode = float(_cost_per_mtok(system, ev["output_per_gpu"][i]))
        cost_in = float(_cost_per_mtok(system, pool["input_tokens_per_s_per_gpu"]))
        gpus = lay.gpus * (1 + float(ratio[i]))
    else:
        cost_out_decode = price * (1 - share) / out_gpu * 1e6
        cost_in = price * share / in_gpu * 1e6 if share > 0 else 0.0
        gpus = lay.gpus
    cost_out = float(_cost_per_mtok(system, out_gpu))
    low, high = out_gpu * np.exp(cal.residual_low), out_gpu * np.exp(cal.residual_high)
    step = {k: float(np.asarray(v)[i]) for k, v in ev["step"].items()
            if k.endswith("_s") or k.endswith("_bytes") or k == "flops"}
    d = {"output_tokens_per_s_per_gpu": out_gpu, "input_tokens_per_s_per_gpu": in_gpu,
         "user_tokens_per_s": float(ev["user_tokens_per_s"][i]), "ttft_s": float(ev["ttft_s"][i]),
         "tpot_s": float(ev["tpot_s"][i]), "gpus": gpus,
         "concurrency": _in_flight(g["B"][i] * lay.dp, ev["ttft_s"][i], O, ev["tpot_s"][i]),
         "parallelism": {"tp": lay.tp, "ep": lay.ep, "pp": lay.pp, "dp": lay.dp, "attn_dp": lay.attn_dp,
                         "etp": lay.etp},
         "layout": lay.label(), "mode": "disaggregated" if disaggregated else "aggregated",
         "domain_chips": system.chips, "domains": lay.domains(system.chips),
         "replica_domains": lay.replica_domains(system.chips),
         "overlap": str(ev["overlap"][i]), "batch_per_replica": float(g["B"][i]),
         "cost_per_mtok_output_usd": cost_out, "cost_per_mtok_output_decode_share_usd": cost_out_decode,
         "cost_per_mtok_input_prefill_share_usd": cost_in,
         "range": {"output_tokens_per_s_per_gpu": [float(low), float(high)]},
         "weight_bytes_per_gpu": float(ev["weight_bytes_per_gpu"][i]),
         "kv_bytes_per_gpu": float(ev["kv_bytes_per_gpu"][i]), "step": step,
         "prefill_time_share": share}
    if disaggregated:
        d["prefill"] = {"layout": pool["layout"].label(), "parallelism": pool["layout"].to_dict(),
                        "input_tokens_per_s_per_gpu": pool["input_tokens_per_s_per_gpu"],
                        "gpus_per_decode_gpu": float(ratio[i]), "ttft_s": pool["ttft_s"]}
        # the whole deployment: the layout's decode replicas (the smallest whole number of them where it has one,
        # unless --gpus sized the decode pool: then the layout's own) and the prefill replicas that keep up with
        # them; its layout, replicas and requests in flight are theirs
        Gd, Gp, r = lay.replica_gpus, pool["layout"].replica_gpus, float(ratio[i])
        k = lay.dp if lay.dp > 1 or sized else whole_pools(Gd, Gp, r)[0]
        p = prefill_replicas(k, Gd, Gp, r)
        dec_g, pre_g = k * lay.replica_gpus, p * pool["layout"].replica_gpus
        whole = float(ev["output_per_gpu"][i]) * dec_g / (dec_g + pre_g)
        dec_lay, pre_lay = dataclasses.replace(lay, dp=k), dataclasses.replace(pool["layout"], dp=p)
        d["prefill"].update(layout=pre_lay.label(), parallelism=pre_lay.to_dict(), replicas=p)
        d.update(layout=dec_lay.label(), parallelism={**d["parallelism"], "dp": k}, decode_replicas=k,
                 concurrency=_in_flight(g["B"][i] * k, ev["ttft_s"][i], O, ev["tpot_s"][i]))
        # the prefill share charged for the prefill GPUs deployed (whole workers), over the prompt tokens the decode
        # replicas serve: decode share + prefill share x I/O adds up to the total per output token (QA 2026-11-28:
        # priced at the pool's full-utilisation rate, the split fell 4-7% short of the total)
        served_in = float(ev["output_per_gpu"][i]) * dec_g * I / O
        d["cost_per_mtok_input_prefill_share_usd"] = price * pre_g / served_in * 1e6 if served_in > 0 else 0.0
        d["prefill"]["gpus_per_decode_gpu_deployed"] = pre_g / dec_g
        d.update(gpus=dec_g + pre_g, decode_gpus=dec_g, prefill_gpus=pre_g, output_tokens_per_s_per_gpu=whole,
                 input_tokens_per_s_per_gpu=whole * I / O,
                 cost_per_mtok_output_usd=float(_cost_per_mtok(system, whole)),
                 range={"output_tokens_per_s_per_gpu": [whole * float(np.exp(cal.residual_low)),
                                                        whole * float(np.exp(cal.residual_high))]})
    return d


#: Most decode replicas `whole_pools` tries for a whole disaggregated deployment.
WHOLE_POOL_REPLICAS = 16


def prefill_replicas(k: int, decode_replica_gpus: int, prefill_replica_gpus: int,
                     prefill_per_decode_gpu: float) -> int:
    """Prefill replicas that keep up with `k` decode replicas: ceil(k G_d r / G_p), at least one."""
    r = max(float(prefill_per_decode_gpu), 0.0)
    return max(int(math.ceil(k * int(decode_replica_gpus) * r / int(prefill_replica_gpus) - 1e-9)), 1)


def whole_pools(decode_replica_gpus: int, prefill_replica_gpus: int, prefill_per_decode_gpu: float):
    """(decode replicas, prefill replicas) of the smallest whole disaggregated deployment whose prefill pool keeps up
    with its decode pool and wastes least: over k = 1..WHOLE_POOL_REPLICAS decode replicas, p = ceil(k G_d r / G_p)
    prefill replicas; the first k within 5% of the ideal GPU count k G_d (1 + r), else the least wasteful.

    Formula: p(k) = ceil(k G_d r / G_p); waste(k) = (k G_d + p(k) G_p) / (k G_d (1 + r)) - 1.
    Assumes: prefill and decode replicas each at their own layout; the pools' rates scale with replicas."""
    Gd, Gp, r = int(decode_replica_gpus), int(prefill_replica_gpus), max(float(prefill_per_decode_gpu), 0.0)
    best = None
    for k in range(1, WHOLE_POOL_REPLICAS + 1):
        p = prefill_replicas(k, Gd, Gp, r)
        waste = (k * Gd + p * Gp) / (k * Gd * (1 + r)) - 1
        if best is None or waste < best[0] - 1e-12:
            best = (waste, k, p)
        if waste <= 0.05:
            break
    return best[1], best[2]


def _frontier_point(j, g, ev, per_gpu, layouts, system, O) -> dict:
    lay = layouts[int(g["idx"][j])]
    return {"user_tokens_per_s": float(ev["user_tokens_per_s"][j]), "output_tokens_per_s_per_gpu": float(per_gpu[j]),
            "cost_per_mtok_output_usd": float(_cost_per_mtok(system, per_gpu[j])), "layout": lay.label(),
            "parallelism": {"tp": lay.tp, "ep": lay.ep, "pp": lay.pp, "dp": lay.dp},
            "concurrency": _in_flight(g["B"][j] * lay.dp, ev["ttft_s"][j], O, ev["tpot_s"][j]),
            "ttft_s": float(ev["ttft_s"][j])}


def speed_price_multiples(user, per_gpu, base_user, base_per_gpu, speedups=SPEEDUPS):
    """Price multiple that buys k x the per-user speed of a base point: cheapest point at least k x as fast.

    Formula: multiple(k) = (cost per token of the cheapest point with speed >= k * s0) / (cost at s0)
             = throughput per GPU at s0 / best throughput per GPU at >= k * s0
    Ref: the lecture ("fast mode: 6x the price for 2.5x the speed"); cost eq. 4.
    Assumes: price proportional to GPU-seconds per token (same $/GPU-h at every speed).
    """
    out = []
    for k in speedups:
        sel = user >= k * base_user * (1 - 1e-9)
        if not np.any(sel):
            out.append({"speedup": k, "user_tokens_per_s": k * base_user, "price_multiple": None})
            continue
        j = int(np.argmax(np.where(sel, per_gpu, -np.inf)))
        out.append({"speedup": k, "user_tokens_per_s": float(user[j]),
                    "price_multiple": float(base_per_gpu / per_gpu[j]), "index": j})
    return out


def _modes(front, ev, per_gpu, layouts, g, res, system) -> list[dict]:
    user, thr = ev["user_tokens_per_s"][front], per_gpu[front]
    rows = speed_price_multiples(user, thr, res["user_tokens_per_s"], res["output_tokens_per_s_per_gpu"])
    for r in rows:
        j = r.pop("index", None)
        if j is not None:
            r["layout"] = layouts[int(g["idx"][front[j]])].label()
            r["cost_per_mtok_output_usd"] = float(_cost_per_mtok(system, thr[j]))
    return rows


def _notes(system: System, cal: Calibration, model=None, par: dict | None = None) -> list[str]:
    """Assumptions an answer rests on: an assumed price, the ideal roofline, and for an MoE model on a layout (`model`,
    its parallelism `par`) the expert loads its kernels were timed with. (The doors add their context note,
    `cut_lengths`, on the lengths as asked.)"""
    n = []
    ep = float(par["ep"]) if par is not None and par["attn_dp"] > 1 else None  # experts over an EP group
    if model is not None and model.is_moe and ep is not None and cal.label != "ideal" and cal.use_kernel_tables:
        if cal.balances_experts(ep, par["attn_dp"]):
            n.append(f"experts timed with balanced loads: an expert-load balancer (redundant experts placed by load) "
                     f"on the EP{ep:g} group, as wide-EP deployments run"
                     + (f" from EP{cal.eplb_min_ep:g}" if cal.eplb_min_ep > 2 else "") + " (--eplb off: without)")
        elif ep > 1:
            n.append(f"experts timed with served traffic's uneven (power-law) loads on EP{ep:g}"
                     + (f"; a balancer is assumed from EP{cal.eplb_min_ep:g}" if cal.eplb_min_ep < float("inf")
                        else "") + " (--eplb on: with one)")
    if system.chip.price_is_assumption:
        n.append(f"{system.chip.id} price ${system.chip.price_usd_per_hour}/h is an assumption: "
                 f"{system.chip.price_note}")
    if cal.label == "ideal":
        n.append("ideal: peak FLOP/s, HBM and link bandwidth, no overhead: an upper bound real engines miss by 1.5-3x")
    return n


# --------------------------------------------------------------------------- lecture claim
def claims() -> list[Claim]:
    """`fast_mode_price_for_2_5x_speed`: DeepSeek-V3 on a GB200 NVL72 rack."""
    # DeepSeek-V3 serves with its own MTP module (its config's one draft layer, accepted at the catalog's rate:
    # 85-90% in the DeepSeek-V3 technical report, arXiv 2412.19437, section 5.4.3); without it the rack's
    # latency floor sits below 2.5x 40 tok/s
    mtp = model_speculation("deepseek-v3")

    # one search of the rack's layouts x batch, read at two base speeds (what `throughput` answers for each)
    found = _search("deepseek-v3", "gb200-nvl72", input_len=2000, output_len=1000, speculative=mtp,
                    speeds=(40.0, 20.0))

    def multiple(base):
        r = _select(found, base)
        return r, next(m for m in r["modes"] if m["speedup"] == 2.5)

    base_speed = 40.0
    r, fast = multiple(base_speed)
    _, slow_base = multiple(20.0)
    value = fast["price_multiple"]
    return [Claim(
        id="fast_mode_price_for_2_5x_speed", value=value, unit="x price for 2.5x per-user speed",
        lecture_value=6, lecture_range=(3.0, 12.0), section="Batch size, latency and cost",
        assumptions=f"DeepSeek-V3 (FP8) on one GB200 NVL72 rack, 2,000-token prompts and 1,000-token answers, "
                    f"calibrated efficiency, its MTP module (1 draft token accepted 85% of the time, DeepSeek-V3 "
                    f"report); base = the cheapest layout and batch serving >= {base_speed:.0f} "
                    f"tokens/s per user (a frontier API's speed); fast = the cheapest point at >= 2.5x the base "
                    f"point's speed; price proportional to GPU-seconds per token.",
        explanation=(f"The base runs {r['layout']} at {r['user_tokens_per_s']:.0f} tokens/s per user and "
                     f"{r['output_tokens_per_s_per_gpu']:.0f} tokens/s per GPU; 2.5x that speed "
                     f"({fast['user_tokens_per_s']:.0f} tokens/s) needs smaller batches per GPU "
                     f"({fast.get('layout', 'n/a')}) and costs {value:.1f}x per token. The multiple depends on "
                     f"where the base sits: from a 20 tokens/s base it is "
                     f"{slow_base['price_multiple']:.1f}x, and it explodes near the rack's latency floor, where "
                     "the weight read can no longer be amortised: the lecture's 'you cannot pay 100x to go much "
                     "faster'.") if value is not None else "No layout reaches 2.5x the base speed on this rack.")]
