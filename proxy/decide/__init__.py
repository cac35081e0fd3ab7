"""Decide: windows, token counts and budgets; migrate or compress, and with what."""
