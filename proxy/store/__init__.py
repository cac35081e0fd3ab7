"""The snapshot store: every chat turn recorded once, readable afterwards.

``base`` holds the interfaces; ``sqlite`` the embedded writer (``process`` runs it in a
child process, ``lock`` keeps it the only writer of its file, ``files`` keeps the files
private); ``read`` the queries the CLI and the ``/handoff/v1`` API use.
"""
