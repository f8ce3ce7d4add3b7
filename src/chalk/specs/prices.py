"""API price sheets and KV-cache storage tiers: catalog models and loaders.

Price sheets live in ``chalk/catalog/prices/<id>.yaml`` and are written in the units
the providers publish (USD per million tokens). Storage tiers live in
``chalk/catalog/storage.yaml`` in GB and GB/s (decimal). Everything is converted to
SI on load: USD per token, bytes, bytes per second, seconds.

The models are frozen; derived values are properties. The reading behind them:

* ``PriceTier.output_input_ratio``: output / input price, a proxy for how much more a
  decode token costs the provider than a prefill token.
* ``PriceSheet.long_context_tier``: the price cliff above a context threshold, which
  prices the KV-cache bytes a long prompt pins.
* ``StorageTier.drain_time_s``: capacity / bandwidth, the time to read a whole tier
  once; retention tiers (5 min, 1 h) line up with the drain times of DRAM and flash.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from chalk.errors import SpecError, UnknownNameError
from chalk.specs.catalog import _catalog_dir, read_yaml

__all__ = [
    "MTOK",
    "GB",
    "PriceTier",
    "PriceMode",
    "PriceSheet",
    "StorageTier",
    "load_price_sheets",
    "load_price_sheet",
    "parse_price_sheet",
    "price_sheet_ids",
    "load_storage_tiers",
    "load_storage_tier",
]

MTOK = 1_000_000  # tokens per "MTok", the unit price sheets are quoted in
GB = 1_000_000_000  # bytes per GB (decimal, as vendors quote capacity and bandwidth)
HOUR_S = 3600.0

Confidence = Literal["high", "medium", "low"]
StorageKind = Literal["hbm", "dram", "flash", "disk"]
#: Ordering of storage kinds from fastest / smallest to slowest / largest.
STORAGE_KIND_ORDER: tuple[str, ...] = ("hbm", "dram", "flash", "disk")

_DATE_RE = re.compile(r"^\d{4}(-(0[1-9]|1[0-2])(-(0[1-9]|[12]\d|3[01]))?)?$")
_ID_RE = re.compile(r"^[a-z0-9][a-z0-9.\-]*$")


# ----------------------------------------------------------------------------- validators


def _finite_nonneg(v: float) -> float:
    if not math.isfinite(v):
        raise ValueError(f"must be finite, got {v!r}")
    if v < 0:
        raise ValueError(f"must be >= 0, got {v!r}")
    return float(v)


def _finite_pos(v: float) -> float:
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"must be finite and > 0, got {v!r}")
    return float(v)


def _date(v: str) -> str:
    if not _DATE_RE.match(v):
        raise ValueError(f"date must be YYYY, YYYY-MM or YYYY-MM-DD, got {v!r}")
    return v


def _ident(v: str) -> str:
    if not _ID_RE.match(v):
        raise ValueError(f"id must be lower-case letters, digits, '.' and '-', got {v!r}")
    return v


def _nonblank(v: str) -> str:
    if not v.strip():
        raise ValueError("must not be blank")
    return v


Price = Annotated[float, AfterValidator(_finite_nonneg)]
Positive = Annotated[float, AfterValidator(_finite_pos)]
DateStr = Annotated[str, AfterValidator(_date)]
Ident = Annotated[str, AfterValidator(_ident)]
Text = Annotated[str, AfterValidator(_nonblank)]

_FROZEN = ConfigDict(frozen=True, extra="forbid")


# ----------------------------------------------------------------------------- SI models


class PriceTier(BaseModel):
    """Prices (USD per token) for prompts with more than ``min_context_tokens`` input tokens.

    ``cache_read_usd_per_token`` is None where the provider does not publish it; the cache
    write prices are None where the provider charges no separate write price (writes billed
    as ordinary input) or does not publish one.
    """

    model_config = _FROZEN

    name: Text
    min_context_tokens: int = Field(ge=0)
    input_usd_per_token: Price
    output_usd_per_token: Price
    cache_read_usd_per_token: Price | None = None
    cache_write_5m_usd_per_token: Price | None = None
    cache_write_1h_usd_per_token: Price | None = None

    @property
    def output_input_ratio(self) -> float:
        """Output price / input price (decode vs prefill cost proxy); inf if input is free."""
        if self.input_usd_per_token == 0:
            return math.inf
        return self.output_usd_per_token / self.input_usd_per_token

    @property
    def cache_read_fraction(self) -> float | None:
        """Cache-read price as a fraction of the input price (e.g. 0.1), None if unknown."""
        if self.cache_read_usd_per_token is None or self.input_usd_per_token == 0:
            return None
        return self.cache_read_usd_per_token / self.input_usd_per_token

    def per_mtok(self, field: str) -> float | None:
        """A price field of this tier back in USD per million tokens (for display)."""
        v = getattr(self, field)
        return None if v is None else v * MTOK


class PriceMode(BaseModel):
    """A priority / fast / off-peak mode priced as a multiple of the sheet's standard tier."""

    model_config = _FROZEN

    name: Text
    price_multiple: Positive
    #: claimed per-user output-speed multiple; None when the provider states none
    speedup: Positive | None = None
    source: Text
    #: id of the sheet that carries this mode's full price list, if there is one
    sheet: Ident | None = None

    @property
    def price_per_speedup(self) -> float | None:
        """Price multiple paid per unit of claimed speedup (None if no speedup is stated)."""
        return None if self.speedup is None else self.price_multiple / self.speedup


class PriceSheet(BaseModel):
    """One provider's public prices for one model (or one mode of a model), with sources."""

    model_config = _FROZEN

    id: Ident
    provider: Text
    model: Text
    date: DateStr
    source: Text
    confidence: Confidence
    tiers: tuple[PriceTier, ...] = Field(min_length=1)
    modes: tuple[PriceMode, ...] = ()
    #: for a sheet that is itself a priority / fast mode: the id of the standard sheet
    mode_of: Ident | None = None
    #: context-cache storage price (Gemini), USD per token per second
    cache_storage_usd_per_token_s: Price | None = None
    notes: str = ""

    @model_validator(mode="after")
    def _check(self) -> PriceSheet:
        if self.tiers[0].min_context_tokens != 0:
            raise ValueError("the first tier must have min_context_tokens 0")
        thresholds = [t.min_context_tokens for t in self.tiers]
        if any(b <= a for a, b in zip(thresholds, thresholds[1:])):
            raise ValueError(f"tier thresholds must strictly increase, got {thresholds}")
        names = [t.name for t in self.tiers]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate tier names {names}")
        mode_names = [m.name for m in self.modes]
        if len(set(mode_names)) != len(mode_names):
            raise ValueError(f"duplicate mode names {mode_names}")
        if self.mode_of == self.id:
            raise ValueError("a sheet cannot be a mode of itself")
        return self

    # --- derived
    @property
    def base_tier(self) -> PriceTier:
        """The standard tier (threshold 0)."""
        return self.tiers[0]

    @property
    def long_context_tier(self) -> PriceTier | None:
        """The first tier above the standard one (the long-context price cliff), or None."""
        return self.tiers[1] if len(self.tiers) > 1 else None

    @property
    def long_context_threshold_tokens(self) -> int | None:
        lc = self.long_context_tier
        return None if lc is None else lc.min_context_tokens

    @property
    def long_context_input_multiple(self) -> float | None:
        """Long-context input price / standard input price (e.g. 2.0), None without a cliff."""
        lc = self.long_context_tier
        if lc is None or self.base_tier.input_usd_per_token == 0:
            return None
        return lc.input_usd_per_token / self.base_tier.input_usd_per_token

    @property
    def long_context_output_multiple(self) -> float | None:
        lc = self.long_context_tier
        if lc is None or self.base_tier.output_usd_per_token == 0:
            return None
        return lc.output_usd_per_token / self.base_tier.output_usd_per_token

    @property
    def output_input_ratio(self) -> float:
        """Output / input price of the standard tier."""
        return self.base_tier.output_input_ratio

    @property
    def is_mode_sheet(self) -> bool:
        return self.mode_of is not None

    @property
    def cache_storage_usd_per_token_hour(self) -> float | None:
        s = self.cache_storage_usd_per_token_s
        return None if s is None else s * HOUR_S

    def tier_for(self, context_tokens: int) -> PriceTier:
        """The tier that prices a prompt of ``context_tokens`` input tokens.

        A tier applies to prompts with *more than* its ``min_context_tokens`` input tokens,
        so a prompt of exactly 200,000 tokens stays in a ">200K" sheet's standard tier.
        """
        if context_tokens < 0:
            raise ValueError(f"context_tokens must be >= 0, got {context_tokens}")
        chosen = self.tiers[0]
        for t in self.tiers[1:]:
            if context_tokens > t.min_context_tokens:
                chosen = t
        return chosen

    def mode(self, name: str) -> PriceMode:
        for m in self.modes:
            if m.name == name:
                return m
        raise UnknownNameError(f"price mode of {self.id}", name, [m.name for m in self.modes])


class StorageTier(BaseModel):
    """A storage tier that could hold KV cache: capacity and read bandwidth, in SI units."""

    model_config = _FROZEN

    id: Ident
    name: Text
    kind: StorageKind
    capacity_bytes: Positive
    bandwidth_bytes_per_s: Positive
    source: Text
    assumption: bool
    notes: str = ""

    @property
    def drain_time_s(self) -> float:
        """Seconds to read the whole tier once at its bandwidth (capacity / bandwidth)."""
        return self.capacity_bytes / self.bandwidth_bytes_per_s

    @property
    def capacity_gb(self) -> float:
        return self.capacity_bytes / GB

    @property
    def bandwidth_gb_per_s(self) -> float:
        return self.bandwidth_bytes_per_s / GB

    @property
    def kind_rank(self) -> int:
        """0 for HBM, 1 for DRAM, 2 for flash, 3 for disk."""
        return STORAGE_KIND_ORDER.index(self.kind)


# ----------------------------------------------------------------------------- file schema
# What the YAML files hold (provider units); converted to the SI models above.


class _TierFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    min_context_tokens: int = Field(ge=0)
    input_usd_per_mtok: Price
    output_usd_per_mtok: Price
    cache_read_usd_per_mtok: Price | None = None
    cache_write_5m_usd_per_mtok: Price | None = None
    cache_write_1h_usd_per_mtok: Price | None = None

    @field_validator("min_context_tokens", mode="before")
    @classmethod
    def _no_float_tokens(cls, v: Any) -> Any:
        if isinstance(v, float):
            raise ValueError("min_context_tokens must be an integer")
        return v

    def to_si(self) -> PriceTier:
        def conv(x: float | None) -> float | None:
            return None if x is None else x / MTOK

        return PriceTier(
            name=self.name,
            min_context_tokens=self.min_context_tokens,
            input_usd_per_token=self.input_usd_per_mtok / MTOK,
            output_usd_per_token=self.output_usd_per_mtok / MTOK,
            cache_read_usd_per_token=conv(self.cache_read_usd_per_mtok),
            cache_write_5m_usd_per_token=conv(self.cache_write_5m_usd_per_mtok),
            cache_write_1h_usd_per_token=conv(self.cache_write_1h_usd_per_mtok),
        )


class _SheetFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    provider: str
    model: str
    date: str
    source: str
    confidence: str
    tiers: list[_TierFile]
    modes: list[PriceMode] = []
    mode_of: str | None = None
    cache_storage_usd_per_mtok_hour: Price | None = None
    notes: str = ""

    def to_si(self) -> PriceSheet:
        storage = self.cache_storage_usd_per_mtok_hour
        return PriceSheet(
            id=self.id,
            provider=self.provider,
            model=self.model,
            date=self.date,
            source=self.source,
            confidence=self.confidence,  # type: ignore[arg-type]
            tiers=tuple(t.to_si() for t in self.tiers),
            modes=tuple(self.modes),
            mode_of=self.mode_of,
            cache_storage_usd_per_token_s=None if storage is None else storage / MTOK / HOUR_S,
            notes=self.notes,
        )


class _StorageTierFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    name: str
    kind: str
    capacity_gb: Positive
    bandwidth_gb_per_s: Positive
    source: str
    assumption: bool
    notes: str = ""

    def to_si(self) -> StorageTier:
        return StorageTier(
            id=self.id,
            name=self.name,
            kind=self.kind,  # type: ignore[arg-type]
            capacity_bytes=self.capacity_gb * GB,
            bandwidth_bytes_per_s=self.bandwidth_gb_per_s * GB,
            source=self.source,
            assumption=self.assumption,
            notes=self.notes,
        )


class _StorageFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tiers: list[_StorageTierFile] = Field(min_length=1)


# ----------------------------------------------------------------------------- loading


def _first_error(exc: ValidationError) -> str:
    errs = exc.errors()
    parts = []
    for e in errs[:3]:
        loc = ".".join(str(x) for x in e.get("loc", ()))
        parts.append(f"{loc}: {e.get('msg')}" if loc else str(e.get("msg")))
    more = f" (+{len(errs) - 3} more)" if len(errs) > 3 else ""
    return "; ".join(parts) + more


def parse_price_sheet(data: Any, label: str = "price sheet") -> PriceSheet:
    """Build a PriceSheet from a mapping in the file schema (USD per million tokens).

    Raises SpecError, naming ``label``, for anything malformed: unknown keys, missing
    fields, negative or non-finite prices, tiers out of order.
    """
    if not isinstance(data, dict):
        raise SpecError(f"{label}: expected a mapping at the top level")
    try:
        return _SheetFile.model_validate(data).to_si()
    except ValidationError as exc:
        raise SpecError(f"{label}: {_first_error(exc)}") from exc


def _parse_sheet(data: Any, label: str, stem: str) -> PriceSheet:
    sheet = parse_price_sheet(data, label)
    if sheet.id != stem:
        raise SpecError(f"{label}: id {sheet.id!r} does not match the file name {stem!r}")
    return sheet


@lru_cache(maxsize=1)
def _sheets() -> tuple[PriceSheet, ...]:
    folder = _catalog_dir() / "prices"
    entries = sorted(
        (p for p in folder.iterdir() if p.name.endswith(".yaml")), key=lambda p: p.name
    )
    sheets = []
    for p in entries:
        stem = p.name[: -len(".yaml")]
        sheets.append(_parse_sheet(read_yaml(p, f"prices/{p.name}"), f"prices/{p.name}", stem))
    ids = [s.id for s in sheets]
    if len(set(ids)) != len(ids):
        raise SpecError(f"duplicate price sheet ids in prices/: {sorted(ids)}")
    _check_links(sheets)
    return tuple(sorted(sheets, key=lambda s: s.id))


def _check_links(sheets: Iterable[PriceSheet]) -> None:
    by_id = {s.id: s for s in sheets}
    for s in by_id.values():
        if s.mode_of is not None and s.mode_of not in by_id:
            raise SpecError(f"prices/{s.id}.yaml: mode_of {s.mode_of!r} is not a known sheet")
        for m in s.modes:
            if m.sheet is not None and m.sheet not in by_id:
                raise SpecError(
                    f"prices/{s.id}.yaml: mode {m.name!r} names unknown sheet {m.sheet!r}"
                )


def load_price_sheets(*, include_mode_sheets: bool = True) -> list[PriceSheet]:
    """Every price sheet in the catalog, sorted by id.

    With ``include_mode_sheets=False`` the sheets that are themselves a priority / fast mode
    of another sheet (``mode_of`` set) are left out, so each model is counted once.
    """
    sheets = _sheets()
    if not include_mode_sheets:
        sheets = tuple(s for s in sheets if s.mode_of is None)
    return list(sheets)


def price_sheet_ids() -> list[str]:
    return [s.id for s in _sheets()]


def load_price_sheet(id: str) -> PriceSheet:  # noqa: A002 - the catalog's own word
    """The price sheet with this id; UnknownNameError if there is none."""
    for s in _sheets():
        if s.id == id:
            return s
    raise UnknownNameError("price sheet", id, price_sheet_ids())


@lru_cache(maxsize=1)
def _storage() -> tuple[StorageTier, ...]:
    label = "storage.yaml"
    data = read_yaml(_catalog_dir() / "storage.yaml", label)
    try:
        tiers = tuple(t.to_si() for t in _StorageFile.model_validate(data).tiers)
    except ValidationError as exc:
        raise SpecError(f"{label}: {_first_error(exc)}") from exc
    ids = [t.id for t in tiers]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise SpecError(f"{label}: duplicate tier ids {dupes}")
    return tiers


def load_storage_tiers() -> list[StorageTier]:
    """Every storage tier in the catalog, in file order (fastest first)."""
    return list(_storage())


def load_storage_tier(id: str) -> StorageTier:  # noqa: A002
    for t in _storage():
        if t.id == id:
            return t
    raise UnknownNameError("storage tier", id, [t.id for t in _storage()])
