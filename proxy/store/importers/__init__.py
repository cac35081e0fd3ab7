"""Other tools' saved conversations, turned into ordinary handoff sessions.

- ``registry``: kind → :class:`~proxy.store.importers.base.Importer` (a detector over a
  file's first bytes, and a reader), in detection order; walking a folder.
- ``base``: what a reader yields (conversations, portable documents, problems with
  their file and line) and the helpers readers share.
- one module a format: ``codex`` (rollouts), ``claude_code`` (transcripts),
  ``chatgpt`` (``conversations.json``), ``messages_json`` (OpenAI / Anthropic request
  JSON), ``portable_file`` (handoff's own export, upgraded).
- ``document``: a conversation as a portable document; ``load``: into the store through
  the import write path, once (keyed by source).
"""
