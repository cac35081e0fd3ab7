"""The snapshot store: every chat turn recorded once, readable afterwards.

The modules, by job (the proxy sees only the interface; everything under "SQLite
writer" and "speed" is the SQLite store's own business):

Interface
    ``base`` (:class:`~proxy.store.base.Store`, what the proxy calls;
    :class:`~proxy.store.base.StoreReader`, what readers ask; ``TurnRecord``),
    ``configured`` (the store the settings ask for), ``errors``.
SQLite writer
    ``sqlite`` (the store: a queue and one writer thread), ``write`` (one turn, in the
    caller's transaction) with its steps ``placement`` (threading: which session, what a
    turn builds on), ``titles`` (a session's title: the person's own words, injected
    blocks skipped), ``turn_row`` and ``messages`` (each message once, by digest);
    ``canonical`` (digests and chain hashes), ``forwarded`` (what the model was sent, as
    edits of the history), ``indexer`` (full-text indexing and packing, in batches),
    ``calibration`` and ``side_rows`` (calibration, limits, summaries, memories and
    the reader, the same for both writers), ``redact``; ``db``, ``migrations`` (the
    schema below), ``lock`` (one writer per file), ``files`` (private permissions),
    ``ids``, ``retention``.
Speed (none changes what is stored: property tests hold the writer with ``prefix`` and
``known`` to the rows of the plain path, and the shipped bodies to the bodies sent)
    ``process``, ``writer_process``, ``wire``, ``shipped`` and ``progress`` (the writer in a
    process of its own, fed the request bodies as received); ``prefix`` (digests of recent
    histories), ``known`` and ``seen`` (answers the writer remembers instead of querying),
    ``pacing`` (giving the GIL way), ``checkpoint`` (WAL checkpoints off the commit path).
Readers
    ``read`` (:class:`~proxy.store.read.SqliteReader`, for the CLI and ``/handoff/v1``),
    ``history`` (a turn's messages from its incremental encoding), ``short_ids`` (the
    shortest unique start of an id, for tables), ``durations``, ``jsonout``,
    ``limits`` (the windows upstreams named and the engine planned with).
Memories
    ``memories`` (a session's structured memory, written in the writer's transaction,
    into the session it threaded the turn into; read per workspace) and ``remember`` (a
    memory built from a session's messages, refined by an LLM when one is configured).
Export and import
    ``export`` with ``portable`` (the portable JSON format, versioned, with its upgrade),
    ``markdown``, ``anthropic_messages`` (Messages bodies, both ways), ``responses_input``
    (OpenAI Responses bodies) and ``ollama_chat`` (``/api/chat`` bodies); ``importers``
    (other tools' saved conversations, one module per tool behind a registry); ``admin``
    (imports and prunes the CLI writes directly).

The SQLite schema (``migrations`` has every column):

``messages(id, hash, body)``
    Every message, and every request's other parameters, stored once: ``hash`` is the
    sha256 of its canonical JSON (sorted keys), ``body`` that JSON, zlib-packed on insert
    when smaller. Other tables refer to a message by ``id``.
``sessions(id, workspace, hint, title, parent_session, parent_turn, head_turn, …)``
    A conversation: a straight line of turns. ``hint`` is the client's own name for it
    (unique per workspace); a fork (an edited or regenerated turn) names the session
    and turn it left.
``turns(id, session_id, seq, base_turn, base_len, tail, history_hash, ext_hash,
reply_msg, params_msg, forwarded, decision, wire, choices, side_call, …)``
    One chat request. Its history is the first ``base_len`` messages of turn
    ``base_turn``'s history + reply, then ``tail`` (8-byte message ids), so a long
    conversation stores each message once and a few ids a turn. ``history_hash`` and
    ``ext_hash`` are the chain hashes of the history and of history + reply, by which
    a new request finds the turn it continues. ``wire`` is the format the client spoke,
    ``choices`` every choice of an ``n`` > 1 request (JSON), ``side_call`` a client's side
    call (a title, a compaction) kept in the session it named.
``session_aliases(alias, session_id)``
    An id the proxy announced in ``x-handoff-session`` for a turn the writer threaded
    into a session it knew by another id.
``session_messages(message_id, session_id)``
    Which sessions hold which message, so search finds forks too.
``messages_fts``, ``index_state(upto)``
    Full-text search (FTS5, when this SQLite has it), and how far it has indexed.
``memories(session_id, workspace, updated_at, turns, source, reason, body, text)``
    A session's memory: its sections as JSON (``body``) and the text recall inserts.
``calibration(key, value)``, ``writer_progress(writer, turns)``, ``_migrations(name)``
    Token-count calibration; the turns each writer process committed; the migrations
    applied.
"""
