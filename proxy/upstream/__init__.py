"""Upstream: which server a model goes to, sending to it, and reading its answer."""
