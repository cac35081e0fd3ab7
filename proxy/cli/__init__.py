"""The ``handoff`` command line: one module per command."""
