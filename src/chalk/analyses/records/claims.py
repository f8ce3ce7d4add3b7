"""A lecture claim: one deduction, computed by the library, beside the lecture's own figure."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Claim:
    """One checkable deduction from `shared/lecture/claims.md`.

    `value` is always computed by chalk's functions; `lecture_value` is what the lecture says
    (a number, a range [low, high], or a short phrase); `lecture_range` is the numeric range the
    value must fall in to count as reproducing the lecture (None when the claim is qualitative).
    """

    id: str
    value: float | list | str | None
    unit: str
    lecture_value: float | list | str | None
    assumptions: str
    explanation: str
    lecture_range: tuple[float, float] | None = None
    section: str = ""

    def to_dict(self) -> dict:
        d = asdict(self)
        d["lecture_range"] = list(self.lecture_range) if self.lecture_range else None
        return d

    @property
    def within_lecture_range(self) -> bool | None:
        if self.lecture_range is None or not isinstance(self.value, (int, float)):
            return None
        lo, hi = self.lecture_range
        return lo <= float(self.value) <= hi
