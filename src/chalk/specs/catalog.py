"""Find chips, systems and models by id, alias or path; the catalog is package data."""

from __future__ import annotations

import json
import os
import zlib
from functools import lru_cache
from pathlib import Path

from chalk.errors import SpecError, UnknownNameError
from chalk.memo import by_identity
from chalk.specs.files import MAX_SPEC_BYTES, read_bounded
from chalk.specs.hardware import Chip, System
from chalk.specs.model import ModelSpec, model_from_config
from chalk.specs.validate import spec_int, spec_str, spec_str_list, spec_str_map
from chalk.specs.workload import MAX_GPUS

#: The installed package's own folder: its data files sit beside the modules (a plain path, not
#: importlib.resources, whose import costs ~7 ms of every CLI start; chalk is never installed zipped)
PACKAGE_DIR = Path(__file__).resolve().parent.parent

#: The catalog's YAML files parsed ahead of time (`compile_catalog`, written by `scripts/compile_catalog.py`):
#: {"files": {path under catalog/: [CRC-32, size in bytes, the parsed mapping as JSON text]}}. A file whose bytes
#: still match its entry is read from here without importing PyYAML, whose import (with its resolver's regular
#: expressions) is ~9 ms of every CLI start (issue 12); any other file, an edited one included, is parsed from its
#: YAML as before. Derived data: tests/test_catalog_compiled.py fails when it no longer matches the YAML.
COMPILED_FILE = "compiled.json"


def package_path(*parts: str) -> Path:
    """A file or folder of chalk's package data, e.g. package_path("catalog", "calibration.yaml")."""
    return PACKAGE_DIR.joinpath(*parts)


def _catalog_dir(kind: str = ""):
    d = PACKAGE_DIR / "catalog"
    return d / kind if kind else d


def _read_bytes(path, where: str) -> bytes:
    """A file's bytes (a Path, str or importlib resource), every failure as one SpecError line. A path is read
    bounded (specs/files.py): a regular file of at most MAX_SPEC_BYTES, never a device or a FIFO."""
    if isinstance(path, (str, bytes, os.PathLike)):
        return read_bounded(path, where, MAX_SPEC_BYTES, what="a spec file")
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise SpecError(f"{where}: no such file") from None
    except (OSError, ValueError) as e:
        raise SpecError(f"{where}: cannot read ({e.__class__.__name__})") from None


def _read_text(path, where: str) -> str:
    """A file's text, every failure as one SpecError line."""
    try:
        return _read_bytes(path, where).decode()
    except UnicodeDecodeError as e:
        raise SpecError(f"{where}: cannot read ({e.__class__.__name__})") from None


@lru_cache(maxsize=1)
def _compiled() -> dict:
    """The compiled catalog's entries ({} when the file is missing or unreadable: every file parses as YAML)."""
    try:
        d = json.loads((PACKAGE_DIR / "catalog" / COMPILED_FILE).read_bytes())
    except (OSError, ValueError):
        return {}
    files = d.get("files") if isinstance(d, dict) else None
    return files if isinstance(files, dict) else {}


def _catalog_key(path) -> str | None:
    """`path` relative to the catalog folder (posix), or None for a file outside it."""
    try:
        return Path(path).resolve().relative_to(PACKAGE_DIR / "catalog").as_posix()
    except (TypeError, ValueError, OSError):
        return None


def in_catalog(path) -> bool:
    """Whether `path` is a file of the package's catalog (whose edit makes its compiled entry stale)."""
    return _catalog_key(path) is not None


def _precompiled(path, raw: bytes):
    """The mapping compiled for catalog file `path` if its bytes `raw` are those it was compiled from, else None.
    A new object on every call, as a fresh parse would give."""
    entries = _compiled()
    if not entries:
        return None
    e = entries.get(_catalog_key(path))
    if not isinstance(e, list) or len(e) != 3 or e[1] != len(raw) or e[0] != zlib.crc32(raw):
        return None
    try:
        return json.loads(e[2])
    except (TypeError, ValueError):
        return None


def _too_long(e: ValueError) -> str:
    """A parser's ValueError in a few words: Python reads no integer of more than 4,300 digits from text."""
    return "a number of more than 4,300 digits" if "digits" in str(e) else e.__class__.__name__


def _parse_yaml(raw: bytes, where: str):
    """PyYAML's safe parse of a file's bytes (libyaml's C loader where PyYAML was built with it: ~10x faster than
    the pure-Python one), every failure as one SpecError line. PyYAML is imported here, on first need."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(raw, Loader=loader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark else ""
        raise SpecError(f"{where}: malformed YAML{at}") from None
    except RecursionError:
        raise SpecError(f"{where}: YAML nested too deeply") from None
    except ValueError as e:  # an integer of more than 4,300 digits (Python's int-from-text limit)
        raise SpecError(f"{where}: malformed YAML ({_too_long(e)})") from None


def read_yaml(path, where: str | None = None) -> dict:
    """Parse a YAML mapping (a catalog file from the compiled catalog when it is unchanged), turning every failure
    into one SpecError line."""
    where = where or str(path)
    raw = _read_bytes(path, where)
    data = _precompiled(path, raw)
    if data is None:
        data = _parse_yaml(raw, where)
    if not isinstance(data, dict):
        raise SpecError(f"{where}: expected a YAML mapping at the top level")
    return data


def compile_catalog(root: Path | None = None) -> dict:
    """The compiled catalog (see COMPILED_FILE) of every YAML file under `root` (default: the package's catalog),
    in path order. A file whose parse would not come back the same through JSON (a date, a non-text key, a NaN) is
    left out: it keeps being parsed from its YAML."""
    root = Path(root) if root is not None else _catalog_dir()
    files = {}
    for f in sorted(root.rglob("*.yaml")):
        raw = f.read_bytes()
        data = _parse_yaml(raw, str(f))
        try:
            text = json.dumps(data, sort_keys=False, separators=(",", ":"))  # .inf as Infinity, read back as such
        except (TypeError, ValueError):
            continue
        if json.loads(text) != data:  # a NaN (never equal to itself) ends here too
            continue
        files[f.relative_to(root).as_posix()] = [zlib.crc32(raw), len(raw), text]
    return {"about": "chalk's catalog YAML parsed ahead of time (scripts/compile_catalog.py); each entry: "
                     "[CRC-32, size in bytes, the parse as JSON] of the file it was compiled from",
            "files": files}


def write_compiled_catalog(root: Path | None = None) -> Path:
    """Write `compile_catalog(root)` to `root`/COMPILED_FILE and forget the loaded one. Returns the path."""
    root = Path(root) if root is not None else _catalog_dir()
    out = root / COMPILED_FILE
    from chalk.specs.files import atomic_write

    atomic_write(out, json.dumps(compile_catalog(root), indent=0, sort_keys=False) + "\n", "compiled catalog")
    _compiled.cache_clear()
    return out


def read_json(path, where: str | None = None) -> dict:
    """Parse a JSON object, turning every failure into one SpecError line."""
    where = where or str(path)
    text = _read_text(path, where)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise SpecError(f"{where}: malformed JSON at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise SpecError(f"{where}: JSON nested too deeply") from None
    except ValueError as e:  # an integer of more than 4,300 digits (Python's int-from-text limit)
        raise SpecError(f"{where}: malformed JSON ({_too_long(e)})") from None
    if not isinstance(data, dict):
        raise SpecError(f"{where}: expected a JSON object at the top level")
    return data


# --------------------------------------------------------------------------- chips and systems
@lru_cache(maxsize=None)
def _yaml_files(kind: str) -> dict[str, dict]:
    """Every `<id>.yaml` in one catalog folder (chips, systems), parsed once, keyed by id."""
    out = {}
    for f in sorted(_catalog_dir(kind).iterdir(), key=lambda p: p.name):
        if f.name.endswith(".yaml"):
            d = read_yaml(f, f"catalog {kind[:-1]} {f.name}")
            out[str(d.get("id", f.name[:-5]))] = d
    return out


def _chip_files() -> dict[str, dict]:
    return _yaml_files("chips")


def _system_files() -> dict[str, dict]:
    return _yaml_files("systems")


def chip_ids() -> list[str]:
    return list(_chip_files())


def system_ids() -> list[str]:
    return list(_system_files())


@by_identity(maxsize=64)
def _alias_map(files: dict[str, dict]) -> dict[str, str]:
    """lower-case id or alias -> id; kept per catalog folder (`_yaml_files` parses each once), so that resolving a
    name does not rebuild it (do not modify the returned map)."""
    return _build_alias_map(files)


def _build_alias_map(files: dict[str, dict]) -> dict[str, str]:
    m = {}
    for cid, d in files.items():
        m[cid.lower()] = cid
        for a in spec_str_list(d.get("aliases"), f"{cid}: aliases"):
            m[a.lower()] = cid
    return m


@lru_cache(maxsize=None)
def _file_by_id(kind: str, cid: str) -> dict | None:
    """`<kind>/<cid>.yaml` (chips, systems) parsed alone when it holds id `cid`, else None.

    A chip or system named by its id, the usual case, then needs no other catalog file: `chalk estimate -H h100-sxm`
    reads the chip's and its system's files instead of all thirty-two (issue 12). Ids are unique across chips and
    systems and no alias is an id (tests/test_catalog_chips.py), so the answer is the one the alias map would give.
    """
    if not cid or any(c in cid for c in "/\\") or cid.startswith("."):
        return None
    f = _catalog_dir(kind) / f"{cid}.yaml"
    if not _probe(f, "is_file"):
        return None
    d = read_yaml(f, f"catalog {kind[:-1]} {f.name}")
    return d if str(d.get("id", cid)) == cid else None


def _find(kind: str, name: str) -> tuple[str, dict] | None:
    """(id, parsed YAML) of the chip or system (`kind`: chips, systems) called `name`, id or alias in any case."""
    key = str(name).lower()
    d = _file_by_id(kind, key)
    if d is not None:
        return key, d
    files = _yaml_files(kind)
    cid = _alias_map(files).get(key)
    return (cid, files[cid]) if cid is not None else None


@lru_cache(maxsize=None)
def load_chip(name: str) -> Chip:
    """A catalog chip by id or alias."""
    found = _find("chips", name)
    if found is None:
        files = _chip_files()
        raise UnknownNameError("chip", name, _alias_map(files), files)
    return Chip.from_yaml_dict(found[1], f"catalog chip {found[0]}")


@lru_cache(maxsize=None)
def load_system(name: str) -> System:
    """A catalog system by id or alias."""
    found = _find("systems", name)
    if found is None:
        files = _system_files()
        raise UnknownNameError("system", name, _alias_map(files), files)
    return _system_from_dict(found[1], f"catalog system {found[0]}")


def _system_from_dict(d: dict, where: str) -> System:
    chip = d.get("chip")
    if isinstance(chip, dict):
        chip = Chip.from_yaml_dict(chip, f"{where}: chip")
    elif isinstance(chip, str):
        chip = load_chip(chip)
    else:
        raise SpecError(f"{where}: missing field 'chip' (a chip id or a chip mapping)")
    n = spec_int(d.get("chips"), f"{where}: chips (chips in the scale-up domain)", minimum=1, maximum=MAX_GPUS)
    try:
        return System(id=spec_str(d.get("id"), f"{where}: id", default=chip.id),
                      name=spec_str(d.get("name"), f"{where}: name", default=str(d.get("id", chip.id))), chip=chip,
                      chips=n, kind=spec_str(d.get("kind"), f"{where}: kind", default="node"),
                      host_chips=spec_int(d.get("host_chips", 0), f"{where}: host_chips (chips per host)", minimum=0,
                                          maximum=MAX_GPUS),
                      aliases=tuple(a.lower() for a in spec_str_list(d.get("aliases"), f"{where}: aliases")),
                      sources=spec_str_map(d.get("sources"), f"{where}: sources"),
                      notes=spec_str(d.get("notes"), f"{where}: notes"))
    except ValueError as e:
        from chalk.specs.hardware import _first_line

        raise SpecError(f"{where}: {_first_line(e)}") from None


def _chip_yaml_system(d: dict, where: str) -> System:
    """A chip YAML as `--hardware`: the chip in its scale-up domain.

    The domain is the file's own `chips:` (chips per scale-up domain, linked by `scaleup_link` at
    `scaleup_gb_per_s_bidir`) when given; else that of its `default_system` when the catalog has it (an
    unchanged copy of a catalog chip's YAML answers like the catalog id); else one chip.
    """
    chip = Chip.from_yaml_dict(d, where)
    found = _find("systems", chip.default_system) if chip.default_system else None
    if "chips" not in d and found is not None:
        base = load_system(found[0])
        same = base.chip.id == chip.id
        return _validated_system(where, id=base.id if same else chip.id, name=base.name if same else chip.name,
                                 chip=chip, chips=base.chips, kind=base.kind, host_chips=base.host_chips,
                                 sources=dict(base.sources))
    n = spec_int(d.get("chips", 1), f"{where}: chips (chips in the scale-up domain)", minimum=1, maximum=MAX_GPUS)
    return _validated_system(where, id=chip.id, name=chip.name, chip=chip, chips=n, kind="chip" if n == 1 else "node")


def _validated_system(where: str, **kw) -> System:
    try:
        return System(**kw)
    except ValueError as e:
        from chalk.specs.hardware import _first_line

        raise SpecError(f"{where}: {_first_line(e)}") from None


def _looks_like_path(name: str) -> bool:
    return any(s in name for s in ("/", "\\")) or name.endswith((".yaml", ".yml", ".json"))


def _probe(path: Path, test: str) -> bool:
    """`path.is_file()` / `.is_dir()` / `.exists()`, False for a name the OS cannot look up (too long, NUL)."""
    try:
        return getattr(path, test)()
    except (OSError, ValueError):
        return False


def resolve_hardware(name: str) -> System:
    """`--hardware`: a chip id (its default system), a system id, or a path to a chip/system YAML."""
    name = str(name).strip()
    if _looks_like_path(name) or _probe(Path(name), "is_file"):
        d = read_yaml(name)
        if "chip" in d:
            return _system_from_dict(d, name)
        return _chip_yaml_system(d, name)
    key = name.lower()
    found = _find("systems", key) if _file_by_id("chips", key) is None else None  # a chip id is no system's
    if found is not None:
        return load_system(found[0])
    found = _find("chips", key)
    if found is not None:
        chip = load_chip(found[0])
        if chip.default_system:
            return load_system(chip.default_system)
        return System(id=chip.id, name=chip.name, chip=chip, chips=1, kind="chip")
    chips, systems = _alias_map(_chip_files()), _alias_map(_system_files())
    raise UnknownNameError("hardware", name, {**chips, **systems}, [*_chip_files(), *_system_files()])


# --------------------------------------------------------------------------- models
@lru_cache(maxsize=1)
def _model_dirs() -> dict[str, object]:
    out = {}
    for d in sorted(_catalog_dir("models").iterdir(), key=lambda p: p.name):
        if d.is_dir() and (d / "config.json").is_file():
            out[d.name] = d
    return out


@lru_cache(maxsize=1)
def _model_aliases() -> dict[str, str]:
    m = {}
    for mid, d in _model_dirs().items():
        m[mid.lower()] = mid
        meta = d / "meta.yaml"
        if meta.is_file():
            md = read_yaml(meta, f"catalog model {mid}/meta.yaml")
            for a in spec_str_list(md.get("aliases"), f"catalog model {mid}/meta.yaml: aliases") + \
                    spec_str_list(md.get("hf_repo"), f"catalog model {mid}/meta.yaml: hf_repo"):
                m[a.lower()] = mid
    return m


def _model_id(name: str) -> str | None:
    """The catalog id of model `name` (id, alias or HF repo name, any case), or None. An id is looked up among
    the folders without reading every model's meta.yaml (issue 12: start-up time)."""
    key = name.lower()
    return key if key in _model_dirs() else _model_aliases().get(key)


def as_model(model) -> ModelSpec:
    """`model` itself if it is a ModelSpec, else `load_model(model)` (id, alias, HF repo name or path)."""
    return model if isinstance(model, ModelSpec) else load_model(str(model))


def as_system(hardware) -> System:
    """`hardware` itself if it is a System, else `resolve_hardware(hardware)` (chip, system or YAML path)."""
    return hardware if isinstance(hardware, System) else resolve_hardware(str(hardware))


def model_ids() -> list[str]:
    return list(_model_dirs())


@lru_cache(maxsize=None)
def load_model(name: str) -> ModelSpec:
    """`--model`: a catalog id or alias, a path to a config.json, or a folder holding one."""
    name = str(name).strip()
    p = Path(name)
    mid = _model_id(name)
    in_catalog = mid is not None and not _probe(p, "exists")
    if not in_catalog and (_looks_like_path(name) or _probe(p, "exists")):
        if _probe(p, "is_dir"):
            p = p / "config.json"
        cfg = read_json(p)
        meta_path = p.parent / "meta.yaml"
        meta = read_yaml(meta_path) if _probe(meta_path, "is_file") else {}
        mid = spec_str(meta.get("id"), f"{meta_path}: id") or (p.parent.name if p.name == "config.json" else p.stem)
        return model_from_config(cfg, id=mid, source=str(p), meta=meta)
    if mid is None:
        raise UnknownNameError("model", name, _model_aliases(), _model_dirs())
    d = _model_dirs()[mid]
    meta_path = d / "meta.yaml"
    meta = read_yaml(meta_path, f"catalog model {mid}/meta.yaml") if meta_path.is_file() else {}
    cfg = read_json(d / "config.json", f"catalog model {mid}/config.json")
    return model_from_config(cfg, id=mid, source=spec_str(meta.get("source"), f"{mid}/meta.yaml: source"), meta=meta,
                             from_catalog=True)


def catalog_meta(model) -> dict:
    """The catalog meta.yaml of `model` (a ModelSpec) where it is the catalog's own entry, else {}: a config loaded
    from a path is the user's checkpoint, whatever its folder is named (QA: a 70B config in a folder named
    llama-3.1-8b launched the catalog's 8B FP8 checkpoint)."""
    return model_meta(model.id) if getattr(model, "from_catalog", False) else {}


def model_meta(mid: str) -> dict:
    d = _model_dirs().get(mid)
    if d is None or not (d / "meta.yaml").is_file():
        return {}
    return read_yaml(d / "meta.yaml", f"catalog model {mid}/meta.yaml")
