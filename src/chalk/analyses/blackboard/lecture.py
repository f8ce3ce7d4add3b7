"""The lecture's deductions (shared/lecture/claims.md), each computed by chalk's own functions.

Step times here are the lecture's aggregate bound (`roofline.step`: the system's chips summed into one
communication-free chip), as the lecture reasons; each claim that uses it says so in its assumptions.

Claims from later analyses (parallel, serving, simulate, pricing, training, reversible) are pulled
from their modules' `claims()`; a module not built yet contributes nothing (absent, never faked).
"""

from __future__ import annotations

import importlib

import numpy as np

from chalk.analyses.records.claims import Claim
from chalk.analyses.blackboard.hardware_facts import chip_facts
from chalk.analyses.step.model_sizes import ModelSizes
from chalk.analyses.step.calibration import IDEAL
from chalk.analyses.step.roofline import step as aggregate_bound
from chalk.equations import moe
from chalk.equations import roofline as R
from chalk.specs.catalog import chip_ids, load_chip, load_model, resolve_hardware
from chalk.specs.precision import bytes_per_element

LECTURE_RATIO = 300.0  # "a dimensionless constant of around 300 on most GPUs"


def hardware_claims() -> list[Claim]:
    out = []
    for cid in chip_ids():
        chip = load_chip(cid)
        f = chip_facts(chip)
        out.append(Claim(
            id=f"dense_critical_batch.{cid}", value=f["dense_critical_batch"], unit="multiplies per weight byte",
            lecture_value=300, lecture_range=(100, 600), section="roofline",
            assumptions=f"{chip.name}: dense {f['native_precision']} peak {chip.peak_flops_per_s(f['native_precision']):.4g} "
                        f"FLOP/s, HBM {chip.hbm_bandwidth_bytes_per_s:.4g} B/s, "
                        f"{bytes_per_element(f['native_precision'])} B per weight",
            explanation="(FLOP/s / 2) x bytes per weight / HBM bandwidth: the batch at which a dense model's weight "
                        "multiplies take as long as its weight fetch (eq. 5 with sparsity 1)."))
    for cid in chip_ids():
        chip = load_chip(cid)
        f = chip_facts(chip)
        out.append(Claim(
            id=f"hbm_drain_time_ms.{cid}", value=f["hbm_drain_time_s"] * 1e3, unit="ms",
            lecture_value=[15, 20], lecture_range=(10, 45), section="roofline",
            assumptions=f"{chip.name}: {chip.hbm_bytes / 1e9:.4g} GB HBM at {chip.hbm_bandwidth_bytes_per_s / 1e12:.4g} TB/s",
            explanation="HBM capacity / bandwidth: the time to read all of memory once, which bounds the step time "
                        "of a full chip; it has stayed within a small factor of 20 ms across generations."))
    return out


def deepseek_claims() -> list[Claim]:
    ds = load_model("deepseek-v3")
    sz = ModelSizes(ds)
    lecture_sparsity = float(moe.expert_sparsity(256, 32))
    h800 = load_chip("h800")
    ratio = float(R.hardware_ratio(h800.peak_flops_per_s("fp8"), h800.hbm_bandwidth_bytes_per_s, 1.0))
    real = float(R.critical_batch(h800.peak_flops_per_s("fp8"), h800.hbm_bandwidth_bytes_per_s, sz.total_params,
                                  sz.active_params, 1.0))
    return [
        Claim(id="critical_batch_deepseek_lecture", value=LECTURE_RATIO * lecture_sparsity, unit="sequences",
              lecture_value=2400, lecture_range=(2000, 3000), section="roofline",
              assumptions="ratio 300 (lecture), sparsity 256/32 = 8 as the lecture reads DeepSeek (it actually "
                          "routes 8 of 256 experts plus 1 shared)",
              explanation="B* ~ 300 x sparsity: weights are amortised once the batch reaches the hardware ratio "
                          "times the fraction of weights each token skips."),
        Claim(id="critical_batch_deepseek_v3", value=real, unit="sequences", lecture_value="~5,300",
              lecture_range=(4500, 6500), section="roofline",
              assumptions=f"DeepSeek-V3 config: {sz.total_params / 1e9:.1f}B total, {sz.active_params / 1e9:.1f}B "
                          f"active per token (embeddings included); H800 FP8 {h800.peak_flops_per_s('fp8') / 1e12:.1f} "
                          f"TFLOP/s dense over {h800.hbm_bandwidth_bytes_per_s / 1e12:.2f} TB/s (ratio {ratio:.0f}), "
                          "1-byte FP8 weights",
              explanation=f"The same eq. 5 from the real spec: sparsity is {sz.total_params / 1e9:.0f}/"
                          f"{sz.active_params / 1e9:.1f} = {sz.sparsity:.1f}, not {lecture_sparsity:.0f}, because "
                          "the lecture's '32 of 256' overstates the active share; the shortcut undercounts the batch."),
    ]


def nvl72_claims() -> list[Claim]:
    rack = resolve_hardware("gb200-nvl72")
    ds = load_model("deepseek-v3")
    out = [Claim(id="nvl72_hbm_tb", value=rack.hbm_bytes / 1e12, unit="TB", lecture_value=13.5,
                 lecture_range=(13.0, 14.0), section="roofline",
                 assumptions=f"{rack.chips} GPUs x {rack.chip.hbm_bytes / 1e9:.0f} GB ({rack.chip.sources.get('hbm_gb', '')})",
                 explanation="A GB200 NVL72 rack pools 72 GPUs' HBM in one NVLink domain: enough for a "
                             "trillion-parameter model's weights plus a large KV cache.")]
    ctx = 4096
    # batch 1 vs the cheapest batch that fits, lecture form (all weights every step) and refined MoE form
    batches = np.unique(np.round(np.geomspace(1, 65536, 200)))
    for refined, cid, extra in ((False, "batch1_cost_penalty", "lecture form: all 671B weights read every step"),
                                (True, "batch1_cost_penalty_refined",
                                 "refined form: a batch-1 step reads only the ~37B parameters it routes to")):
        r = aggregate_bound(ds, rack, batches, ctx, kv_precision="bf16", efficiency=IDEAL, refined=refined)
        cost = np.where(r.fits, r.cost_per_mtok_usd, np.inf)
        best = int(np.argmin(cost))
        out.append(Claim(
            id=cid, value=float(cost[0] / cost[best]), unit="x", lecture_value="a thousand times worse",
            lecture_range=(300, 3000) if not refined else None, section="roofline",
            assumptions=f"DeepSeek-V3, FP8 weights, BF16 KV, GB200 NVL72 (72 GPUs summed into one chip: the "
                        f"aggregate bound, ideal roofline), context {ctx} "
                        f"tokens; batch 1 vs the cheapest batch that fits ({batches[best]:.0f}); {extra}",
            explanation="At batch 1 every weight fetch serves one token; at a large batch it is shared by "
                        "thousands, leaving only compute and each sequence's own KV fetch."))
    # slow mode: 10x the critical batch buys almost nothing once past it
    r1 = aggregate_bound(ds, rack, 1, ctx, refined=False)
    bstar = r1.critical_batch
    r = aggregate_bound(ds, rack, np.array([bstar, 10 * bstar]), ctx, refined=False)
    out.append(Claim(
        id="slow_mode_saving", value=float(r.cost_per_mtok_usd[1] / r.cost_per_mtok_usd[0]), unit="x",
        lecture_value="close to 1 (saves little)", lecture_range=(0.4, 1.0), section="roofline",
        assumptions=f"DeepSeek-V3 on GB200 NVL72, FP8 weights, BF16 KV, context {ctx}: cost per token at 10 x B* ({10 * bstar:.0f}) "
                    f"over cost at B* ({bstar:.0f}); the aggregate bound (72 GPUs as one chip), memory permitting "
                    "(ideal aggregate HBM)",
        explanation="Past the critical batch the cost per token is the compute floor plus each sequence's own KV "
                    "fetch, neither of which a bigger batch amortises: a 'slow mode' that waits for more users "
                    "saves little."))
    return out


def batch_train_claims() -> list[Claim]:
    """The train that departs every T: worst wait plus ride, and the throughput of full trains."""
    from chalk.analyses.traffic import simulate as sim

    period = 0.020
    quiet = sim.poisson_arrivals(200.0, 20_000, input_len=1, output_len=1, seed=1)
    r = sim.simulate_train(quiet, sim.StepCost.constant(period), period_s=period, max_batch=2048)
    worst_ms = float(np.max(r.e2e_s)) * 1e3
    out = [Claim(
        id="batch_train_worst_latency_ms", value=worst_ms, unit="ms", lecture_value=40, lecture_range=(36, 40.01),
        section="batch-train",
        assumptions=f"a train departs every {period * 1e3:.0f} ms and its step fills the period; "
                    f"{len(quiet)} one-token requests arrive at random (Poisson, 200/s), so some just miss a train",
        explanation="A request that just misses a departure waits a whole period for the next train, then rides "
                    "it for one step: the worst latency is twice the period, the mean one and a half.")]
    step_s, seats = 0.016, 2048
    full = sim.poisson_arrivals(1e6, 200_000, input_len=1, output_len=100, seed=2)
    r = sim.simulate_train(full, sim.StepCost.constant(step_s), period_s=step_s, max_batch=seats)
    out.append(Claim(
        id="batch_train_throughput_tok_s", value=float(r.output_tokens_per_s), unit="tokens/s",
        lecture_value=[100_000, 128_000], lecture_range=(100_000, 128_000 * (1 + 1e-9)), section="batch-train",
        assumptions=f"{seats} seats per train, a {step_s * 1e3:.0f} ms decode step per departure, demand high enough "
                    f"that every train leaves full (simulated, {len(full)} requests of 100 output tokens)",
        explanation="Each departure produces one token for every rider, so throughput is seats / period: "
                    "about 2000 sequences every 16-20 ms is ~100-128K tokens/s per replica."))
    return out


_MODULE_CLAIMS = ("chalk.analyses.step.parallel", "chalk.analyses.traffic.serving", "chalk.analyses.economics.pricing",
                  "chalk.analyses.blackboard.training", "chalk.analyses.blackboard.reversible")


def all_claims() -> list[Claim]:
    """Every claim chalk can compute now, in the lecture's order."""
    claims = hardware_claims() + deepseek_claims() + nvl72_claims() + batch_train_claims()
    for name in _MODULE_CLAIMS:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name == name:
                continue
            raise
        if hasattr(mod, "claims"):
            claims.extend(mod.claims())
    seen, out = set(), []
    for c in claims:
        if c.id not in seen:
            seen.add(c.id)
            out.append(c)
    return out
