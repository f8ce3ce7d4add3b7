"""`chalk lecture` without --json: walk a reader through the deductions in prose, numbers from chalk."""

from __future__ import annotations

from chalk.faces.fmt import num

SECTIONS = [
    ("roofline", "1. The roofline: why batch size is everything",
     "A decode step takes at least the longer of two times: the compute time, batch x active parameters x 2 / "
     "FLOP/s (eq. 2), and the memory time, all weights plus every sequence's KV cache over HBM bandwidth (eq. 3). "
     "Setting weight-fetch time equal to weight-multiply time gives the critical batch (eq. 5): the hardware's "
     "FLOP/s per byte/s times the model's sparsity."),
    ("batch-train", "2. The train that departs every ~20 ms",
     "A server picks a batch and runs it on a fixed schedule; requests board the next departure."),
    ("parallel", "3. Racks and pipelines",
     "MoE layers want their all-to-all inside one scale-up domain; pipelining splits weights but not KV."),
    ("serving", "4. Fast and slow modes", "Per-user speed is bought with smaller batches, at a price."),
    ("pricing", "5. What API prices reveal",
     "Price sheets encode hardware facts: output/input ratios, long-context cliffs, cache tiers."),
    ("training", "6. Training, RL and inference pools", "Why models are trained far past Chinchilla."),
    ("reversible", "7. Reversible networks", "Trading compute for memory, the other way round from the KV cache."),
]


#: section names analyses use, mapped onto the lecture's order above
ALIASES = {"moe rack layout": "parallel", "pipeline parallelism": "parallel", "pipeline": "parallel",
           "batch size, latency and cost": "serving", "fast mode": "serving"}


def _fmt(v, unit: str) -> str:
    """A value and its unit as printed through rich: escaped, so a unit such as '[reversible/standard ...]' is text,
    not a style tag rich swallows (QA 2026-11-28)."""
    from rich.markup import escape

    if isinstance(v, (int, float)):
        return escape(f"{num(v)} {unit}".strip())
    if isinstance(v, list):
        return escape("[" + ", ".join(num(x) if isinstance(x, (int, float)) else str(x) for x in v)
                      + f"] {unit}".rstrip())
    return escape(f"{v} {unit}".strip()) if v is not None else "n/a"


def render(claims, console) -> None:
    by_section: dict[str, list] = {}
    for c in claims:
        key = (c.section or "other").lower()
        by_section.setdefault(ALIASES.get(key, key), []).append(c)
    console.print("[bold]The math behind how LLMs are trained and served — replayed by chalk[/bold]\n")
    known = {s for s, _, _ in SECTIONS}
    order = SECTIONS + [(s, s.title(), "") for s in by_section if s not in known]
    for key, title, intro in order:
        items = by_section.get(key)
        if not items:
            continue
        console.print(f"[bold underline]{title}[/bold underline]")
        if intro:
            console.print(intro + "\n")
        grouped = [c for c in items if "." in c.id and c.id.split(".")[0] in ("dense_critical_batch", "hbm_drain_time_ms")]
        for prefix, label in (("dense_critical_batch", "Critical batch of a dense model, per chip"),
                              ("hbm_drain_time_ms", "Time to read all of HBM once, per chip")):
            group = [c for c in grouped if c.id.startswith(prefix + ".")]
            if group:
                console.print(f"[bold]{label}[/bold] (lecture: {_fmt(group[0].lecture_value, '')}): "
                              + ", ".join(f"{c.id.split('.', 1)[1]} {num(c.value)}" for c in group)
                              + f" {group[0].unit}.")
                console.print(f"  {group[0].explanation}\n")
        for c in items:
            if c in grouped:
                continue
            mark = {True: "[green]within the lecture's range[/green]", False: "[yellow]outside the lecture's range"
                    "[/yellow]", None: ""}[c.within_lecture_range]
            console.print(f"[bold]{c.id}[/bold]: chalk {_fmt(c.value, c.unit)}; lecture {_fmt(c.lecture_value, '')}"
                          f" {mark}")
            console.print(f"  {c.explanation}")
            console.print(f"  [dim]Assumes: {c.assumptions}[/dim]\n")
