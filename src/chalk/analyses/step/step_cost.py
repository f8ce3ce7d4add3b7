"""The linearised step of one mixed prefill + decode step, for the request simulator.

A simulated step costs a handful of float operations. Its coefficients come from the step model on one replica
layout (`StepCost.from_step_model`: what `chalk simulate` and the serving replays use), or, for the lecture's
aggregate bound only, from `roofline.aggregate_step_cost` (`from_roofline`; it agrees with `roofline.step` for
pure decode batches, tests/test_simulate.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from chalk.analyses.step.calibration import IDEAL, Efficiency
from chalk.equations import roofline as R
from chalk.errors import InputError
from chalk.specs.workload import positive


# ----------------------------------------------------------------------------------------- step cost
@dataclass(frozen=True)
class StepCost:
    """Linearised roofline of one mixed prefill + decode step. Rates are effective (efficiency applied).

    compute = (flops_per_token * tokens + attn_flops_per_context_token * sum_ctx
               + attn_flops_per_sequence * n_decode + prefill_attn_flops_per_pair * attended) / peak
    memory  = (weight_dense_bytes + expert_bytes_all * (1 - (1 - k/E)^tokens)
               + kv_read_bytes_per_context_token * (sum_ctx + prefill_prior)
               + kv_read_bytes_per_sequence * n_decode + kv_write_bytes_per_token * n_prefill) / bw
    Attention and KV terms are the tangent at `reference_context_tokens`: exact for full attention,
    a linearisation for sliding-window and top-k (DSA) layers.
    """

    flops_per_token: float
    attn_flops_per_context_token: float
    attn_flops_per_sequence: float
    prefill_attn_flops_per_pair: float
    peak_flops_per_s: float
    weight_dense_bytes: float
    expert_bytes_all: float
    log1m_expert_fraction: float  # log(1 - k/E); 0 for dense models
    kv_read_bytes_per_context_token: float
    kv_read_bytes_per_sequence: float
    kv_write_bytes_per_token: float
    bandwidth_bytes_per_s: float
    overhead_s: float = 0.0
    kv_capacity_tokens: float = math.inf
    label: str = ""

    def __post_init__(self):
        for f in fields(self)[:-1]:  # all but the label
            v, sign = getattr(self, f.name), -1 if f.name == "log1m_expert_fraction" else 1
            if not (isinstance(v, (int, float)) and sign * v >= 0):
                raise InputError(f"step cost {f.name} must be a number {'<=' if sign < 0 else '>='} 0, got {v!r}")
        if self.peak_flops_per_s <= 0 or self.bandwidth_bytes_per_s <= 0:
            raise InputError("step cost peak FLOP/s and bandwidth must be positive")
        if self.overhead_s <= 0 and self.weight_dense_bytes <= 0 and self.flops_per_token <= 0:
            raise InputError("a step must take time: give an overhead, weight bytes or FLOPs per token")

    @classmethod
    def from_roofline(cls, model, system, chips: int | None = None, precision: str | None = None,
                      kv_precision: str = "bf16", efficiency: Efficiency = IDEAL,
                      reference_context_tokens: float = 4096) -> StepCost:
        """The lecture's aggregate bound as a step cost: `roofline.aggregate_step_cost` (computed there, with the
        rest of the bound). No chalk command simulates on it; the step model's form is `from_step_model`."""
        from chalk.analyses.step.roofline import aggregate_step_cost

        return cls(**aggregate_step_cost(model, system, chips, precision, kv_precision, efficiency,
                                         reference_context_tokens))

    @classmethod
    def from_step_model(cls, model, system, layout, *, batch: float, context: float, prompt_len: float,
                        prefill_tokens: float = 0.0, prefill_rank_tokens: float | None = None,
                        precision: str | None = None, kv_precision: str | None = "auto",
                        cal=None, ideal: bool = False, overhead_s: float | None = None,
                        kernels=None, prefill_tokens_high: float | None = None) -> StepCost:
        """The one step model (`chalk.analyses.step.step_model`) on one replica `layout`, as the simulator's linear step
        cost around `batch` decoding sequences of `context` tokens: in decode sequences and context its tangent
        there (pure decode), in prompt tokens its secant from none to `prefill_tokens` (a step carrying one
        prefill chunk, `prefill_rank_tokens` of it on the busiest attention-DP rank), so a pure decode step and a
        step carrying that chunk are both exact.

        Formula: T(n, sum_ctx, c) = T0 + dT/dn * (n - B) + dT/dctx * (sum_ctx - B L) + (T(B, L, c0) - T0) / c0 * c,
                 T0 = T(B, L, 0); T is the token step (PP stage steps). c0 = 0: the secant over one prompt.
        Written on the StepCost's memory line (bandwidth 1: its coefficients are seconds), whose decode term
        (`kv_read_bytes_per_sequence`) and prompt term (`kv_write_bytes_per_token`) are apart: a compute line's one
        per-token coefficient would serve both, so where a prompt token costs more than a decoding sequence (always
        under attention DP: one rank prefills while every rank decodes its own sequences) it charged each decoding
        sequence a prompt token's price, ~7x the step model's slope for DeepSeek-R1 on DEP32, and its fixed time
        went negative (clamped: away from the reference batch a decode step took microseconds). Where the tangent's
        fixed time would fall below zero (a step curving up at `batch`), the decode slope is lowered so the
        reference step stays exact.

        That tangent and secant are one line, which prices a burst of prompts at the low-load secant's rate: near
        a memory-bound decode step a prompt token is almost free, while a step carrying many prompts at once is
        compute-bound. So the compute line carries the roofline's other side: every token of the step (decoding or
        prompt) at the secant from none to `prefill_tokens_high` prompt tokens (default: every decoding sequence's
        prompt at once, `batch` x `prompt_len`; the replays pass their chunk budget where it is smaller), through
        the origin, no steeper than keeps the two reference steps on the memory line. The step is the larger of the two plus the
        fixed time, as the step model's own roofline. (QA 2026-11-28: LMDeploy's 16 threads of 128-token prompts
        on Llama-2-70B TP4 A100 arrive together; one step prefills all 2,048 tokens, 341 ms in the step model,
        which the replay's one line priced at 193 ms from the secant over one 128-token prompt beside 16 decodes.)

        The fixed time both share is the step model's overhead at the reference step (F, launches and scheduling);
        the rest of the line's intercept (the weights' read) is the memory line's own.

        Formula: T_mem = the line above less F; T_comp = k * (n + c), k = min((T(B, L, c_hi) - F) / (B + c_hi),
                 (T0 - F) / B, (T(B, L, c0) - F) / (B + c0)); T = F + max(T_mem, T_comp).
        """
        from chalk.analyses.step.calibration import calibration
        from chalk.analyses.step.estimate import make_layout
        from chalk.analyses.step.parallel import default_kernels, memory_per_chip, stage_step, step_costs
        from chalk.equations import parallel as P
        from chalk.specs.catalog import as_model, as_system

        model, system = as_model(model), as_system(system)
        cal = cal or calibration(ideal)
        lay = make_layout(model, layout)
        _, kvp, costs = step_costs(model, system, precision, kv_precision)
        # the engine's own kernel tables where the caller has them (`parallel.engine_kernels`), as its closed form
        # times the same steps; else chalk's main tables
        kern = (default_kernels(system.chip, cal) if kernels is None else kernels) or False
        B = float(positive("batch", batch, scalar=True))
        L = float(positive("context", context, scalar=True))
        I = float(positive("prompt length", prompt_len, scalar=True))
        c0 = float(positive("prefill tokens", prefill_tokens, allow_zero=True, scalar=True))

        def T(b, ctx, c, full=False, rank_tokens=None):
            rank = rank_tokens if rank_tokens is not None else prefill_rank_tokens if c > 0 and c0 > 0 else None
            st = stage_step(costs, system, lay.tp, lay.attn_dp, lay.pp, lay.ep, b, c, ctx, I, cal, kernels=kern,
                            overhead_s=overhead_s, prefill_rank_tokens=rank)
            t = float(P.pipeline_token_latency_s(st["stage_time_s"], lay.pp))
            return (t, float(P.pipeline_token_latency_s(st["overhead_s"], lay.pp))) if full else t

        t0, ovh0 = T(B, L, 0.0, full=True)
        db = max(B * 0.05, 1.0)
        d_seq = (T(B + db, L, 0.0) - T(max(B - db, 1e-3), L, 0.0)) / (B + db - max(B - db, 1e-3))
        dl = max(L * 0.05, 1.0)
        d_ctx = max((T(B, L + dl, 0.0) - T(B, max(L - dl, 1.0), 0.0)) / (L + dl - max(L - dl, 1.0)) / B, 0.0)
        dc = c0 if c0 > 0 else I
        d_tok = max((T(B, L, dc) - t0) / dc, 0.0)
        d_ctx = min(d_ctx, t0 / (B * L))  # the reference step's context alone never outlasts it
        per_seq = min(max(d_seq - d_ctx * L, 0.0), (t0 - d_ctx * B * L) / B)  # the tangent, within the step
        fixed = t0 - (per_seq * B + d_ctx * B * L)
        # the fixed time both lines share is the step's overhead (launches, scheduling); the rest of the tangent's
        # intercept (the weights' read, communication) is the memory line's own
        ovh = min(max(ovh0, 1e-9), max(fixed, 1e-9))
        # the compute side: every token at the secant to a step carrying `c_hi` prompt tokens, kept below the
        # memory line at the two reference steps (a pure decode step and one carrying `dc`)
        c_hi = B * I if prefill_tokens_high is None else float(positive("prefill tokens high", prefill_tokens_high,
                                                                          allow_zero=True, scalar=True))
        k = 0.0
        if c_hi > 1.5 * dc:
            # a burst of many prompts spreads over the attention-DP ranks (one chunk's prompt sits on one)
            rank_hi = None if prefill_rank_tokens is None or c0 <= 0 else max(c_hi / lay.attn_dp,
                                                                               min(prefill_rank_tokens, c_hi))
            t_hi = T(B, L, c_hi, rank_tokens=rank_hi)
            k = max(min((t_hi - ovh) / (B + c_hi), (t0 - ovh) / B, (t0 + d_tok * dc - ovh) / (B + dc)), 0.0)
        w, kv1 = memory_per_chip(costs, lay.tp, lay.attn_dp, lay.pp, lay.ep, float(lay.attn_dp * lay.pp), L)
        usable = system.chip.hbm_bytes * (1 - cal.memory_reserve)
        seqs = max(float(usable - w), 0.0) / float(kv1) * lay.attn_dp * lay.pp if float(kv1) > 0 else math.inf
        lines = dict(flops_per_token=k, attn_flops_per_context_token=0.0, attn_flops_per_sequence=0.0,
                     kv_read_bytes_per_context_token=d_ctx, kv_read_bytes_per_sequence=per_seq,
                     kv_write_bytes_per_token=d_tok)
        return cls(**lines, prefill_attn_flops_per_pair=0.0, peak_flops_per_s=1.0,
                   weight_dense_bytes=max(fixed - ovh, 0.0), expert_bytes_all=0.0, log1m_expert_fraction=0.0,
                   bandwidth_bytes_per_s=1.0, overhead_s=ovh, kv_capacity_tokens=seqs * L,
                   label=f"{model.id} on {lay.label()} of {system.chip.id} ({costs.precision}, KV {kvp}; step model "
                         f"tangent at {B:.0f} sequence{'' if round(B) == 1 else 's'} of {L:.0f} tokens, {cal.label})")

    @classmethod
    def constant(cls, step_time_s: float) -> StepCost:
        """A step that always takes `step_time_s` whatever it holds (the lecture's idealised train)."""
        return cls(0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0,
                   overhead_s=float(positive("step time", step_time_s, scalar=True)), label=f"constant {step_time_s} s")

    def times_s(self, n_decode, decode_context_tokens, prefill_tokens=0, prefill_attended_tokens=0,
                prefill_prior_tokens=0) -> tuple[np.ndarray, np.ndarray]:
        """(compute time, memory time) of steps; arguments broadcast as numpy arrays."""
        nd, ctx = np.asarray(n_decode, float), np.asarray(decode_context_tokens, float)
        npf, att = np.asarray(prefill_tokens, float), np.asarray(prefill_attended_tokens, float)
        prior = np.asarray(prefill_prior_tokens, float)
        tokens = nd + npf
        flops = (self.flops_per_token * tokens + self.attn_flops_per_context_token * ctx
                 + self.attn_flops_per_sequence * nd + self.prefill_attn_flops_per_pair * att)
        weights = self.weight_dense_bytes + self.expert_bytes_all * -np.expm1(tokens * self.log1m_expert_fraction)
        kv = (self.kv_read_bytes_per_context_token * (ctx + prior) + self.kv_read_bytes_per_sequence * nd
              + self.kv_write_bytes_per_token * npf)
        return flops / self.peak_flops_per_s, (weights + kv) / self.bandwidth_bytes_per_s

    def step_time_s(self, n_decode, decode_context_tokens, prefill_tokens=0, prefill_attended_tokens=0,
                    prefill_prior_tokens=0):
        """Step duration: max(compute, weight + KV read) + overhead, for `n_decode` sequences whose
        contexts sum to `decode_context_tokens` and `prefill_tokens` prompt tokens attending to
        `prefill_attended_tokens` (token, context) pairs in all, after `prefill_prior_tokens` cached."""
        c, m = self.times_s(n_decode, decode_context_tokens, prefill_tokens, prefill_attended_tokens,
                            prefill_prior_tokens)
        t = np.asarray(R.step_time_s(c, m, self.overhead_s))
        return float(t) if t.ndim == 0 else t

    __call__ = step_time_s
