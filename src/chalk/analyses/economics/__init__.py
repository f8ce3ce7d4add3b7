"""Money and energy: API prices read as rooflines, $/M tokens, joules per token."""
