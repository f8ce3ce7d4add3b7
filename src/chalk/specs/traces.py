"""Request traces: when each request arrived and how long its prompt and answer were, read from a file.

One reader, `read_trace`, for three formats told apart by the file's first line:

    chalk     CSV, header arrival_s,input_len,output_len (extra columns ignored; rows in any order, sorted here)
    azure     Azure LLM inference trace 2023 CSV, header TIMESTAMP,ContextTokens,GeneratedTokens; wall-clock
              timestamps (2023-11-16 18:15:46.6805900) become seconds from the first request
    mooncake  Mooncake FAST'25 JSONL, one {"timestamp", "input_length", "output_length", "hash_ids"} per line;
              timestamp in ms from the trace start, hash_ids the prompt's prefix blocks of 512 tokens
              (equal ids: the same prefix, so its KV can be reused)

Public traces arrive in time order: an Azure or Mooncake timestamp that goes backwards is an error (the prefix
cache is replayed in that order). Reads are bounded: a trace is a regular file of at most MAX_TRACE_BYTES.
Every problem is one SpecError line naming the file (and the line, where one is at fault).
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import dataclass

import numpy as np

from chalk.errors import InputError, SpecError
from chalk.specs.files import read_bounded
from chalk.specs.workload import MAX_QUANTITY

#: Largest trace file read (bytes): ~25M Azure rows or ~4M Mooncake rows, well past what one simulation takes.
MAX_TRACE_BYTES = 1_000_000_000
#: Tokens per Mooncake hash block (Mooncake FAST'25 trace release, README: "hash_ids ... block size 512").
MOONCAKE_BLOCK_TOKENS = 512

CHALK_COLUMNS = ("arrival_s", "input_len", "output_len")
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length")
#: A zone on a wall-clock TIMESTAMP (Z, +05:30, -0800): numpy reads one with a UserWarning on stderr, so it is taken
#: off here and the time moved to UTC (`_zone`).
_ZONE = re.compile(r"^(\d{4,}-\d\d-\d\d[T ]\d\d:\d\d(?::\d\d(?:\.\d*)?)?)\s*(?:(Z)|([+-])(\d\d):?(\d\d)?)$",
                   re.IGNORECASE)
FORMATS = {"chalk": "chalk CSV (arrival_s,input_len,output_len)",
           "azure": "Azure LLM inference trace CSV (TIMESTAMP,ContextTokens,GeneratedTokens)",
           "mooncake": 'Mooncake JSONL ({"timestamp": ms, "input_length", "output_length", "hash_ids"} per line)'}


@dataclass(frozen=True, eq=False)
class Trace:
    """Requests in arrival order: arrival time (s from the first request's clock zero), prompt and output lengths
    (tokens). Mooncake traces also carry each prompt's prefix blocks: request i's block ids are
    `hash_ids[hash_offsets[i]:hash_offsets[i + 1]]`, `block_tokens` tokens each."""

    arrival_s: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray
    format: str
    source: str
    hash_ids: np.ndarray | None = None
    hash_offsets: np.ndarray | None = None
    block_tokens: int | None = None
    speedup: float = 1.0

    def __len__(self) -> int:
        return int(self.arrival_s.size)

    @property
    def has_blocks(self) -> bool:
        return self.hash_ids is not None

    def blocks(self, i: int) -> np.ndarray:
        """Request i's prefix-block ids (empty without hash ids)."""
        if self.hash_ids is None:
            return np.zeros(0, dtype=np.int64)
        return self.hash_ids[self.hash_offsets[i]:self.hash_offsets[i + 1]]

    @property
    def span_s(self) -> float:
        """First to last arrival."""
        return float(self.arrival_s[-1] - self.arrival_s[0])

    @property
    def mean_rate_per_s(self) -> float:
        """Requests per second over the span: (n - 1) / span (NaN for one request or a zero span)."""
        return (len(self) - 1) / self.span_s if self.span_s > 0 else math.nan

    def peak_rate_per_s(self, window_s: float = 60.0) -> float:
        """Most requests arriving in any `window_s` (sliding, starting at an arrival) per second of the window;
        a trace shorter than the window gives its mean rate."""
        return self.peak_window(window_s)[0]

    def peak_window(self, window_s: float = 60.0) -> tuple[float, float]:
        """(`peak_rate_per_s`, when its busiest window starts, in seconds from the first request; 0 for a trace
        shorter than the window)."""
        w = float(window_s)
        if not (math.isfinite(w) and w > 0):
            raise InputError(f"window must be a positive number of seconds, got {window_s!r}")
        if not self.span_s > w:
            return self.mean_rate_per_s, 0.0
        a = self.arrival_s
        n = np.searchsorted(a, a + w, side="left") - np.arange(a.size)
        i = int(np.argmax(n))
        return float(n[i]) / w, float(a[i] - a[0])

    def head(self, n: int) -> Trace:
        """The first n requests."""
        n = int(n)
        if n < 1:
            raise InputError(f"a trace head needs at least one request, got {n}")
        if n >= len(self):
            return self
        ids = offs = None
        if self.hash_ids is not None:
            offs = self.hash_offsets[: n + 1]
            ids = self.hash_ids[: int(offs[-1])]
        return Trace(self.arrival_s[:n], self.input_len[:n], self.output_len[:n], self.format, self.source, ids,
                     offs, self.block_tokens, self.speedup)


# ----------------------------------------------------------------------------------------------- reading
def read_trace(path, *, speedup: float = 1.0, max_bytes: int = MAX_TRACE_BYTES) -> Trace:
    """The trace in `path`, its format told by its first line; arrival times divided by `speedup` (the rate
    multiplied by it). Raises SpecError (one line) for a file that is missing, not a regular file, too large,
    of an unknown format, empty, or with a malformed line; InputError for a bad speedup."""
    x = _speedup(speedup)
    where = str(path)
    text = _read_bounded(path, where, max_bytes)
    first = next((ln for ln in text.splitlines() if ln.strip()), None)
    if first is None:
        raise SpecError(f"{where}: empty trace (expected one of: {'; '.join(FORMATS.values())})")
    fmt = _detect(first, where)
    if fmt == "mooncake":
        t = _read_mooncake(text, where)
    elif fmt == "azure":
        t = _read_azure(text, where)
    else:
        t = _read_chalk(text, where)
    if x != 1.0:
        t = Trace(t.arrival_s / x, t.input_len, t.output_len, t.format, t.source, t.hash_ids, t.hash_offsets,
                  t.block_tokens, x)
    return t


def _speedup(v) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise InputError(f"speedup must be a number, got {v!r}") from None
    if not (math.isfinite(x) and 0 < x <= 1e6):
        raise InputError(f"speedup must be a positive number (at most 1e6), got {v!r}")
    return x


def _read_bounded(path, where: str, max_bytes: int) -> str:
    raw = read_bounded(path, where, max_bytes, what="a trace")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise SpecError(f"{where}: not UTF-8 text, so not a trace (expected one of: "
                        f"{'; '.join(FORMATS.values())})") from None


def _detect(first: str, where: str) -> str:
    head = first.strip()
    if head.startswith("{"):
        return "mooncake"
    cols = {c.strip().lower() for c in next(csv.reader([head], skipinitialspace=True), [])}
    if cols & {c.lower() for c in AZURE_COLUMNS}:
        return "azure"
    if cols & set(CHALK_COLUMNS):
        return "chalk"
    shown = head if len(head) <= 60 else head[:57] + "..."
    raise SpecError(f"{where}: unknown trace format (first line {shown!r}); accepted: {'; '.join(FORMATS.values())}")


# ----------------------------------------------------------------------------------------------- CSV formats
def _csv_rows(text: str, where: str) -> list:
    """(file line number, fields) of each non-blank CSV row."""
    reader = csv.reader(io.StringIO(text, newline=""), skipinitialspace=True)
    try:
        return [(reader.line_num, row) for row in reader if any(c.strip() for c in row)]
    except csv.Error as e:
        raise SpecError(f"{where}: malformed CSV ({e.__class__.__name__})") from None


def _table(text: str, where: str, columns: tuple, *, case: bool = True) -> tuple[list, list, list]:
    """Header-checked rows: (data rows, the columns' indices, header)."""
    rows = _csv_rows(text, where)
    header = [str(c).strip() for c in rows[0][1]]
    key = (lambda s: s) if case else str.lower
    names = [key(h) for h in header]
    missing = [c for c in columns if key(c) not in names]
    if missing:
        raise SpecError(f"{where}: missing column(s) {', '.join(missing)}; expected header {','.join(columns)}")
    data = rows[1:]
    if not data:
        raise SpecError(f"{where}: no requests after the header")
    for line, row in data:
        if len(row) > len(header):
            raise SpecError(f"{where}: malformed CSV (line {line}: expected {len(header)} fields, saw {len(row)})")
    return data, [names.index(key(c)) for c in columns], header


def _cells(data, j: int) -> list[str]:
    return [row[j].strip() if j < len(row) else "" for _, row in data]


def _lengths(data, j: int, name: str, where: str) -> np.ndarray:
    raw = _cells(data, j)
    x = np.array([_number(v) for v in raw], dtype=float)
    bad = ~np.isfinite(x) | (x <= 0) | (x != np.floor(x))
    if bad.any():
        i = int(np.argmax(bad))
        raise SpecError(f"{where}: line {data[i][0]}: {name} must be a positive integer, got {raw[i]!r}")
    big = x > MAX_QUANTITY  # 9.2e18 wrapped round int64 and was called 'not positive' (QA 2026-11-28)
    if big.any():
        i = int(np.argmax(big))
        raise SpecError(f"{where}: line {data[i][0]}: {name} must be at most {MAX_QUANTITY:,.0f} tokens, got {raw[i]}")
    return x.astype(np.int64)


def _read_chalk(text: str, where: str) -> Trace:
    data, (ja, ji, jo), _ = _table(text, where, CHALK_COLUMNS)
    raw = _cells(data, ja)
    a = np.array([_number(v) for v in raw], dtype=float)
    bad = ~np.isfinite(a) | (a < 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise SpecError(f"{where}: line {data[i][0]}: arrival_s must be a finite time >= 0, got {raw[i]!r}")
    inp, out = _lengths(data, ji, "input_len", where), _lengths(data, jo, "output_len", where)
    order = np.argsort(a, kind="stable")  # chalk's own CSV is a set of requests: any row order, sorted here
    return Trace(a[order], inp[order], out[order], "chalk", where)


def _read_azure(text: str, where: str) -> Trace:
    data, (jt, ji, jo), _ = _table(text, where, AZURE_COLUMNS, case=False)
    raw = _cells(data, jt)
    clock, east = zip(*map(_zone, raw))
    try:
        ts = np.array(clock, dtype="datetime64[ns]")
        days = np.array(clock, dtype="datetime64[D]")
    except ValueError:
        for i, v in enumerate(clock):
            try:
                np.datetime64(v, "ns")
            except ValueError:
                raise SpecError(f"{where}: line {data[i][0]}: TIMESTAMP must be a date and time such as "
                                f"2023-11-16 18:15:46.68, got {_short(raw[i])}") from None
        raise SpecError(f"{where}: malformed TIMESTAMP column") from None
    if np.isnat(ts).any():
        i = int(np.argmax(np.isnat(ts)))
        raise SpecError(f"{where}: line {data[i][0]}: TIMESTAMP must be a date and time, got {raw[i]!r}")
    wrapped = ts.astype("datetime64[D]") != days  # past nanoseconds' range numpy wraps round (12345 read as 1823)
    if wrapped.any():
        i = int(np.argmax(wrapped))
        raise SpecError(f"{where}: line {data[i][0]}: TIMESTAMP must be a date between the years 1678 and 2261, "
                        f"got {_short(raw[i])}")
    ts = ts - np.array(east, dtype="timedelta64[m]")  # each time in UTC: a trace may change zone (summer time)
    a = (ts - ts[0]).astype(np.int64) / 1e9
    _in_order(a, data, where, "TIMESTAMP")
    return Trace(a, _lengths(data, ji, "ContextTokens", where), _lengths(data, jo, "GeneratedTokens", where),
                 "azure", where)


def _zone(v: str) -> tuple[str, int]:
    """(a TIMESTAMP without its zone, the zone's offset east of UTC in minutes; 0 for none or Z)."""
    m = _ZONE.match(v)
    if m is None or m.group(2):
        return (v, 0) if m is None else (m.group(1), 0)
    return m.group(1), (1 if m.group(3) == "+" else -1) * (int(m.group(4)) * 60 + int(m.group(5) or 0))


def _in_order(a: np.ndarray, data, where: str, name: str) -> None:
    back = np.diff(a) < 0
    if back.any():
        i = int(np.argmax(back)) + 1
        raise SpecError(f"{where}: line {data[i][0]}: {name} goes backwards ({a[i]:.6g} s after the first "
                        f"request, the line before is at {a[i - 1]:.6g} s); a trace must be in arrival order")


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return float("nan")


# ----------------------------------------------------------------------------------------------- Mooncake JSONL
def _read_mooncake(text: str, where: str) -> Trace:
    ts, inp, out, ids, offs, lines = [], [], [], [], [0], []
    any_ids = False  # whether any line carries hash_ids (the prefix blocks)
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except ValueError as e:
            why = "a number of more than 4,300 digits" if "digits" in str(e) else getattr(e, "msg", "ValueError")
            raise SpecError(f"{where}: line {n}: not a JSON object ({why})") from None
        if not isinstance(r, dict):
            raise SpecError(f"{where}: line {n}: expected a JSON object, got {type(r).__name__}")
        missing = [k for k in MOONCAKE_KEYS if k not in r]
        if missing:
            raise SpecError(f"{where}: line {n}: missing key(s) {', '.join(missing)}")
        t = r["timestamp"]
        try:
            time_ok = not isinstance(t, bool) and isinstance(t, (int, float)) and math.isfinite(t) and t >= 0
        except OverflowError:  # an integer past float's range (1 and 400 zeros): math.isfinite cannot take it
            time_ok = False
        if not time_ok:
            raise SpecError(f"{where}: line {n}: timestamp must be a time >= 0 in ms, got {_short(t)}")
        for k in ("input_length", "output_length"):
            v = r[k]
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise SpecError(f"{where}: line {n}: {k} must be a positive integer, got {_short(v)}")
            if v > MAX_QUANTITY:
                raise SpecError(f"{where}: line {n}: {k} must be at most {MAX_QUANTITY:,.0f} tokens, got {_short(v)}")
        h = r.get("hash_ids", [])
        any_ids = any_ids or "hash_ids" in r
        if not isinstance(h, list) or not all(isinstance(b, int) and not isinstance(b, bool) for b in h):
            raise SpecError(f"{where}: line {n}: hash_ids must be a list of integers")
        ts.append(float(t))
        inp.append(r["input_length"])
        out.append(r["output_length"])
        ids.extend(h)
        offs.append(len(ids))
        lines.append((n, None))
    a = np.array(ts) / 1e3
    _in_order(a, lines, where, "timestamp")
    try:
        hid = np.array(ids, dtype=np.int64)
        i_len, o_len = np.array(inp, dtype=np.int64), np.array(out, dtype=np.int64)
    except OverflowError:
        raise SpecError(f"{where}: a length or hash id does not fit in 64 bits") from None
    if not any_ids:  # no line carries prefix blocks: no hit rate to compute (QA 2026-11-28: it said a computed 0.0%)
        return Trace(a, i_len, o_len, "mooncake", where)
    return Trace(a, i_len, o_len, "mooncake", where, hid, np.array(offs, dtype=np.int64), MOONCAKE_BLOCK_TOKENS)


def _short(v) -> str:
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."
