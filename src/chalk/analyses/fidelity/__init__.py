"""Predictions against measured results: validation, cross-validation, calibration and its fit cache."""
