"""Which checkpoint an engine loads to run a model at the precision a plan sized, and the flags that ask for it.

A deployment sized at a precision must load weights stored at that precision (or quantise them on load), or the
launch does not match the sizing: a BF16 70B checkpoint on one GPU sized for FP4 does not even fit. The choice,
in order:

1. the user's own checkpoint (`--checkpoint REPO_OR_PATH`), loaded as given;
2. the model's own checkpoint when it stores that precision (a quantised config such as a GPTQ one loads as given);
3. a known checkpoint at that precision (`checkpoints:` in the model's catalog meta.yaml, each with its source);
4. the engine's on-load quantisation of the model's own checkpoint (`catalog/launch.yaml`: vLLM and SGLang
   quantise BF16 weights to FP8 with `--quantization fp8`);
5. otherwise a placeholder the user must fill, said so in a note: never a checkpoint of another precision.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from chalk.errors import InputError
from chalk.specs.precision import canonical

#: How a checkpoint was chosen (`Checkpoint.how`).
HOW = ("user", "native", "catalog", "on_load", "placeholder")
_REPO = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass(frozen=True)
class Checkpoint:
    """What the engine loads (`repo`: a Hugging Face repo id, a folder, or a placeholder to fill), the precision
    its weights run at once loaded (`precision`; None where unknown: a user's checkpoint), how it was chosen, the
    extra engine flags it needs (`flags`: (flag, value or None) pairs), where its name comes from, and a note."""

    repo: str
    precision: str | None
    how: str
    flags: tuple[tuple[str, str | None], ...] = ()
    source: str = ""
    note: str | None = None

    @property
    def placeholder(self) -> bool:
        return self.how == "placeholder"

    @property
    def local_path(self) -> str | None:
        """The absolute path of a checkpoint that is a folder on this machine (a config given by its path, or a
        `--checkpoint` folder), which a container must mount to load; None for a repo id or a placeholder."""
        if self.placeholder:
            return None
        p = Path(self.repo)
        return str(p.resolve()) if p.is_dir() else None

    def argv(self) -> list[str]:
        out: list[str] = []
        for flag, value in self.flags:
            out += [flag] if value is None else [flag, value]
        return out

    def to_dict(self) -> dict:
        return {"repo": self.repo, "precision": self.precision, "how": self.how,
                "flags": [f if v is None else f"{f} {v}" for f, v in self.flags], "source": self.source,
                "placeholder": self.placeholder, "local_path": self.local_path, "note": self.note}


def launch_rules() -> dict:
    """The per-engine launch data of `catalog/launch.yaml`."""
    from chalk.specs.catalog import _catalog_dir, read_yaml

    return read_yaml(_catalog_dir() / "launch.yaml", "catalog launch.yaml")


def user_checkpoint(value: str) -> str:
    """A user's `--checkpoint`: a Hugging Face repo id (org/name) or an existing local file or folder (served from
    its folder). Anything else, a URL scheme included, is refused in one line."""
    text = str(value).strip()
    m = re.match(r"^([A-Za-z][\w+.-]*)://", text)
    if m:
        raise InputError(f"unknown checkpoint scheme {m.group(1)!r}: give a Hugging Face repo id (org/name) or a "
                         f"local folder, got {text[:60]!r}")
    p = Path(text)
    if text and p.exists():
        return str(p.parent if p.is_file() else p)
    if not _REPO.match(text):
        raise InputError(f"--checkpoint must be a Hugging Face repo id (org/name) or an existing folder, "
                         f"got {text[:60]!r}")
    return text


def checkpoint_quant_method(checkpoint: str | None) -> str | None:
    """The quantisation method (`quantization_config`'s, lower case) of a user's local checkpoint folder whose
    config.json declares one; None for a repo id, a folder without a readable config.json, or an unquantised one."""
    import json

    from chalk.specs.quantisation import quant_method

    cfg = Path(checkpoint) / "config.json" if checkpoint else None
    if cfg is None or not cfg.is_file():
        return None
    try:
        q = json.loads(cfg.read_text()).get("quantization_config")
    except (OSError, ValueError, AttributeError):
        return None
    m = quant_method(q) if isinstance(q, dict) else None
    return m.strip().lower() if isinstance(m, str) else None


def stored_precision(model) -> str | None:
    """The precision a model's own checkpoint stores its weights at (its quantised format where its config has
    one; MoE experts' where they differ, as gpt-oss's MXFP4); None for a model chalk cannot read."""
    fmt = getattr(model, "weight_format", None)
    if fmt is not None:
        return canonical(fmt.precision)
    p = getattr(model, "expert_precision", None) or getattr(model, "native_precision", None)
    return canonical(p) if p else None


def native_kv_cache(model, precision: str | None) -> str | None:
    """The KV-cache dtype an engine that follows the checkpoint (TensorRT-LLM's KvCacheConfig dtype 'auto') stores
    when it loads the model's own quantised checkpoint at `precision` (None: the checkpoint's own): the KV cache its
    quantisation config declares, else its activation dtype (DeepSeek-R1's FP8 and gpt-oss's MXFP4 checkpoints
    declare none: BF16). None where that is not known here: an unquantised checkpoint (whose KV is its dtype), or
    another checkpoint loaded for `precision` (chalk's 8-bit-beside-8-bit reading of it stands)."""
    fmt = getattr(model, "weight_format", None)
    own = stored_precision(model)
    if fmt is None or own is None or (precision and canonical(precision) != own):
        return None
    return fmt.kv_cache or fmt.dense_dtype


def checkpoint_for(model, base_repo: str, precision: str | None, engine: str, user: str | None = None,
                   known: dict | None = None, vendor: str | None = None) -> Checkpoint:
    """The checkpoint `engine` loads to run `model` (a ModelSpec, or None where unknown) at `precision` (None: the
    checkpoint's own). `base_repo`: the model's own checkpoint; `known`: its catalog `checkpoints` mapping (an entry
    with `vendors` serves only those chips' vendors); `user`: the user's own (`user_checkpoint`); `vendor`: the
    chip's vendor where known."""
    want = canonical(precision) if precision else None
    if user is not None:
        note = (f"the given checkpoint must store {want} weights, the precision this plan sized" if want else None)
        return Checkpoint(user_checkpoint(user), want, "user", source="given with --checkpoint", note=note)
    own = stored_precision(model) if model is not None else None
    if want is None or own is None or want == own:
        return Checkpoint(base_repo, want or own, "native", source="the model's own checkpoint")
    entry = (known or {}).get(want)
    if entry and vendor and entry.get("vendors") and vendor.lower() not in entry["vendors"]:
        entry = None  # e.g. NVIDIA's NVFP4 checkpoints on an AMD chip
    if entry:
        return Checkpoint(str(entry["repo"]), want, "catalog", source=str(entry.get("source", "")))
    rule = (launch_rules().get(engine, {}).get("on_load_quantization") or {}).get(want)
    if rule and own in rule.get("from", ()):
        return Checkpoint(base_repo, want, "on_load", flags=((rule["flag"], rule.get("value")),),
                          source=str(rule.get("source", "")),
                          note=f"{engine} quantises the {own} checkpoint to {want} while loading it")
    return Checkpoint(f"<{want}-checkpoint-of-{base_repo}>", want, "placeholder",
                      note=f"FILL IN: chalk knows no {want} checkpoint of {base_repo} that {engine} loads"
                           + (f" on {vendor} chips" if vendor else "") + ", and "
                           f"{engine} does not quantise {own} weights to {want} on load; replace the placeholder "
                           f"with a repo or folder storing {want} weights (or pass --checkpoint)")
