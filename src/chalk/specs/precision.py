"""Numeric precisions: bytes per element, and which compute rate a chip runs them at.

Besides the plain element types (bf16, fp8, fp4, ...), a precision may name a weight-only quantised format
(`WeightOnly`): integer (or NF4) weights of a few bits with one scale (and a zero point) per group of weights,
multiplied at 16 bits after an on-chip dequantisation (GPTQ, AWQ, bitsandbytes, compressed-tensors W4A16). Its
name says all that sets its size, `w{bits}a16-{label}-g{group}[-zp]` (`-ch`: one scale per output channel), e.g.
`w4a16-gptq-g128-zp`: 4 bits + (16-bit scale + 4-bit zero) / 128 = 4.16 bits per weight, bf16 math.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from chalk.errors import UnknownNameError

#: Bytes per element. fp4 is NVFP4, the FP4 that chips with an FP4 rate are quoted and served at: 4-bit E2M1
#: elements plus one FP8 (E4M3) scale per 16 elements = 4.5 bits, and one FP32 scale per tensor (NVIDIA, Blackwell,
#: June 2025; https://modal.com/llm-almanac/block-quants: "blocks are 16 elements ... the block scale uses full FP8
#: E4M3 ... A second per-tensor FP32 scale"). mxfp4 is OCP microscaling FP4: 4-bit elements plus one 8-bit scale
#: per 32 elements = 4.25 bits (OCP MX spec v1.0; gpt-oss stores its MoE weights this way, and AMD's FP4 checkpoints
#: are MXFP4).
BYTES_PER_ELEMENT: dict[str, float] = {
    "fp32": 4.0,
    "tf32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "fp4": 4.5 / 8,
    "mxfp4": 4.25 / 8,
}

ALIASES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16", "e4m3": "fp8",
           "float8": "fp8", "nvfp4": "fp4", "float4": "fp4",
           # weight-only what-ifs: integer weights, one 16-bit scale per 128 (the common GPTQ / AWQ group)
           "w4a16": "w4a16-int-g128", "w8a16": "w8a16-int-g128"}

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

#: the plain element types (before any weight-only format is registered)
_PLAIN = tuple(BYTES_PER_ELEMENT)

#: Scale bits per group of each weight-only label: what one scale costs in the checkpoint.
#: gptq / awq: fp16 `scales` beside packed int32 `qweight`, and packed `qzeros` at the weight width (AutoGPTQ and
#: AutoAWQ store qzeros even for symmetric GPTQ); ct: compressed-tensors pack-quantized, one `weight_scale` per
#: group in the model dtype (16 bits), `weight_zero_point` only when asymmetric; int: a plain what-if at 16-bit
#: scales; nf4 / bnbfp4: bitsandbytes 4-bit, one fp32 absmax per block of 64; nf4dq / bnbfp4dq: with double
#: quantisation, an 8-bit absmax per block plus one fp32 constant per 256 blocks, 8 + 32/256 = 8.125 bits (Dettmers
#: et al. 2023, QLoRA, sec. 3: 0.127 bits per parameter at block 64); bnb8: LLM.int8() weights, one fp32 scale per
#: row (Dettmers et al. 2022), written per channel (`-ch`).
SCALE_BITS = {"gptq": 16.0, "awq": 16.0, "ct": 16.0, "int": 16.0, "nf4": 32.0, "bnbfp4": 32.0,
              "nf4dq": 8.125, "bnbfp4dq": 8.125, "bnb8": 32.0}
#: the 16-bit math weight-only formats run at on a chip, nearest first
WEIGHT_ONLY_COMPUTE = ("bf16", "fp16")
_NAME = re.compile(r"^w(\d+)a16-([a-z0-9]+)-(?:g(\d+)|ch)(-zp)?$")


@dataclass(frozen=True)
class WeightOnly:
    """A weight-only quantised storage format: `bits`-bit weights, one `scale_bits` scale and (`zero_point`) one
    `bits`-bit zero point per `group_size` weights along the input dimension (0: per output channel, whose one
    scale per row of thousands of weights is below 0.01 bit per weight and not counted), multiplied at 16 bits.

    Assumes: packing is exact (32 / bits weights per int32 word, as GPTQ, AWQ and compressed-tensors pack 4 and
    8 bits); act-order indices (GPTQ `g_idx`, 32 bits per input row: < 0.01 bit per weight) are not counted.
    Timing (`chalk.analyses.step.step_model`): the math at the chip's 16-bit rate, the weights read at these bits, the
    dequantisation hidden under both. Ref: Frantar et al. 2024, MARLIN (arXiv:2408.11743): an FP16xINT4 kernel
    within 5% of the ideal 3.87x speed-up up to batch 32 (A10); its ~10% shortfall against FP16 in compute-bound
    prefill (batch >= 1024) is not modelled, so a narrower read is never slower."""

    bits: int
    label: str
    group_size: int = 0
    zero_point: bool = False

    def __post_init__(self) -> None:
        if not (isinstance(self.bits, int) and 1 <= self.bits <= 8):
            raise ValueError(f"weight bits must be a whole number from 1 to 8, got {self.bits!r}")
        if self.label not in SCALE_BITS:
            raise ValueError(f"unknown weight-only format label {self.label!r} (known: {', '.join(SCALE_BITS)})")
        if not (isinstance(self.group_size, int) and 0 <= self.group_size <= 1 << 20):
            raise ValueError(f"group size must be a whole number from 0 (per channel) to 2^20, got "
                             f"{self.group_size!r}")

    @property
    def name(self) -> str:
        group = f"g{self.group_size}" if self.group_size else "ch"
        return f"w{self.bits}a16-{self.label}-{group}" + ("-zp" if self.zero_point else "")

    @property
    def bits_per_weight(self) -> float:
        """Stored bits per weight, scales and zero points included.

        Formula: b + (s + z) / g   (b weight bits, s scale bits, z zero-point bits (b or 0), g group size)
        Ref: the checkpoint tensors of each format (see `SCALE_BITS`).
        """
        if not self.group_size:
            return float(self.bits)
        return self.bits + (SCALE_BITS[self.label] + (self.bits if self.zero_point else 0)) / self.group_size

    @classmethod
    def parse(cls, name: str) -> WeightOnly | None:
        """The format a precision name spells (`w4a16-gptq-g128-zp`), or None when it spells none."""
        m = _NAME.match(name)
        if m is None or m.group(2) not in SCALE_BITS:
            return None
        try:
            return cls(bits=int(m.group(1)), label=m.group(2), group_size=int(m.group(3) or 0),
                       zero_point=bool(m.group(4)))
        except ValueError:
            return None

    def register(self) -> str:
        """Make the name a precision (bytes per element, the 16-bit math it runs at); returns the name. The name
        fixes every number, so registering it twice changes nothing."""
        name = self.name
        if name not in BYTES_PER_ELEMENT:
            COMPUTE_FALLBACK[name] = WEIGHT_ONLY_COMPUTE
            BYTES_PER_ELEMENT[name] = self.bits_per_weight / 8
            _WEIGHT_ONLY.add(name)
        return name


#: The weight-only formats registered (`WeightOnly.register`). A membership, not `COMPUTE_FALLBACK[name] is
#: WEIGHT_ONLY_COMPUTE`: Python folds equal constant tuples into one object, so bf16's own fallback ('bf16', 'fp16')
#: was that very tuple and bf16 read as weight-only.
_WEIGHT_ONLY: set[str] = set()


def weight_only(name: str) -> bool:
    """Whether a precision stores weights narrower than the 16-bit math it runs at (a weight-only format)."""
    return canonical(name) in _WEIGHT_ONLY


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
        fmt = WeightOnly.parse(key)
        if fmt is None:
            raise UnknownNameError("precision", name, _PLAIN, [*_PLAIN, "w<bits>a16-<label>-g<group>[-zp]"])
        key = fmt.register()
    return key


def bytes_per_element(name: str) -> float:
    """Bytes one element occupies at this precision."""
    return BYTES_PER_ELEMENT[canonical(name)]
