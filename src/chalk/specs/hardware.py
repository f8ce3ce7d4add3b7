"""Chips and systems (a chip in its scale-up domain), loaded from catalog YAML.

The YAML holds vendor units with the unit in the key (`hbm_tb_per_s`); everything here is SI:
FLOP/s, bytes, bytes/s, W, USD/s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

from chalk.errors import SpecError
from chalk.specs.precision import COMPUTE_FALLBACK, bytes_per_element, canonical
from chalk.specs.validate import (field_choice, field_number, spec_number, spec_str, spec_str_list,
                                  spec_str_map)

NUMERIC_FIELDS = ("dense_tflops", "hbm_gb", "hbm_tb_per_s", "scaleup_gb_per_s_bidir",
                  "scaleout_gbit_per_s", "tdp_w", "price_usd_per_hour")


@dataclass(frozen=True, kw_only=True)
class ChipEfficiency:
    """Achieved fractions of a chip's own ceilings and its per-step overhead, as fitted by `chalk measure`.

    YAML (`efficiency:` block of a chip file): compute, memory (fractions), overhead_ms, overhead_prefill_ms, source.
    """

    compute: float
    memory: float
    overhead_s: float
    overhead_prefill_s: float | None = None
    source: str = ""

    def __post_init__(self) -> None:
        field_number(self, "compute", gt=0, le=1)
        field_number(self, "memory", gt=0, le=1)
        field_number(self, "overhead_s", ge=0, lt=10)
        field_number(self, "overhead_prefill_s", ge=0, lt=10, optional=True)

    @classmethod
    def from_yaml_dict(cls, d, where: str) -> ChipEfficiency:
        if not isinstance(d, dict):
            raise SpecError(f"{where}: efficiency must be a mapping (compute, memory, overhead_ms)")
        unknown = set(d) - {"compute", "memory", "overhead_ms", "overhead_prefill_ms", "source"}
        if unknown:
            raise SpecError(f"{where}: efficiency has unknown field(s) {', '.join(sorted(map(str, unknown)))}")
        try:
            pre = d.get("overhead_prefill_ms")
            return cls(compute=spec_number(d["compute"], f"{where}: efficiency.compute"),
                       memory=spec_number(d["memory"], f"{where}: efficiency.memory"),
                       overhead_s=spec_number(d.get("overhead_ms", 0) or 0, f"{where}: efficiency.overhead_ms") / 1e3,
                       overhead_prefill_s=None if pre is None else spec_number(pre, f"{where}: efficiency.overhead_prefill_ms")
                       / 1e3, source=str(d.get("source", "") or ""))
        except KeyError as e:
            raise SpecError(f"{where}: efficiency needs {e.args[0]!r}") from None
        except ValueError as e:
            raise SpecError(f"{where}: efficiency: {_first_line(e)}") from None

    def to_yaml_dict(self) -> dict:
        def g(v):  # 7 significant digits: a fitted fraction may be small
            return float(f"{v:.7g}")

        d = {"compute": g(self.compute), "memory": g(self.memory), "overhead_ms": g(self.overhead_s * 1e3)}
        if self.overhead_prefill_s is not None:
            d["overhead_prefill_ms"] = g(self.overhead_prefill_s * 1e3)
        d["source"] = self.source
        return d


@dataclass(frozen=True, kw_only=True)
class Chip:
    """One accelerator. SI units; `flops_per_s` maps precision -> dense peak FLOP/s."""

    id: str
    name: str
    vendor: str = ""
    aliases: tuple[str, ...] = ()
    default_system: str | None = None
    flops_per_s: dict[str, float]
    hbm_bytes: float
    hbm_bandwidth_bytes_per_s: float
    scaleup_bandwidth_bytes_per_s_bidir: float = 0.0
    scaleup_link: str = ""
    #: Dimensions of the torus the scale-up links form (TPU ICI: 2 or 3); 0: a switched fabric (NVSwitch).
    scaleup_torus_dims: int = 0
    scaleout_bandwidth_bytes_per_s: float = 0.0
    tdp_w: float | None = None
    price_usd_per_hour: float = 0.0
    price_date: str | None = None
    price_is_assumption: bool = False
    price_note: str = ""
    confidence: str = ""
    sources: dict[str, str] = field(default_factory=dict)
    notes: str = ""
    #: Set by `chalk measure`: a calibrated spec's ceilings are measured, not datasheet peaks.
    measured: bool = False
    #: Fitted by `chalk measure`: used instead of chalk's calibrated constants when this chip is the hardware.
    efficiency: ChipEfficiency | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.flops_per_s, dict) or not self.flops_per_s:
            raise ValueError("flops_per_s needs at least one dense FLOP/s figure")
        rates = {}
        for k, rate in self.flops_per_s.items():
            if isinstance(rate, bool) or not (isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0):
                raise ValueError(f"FLOP/s for {k} must be a positive number, got {rate!r}")
            rates[canonical(k)] = float(rate)
        object.__setattr__(self, "flops_per_s", rates)
        object.__setattr__(self, "aliases", tuple(self.aliases))
        field_number(self, "hbm_bytes", gt=0)
        field_number(self, "hbm_bandwidth_bytes_per_s", gt=0)
        field_number(self, "scaleup_bandwidth_bytes_per_s_bidir", ge=0)
        field_number(self, "scaleout_bandwidth_bytes_per_s", ge=0)
        dims = self.scaleup_torus_dims
        if isinstance(dims, bool) or dims not in range(7):
            raise ValueError(f"scaleup_torus_dims must be a whole number of dimensions from 0 to 6, got {dims!r}")
        object.__setattr__(self, "scaleup_torus_dims", int(dims))
        field_number(self, "tdp_w", optional=True)
        field_number(self, "price_usd_per_hour", ge=0)
        if self.efficiency is not None and not isinstance(self.efficiency, ChipEfficiency):
            raise ValueError(f"efficiency must be a ChipEfficiency, got {type(self.efficiency).__name__}")

    @property
    def scaleup_bandwidth_bytes_per_s(self) -> float:
        """One-way scale-up bandwidth per chip (vendors quote the bidirectional sum)."""
        return self.scaleup_bandwidth_bytes_per_s_bidir / 2

    @property
    def price_usd_per_s(self) -> float:
        return self.price_usd_per_hour / 3600.0

    @property
    def precisions(self) -> tuple[str, ...]:
        return tuple(self.flops_per_s)

    def compute_precision(self, precision: str) -> str:
        """The precision whose peak rate `precision` runs at on this chip (fallback to wider)."""
        p = canonical(precision)
        for cand in COMPUTE_FALLBACK.get(p, (p,)):
            if cand in self.flops_per_s:
                return cand
        # last resort: the chip's widest listed 16-bit-or-wider rate
        return max(self.flops_per_s, key=bytes_per_element)

    def peak_flops_per_s(self, precision: str) -> float:
        """Dense peak FLOP/s for matrix work at `precision` (after fallback)."""
        return self.flops_per_s[self.compute_precision(precision)]

    def native_precision(self) -> str:
        """The narrowest float precision that runs faster than the next wider one (fp4 > fp8 > bf16).

        TPU v5p and v6e list fp8 at the bf16 rate: no speed-up, so their native precision is bf16.
        """
        floats = sorted((p for p in self.flops_per_s if p not in ("int8", "tf32")),
                        key=lambda p: (-bytes_per_element(p), p)) or list(self.flops_per_s)
        best = floats[0]
        for p in floats[1:]:
            if bytes_per_element(p) < bytes_per_element(best) and self.flops_per_s[p] > self.flops_per_s[best] * 1.01:
                best = p
        return best

    @classmethod
    def from_yaml_dict(cls, d: dict, where: str = "chip") -> Chip:
        """Convert catalog YAML (vendor units) to SI; every field is type-checked (one SpecError line).

        `scaleup_gb_per_s_bidir` and `scaleout_gbit_per_s` may be left out: 0, no such link. A system of
        more than one chip then refuses to load (see `System`), so a missing link never becomes a NaN time.
        """
        if not isinstance(d, dict):
            raise SpecError(f"{where}: a chip must be a mapping of fields")
        try:
            tflops = d["dense_tflops"]
            if not isinstance(tflops, dict):
                raise SpecError(f"{where}: dense_tflops must be a mapping precision -> TFLOP/s")
            opt = lambda key: spec_number(d.get(key) or 0, f"{where}: {key}")  # noqa: E731
            return cls(
                id=spec_str(d["id"], f"{where}: id"), name=spec_str(d.get("name"), f"{where}: name",
                                                                    default=str(d["id"])),
                vendor=spec_str(d.get("vendor"), f"{where}: vendor"),
                aliases=tuple(a.lower() for a in spec_str_list(d.get("aliases"), f"{where}: aliases")),
                default_system=spec_str(d.get("default_system"), f"{where}: default_system") or None,
                flops_per_s={str(k): spec_number(v, f"{where}: dense_tflops.{k}") * 1e12 for k, v in tflops.items()},
                hbm_bytes=spec_number(d["hbm_gb"], f"{where}: hbm_gb") * 1e9,
                hbm_bandwidth_bytes_per_s=spec_number(d["hbm_tb_per_s"], f"{where}: hbm_tb_per_s") * 1e12,
                scaleup_bandwidth_bytes_per_s_bidir=opt("scaleup_gb_per_s_bidir") * 1e9,
                scaleup_link=spec_str(d.get("scaleup_link"), f"{where}: scaleup_link"),
                scaleup_torus_dims=spec_number(d.get("scaleup_torus_dims") or 0, f"{where}: scaleup_torus_dims",
                                               maximum=6),
                scaleout_bandwidth_bytes_per_s=opt("scaleout_gbit_per_s") * 1e9 / 8,
                tdp_w=None if d.get("tdp_w") is None else spec_number(d["tdp_w"], f"{where}: tdp_w"),
                price_usd_per_hour=opt("price_usd_per_hour"),
                price_date=spec_str(d.get("price_date"), f"{where}: price_date") or None,
                price_is_assumption=bool(d.get("price_is_assumption", False)),
                price_note=spec_str(d.get("price_note"), f"{where}: price_note"),
                confidence=spec_str(d.get("confidence"), f"{where}: confidence"),
                sources=spec_str_map(d.get("sources"), f"{where}: sources"),
                notes=spec_str(d.get("notes"), f"{where}: notes"),
                measured=bool(d.get("measured", False)),
                efficiency=None if d.get("efficiency") is None
                else ChipEfficiency.from_yaml_dict(d["efficiency"], where),
            )
        except KeyError as e:
            raise SpecError(f"{where}: missing field {e.args[0]!r}") from None
        except (TypeError, ValueError) as e:
            raise SpecError(f"{where}: {_first_line(e)}") from None

    def to_yaml_dict(self) -> dict:
        """Back to catalog YAML (vendor units), e.g. for a calibrated spec written by `chalk measure`."""
        return {
            "id": self.id, "name": self.name, "vendor": self.vendor, "aliases": list(self.aliases),
            "default_system": self.default_system,
            "dense_tflops": {k: round(v / 1e12, 6) for k, v in self.flops_per_s.items()},
            "hbm_gb": round(self.hbm_bytes / 1e9, 6),
            "hbm_tb_per_s": round(self.hbm_bandwidth_bytes_per_s / 1e12, 6),
            "scaleup_gb_per_s_bidir": round(self.scaleup_bandwidth_bytes_per_s_bidir / 1e9, 6),
            **({"scaleup_torus_dims": self.scaleup_torus_dims} if self.scaleup_torus_dims else {}),
            "scaleout_gbit_per_s": round(self.scaleout_bandwidth_bytes_per_s * 8 / 1e9, 6),
            "tdp_w": self.tdp_w, "price_usd_per_hour": self.price_usd_per_hour,
            "price_date": self.price_date, "price_is_assumption": self.price_is_assumption,
            "price_note": self.price_note, "confidence": self.confidence,
            "sources": dict(self.sources), "notes": self.notes, "measured": self.measured,
            **({"efficiency": self.efficiency.to_yaml_dict()} if self.efficiency is not None else {}),
        }


SYSTEM_KINDS = ("node", "rack", "pod", "chip")


@dataclass(frozen=True, kw_only=True)
class System:
    """A chip in its scale-up domain (an HGX node, an NVL72 rack, a TPU slice)."""

    id: str
    name: str
    chip: Chip
    chips: int
    kind: str = "node"  # one of SYSTEM_KINDS
    # chips per host (one machine: what one launch command's node and one Kubernetes node hold) where the scale-up
    # domain spans several (an NVL72 rack's compute trays hold 4 GPUs each); 0: the domain is one host
    host_chips: int = 0
    aliases: tuple[str, ...] = ()
    sources: dict[str, str] = field(default_factory=dict)
    notes: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.chip, Chip):
            raise ValueError(f"chip must be a Chip, got {type(self.chip).__name__}")
        field_number(self, "chips", gt=0, whole=True)
        field_choice(self, "kind", SYSTEM_KINDS)
        field_number(self, "host_chips", ge=0, whole=True)
        if self.host_chips and (self.host_chips > self.chips or self.chips % self.host_chips):
            raise ValueError(f"host_chips ({self.host_chips}) must divide chips ({self.chips})")
        object.__setattr__(self, "aliases", tuple(self.aliases))
        if self.chips > 1 and self.chip.scaleup_bandwidth_bytes_per_s_bidir <= 0:
            raise ValueError(f"a scale-up domain of {self.chips} chips needs the chip's scaleup_gb_per_s_bidir "
                             "(GB/s per chip, both directions); give it, or set chips: 1")

    @cached_property
    def hbm_bytes(self) -> float:
        return self.chips * self.chip.hbm_bytes

    @property
    def chips_per_host(self) -> int:
        """Chips one host holds (`host_chips`, else the whole domain)."""
        return int(self.host_chips or self.chips)


def _first_line(e: Exception) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return lines[0] if lines else type(e).__name__
