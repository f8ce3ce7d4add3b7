"""Every user file chalk reads or writes passes through here: reads bounded, writes atomic.

* `read_bounded` refuses what is not a regular file (a FIFO, /dev/zero, a folder) before opening it, and a file
  larger than a stated limit, in one line naming the limit; it never reads more than limit + 1 bytes, so a file
  that grows while read is refused too.
* `atomic_write` writes to a temporary file in the target's folder, flushes it to disk (fsync), then renames it
  over the target (`os.replace`, atomic on POSIX): a full disk or any other write error leaves an existing file
  byte-identical and no temporary behind, and becomes one `InputError` line.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from chalk.errors import InputError, SpecError

#: Size limits of the user files chalk reads, in bytes (a real one is far smaller: these only stop a runaway read).
MAX_SPEC_BYTES = 16_000_000  # a config.json, a chip or system YAML, a price sheet (a real one: < 100 kB)
MAX_TABLE_BYTES = 64_000_000  # a lengths file, a diurnal curve (a million lengths: ~7 MB)


def _size(n: int) -> str:
    return f"{n / 1e9:g} GB" if n >= 1e8 else f"{n / 1e6:g} MB" if n >= 1e6 else f"{n:,} bytes"


def shown(path) -> str:
    """A path as printable text: bytes the file system holds that are not UTF-8 shown as \\x escapes."""
    text = os.fsdecode(path) if isinstance(path, bytes) else str(path)
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def read_bounded(path, where: str, max_bytes: int, *, what: str = "file", error: type = SpecError) -> bytes:
    """The bytes of a regular file of at most `max_bytes`; anything else is one `error` line naming the limit.

    `where` starts each message (a file name or an option); `what` names the file in the limit ("a lengths file").
    The file's type and size are read with stat before it is opened, so a device or a FIFO is never opened."""
    limit = f"{what} must be a regular file of at most {_size(max_bytes)}"
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise error(f"{where}: no such file") from None
    except (OSError, ValueError, TypeError) as e:
        raise error(f"{where}: cannot read it ({getattr(e, 'strerror', None) or e.__class__.__name__})") from None
    if stat.S_ISDIR(st.st_mode):
        raise error(f"{where}: a folder, not a regular file ({limit})")
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{where}: not a regular file ({limit})")
    if st.st_size > max_bytes:
        raise error(f"{where}: {_size(st.st_size)}; {limit}")
    try:
        with open(path, "rb") as f:
            raw = f.read(max_bytes + 1)
    except OSError as e:
        raise error(f"{where}: cannot read it ({e.strerror or e.__class__.__name__})") from None
    if len(raw) > max_bytes:
        raise error(f"{where}: more than {_size(max_bytes)}; {limit}")
    return raw


def read_bounded_text(path, where: str, max_bytes: int, *, what: str = "file", error: type = SpecError) -> str:
    """`read_bounded` decoded as UTF-8 (a byte-order mark dropped); other bytes are one `error` line."""
    raw = read_bounded(path, where, max_bytes, what=what, error=error)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise error(f"{where}: not UTF-8 text (byte {e.start})") from None


def _new_file_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def atomic_path(path, option: str = "output"):
    """A temporary path in `path`'s folder to write to (same suffix, so writers that go by it still can);
    on a clean exit it is flushed to disk and renamed over `path`. On any error the temporary is removed and
    `path` is untouched; an OSError becomes one InputError line naming `option` and the reason."""
    import tempfile  # here: its import (random, shutil) would cost every command's start

    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if os.path.lexists(target) and not os.path.isfile(target):  # a device, a FIFO, a folder: never replaced
        raise InputError(f"{option}: {shown(path)!r} is not a regular file")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.stem[:100]}.", suffix=f".tmp{target.suffix[:20]}", dir=folder)
    except OSError as e:
        raise InputError(f"{option}: cannot write {shown(path)!r} ({e.strerror or e.__class__.__name__})") from None
    os.close(fd)
    try:
        yield Path(tmp)
        try:
            mode = stat.S_IMODE(os.stat(target).st_mode)
        except OSError:
            mode = _new_file_mode()
        with open(tmp, "rb+") as f:
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise InputError(f"{option}: cannot write {shown(path)!r} ({e.strerror or e.__class__.__name__}); "
                         f"an existing file is left as it was") from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # the rename itself on disk
        dfd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def atomic_write(path, data: bytes | str, option: str = "output") -> Path:
    """Write `data` (text is UTF-8) to `path` atomically (see `atomic_path`). Returns the path."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with atomic_path(path, option) as tmp:
        with open(tmp, "wb") as f:
            f.write(raw)
    return Path(path)


def make_folder(path, option: str = "output") -> Path:
    """`path` as a folder, made with its parents where missing; an OSError is one InputError line."""
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"{option}: cannot make folder {shown(path)!r} ({e.strerror or e.__class__.__name__})") from None
    return p
