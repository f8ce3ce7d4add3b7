"""Reversible residual stack (RevNet) in numpy: backprop without stored activations.

Each block splits its input into halves and applies an additive coupling (a Feistel
round, Gomez et al. 2017, arXiv:1707.04585):

    y1 = x1 + F(x2),   y2 = x2 + G(y1),     F(u) = tanh(u Wf + bf), G(v) = tanh(v Wg + bg)

which inverts exactly: x2 = y2 - G(y1), x1 = y1 - F(x2). `ReversibleStack.backward`
walks from the output to the input, reconstructing each block's input before taking
its gradient, so activation memory is flat in depth; the price is one extra forward.
`forward_stored` / `backward_stored` is the ordinary path that keeps every block's
activations, used as the reference for both gradients and memory.

Run `PYTHONPATH=src python -m chalk.analyses.blackboard.reversible` to print the depth sweep.
"""

from __future__ import annotations

import gc
import time
import tracemalloc
from dataclasses import dataclass
from typing import Callable

import numpy as np

from chalk.equations import reversible as eq
from chalk.errors import InputError
from chalk.specs.workload import positive

BYTES_PER_FLOAT64 = 8
# Width-sized tensors the stored path keeps per block: (x2, y1) = the block's input
# information, plus (tanh outputs of F and G) = its hidden activations.
STORED_ACTIVATIONS_PER_BLOCK = 2.0
# Width-sized tensors alive inside the one block being back-propagated on the reversible path, beyond the output:
# measured once with `measure_memory()` at batch 64, width 256 (854,552 B peak at depth 64 = 6.52 x B x W x 8 B,
# flat in depth). Lets the lecture and the report quote the RevNet figures in closed form without running the
# experiment; tests/test_reversible.py checks it against a fresh measurement.
REVERSIBLE_WORKING_SET_ACTIVATIONS = 5.5
#: The depth sweep `claims()` quotes (the default of `measure_memory`).
CLAIM_DEPTH, CLAIM_BATCH, CLAIM_WIDTH = 64, 64, 256


@dataclass(frozen=True)
class StackParams:
    """Per-block weights (or their gradients) stacked over depth on axis 0."""

    w_f: np.ndarray  # (depth, half, half)
    b_f: np.ndarray  # (depth, half)
    w_g: np.ndarray  # (depth, half, half)
    b_g: np.ndarray  # (depth, half)

    @classmethod
    def zeros(cls, depth: int, half: int) -> "StackParams":
        return cls(np.zeros((depth, half, half)), np.zeros((depth, half)),
                   np.zeros((depth, half, half)), np.zeros((depth, half)))

    def arrays(self) -> tuple[np.ndarray, ...]:
        return (self.w_f, self.b_f, self.w_g, self.b_g)

    def max_abs_diff(self, other: "StackParams") -> float:
        return max(float(np.max(np.abs(a - b))) for a, b in zip(self.arrays(), other.arrays()))

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays())


@dataclass(frozen=True)
class ForwardResult:
    """Output of a forward pass; `tape` holds stored activations (empty if reversible)."""

    y: np.ndarray
    matmul_flops: int
    tape: tuple[tuple[np.ndarray, ...], ...] = ()


@dataclass(frozen=True)
class BackwardResult:
    """Gradients of a scalar loss given dL/dy; `x` is the reconstructed input (reversible only)."""

    dx: np.ndarray
    grads: StackParams
    matmul_flops: int
    x: np.ndarray | None = None


@dataclass(frozen=True)
class RevnetMeasurement:
    """Peak traced heap and matmul FLOPs of one forward+backward, stored vs reversible."""

    depth: int
    batch: int
    width: int
    standard_peak_bytes: int
    reversible_peak_bytes: int
    standard_matmul_flops: int
    reversible_matmul_flops: int
    standard_time_s: float
    reversible_time_s: float

    @property
    def memory_ratio(self) -> float:
        return self.standard_peak_bytes / self.reversible_peak_bytes

    @property
    def compute_ratio(self) -> float:
        return self.reversible_matmul_flops / self.standard_matmul_flops


@dataclass(frozen=True)
class RevnetSummary:
    """Depth-sweep headline figures, measured and as predicted by chalk.equations.reversible."""

    max_depth: int
    batch: int
    width: int
    memory_ratio_at_max_depth: float
    standard_slope_bytes_per_layer: float
    reversible_slope_bytes_per_layer: float
    extra_compute_ratio: float
    time_ratio_at_max_depth: float
    predicted_standard_slope_bytes_per_layer: float
    predicted_extra_compute_ratio: float


def _split(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    half = a.shape[1] // 2
    return np.ascontiguousarray(a[:, :half]), np.ascontiguousarray(a[:, half:])


def _dense_tanh(u: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """tanh(u @ w + b) with a single allocation."""
    z = u @ w
    z += b
    np.tanh(z, out=z)
    return z


def _tanh_grad(h: np.ndarray, upstream: np.ndarray) -> np.ndarray:
    """(1 - h^2) * upstream with a single allocation."""
    dz = h * h
    np.subtract(1.0, dz, out=dz)
    dz *= upstream
    return dz


class ReversibleStack:
    """`depth` additive-coupling blocks on inputs of shape (batch, width), width even."""

    def __init__(self, depth: int, width: int, seed: int = 0, weight_scale: float = 0.5):
        if depth < 1 or width < 2 or width % 2:
            raise ValueError(f"need depth >= 1 and an even width >= 2, got {depth=}, {width=}")
        self.depth, self.width, self.half = depth, width, width // 2
        rng = np.random.default_rng(seed)
        h, std = self.half, weight_scale / np.sqrt(width // 2)
        self.params = StackParams(
            w_f=rng.normal(0.0, std, (depth, h, h)), b_f=rng.normal(0.0, 0.1, (depth, h)),
            w_g=rng.normal(0.0, std, (depth, h, h)), b_g=rng.normal(0.0, 0.1, (depth, h)),
        )

    def _mm_flops(self, batch: int) -> int:
        return 2 * batch * self.half * self.half  # one (batch, h) @ (h, h)

    # -- forward / inverse -------------------------------------------------------
    def forward(self, x: np.ndarray) -> ForwardResult:
        """Reversible forward: keeps only the current block's halves."""
        p, (x1, x2) = self.params, _split(x)
        for k in range(self.depth):
            x1 = x1 + _dense_tanh(x2, p.w_f[k], p.b_f[k])
            x2 = x2 + _dense_tanh(x1, p.w_g[k], p.b_g[k])
        return ForwardResult(np.concatenate((x1, x2), axis=1), 2 * self.depth * self._mm_flops(len(x)))

    def inverse(self, y: np.ndarray) -> np.ndarray:
        """Exact inverse of `forward`: x2 = y2 - G(y1), x1 = y1 - F(x2), block by block."""
        p, (y1, y2) = self.params, _split(y)
        for k in reversed(range(self.depth)):
            y2 = y2 - _dense_tanh(y1, p.w_g[k], p.b_g[k])
            y1 = y1 - _dense_tanh(y2, p.w_f[k], p.b_f[k])
        return np.concatenate((y1, y2), axis=1)

    def forward_stored(self, x: np.ndarray) -> ForwardResult:
        """Ordinary forward that keeps (x2, F-hidden, y1, G-hidden) of every block for backprop."""
        p, (x1, x2) = self.params, _split(x)
        tape = []
        for k in range(self.depth):
            h_f = _dense_tanh(x2, p.w_f[k], p.b_f[k])
            y1 = x1 + h_f
            h_g = _dense_tanh(y1, p.w_g[k], p.b_g[k])
            y2 = x2 + h_g
            tape.append((x2, h_f, y1, h_g))
            x1, x2 = y1, y2
        y = np.concatenate((x1, x2), axis=1)
        return ForwardResult(y, 2 * self.depth * self._mm_flops(len(x)), tuple(tape))

    # -- backward ------------------------------------------------------------------
    def _block_backward(self, k, x2, h_f, y1, h_g, dy1, dy2, grads):
        """Gradients of block k given its activations; writes grads[k], returns (dx1, dx2)."""
        p = self.params
        dz_g = _tanh_grad(h_g, dy2)                      # y2 = x2 + G(y1)
        np.matmul(y1.T, dz_g, out=grads.w_g[k])
        dz_g.sum(axis=0, out=grads.b_g[k])
        dy1_total = dz_g @ p.w_g[k].T
        dy1_total += dy1
        del dz_g
        dz_f = _tanh_grad(h_f, dy1_total)                # y1 = x1 + F(x2)
        np.matmul(x2.T, dz_f, out=grads.w_f[k])
        dz_f.sum(axis=0, out=grads.b_f[k])
        dx2 = dz_f @ p.w_f[k].T
        dx2 += dy2
        return dy1_total, dx2                            # dx1 = total gradient reaching y1

    def backward_stored(self, tape, dy: np.ndarray, grads: StackParams | None = None) -> BackwardResult:
        """Backprop through the activations saved by `forward_stored`."""
        grads = grads if grads is not None else StackParams.zeros(self.depth, self.half)
        dy1, dy2 = _split(dy)
        for k in reversed(range(self.depth)):
            dy1, dy2 = self._block_backward(k, *tape[k], dy1, dy2, grads)
        flops = 4 * self.depth * self._mm_flops(len(dy))
        return BackwardResult(np.concatenate((dy1, dy2), axis=1), grads, flops)

    def backward(self, y: np.ndarray, dy: np.ndarray, grads: StackParams | None = None) -> BackwardResult:
        """RevNet backprop from the output alone: reconstruct each block's input, then differentiate.

        The reconstruction computes G(y1) and F(x2), which are exactly the hidden
        activations the gradient needs, so each block costs one forward (2 matmuls)
        plus the usual backward (4 matmuls).
        """
        grads = grads if grads is not None else StackParams.zeros(self.depth, self.half)
        p, (y1, y2), (dy1, dy2) = self.params, _split(y), _split(dy)
        for k in reversed(range(self.depth)):
            h_g = _dense_tanh(y1, p.w_g[k], p.b_g[k])
            x2 = y2 - h_g
            h_f = _dense_tanh(x2, p.w_f[k], p.b_f[k])
            x1 = y1 - h_f
            dy1, dy2 = self._block_backward(k, x2, h_f, y1, h_g, dy1, dy2, grads)
            y1, y2 = x1, x2
            del h_g, h_f, x1, x2
        flops = 6 * self.depth * self._mm_flops(len(dy))
        return BackwardResult(np.concatenate((dy1, dy2), axis=1), grads, flops,
                              x=np.concatenate((y1, y2), axis=1))


# -- measurement ------------------------------------------------------------------
def _traced_peak_bytes(fn: Callable[[], int]) -> tuple[int, int]:
    """Peak Python-heap bytes (numpy buffers included) allocated while fn runs, and fn()."""
    gc.collect()
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    baseline = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    try:
        value = fn()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        if not was_tracing:
            tracemalloc.stop()
    return peak - baseline, value


def _timed_s(fn: Callable[[], int], repeats: int = 3) -> float:
    """Best-of-`repeats` wall time of fn (untraced)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


#: What one `measure_memory` call may take: float64 bytes held at once, and matmul FLOPs in all.
MAX_REVNET_BYTES, MAX_REVNET_FLOPS = 2e9, 2e11


def _check_size(depths, batch, width) -> None:
    """Refuse, before allocating, a stack whose parameters, gradients and activations or whose matmuls would
    not fit the budget: per layer two (width/2)^2 matrices and their gradients, activations batch x width."""
    if not depths:
        raise InputError("depths must name at least one depth")
    for name, v in (("batch", batch), ("width", width), *(("depth", d) for d in depths)):
        positive(name, v, integer=True)
    if width < 2 or width % 2:
        raise InputError(f"width must be an even number >= 2, got {width!r}")
    half, deepest = width / 2, max(depths)
    held = 8.0 * deepest * (4 * half * half + 4 * batch * width)
    flops = 12.0 * sum(depths) * batch * 2 * half * half
    if held > MAX_REVNET_BYTES or flops > MAX_REVNET_FLOPS:
        raise InputError(f"a reversible stack of depth {deepest}, batch {batch}, width {width} needs about "
                         f"{held / 1e9:.3g} GB and {flops:.3g} FLOP; at most {MAX_REVNET_BYTES / 1e9:g} GB and "
                         f"{MAX_REVNET_FLOPS:g} FLOP: lower --width, --batch or --max-depth")


def measure_memory(
    depths: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64),
    batch: int = 64,
    width: int = 256,
    seed: int = 0,
) -> list[RevnetMeasurement]:
    """Forward+backward at each depth, stored vs reversible: peak traced bytes, matmul FLOPs, time.

    Inputs, dL/dy and the gradient buffers are allocated before tracing starts: they
    are the same for both paths, and gradient buffers are parameter-sized (O(depth)
    in both), not activations.
    """
    _check_size(depths, batch, width)
    rng = np.random.default_rng(seed + 1)
    x, dy = rng.normal(size=(batch, width)), rng.normal(size=(batch, width))
    out = []
    for depth in depths:
        stack = ReversibleStack(depth, width, seed)
        grads = StackParams.zeros(depth, stack.half)

        def standard() -> int:
            fwd = stack.forward_stored(x)
            return fwd.matmul_flops + stack.backward_stored(fwd.tape, dy, grads).matmul_flops

        def reversible() -> int:
            fwd = stack.forward(x)
            return fwd.matmul_flops + stack.backward(fwd.y, dy, grads).matmul_flops

        std_peak, std_flops = _traced_peak_bytes(standard)
        rev_peak, rev_flops = _traced_peak_bytes(reversible)
        out.append(RevnetMeasurement(
            depth=depth, batch=batch, width=width,
            standard_peak_bytes=std_peak, reversible_peak_bytes=rev_peak,
            standard_matmul_flops=std_flops, reversible_matmul_flops=rev_flops,
            standard_time_s=_timed_s(standard), reversible_time_s=_timed_s(reversible),
        ))
    return out


def summary(measurements: list[RevnetMeasurement] | None = None) -> RevnetSummary:
    """Headline figures of a depth sweep (runs `measure_memory()` if none is given)."""
    ms = measurements if measurements is not None else measure_memory()
    depths = np.array([m.depth for m in ms], dtype=float)
    std_slope = float(np.polyfit(depths, [m.standard_peak_bytes for m in ms], 1)[0])
    rev_slope = float(np.polyfit(depths, [m.reversible_peak_bytes for m in ms], 1)[0])
    last = max(ms, key=lambda m: m.depth)
    return RevnetSummary(
        max_depth=last.depth, batch=last.batch, width=last.width,
        memory_ratio_at_max_depth=last.memory_ratio,
        standard_slope_bytes_per_layer=std_slope,
        reversible_slope_bytes_per_layer=rev_slope,
        extra_compute_ratio=last.compute_ratio,
        time_ratio_at_max_depth=last.reversible_time_s / last.standard_time_s,
        predicted_standard_slope_bytes_per_layer=float(eq.activation_bytes_per_layer_standard(
            last.batch, last.width, BYTES_PER_FLOAT64,
            activations_per_block=STORED_ACTIVATIONS_PER_BLOCK)),
        predicted_extra_compute_ratio=float(eq.training_flops_ratio_reversible(2.0)),
    )


def format_report(ms: list[RevnetMeasurement], s: RevnetSummary) -> str:
    """Plain-text table of a sweep and its summary."""
    lines = [f"RevNet vs stored activations, batch={s.batch}, width={s.width}, float64",
             f"{'depth':>5} {'std_peak_bytes':>15} {'rev_peak_bytes':>15} {'mem_ratio':>9}"
             f" {'std_flops':>12} {'rev_flops':>12} {'flop_ratio':>10} {'std_s':>8} {'rev_s':>8}"]
    for m in ms:
        lines.append(f"{m.depth:>5} {m.standard_peak_bytes:>15,} {m.reversible_peak_bytes:>15,}"
                     f" {m.memory_ratio:>9.2f} {m.standard_matmul_flops:>12.3e}"
                     f" {m.reversible_matmul_flops:>12.3e} {m.compute_ratio:>10.4f}"
                     f" {m.standard_time_s:>8.4f} {m.reversible_time_s:>8.4f}")
    lines += [
        f"memory_ratio_at_max_depth        {s.memory_ratio_at_max_depth:.2f}",
        f"standard_slope_bytes_per_layer   {s.standard_slope_bytes_per_layer:,.0f}"
        f"  (equation: {s.predicted_standard_slope_bytes_per_layer:,.0f})",
        f"reversible_slope_bytes_per_layer {s.reversible_slope_bytes_per_layer:,.0f}  (equation: 0)",
        f"extra_compute_ratio (FLOP)       {s.extra_compute_ratio:.4f}"
        f"  (equation: {s.predicted_extra_compute_ratio:.4f})",
        f"time_ratio_at_max_depth          {s.time_ratio_at_max_depth:.2f}",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    _ms = measure_memory()
    print(format_report(_ms, summary(_ms)))


def analytic_memory_ratio(depth: int = CLAIM_DEPTH, batch: int = CLAIM_BATCH, width: int = CLAIM_WIDTH) -> float:
    """Standard / reversible activation memory from the equations, with the measured working set."""
    std = eq.activation_bytes_standard(depth, batch, width, BYTES_PER_FLOAT64,
                                       activations_per_block=STORED_ACTIVATIONS_PER_BLOCK)
    rev = eq.activation_bytes_reversible(depth, batch, width, BYTES_PER_FLOAT64,
                                         working_set_activations=REVERSIBLE_WORKING_SET_ACTIVATIONS)
    return float(std / rev)


def claims(measured: bool = False):
    """The lecture's `revnet_memory_saving`: in closed form (default; no experiment, instant), or measured on
    the numpy stack with `measured=True` (what `chalk revnet` shows; several seconds)."""
    from chalk.analyses.records.claims import Claim

    if measured:
        s = summary(measure_memory())
        ratio, flops, depth, batch, width = (s.memory_ratio_at_max_depth, s.extra_compute_ratio, s.max_depth,
                                             s.batch, s.width)
        std_slope, rev_slope = s.standard_slope_bytes_per_layer, s.reversible_slope_bytes_per_layer
        how = "peak heap measured with tracemalloc during forward + backward"
    else:
        depth, batch, width = CLAIM_DEPTH, CLAIM_BATCH, CLAIM_WIDTH
        ratio, flops = analytic_memory_ratio(depth, batch, width), float(eq.training_flops_ratio_reversible(2.0))
        std_slope = float(eq.activation_bytes_per_layer_standard(
            batch, width, BYTES_PER_FLOAT64, activations_per_block=STORED_ACTIVATIONS_PER_BLOCK))
        rev_slope = 0.0
        how = (f"closed form (equations.reversible) with {STORED_ACTIVATIONS_PER_BLOCK:g} stored tensors per block "
               f"and a {REVERSIBLE_WORKING_SET_ACTIVATIONS:g}-tensor working set measured once; `chalk revnet` "
               f"measures it")
    return [Claim(
        id="revnet_memory_saving", value=[1.0 / ratio, flops],
        unit="[reversible/standard activation memory at max depth, reversible/standard training FLOPs]",
        lecture_value="O(1) vs O(L) memory, ~1 extra forward of compute", section="reversible",
        assumptions=f"additive-coupling stack, depth 1..{depth}, batch {batch}, width {width}, float64; "
                    f"{how}; backward = 2 x forward FLOPs",
        explanation=f"Storing activations grows {std_slope / 1e3:.0f} kB per layer, while the "
                    f"reversible stack recomputes each block's input from its output and stays flat "
                    f"({rev_slope:.0f} B per layer): {ratio:.0f}x less "
                    f"memory at depth {depth} for {flops:.2f}x the training FLOPs (one extra "
                    "forward). The KV cache makes the opposite trade: it stores to avoid recomputing.")]
