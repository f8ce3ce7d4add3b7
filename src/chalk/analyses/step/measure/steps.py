"""`chalk measure`, stage 2: real transformer steps (see `chalk.analyses.step.measure`).

`time_steps` times single-token decode steps over a (batch, context) grid and prefill forward
passes over (batch, prompt) lengths of a `transformers` causal LM that `build_model` makes with
random weights from a config dict (no download); each decode case fills a static KV cache with
random keys/values of the right shape. The grid is walked in several interleaved passes so that
load from other processes lands on a few repeats of many cases, not on all repeats of one.
Also here: the default models and grids, and the model's dtype and attention choices.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from chalk.analyses.step.measure.ceilings import Ceilings
from chalk.analyses.step.measure.common import (TORCH_TO_CHALK, _check_transformers_version, _stat, _sync_fn,
                                           _time_fn, _torch, _transformers)
from chalk.analyses.step.model_sizes import ModelSizes
from chalk.errors import ChalkError, InputError
from chalk.specs.model import ModelSpec, model_from_config

#: The default CPU model: a small llama (~0.17 B parameters, 8 layers, 8 heads). Big enough that a
#: decode step streams ~0.27 GB of bf16 weights (far past the last-level cache), small enough that
#: the quick run takes about two minutes on a 2-core CPU. Full multi-head attention (8 KV heads):
#: with GQA, transformers' eager attention (the CPU default here, see `_attention_for`) would
#: materialise repeated K/V copies every step, traffic chalk's roofline rightly does not count.
QUICK_MODEL_CONFIG: dict = {
    "model_type": "llama",
    "hidden_size": 1024,
    "intermediate_size": 2816,
    "num_hidden_layers": 8,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 32000,
    "max_position_embeddings": 8192,
    "tie_word_embeddings": False,
    "rms_norm_eps": 1e-5,
}
QUICK_MODEL_ID = "chalk-measure-llama-170m"

#: The default GPU model: a ~1.1 B llama (GQA 16 q / 8 kv heads), so a bf16 decode step reads
#: ~2 GB and is not pure kernel-launch overhead.
QUICK_MODEL_CONFIG_GPU: dict = {
    "model_type": "llama",
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 32000,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": False,
    "rms_norm_eps": 1e-5,
}
QUICK_MODEL_ID_GPU = "chalk-measure-llama-1.1b"


# =========================================================================== 2. real steps
@dataclass(frozen=True)
class StepTiming:
    phase: str  # "decode" | "prefill"
    batch: int
    context: int  # decode: tokens already cached; prefill: prompt length
    measured_s: float  # the chosen statistic of samples_s
    samples_s: tuple[float, ...]

    @property
    def median_s(self) -> float:
        return float(statistics.median(self.samples_s))

    @property
    def min_s(self) -> float:
        return float(min(self.samples_s))


def _config_dict(model, device: str = "cpu") -> tuple[dict, ModelSpec]:
    """(HF config dict, chalk ModelSpec) from None (the quick llama), a dict, a catalog id or a path."""
    from chalk.specs.catalog import load_model, read_json

    if model is None:
        cfg, mid = ((dict(QUICK_MODEL_CONFIG_GPU), QUICK_MODEL_ID_GPU) if device == "cuda"
                    else (dict(QUICK_MODEL_CONFIG), QUICK_MODEL_ID))
        return cfg, model_from_config(cfg, id=mid, source="chalk measure quick config")
    if isinstance(model, dict):
        cfg = dict(model)
        return cfg, model_from_config(cfg, id=str(cfg.get("_name_or_path") or "custom-config"),
                                      source="config dict")
    spec = load_model(str(model))
    p = Path(str(model))
    if p.exists():
        cfg = read_json(p / "config.json" if p.is_dir() else p)
    else:
        from chalk.specs.catalog import package_path

        cfg = read_json(package_path("catalog", "models", spec.id, "config.json"),
                        f"catalog model {spec.id}/config.json")
    return cfg, spec


def _hf_config(cfg: dict):
    tr = _transformers()
    d = {k: v for k, v in cfg.items() if k not in ("quantization_config", "auto_map", "architectures",
                                                     "torch_dtype", "dtype", "_name_or_path",
                                                     "transformers_version")}
    mt = d.pop("model_type", None)
    if not mt:
        raise InputError("model config needs a model_type")
    try:
        return tr.AutoConfig.for_model(mt, **d)
    except (ValueError, KeyError) as e:
        raise ChalkError(f"transformers cannot build model_type {mt!r}: {e}") from None


def build_model(cfg: dict, dtype: str = "float32", device: str = "cpu", attn_implementation: str = "sdpa",
                seed: int = 0):
    """A `transformers` causal LM with random weights from a config dict (no download), eval mode."""
    torch = _torch()
    tr = _transformers()
    hf_cfg = _hf_config(cfg)
    torch.manual_seed(seed)
    dt = getattr(torch, dtype)
    kwargs = {"attn_implementation": attn_implementation}
    with torch.device(device):
        try:
            m = tr.AutoModelForCausalLM.from_config(hf_cfg, dtype=dt, **kwargs)
        except TypeError:  # transformers 4.x spells it torch_dtype
            m = tr.AutoModelForCausalLM.from_config(hf_cfg, torch_dtype=dt, **kwargs)
    return m.to(device=device, dtype=dt).eval()


def _params(fn) -> set[str]:
    import inspect

    try:
        return set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return set()


def _kv_shapes(torch, hf, device):
    """Per-layer (heads, key_dim, value_dim) of the model's KV cache, from a one-token probe."""
    tr = _transformers()
    cache = tr.DynamicCache(config=hf.config) if "config" in _params(tr.DynamicCache) else tr.DynamicCache()
    hf(input_ids=torch.zeros((1, 1), dtype=torch.long, device=device), past_key_values=cache, use_cache=True)
    return [(int(layer.keys.shape[1]), int(layer.keys.shape[-1]), int(layer.values.shape[-1]))
            for layer in cache.layers]


class _DecodeCase:
    """A static KV cache holding `context` random tokens for `batch` sequences, and one decode step.

    Each timed step writes token `context` in place and attends over `context + 1` entries; the
    cache's length counter is reset before every step, so every repeat is the same step.
    """

    def __init__(self, torch, hf, shapes, batch: int, context: int, device: str, seed: int = 0):
        tr = _transformers()
        self.hf, self.context = hf, context
        self.cache = tr.StaticCache(config=hf.config, max_cache_len=context + 1)
        if not all(hasattr(layer, "cumulative_length") for layer in self.cache.layers):
            raise ChalkError("this transformers version's StaticCache has no per-layer length counter; "
                             "chalk measure needs transformers >= 5")
        dt = next(hf.parameters()).dtype
        g = torch.Generator(device=device).manual_seed(seed)
        made: dict = {}
        for i, (h, dk, dv) in enumerate(shapes):
            if (h, dk, dv) not in made:  # one random tensor per distinct shape; the values do not matter
                k = (torch.randn(batch, h, context, dk, generator=g, device=device) * 0.5).to(dt)
                v = k if dv == dk else (torch.randn(batch, h, context, dv, generator=g, device=device) * 0.5).to(dt)
                made[(h, dk, dv)] = (k, v)
            self.cache.update(*made[(h, dk, dv)], i)
        del made
        self.ids = torch.randint(0, hf.config.vocab_size, (batch, 1), generator=g, device=device)

    def __call__(self):
        for layer in self.cache.layers:
            layer.cumulative_length.fill_(self.context)
            if hasattr(layer, "cumulative_length_int"):
                layer.cumulative_length_int = self.context
        return self.hf(input_ids=self.ids, past_key_values=self.cache, use_cache=True)


class _PrefillCase:
    """One forward pass over `batch` random prompts of `context` tokens (all logits, KV written once)."""

    def __init__(self, torch, hf, batch: int, context: int, device: str, seed: int = 0):
        g = torch.Generator(device=device).manual_seed(seed)
        self.hf = hf
        self.ids = torch.randint(0, hf.config.vocab_size, (batch, context), generator=g, device=device)

    def __call__(self):
        return self.hf(input_ids=self.ids, use_cache=True)


def time_steps(hf, device: str, decode_grid: Sequence[tuple[int, int]], prefill_grid: Sequence[tuple[int, int]],
               *, passes: int = 3, budget_per_case_s: float = 1.0, min_repeats: int = 3, max_repeats: int = 15,
               statistic: str = "min", progress: Callable[[str], None] | None = None,
               between_passes: Callable[[int], None] | None = None) -> list[StepTiming]:
    """Wall time of real decode steps (batch, context) and prefill passes (batch, prompt).

    The grid is walked `passes` times, each case taking a share of its repeats per pass (its
    cache rebuilt each time), so a burst of load from elsewhere on the machine lands on a few
    samples of many cases rather than on all samples of one. A case's time is the `statistic`
    of all its samples: "min" (default; as `timeit` argues, slower repeats are other processes
    interfering, not the step) or "median". `between_passes(p)` runs after each pass p (the
    caller re-measures the ceilings there, so they see the same machine state as the steps).
    """
    _stat([1.0], statistic)
    torch = _torch()
    if decode_grid:
        _check_transformers_version()
    sync = _sync_fn(torch, device)
    say = progress or (lambda s: None)
    grid = [("decode", int(b), int(c)) for b, c in decode_grid] + [("prefill", int(b), int(c))
                                                                   for b, c in prefill_grid]
    samples: list[list[float]] = [[] for _ in grid]
    n_rep = [0] * len(grid)
    passes = max(1, int(passes))
    with torch.inference_mode():
        shapes = _kv_shapes(torch, hf, device) if decode_grid else []
        for p in range(passes):
            for i, (phase, b, c) in enumerate(grid):
                say(f"pass {p + 1}/{passes}: {phase} batch {b} {'context' if phase == 'decode' else 'prompt'} {c}")
                case = (_DecodeCase(torch, hf, shapes, b, c, device, seed=i) if phase == "decode"
                        else _PrefillCase(torch, hf, b, c, device, seed=i))
                if p == 0:  # first visit: a warm-up, then size the repeats from one timed call
                    case()
                    sync()
                    t0 = time.perf_counter()
                    case()
                    sync()
                    n_rep[i] = max(min_repeats, min(max_repeats,
                                                    int(budget_per_case_s // max(time.perf_counter() - t0, 1e-6))))
                share = max(1, -(-n_rep[i] // passes))
                _, got = _time_fn(case, sync, warmup=1, repeats=share)
                samples[i].extend(got)
                del case
            if between_passes is not None:
                between_passes(p)
    if device == "cuda":
        torch.cuda.empty_cache()
    return [StepTiming(phase, b, c, _stat(s, statistic), tuple(s)) for (phase, b, c), s in zip(grid, samples)]


#: Quick CPU grid for the default model (bf16, 32 KB of KV per token), in the three regimes where
#: one ceiling dominates a step: weight-bound decode (small batch, short context), KV-bound decode
#: (long contexts, up to ~1 GB of cache), compute-bound decode (batch 64-256 at short contexts),
#: and prefill passes of 16 to 256 tokens (memory- to compute-bound). The full grid adds balanced
#: cases (large batch AND long context, long prompts), where an eager CPU step runs its
#: compute-bound GEMMs and its memory-bound attention one after the other, so the measured time
#: nears the SUM of the two roofline terms, not their max: the whole-step roofline is optimistic there.
_CPU_DECODE_QUICK = [(1, 128), (1, 1024), (1, 4096), (2, 512), (4, 2048), (8, 512), (8, 4096), (16, 256),
                     (16, 2048), (32, 64), (64, 32), (128, 16), (128, 64), (256, 16)]
_CPU_PREFILL_QUICK = [(1, 16), (1, 32), (1, 64), (2, 32), (1, 128), (4, 32), (2, 128), (1, 256), (4, 64)]
_GPU_DECODE_QUICK = [(1, 512), (1, 4096), (1, 16384), (8, 2048), (8, 8192), (32, 1024), (32, 4096), (64, 512),
                     (128, 256), (128, 2048), (256, 128), (512, 64), (512, 128)]
_GPU_PREFILL_QUICK = [(1, 512), (1, 2048), (2, 2048), (1, 4096), (4, 2048), (1, 8192), (8, 1024)]


def default_grid(quick: bool = True, device: str = "cpu") -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(decode (batch, context) grid, prefill (batch, prompt) grid) for the default model."""
    if device == "cuda":
        dec, pre = list(_GPU_DECODE_QUICK), list(_GPU_PREFILL_QUICK)
        if not quick:
            dec += [(2, 8192), (16, 16384), (64, 2048), (256, 512), (1024, 64)]
            pre += [(16, 1024), (2, 8192), (1, 16384)]
        return dec, pre
    dec, pre = list(_CPU_DECODE_QUICK), list(_CPU_PREFILL_QUICK)
    if not quick:
        dec += [(2, 8000), (32, 1024), (48, 256), (64, 512), (96, 64), (128, 256)]
        pre += [(1, 512), (2, 256), (8, 64), (1, 1024)]
    return dec, pre


def _kv_fits(spec: ModelSpec, grid, precision: str, cap_bytes: float):
    sz = ModelSizes(spec)
    return [(b, c) for b, c in grid if b * sz.kv_bytes_per_sequence(c + 1, precision) <= cap_bytes]


def _choose_dtype(device: str, ceilings: Ceilings, dtype: str | None) -> tuple[str, str]:
    """The dtype the model runs in, and why."""
    if dtype:
        if dtype not in TORCH_TO_CHALK or dtype == "float8":
            raise InputError(f"model dtype must be float32, bfloat16 or float16, got {dtype!r}")
        return dtype, "asked for"
    if device == "cuda":
        return "bfloat16", "the GPU default"
    f32, b16 = ceilings.flops_per_s.get("fp32", 0.0), ceilings.flops_per_s.get("bf16", 0.0)
    if b16 >= 1.5 * f32:
        return "bfloat16", (f"bf16 matmul measured {b16 / max(f32, 1):.1f}x fp32 here; fp32 small-batch GEMMs on "
                            "CPU also fall far below the fp32 ceiling")
    return "float32", f"bf16 matmul is not faster than fp32 here ({b16 / 1e9:.0f} vs {f32 / 1e9:.0f} GFLOP/s)"


def _attention_for(device: str, dtype: str) -> tuple[str, str]:
    """transformers attention implementation for the timed model, and why."""
    if device == "cpu" and dtype in ("bfloat16", "float16"):
        return "eager", ("eager attention: torch's CPU SDPA kernel reads a bf16 KV cache at about half the rate "
                         "of eager matmul+softmax in decode")
    return "sdpa", "SDPA attention"
