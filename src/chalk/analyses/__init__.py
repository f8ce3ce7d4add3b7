"""Analyses: compose equations into typed answers."""
