"""What an inference engine's memory and batching defaults leave for the KV cache and the decode batch.

Pure functions over floats or numpy arrays. Bytes, tokens, sequences.
"""

from __future__ import annotations

import numpy as np


def kv_cache_budget_bytes(hbm_bytes, weight_bytes, other_bytes, fraction, of: str = "total"):
    """Bytes an engine hands to its KV cache on one GPU, from its memory-fraction setting.

    Formula: of='total' (vLLM gpu_memory_utilization, SGLang mem_fraction_static):
                 KV = f * HBM - weights - other
             of='free'  (TensorRT-LLM kv_cache_free_gpu_memory_fraction):
                 KV = f * (HBM - weights - other)
        clipped at 0.
    Ref: vllm/config/cache.py (gpu_memory_utilization: fraction of the GPU memory the instance may
        use); sglang server_args.py (mem_fraction_static = (weights + KV pool) / GPU memory);
        tensorrt_llm/commands/serve.py ("free GPU memory fraction reserved for KV cache, after
        allocating model weights and buffers").
    Assumes: `other` (activations, CUDA-graph buffers, workspace) is known; SGLang counts only
        weights inside its fraction, so pass other=0 for it.
    """
    h, w, o, f = (np.asarray(x, dtype=float) for x in (hbm_bytes, weight_bytes, other_bytes, fraction))
    if of == "total":
        kv = f * h - w - o
    elif of == "free":
        kv = f * (h - w - o)
    else:
        raise ValueError(f"of must be 'total' or 'free', got {of!r}")
    kv = np.maximum(kv, 0.0)
    return float(kv) if kv.ndim == 0 else kv


def cuda_graph_decode_batch_limit(graph_token_cap, speculative_tokens=0):
    """Largest decode batch (sequences) that still runs inside a captured CUDA graph.

    Formula: B_graph = floor(cap_tokens / (1 + K))   (K speculative tokens verified per sequence)
    Ref: vllm/config/vllm.py _set_cudagraph_sizes (graph sizes count tokens: max_num_seqs *
        (1 + K) * 2, at most 512); SGLang and TensorRT-LLM count sequences (pass K = 0 there).
    Assumes: every sequence in the batch verifies the same K drafts.
    """
    k = np.asarray(speculative_tokens, dtype=float)
    out = np.floor(np.asarray(graph_token_cap, dtype=float) / (1.0 + k))
    return float(out) if out.ndim == 0 else out


def sglang_reserved_memory_mib(chunked_prefill_tokens, cuda_graph_max_bs, tp, pp, gpu_mem_mib, *,
                               dp_attention=False, dp=1, speculative=False, base=512.0,
                               per_chunk_token=1.5, per_graph_seq=2.0, per_tp8=1024.0,
                               dp_per_graph_seq=3.0, dp_large_extra=1.5, floor=10240.0, spec=2048.0):
    """Memory SGLang keeps outside its static pool (activations, CUDA graphs), in MiB.

    Formula: R = 512 + 1.5 max(C, 2048) + 2 G + 1024 tp pp / 8
                 [+ 3 G dp  (+ 1.5 G dp when G > 300) with DP attention]
             R = max(R, 10240) when the GPU has more than 60 GiB;  + 2048 for EAGLE/NEXTN drafts
        (C: chunked prefill tokens, G: cuda_graph_max_bs). Then mem_fraction_static = (M - R) / M.
    Ref: sglang python/sglang/srt/server_args.py ServerArgs._handle_gpu_memory_settings (0.5.x).
    Assumes: the engine's heuristic, not a measurement: a coefficient of 1.5 MiB per prefill token.
    """
    r = base + max(float(chunked_prefill_tokens), 2048.0) * per_chunk_token + cuda_graph_max_bs * per_graph_seq
    r += tp * pp / 8.0 * per_tp8
    if dp_attention:
        r += cuda_graph_max_bs * dp * dp_per_graph_seq
        if cuda_graph_max_bs > 300:
            r += cuda_graph_max_bs * dp * dp_large_extra
    if gpu_mem_mib > 60 * 1024:
        r = max(r, floor)
    if speculative:
        r += spec
    return float(r)


def sglang_request_pool_size(kv_tokens, context_len, per_context=512.0, lo=2048.0, hi=4096.0):
    """Requests SGLang can hold per DP worker when --max-running-requests is left unset.

    Formula: N = min(clamp(floor(KV_tokens / context_len * 512), 2048, 4096), floor(KV_tokens / 2))
    Ref: sglang model_runner (req_to_token pool size) and the scheduler's max_total_num_tokens // 2.
    Assumes: context_len is the served maximum context length.
    """
    kv = np.asarray(kv_tokens, dtype=float)
    pool = np.clip(np.floor(kv / np.asarray(context_len, dtype=float) * per_context), lo, hi)
    out = np.minimum(pool, np.floor(kv / 2.0))
    return float(out) if out.ndim == 0 else out
