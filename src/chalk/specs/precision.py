"""Numeric precisions: bytes per element, and which compute rate a chip runs them at."""

from __future__ import annotations

from chalk.errors import UnknownNameError

#: Bytes per element. mxfp4 is OCP microscaling FP4: 4-bit elements plus one 8-bit scale per
#: 32 elements = 4.25 bits (OCP MX spec v1.0; gpt-oss stores its MoE weights this way).
BYTES_PER_ELEMENT: dict[str, float] = {
    "fp32": 4.0,
    "tf32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "fp4": 0.5,
    "mxfp4": 4.25 / 8,
}

ALIASES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16", "e4m3": "fp8",
           "float8": "fp8", "nvfp4": "fp4", "float4": "fp4"}

#: The chip rate a precision runs at, widest first: a chip without fp4 runs fp4 weights at the next
#: wider rate it has (weight-only quantisation, e.g. Marlin w4a16 kernels on Hopper).
COMPUTE_FALLBACK: dict[str, tuple[str, ...]] = {
    "fp4": ("fp4", "fp8", "bf16", "fp16"),
    "mxfp4": ("fp4", "bf16", "fp16"),
    "fp8": ("fp8", "bf16", "fp16"),
    "int8": ("int8", "fp8", "bf16", "fp16"),
    "bf16": ("bf16", "fp16"),
    "fp16": ("fp16", "bf16"),
    "tf32": ("tf32", "fp32", "bf16"),
    "fp32": ("fp32", "tf32", "bf16"),
}


_CANONICAL: dict[str, str] = {}


def canonical(name: str) -> str:
    """Return the canonical precision name, or raise UnknownNameError."""
    if type(name) is str:
        hit = _CANONICAL.get(name)
        if hit is not None:
            return hit
        if len(_CANONICAL) < 1024:
            _CANONICAL[name] = key = _canonical(name)
            return key
    return _canonical(name)


def _canonical(name) -> str:
    key = str(name).strip().lower()
    key = ALIASES.get(key, key)
    if key not in BYTES_PER_ELEMENT:
        raise UnknownNameError("precision", name, BYTES_PER_ELEMENT)
    return key


def bytes_per_element(name: str) -> float:
    """Bytes one element occupies at this precision."""
    return BYTES_PER_ELEMENT[canonical(name)]
