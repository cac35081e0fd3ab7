"""The snapshot store: every chat turn recorded once, readable afterwards.

``base`` holds the interfaces; ``sqlite`` the embedded writer; ``read`` the
queries the CLI and the ``/handoff/v1`` API use.
"""
