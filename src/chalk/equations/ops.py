"""One operation of a forward step: its FLOPs and the bytes it moves.

The step model (`chalk.analyses.step.step_model`) turns a decode or prefill step into a list of operations, each a
small roofline of its own; these are the pieces it is built from. Their time is the one max rule,
`chalk.equations.roofline.step_time_s`.
"""

from __future__ import annotations

from chalk.equations.num import flt


def matmul_flops(m, k, n):
    """FLOPs of one matrix product [m x k] @ [k x n].

    Formula: F = 2 * m * k * n   (one multiply and one add per term)
    Ref: scaling-book ("a matmul of B x D by D x F costs 2BDF FLOPs").
    Assumes: dense operands; no structured sparsity.
    """
    return 2.0 * flt(m) * k * n


def gemm_bytes(m, k, n, weight_bytes_per_element, activation_bytes_per_element=2.0):
    """HBM bytes one GEMM moves: the weight matrix read once, activations read and written once.

    Formula: bytes = k * n * b_w + (m * k + m * n) * b_a
    Ref: the roofline's memory term (lecture eq. 3) applied to one kernel; LLM-Viewer's per-op records.
    Assumes: the weight tile is streamed once per kernel (no re-reads across M tiles); BF16 activations.
    """
    m = flt(m)
    return k * n * weight_bytes_per_element + (m * k + m * n) * activation_bytes_per_element


def elementwise_bytes_per_token_layer(hidden_size, mlp_width, activation_bytes_per_element=2.0):
    """HBM bytes the non-matmul kernels of one transformer layer move per token.

    Formula: bytes = (10 * H + 3 * F) * b_a
             two RMSNorms (read + write H each: 4H), two residual adds (read 2H, write H: 6H),
             the gated activation (read 2F, write F: 3F), F the MLP width on this chip.
    Ref: the Llama/DeepSeek block structure (pre-norm, SwiGLU); LLM-Viewer's per-op activation bytes.
    Assumes: no kernel fusion (fused norms and activations move less); BF16 activations.
    """
    return (10.0 * flt(hidden_size) + 3.0 * flt(mlp_width)) \
        * activation_bytes_per_element


def sampling_bytes_per_sequence(vocab_size, logit_bytes_per_element=4.0):
    """HBM bytes sampling moves per sequence: the FP32 logits written by the LM head, read by softmax/top-p.

    Formula: bytes = 2 * V * 4
    Ref: vLLM/SGLang samplers keep FP32 logits.
    Assumes: one pass over the logits for softmax and one for top-k/top-p.
    """
    return 2.0 * flt(vocab_size) * logit_bytes_per_element
