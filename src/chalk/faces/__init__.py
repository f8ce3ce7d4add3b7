"""Faces: CLI, plots, web, report. Thin; no formulas live here."""
