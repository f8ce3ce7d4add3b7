"""Fleets: `plan`, sizing against demand and traces, fleet replay, several chips asked one question."""
