"""Reversible networks (Feistel -> RevNet): activation memory flat in depth, paid for in compute.

The KV cache spends memory to save compute; a reversible network does the opposite.
Each block's input can be recomputed exactly from its output, so training stores no
per-block activations and pays one extra forward pass per block during backward.

All functions are pure and accept Python floats or numpy arrays (broadcasting).
Units: bytes, FLOP, dimensionless ratios.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "activation_bytes_standard",
    "activation_bytes_reversible",
    "activation_bytes_per_layer_standard",
    "activation_memory_ratio_standard_to_reversible",
    "coupling_block_forward_flops",
    "training_flops_standard",
    "training_flops_reversible",
    "backward_flops_ratio_reversible",
    "training_flops_ratio_reversible",
]


def _check_nonneg(**values: object) -> None:
    for name, value in values.items():
        if np.any(np.asarray(value) < 0):
            raise ValueError(f"{name} must be >= 0, got {value!r}")


def activation_bytes_standard(
    depth,
    batch,
    width,
    bytes_per_elem,
    *,
    activations_per_block=1.0,
):
    """Activation bytes held for backprop by an ordinary residual stack: O(depth).

    Formula:
        M_std = (a * L + 1) * B * W * b
        L = depth, B = batch, W = width (elements per example), b = bytes_per_elem,
        a = activations_per_block (width-sized tensors saved per block; 1 = just the
        block's input). The "+1" is the final output, which both schemes hold.

    Ref:
        Gomez et al. 2017, "The Reversible Residual Network", arXiv:1707.04585, Sec. 1
        and 3 (backprop must store every layer's activations); Chen et al. 2016,
        arXiv:1604.06174, Sec. 3 (memory linear in the number of layers).

    Assumes:
        Every block keeps its input (and a - 1 further width-sized tensors, e.g. the
        nonlinearity outputs) until its backward step; no checkpointing, no
        recomputation; parameter and gradient buffers are not counted.
    """
    _check_nonneg(depth=depth, batch=batch, width=width, bytes_per_elem=bytes_per_elem,
                  activations_per_block=activations_per_block)
    return (activations_per_block * depth + 1.0) * batch * width * bytes_per_elem


def activation_bytes_reversible(
    depth,
    batch,
    width,
    bytes_per_elem,
    *,
    working_set_activations=1.0,
):
    """Activation bytes held by a reversible stack during training: O(1) in depth.

    Formula:
        M_rev = (1 + s) * B * W * b          (independent of L)
        s = working_set_activations: width-sized tensors alive inside the one block
        being back-propagated (reconstructed input, its gradient, temporaries).

    Ref:
        Gomez et al. 2017, arXiv:1707.04585, Sec. 3.1-3.2 and Alg. 1 (activations
        reconstructed from the output block by block, none stored).

    Assumes:
        Exactly invertible blocks (additive coupling); only the final output and one
        block's working set are alive at any time; parameter and gradient buffers
        are not counted. `depth` only sets the output shape when it is an array.
    """
    _check_nonneg(depth=depth, batch=batch, width=width, bytes_per_elem=bytes_per_elem,
                  working_set_activations=working_set_activations)
    flat = (1.0 + working_set_activations) * batch * width * bytes_per_elem
    return flat + 0.0 * np.asarray(depth) if np.ndim(depth) else flat


def activation_bytes_per_layer_standard(batch, width, bytes_per_elem, *, activations_per_block=1.0):
    """Slope of standard activation memory with depth: bytes added per extra block.

    Formula:
        dM_std/dL = a * B * W * b      (the reversible slope is 0)

    Ref:
        Gomez et al. 2017, arXiv:1707.04585, Sec. 3 (storage grows with depth).

    Assumes:
        Same as activation_bytes_standard.
    """
    _check_nonneg(batch=batch, width=width, bytes_per_elem=bytes_per_elem,
                  activations_per_block=activations_per_block)
    return activations_per_block * batch * width * bytes_per_elem


def activation_memory_ratio_standard_to_reversible(
    depth, *, activations_per_block=1.0, working_set_activations=1.0
):
    """How many times more activation memory the standard stack needs than the reversible one.

    Formula:
        M_std / M_rev = (a * L + 1) / (1 + s)      (B, W, b cancel)

    Ref:
        Gomez et al. 2017, arXiv:1707.04585, Sec. 3.2 and Table 1.

    Assumes:
        Same as activation_bytes_standard and activation_bytes_reversible.
    """
    _check_nonneg(depth=depth, activations_per_block=activations_per_block,
                  working_set_activations=working_set_activations)
    return (activations_per_block * depth + 1.0) / (1.0 + working_set_activations)


def coupling_block_forward_flops(batch, width):
    """Matmul FLOPs of one additive-coupling block forward (F and G on half-width inputs).

    Formula:
        y1 = x1 + F(x2), y2 = x2 + G(y1), F, G: (B, W/2) @ (W/2, W/2)
        FLOPs = 2 * (2 * B * (W/2)^2) = B * W^2

    Ref:
        Gomez et al. 2017, arXiv:1707.04585, Eq. (6)-(7); Kaplan et al. 2020,
        arXiv:2001.08361, Sec. 2.1 (2 FLOP per multiply-accumulate).

    Assumes:
        F and G are single dense layers of width W/2; elementwise ops (bias, tanh,
        additions) are negligible next to the matmuls.
    """
    _check_nonneg(batch=batch, width=width)
    return batch * width * width


def training_flops_standard(forward_flops, backward_to_forward=2.0):
    """FLOPs of one forward + backward with stored activations.

    Formula:
        C_std = F + r * F = (1 + r) * F       (r = 2 gives the usual 3F)

    Ref:
        Kaplan et al. 2020, arXiv:2001.08361, Sec. 2.1 (backward ~ 2x forward).

    Assumes:
        Backward costs r times the forward (grad w.r.t. inputs + grad w.r.t. weights).
    """
    _check_nonneg(forward_flops=forward_flops, backward_to_forward=backward_to_forward)
    return (1.0 + backward_to_forward) * forward_flops


def training_flops_reversible(forward_flops, backward_to_forward=2.0):
    """FLOPs of one forward + backward when activations are reconstructed, not stored.

    Formula:
        C_rev = F + (F + r * F) = (2 + r) * F     (r = 2 gives 4F)
        the extra F recomputes every block's activations from its output.

    Ref:
        Gomez et al. 2017, arXiv:1707.04585, Sec. 3.2 and Sec. 5 (about one extra
        forward; the paper measures the cost as roughly 33-50% more).

    Assumes:
        The reconstruction pass costs exactly one forward and its intermediates are
        reused by the gradient step (no second recomputation).
    """
    _check_nonneg(forward_flops=forward_flops, backward_to_forward=backward_to_forward)
    return (2.0 + backward_to_forward) * forward_flops


def backward_flops_ratio_reversible(backward_to_forward=2.0):
    """Reversible backward FLOPs over standard backward FLOPs.

    Formula:
        (F + r F) / (r F) = (1 + r) / r     (r = 2 gives 3/2)

    Ref:
        Gomez et al. 2017, arXiv:1707.04585, Sec. 3.2, Alg. 1.

    Assumes:
        Same as training_flops_reversible; r > 0.
    """
    if np.any(np.asarray(backward_to_forward) <= 0):
        raise ValueError(f"backward_to_forward must be > 0, got {backward_to_forward!r}")
    return (1.0 + backward_to_forward) / backward_to_forward


def training_flops_ratio_reversible(backward_to_forward=2.0):
    """Reversible training step FLOPs over standard training step FLOPs (the compute price).

    Formula:
        C_rev / C_std = (2 + r) / (1 + r)     (r = 2 gives 4F / 3F = 4/3)

    Ref:
        Gomez et al. 2017, arXiv:1707.04585, Sec. 3.2 and Sec. 5.

    Assumes:
        Same as training_flops_standard and training_flops_reversible.
    """
    _check_nonneg(backward_to_forward=backward_to_forward)
    return (2.0 + backward_to_forward) / (1.0 + backward_to_forward)
