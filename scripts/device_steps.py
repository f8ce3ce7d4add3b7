#!/usr/bin/env python3
"""Time whole decode steps of a Llama-3.1-8B-shaped model the way a serving engine runs them: one CUDA graph per step.

    python scripts/device_steps.py --device cuda --out DIR [--budget-s 200]
    python scripts/device_steps.py --device cpu --out DIR --tiny      # a smoke test of every code path

Writes DIR/steps.csv (one row per variant, batch and context, flushed as it goes) and DIR/env.json (device, driver,
torch, CUDA, date, the command, a device-copy bandwidth, the GQA check). Needs torch only (no transformers, no chalk);
`scripts/compare_device.py` reads the CSV back and asks `chalk.estimate` for the same step.

The step, in plain torch, bf16, random weights (N(0, 0.02)), TP1: token ids [B] -> embedding gather -> 32 x {RMSNorm
(`F.rms_norm`), fused QKV GEMM [B x 4096] @ [6144 x 4096]^T, RoPE on q and k at the step's position (rotate-half form,
cos/sin precomputed: four elementwise kernels), the new token's k and v written into the KV cache at slot L-1,
decode attention of one query token over the L cached tokens (`scaled_dot_product_attention`), O GEMM, residual add,
RMSNorm, gate_up GEMM [B x 4096] @ [28672 x 4096]^T, SiLU(gate) * up, down GEMM, residual add} -> final RMSNorm ->
lm_head [B x 4096] @ [128256 x 4096]^T -> argmax. The KV cache is one contiguous bf16 buffer [layers, 2, B, 8, L, 128]
(a view of one allocation made once at the largest size in the grid), so each step reads B x L x 128 KiB of KV.

Attention variants (column `variant`):
- `gqa`: SDPA with `enable_gqa=True`, q [B, 32, 1, 128] against k, v [B, 8, L, 128]; the FlashAttention backend is
  asked for alone (`sdpa_kernel([FLASH_ATTENTION])`), then efficient, cuDNN, math (the row's `attn_backend` says
  which ran). FlashAttention takes grouped-query heads natively (the KV heads are not repeated); the math backend
  would repeat them (a copy), which is why the backend that ran is recorded.
- `fold`: the grouped query heads folded into the query length: q [B, 8, 4, 128] (the 4 query heads of each KV
  head as 4 query rows, no mask) against k, v [B, 8, L, 128], plain SDPA: exact for a one-token decode step, no KV
  copy and no GQA support needed in the kernel (the form FlashInfer-style decode kernels use). env.json records the
  largest difference between the two on a small case.

The whole step (embedding to argmax) is captured in one CUDA graph after warm-ups off the default stream; each
replay is timed with CUDA events; a row holds the median, p10, p90 and min over replays. On CPU the step runs eagerly
(perf_counter). The grid runs twice (`pass` 1 and 2, the second the run-to-run check); rows whose KV would take the
total over --max-gb are skipped and listed in env.json.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from device_kernels import environment, open_device, source_line, write_env  # noqa: E402  (torch only; the kernel runs' env)

#: Llama-3.1-8B (meta-llama/Llama-3.1-8B config.json; chalk's catalog llama-3.1-8b): layers, hidden, heads, KV heads,
#: head dim, intermediate, vocab, rope theta, rms eps
LLAMA_8B = dict(layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128, inter=14336, vocab=128256,
                rope_theta=500000.0, eps=1e-5)
TINY = dict(layers=2, hidden=256, heads=8, kv_heads=2, head_dim=32, inter=512, vocab=1000, rope_theta=10000.0,
            eps=1e-5)
BATCH = (1, 8, 32, 64, 128, 256)
CONTEXT = (512, 2048, 8192)
VARIANTS = ("gqa", "fold")
FIELDS = ("pass", "variant", "model", "tp", "batch", "context", "measured_s", "p10_s", "p90_s", "min_s", "reps",
          "weight_bytes", "kv_bytes", "tb_per_s", "attn_backend", "rope", "method", "error", "source")


def kv_bytes(cfg: dict, b: int, L: int) -> int:
    """The KV cache one step reads: layers x (K and V) x batch x KV heads x context x head dim x 2 bytes."""
    return cfg["layers"] * 2 * b * cfg["kv_heads"] * L * cfg["head_dim"] * 2


class Model:
    """Random bf16 weights of a Llama-shaped decoder and one decode step over a KV cache view."""

    def __init__(self, torch, cfg: dict, device: str):
        self.torch, self.cfg, self.device = torch, cfg, device
        h, nh, kvh, d, inter, V = (cfg[k] for k in ("hidden", "heads", "kv_heads", "head_dim", "inter", "vocab"))
        bf = torch.bfloat16

        def w(*shape):
            return torch.empty(*shape, device=device, dtype=bf).normal_(0.0, 0.02)
        self.emb = w(V, h)
        self.layers = [dict(n1=torch.ones(h, device=device, dtype=bf), qkv=w((nh + 2 * kvh) * d, h), o=w(h, nh * d),
                            n2=torch.ones(h, device=device, dtype=bf), gu=w(2 * inter, h), down=w(h, inter))
                       for _ in range(cfg["layers"])]
        self.norm = torch.ones(h, device=device, dtype=bf)
        self.lm_head = w(V, h)
        self.weight_bytes = sum(t.numel() * 2 for t in [self.emb, self.norm, self.lm_head] +
                                [t for la in self.layers for t in la.values()])

    def rope_tables(self, pos: int):
        torch, d = self.torch, self.cfg["head_dim"]
        inv = 1.0 / (self.cfg["rope_theta"] ** (torch.arange(0, d, 2, device=self.device, dtype=torch.float32) / d))
        ang = pos * inv
        cos = torch.cat([ang.cos(), ang.cos()]).to(torch.bfloat16)
        sin = torch.cat([ang.sin(), ang.sin()]).to(torch.bfloat16)
        return cos, sin

    def step_fn(self, ids, kv, L: int, variant: str, rope: bool = True):
        """A closure running one decode step for token ids [B] over kv [layers, 2, B, kvh, L, d]; returns the
        argmax token ids [B] (a tensor it rewrites in place, so a CUDA graph's output is stable)."""
        torch, cfg = self.torch, self.cfg
        F = torch.nn.functional
        nh, kvh, d, eps = cfg["heads"], cfg["kv_heads"], cfg["head_dim"], cfg["eps"]
        g = nh // kvh
        B = ids.shape[0]
        cos, sin = self.rope_tables(L - 1)
        half = d // 2
        out_ids = torch.empty(B, device=self.device, dtype=torch.long)

        def rot(t):  # t [..., d]: t * cos + rotate_half(t) * sin
            return t * cos + torch.cat([-t[..., half:], t[..., :half]], dim=-1) * sin

        def step():
            x = F.embedding(ids, self.emb)
            for i, la in enumerate(self.layers):
                hn = F.rms_norm(x, (x.shape[-1],), la["n1"], eps)
                qkv = F.linear(hn, la["qkv"])
                q, k, v = qkv.split((nh * d, kvh * d, kvh * d), dim=-1)
                q, k = q.view(B, nh, d), k.view(B, kvh, d)
                if rope:
                    q, k = rot(q), rot(k)
                kc, vc = kv[i, 0], kv[i, 1]
                kc[:, :, L - 1].copy_(k)
                vc[:, :, L - 1].copy_(v.view(B, kvh, d))
                if variant == "gqa":
                    o = F.scaled_dot_product_attention(q.view(B, nh, 1, d), kc, vc, enable_gqa=nh != kvh)
                else:  # fold: the g query heads of each KV head as g query rows (exact for one decode token)
                    o = F.scaled_dot_product_attention(q.view(B, kvh, g, d), kc, vc)
                x = x + F.linear(o.reshape(B, nh * d), la["o"])
                hn = F.rms_norm(x, (x.shape[-1],), la["n2"], eps)
                gate, up = F.linear(hn, la["gu"]).chunk(2, dim=-1)
                x = x + F.linear(F.silu(gate) * up, la["down"])
            logits = F.linear(F.rms_norm(x, (x.shape[-1],), self.norm, eps), self.lm_head)
            torch.argmax(logits, dim=-1, out=out_ids)
            return out_ids
        return step


def gqa_check(torch, device: str) -> dict:
    """Largest |gqa - fold| and |gqa - repeated-heads math| on a small decode case, and the backend each used."""
    F = torch.nn.functional
    g = torch.Generator(device=device).manual_seed(0)
    B, nh, kvh, L, d = 3, 32, 8, 300, 128
    q = torch.randn(B, nh, 1, d, device=device, generator=g, dtype=torch.bfloat16)
    k = torch.randn(B, kvh, L, d, device=device, generator=g, dtype=torch.bfloat16)
    v = torch.randn(B, kvh, L, d, device=device, generator=g, dtype=torch.bfloat16)
    ref = F.scaled_dot_product_attention(q.float(), k.float().repeat_interleave(nh // kvh, 1),
                                         v.float().repeat_interleave(nh // kvh, 1))
    a = F.scaled_dot_product_attention(q, k, v, enable_gqa=True).float()
    b = F.scaled_dot_product_attention(q.view(B, kvh, nh // kvh, d), k, v).float().view(B, nh, 1, d)
    return {"max_abs_gqa_vs_fp32_ref": float((a - ref).abs().max()), "max_abs_fold_vs_fp32_ref":
            float((b - ref).abs().max()), "max_abs_gqa_vs_fold": float((a - b).abs().max())}


def copy_bandwidth(torch, device: str) -> float | None:
    """Bytes read + written per second of a 1 GiB device-to-device copy (median of 10), the streaming ceiling."""
    if device != "cuda":
        return None
    a = torch.empty(2 ** 30, device=device, dtype=torch.uint8)
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t = []
    for _ in range(10):
        e0.record()
        b.copy_(a)
        e1.record()
        e1.synchronize()
        t.append(e0.elapsed_time(e1) / 1e3)
    del a, b
    return 2 * 2 ** 30 / statistics.median(t)


def time_step(torch, device: str, step, min_reps: int, max_reps: int, max_s: float):
    """(median, p10, p90, min, reps, method) of one step: a CUDA graph's replays timed with events on cuda."""
    def pct(x, p):
        x = sorted(x)
        i = (len(x) - 1) * p
        lo = int(i)
        return x[lo] + (x[min(lo + 1, len(x) - 1)] - x[lo]) * (i - lo)

    samples = []
    if device != "cuda":
        step()
        t_end = time.perf_counter() + max_s
        while len(samples) < max_reps and (len(samples) < min_reps or time.perf_counter() < t_end):
            t0 = time.perf_counter()
            step()
            samples.append(time.perf_counter() - t0)
        method = "eager, perf_counter"
    else:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        for _ in range(3):
            graph.replay()
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t_end = time.perf_counter() + max_s
        while len(samples) < max_reps and (len(samples) < min_reps or time.perf_counter() < t_end):
            e0.record()
            graph.replay()
            e1.record()
            e1.synchronize()
            samples.append(e0.elapsed_time(e1) / 1e3)
        del graph
        method = "one cuda graph per step, events"
    return (statistics.median(samples), pct(samples, 0.1), pct(samples, 0.9), min(samples), len(samples), method)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=200.0, help="stop starting new rows after this long")
    ap.add_argument("--max-gb", type=float, default=100.0, help="weights + KV cache at most this many GB")
    ap.add_argument("--tiny", action="store_true", help="a tiny model and grid (a CPU smoke test of every path)")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--no-rope", action="store_true", help="skip RoPE (four elementwise kernels per layer)")
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    torch = open_device(args)
    if torch is None:
        return 2
    device = args.device
    cfg = TINY if args.tiny else LLAMA_8B
    batches, contexts = ((1, 4), (16, 64)) if args.tiny else (BATCH, CONTEXT)
    variants = tuple(v for v in args.variants.split(",") if v)
    if not set(variants) <= set(VARIANTS):
        ap.error(f"--variants: of {','.join(VARIANTS)}")
    env = environment(torch, device, [sys.executable] + sys.argv)
    env["model"] = "llama-3.1-8b-shaped" if not args.tiny else "tiny"
    env["model_config"] = cfg
    env["copy_bytes_per_s"] = copy_bandwidth(torch, device)
    env["gqa_check"] = gqa_check(torch, device)

    write_env(args.out, env)
    print(json.dumps(env), flush=True)
    source = source_line(env, "scripts/device_steps.py")
    t0 = time.perf_counter()
    model = Model(torch, cfg, device)
    if device == "cuda":
        torch.cuda.synchronize()
    env["weight_bytes"] = model.weight_bytes
    env["weights_init_s"] = time.perf_counter() - t0
    cap = args.max_gb * 1e9 - model.weight_bytes - 2e9  # 2 GB for activations, logits, graph pools
    grid = [(b, L) for b in batches for L in contexts if kv_bytes(cfg, b, L) <= cap]
    env["skipped"] = [(b, L) for b in batches for L in contexts if kv_bytes(cfg, b, L) > cap]
    kv_max = max(kv_bytes(cfg, b, L) for b, L in grid)
    kv_buf = torch.empty(kv_max // 2, device=device, dtype=torch.bfloat16).normal_(0.0, 1.0)
    env["kv_buffer_bytes"] = kv_max
    write_env(args.out, env)
    from torch.nn.attention import SDPBackend, sdpa_kernel
    order = [("flash", SDPBackend.FLASH_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION),
             ("cudnn", SDPBackend.CUDNN_ATTENTION), ("math", SDPBackend.MATH)]
    path = os.path.join(args.out, "steps.csv")
    n_ok = n_err = 0
    stop = False
    small = args.tiny or device != "cuda"
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        w.writeheader()
        for p in range(1, args.passes + 1):
            for variant in variants:
                for b, L in grid:
                    if time.perf_counter() - t_start > args.budget_s:
                        print(f"budget of {args.budget_s:.0f} s reached in pass {p}", flush=True)
                        stop = True
                        break
                    row = {k: "" for k in FIELDS}
                    row.update({"pass": p, "variant": variant, "model": env["model"], "tp": 1, "batch": b,
                                "context": L, "weight_bytes": model.weight_bytes, "kv_bytes": kv_bytes(cfg, b, L),
                                "rope": not args.no_rope, "source": source})
                    kv = kv_buf[: kv_bytes(cfg, b, L) // 2].view(cfg["layers"], 2, b, cfg["kv_heads"], L,
                                                                 cfg["head_dim"])
                    ids = torch.randint(0, cfg["vocab"], (b,), device=device)
                    last = None
                    for name, backend in order:
                        try:
                            with sdpa_kernel([backend]):
                                step = model.step_fn(ids, kv, L, variant, rope=not args.no_rope)
                                med, p10, p90, mn, reps, method = time_step(
                                    torch, device, step, min_reps=3 if small else 10, max_reps=5 if small else 60,
                                    max_s=0.02 if small else 0.6)
                            row.update(measured_s=f"{med:.6e}", p10_s=f"{p10:.6e}", p90_s=f"{p90:.6e}",
                                       min_s=f"{mn:.6e}", reps=reps, method=method, attn_backend=f"sdpa {name}",
                                       tb_per_s=f"{(model.weight_bytes + kv_bytes(cfg, b, L)) / med / 1e12:.3f}")
                            n_ok += 1
                            break
                        except Exception as e:  # noqa: BLE001 - the next backend
                            last = f"{name}: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
                            if device == "cuda":
                                torch.cuda.synchronize()
                    else:
                        row["error"] = last
                        n_err += 1
                    w.writerow(row)
                    fh.flush()
                    if device == "cuda":
                        torch.cuda.empty_cache()
                    print(f"pass {p} {variant:5} b={b:4d} L={L:6d} {row['measured_s']:>12} s (p10 {row['p10_s']}, "
                          f"p90 {row['p90_s']}, {row['reps']} reps) {row['tb_per_s']:>7} TB/s {row['attn_backend']} "
                          f"{row['error']}", flush=True)
                if stop:
                    break
            if stop:
                break
    env["elapsed_s"] = time.perf_counter() - t_start
    write_env(args.out, env)
    print(f"{n_ok} rows timed, {n_err} failed, {env['elapsed_s']:.1f} s; wrote {path}", flush=True)
    return 0 if n_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
