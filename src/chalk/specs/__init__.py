"""Specs: what a chip, a system, a model, a precision and a workload are; catalog loading."""
