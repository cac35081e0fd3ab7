"""Ingress: a client's request body as handoff understands it (parse, validate, reuse)."""
