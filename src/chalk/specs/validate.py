"""Typed reads of fields from parsed spec files (YAML, config.json), and checks of output paths.

Every value that enters chalk from a file passes through one of these readers, so a wrong type, a
non-finite or absurd number, or a wrong container becomes one `SpecError` line naming the file and the
field, never a TypeError deep inside an analysis.
"""

from __future__ import annotations

import math
import numbers
import operator
import os
from pathlib import Path

from chalk.errors import InputError, SpecError
from chalk.specs.workload import short as _short

#: Largest integer a config.json dimension may hold (vocab, hidden size, layers, heads, context, ...).
#: 2^31: no real checkpoint comes near it, and products of a few such dimensions stay finite in float64.
MAX_DIM = 2**31

#: Largest number a spec file's physical figure may hold in its vendor unit (TFLOP/s, GB, TB/s, W, $/h).
MAX_FIGURE = 1e9


def spec_int(value, where: str, *, minimum: int = 0, maximum: int = MAX_DIM) -> int:
    """A whole number in [minimum, maximum] (floats like 4096.0 are accepted; bools and strings are not)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(f"{where} must be a whole number, got {_short(value)}")
    if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
        raise SpecError(f"{where} must be a whole number, got {_short(value)}")
    if not minimum <= value <= maximum:
        raise SpecError(f"{where} must be between {minimum} and {maximum}, got {_short(value)}")
    return int(value)


def spec_number(value, where: str, *, minimum: float = 0.0, maximum: float = MAX_FIGURE) -> float:
    """A finite number in [minimum, maximum]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(f"{where} must be a number, got {_short(value)}")
    v = float(value) if abs(value) < 1e308 else math.inf
    if not math.isfinite(v) or not minimum <= v <= maximum:
        raise SpecError(f"{where} must be a finite number between {minimum:g} and {maximum:g}, got {_short(value)}")
    return v


def spec_str(value, where: str, *, default: str = "") -> str:
    """A string (numbers are accepted and printed; lists and mappings are not)."""
    if value is None:
        return default
    if isinstance(value, (dict, list, tuple, set)):
        raise SpecError(f"{where} must be a string, got {_short(value)}")
    return str(value)


def spec_str_list(value, where: str) -> tuple[str, ...]:
    """A list of strings (or one string, read as a list of one); None is empty."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, (list, tuple)) or any(isinstance(v, (dict, list, tuple)) or v is None for v in value):
        raise SpecError(f"{where} must be a list of strings, got {_short(value)}")
    return tuple(str(v) for v in value)


def spec_str_map(value, where: str) -> dict[str, str]:
    """A mapping of strings to strings (e.g. `sources: {field: url}`); None is empty."""
    if value is None:
        return {}
    if not isinstance(value, dict) or any(isinstance(v, (dict, list, tuple)) for v in value.values()):
        raise SpecError(f"{where} must be a mapping of field names to strings, got {_short(value)}")
    return {str(k): str(v) for k, v in value.items()}


def spec_mapping(value, where: str) -> dict:
    """A mapping (None is empty)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SpecError(f"{where} must be a mapping, got {_short(value)}")
    return value


# ------------------------------------------------------------------ fields of a spec built in code
def field_number(spec, name: str, *, gt: float | None = None, ge: float | None = None, lt: float | None = None,
                 le: float | None = None, whole: bool = False, optional: bool = False) -> None:
    """Check one numeric field of a frozen spec dataclass (in its `__post_init__`) and store it as a float, or
    an int with `whole`; None passes only when `optional`. A ValueError names the field: a spec read from a file
    has passed the readers above already, and its loader turns this into one SpecError line naming the file."""
    v = getattr(spec, name)
    if v is None and optional:
        return
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise ValueError(f"{name} must be a {'whole ' if whole else ''}number, got {_short(v)}")
    if whole:
        if not math.isfinite(v) or v != int(v):
            raise ValueError(f"{name} must be a whole number, got {_short(v)}")
        v = int(v)
    else:
        v = float(v)
    for bound, sign, holds in ((gt, ">", operator.gt), (ge, ">=", operator.ge), (lt, "<", operator.lt),
                               (le, "<=", operator.le)):
        if bound is not None and not holds(v, bound):  # NaN holds none
            raise ValueError(f"{name} must be {sign} {bound:g}, got {_short(v)}")
    object.__setattr__(spec, name, v)


def field_choice(spec, name: str, choices: tuple[str, ...]) -> None:
    """Check that a field of a frozen spec dataclass holds one of `choices` (a ValueError names the field)."""
    v = getattr(spec, name)
    if v not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, got {_short(v)}")


# ------------------------------------------------------------------ output paths
def path_name_ok(path, option: str, what: str) -> Path:
    """The path as a Path, refused in one line when it is empty or has a name the file system cannot hold."""
    text = str(path)
    if not text.strip():
        raise InputError(f"{option} needs a {what} name")
    p = Path(text)
    limit = 255  # NAME_MAX of the common Linux, macOS and Windows file systems
    if any(len(os.fsencode(part)) > limit for part in p.parts):  # fsencode: undecodable bytes kept as bytes
        raise InputError(f"{option}: a name in {text[:60]!r}... is longer than {limit} bytes")
    return p


def output_path(path, option: str, suffixes: tuple[str, ...] | None = None) -> Path:
    """Check an output file path before any work: its folder exists and is writable, it is not a folder.

    `option` names the flag in messages (e.g. '--csv'); `suffixes` restricts the extension.
    """
    p = path_name_ok(path, option, "file")
    if suffixes and p.suffix.lower() not in suffixes:
        raise InputError(f"{option} must end in {' or '.join(suffixes)}, got {str(path)[:80]!r}")
    try:
        if p.is_dir():
            raise InputError(f"{option}: {str(path)!r} is a folder, not a file")
        if p.exists() and not p.is_file():  # a device (/dev/full), a FIFO, a socket: never renamed over
            raise InputError(f"{option}: {str(path)!r} is not a regular file")
        parent = p.parent if str(p.parent) else Path(".")
        if not parent.is_dir():
            raise InputError(f"{option}: folder {str(parent)!r} does not exist")
        if p.exists() and not os.access(p, os.W_OK) or not p.exists() and not os.access(parent, os.W_OK):
            raise InputError(f"{option}: cannot write {str(path)!r} (permission denied)")
    except OSError as e:
        raise InputError(f"{option}: cannot use {str(path)[:80]!r} ({e.strerror or type(e).__name__})") from None
    if _is_virtual_fs(parent):
        raise InputError(f"{option}: cannot write {str(path)!r} (not a regular file system)")
    return p


def output_dir(path, option: str) -> Path:
    """Check an output folder before any work: it exists (or its parent does, to create it) and is writable."""
    p = path_name_ok(path, option, "folder")
    try:
        if p.exists() and not p.is_dir():
            raise InputError(f"{option}: {str(path)!r} exists and is not a folder")
        target = p if p.exists() else p.parent if str(p.parent) else Path(".")
        if not target.is_dir():
            raise InputError(f"{option}: folder {str(target)!r} does not exist")
        if not os.access(target, os.W_OK) or _is_virtual_fs(target):
            raise InputError(f"{option}: cannot write into {str(target)!r}")
    except OSError as e:
        raise InputError(f"{option}: cannot use {str(path)[:80]!r} ({e.strerror or type(e).__name__})") from None
    return p


def _is_virtual_fs(folder: Path) -> bool:
    """/proc and /sys accept no new files (the kernel answers writes with odd errors)."""
    try:
        parts = folder.resolve().parts
    except OSError:
        return False
    return len(parts) > 1 and parts[1] in ("proc", "sys")


# ------------------------------------------------------------------ lists and names given on a command line
def list_items(text, option: str) -> list[str]:
    """The items of a comma-separated list, stripped. An empty item ('bf16,,fp8', 'a,') or an empty list (',',
    '') is one InputError line: a typo is never read as a shorter list."""
    s = str(text)
    items = [p.strip() for p in s.split(",")]
    if not any(items):
        raise InputError(f"{option} needs at least one item, got {_short(s)}")
    if not all(items):
        raise InputError(f"{option} has an empty item in {_short(s)} (two commas, or one at an end)")
    return items


def single_line(value, option: str) -> str:
    """A name printed into a command line or a file (a model repo, a path): one line of printable text."""
    s = str(value)
    if not s.strip() or any(ord(c) < 32 or ord(c) == 127 for c in s):
        raise InputError(f"{option} must be one line of printable text, got {_short(s)}")
    return s
