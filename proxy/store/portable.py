"""The portable export format (``schemas/portable-v2.schema.json``): build, upgrade, validate.

A document holds one conversation: its final history (the last turn's history
and reply) with the time each message first appeared, and every turn's record
(decision, forwarded messages as keep/insert ops, reply, usage…). A turn's
history is ``messages[:history_length]``, or its own ``history`` list in the rare
case it is not a prefix of the final one. Pure functions; validation is by hand
(no jsonschema dependency) and names the offending field.

Versions: 1, then 2 added ``source`` (where an imported conversation came from:
``{"kind", "id"}``, null for one handoff recorded). :func:`upgrade` brings an older
document to the current version; a newer one is refused with what to do.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from proxy.store.errors import InvalidDocument

FORMAT = "handoff.portable"
FORMAT_VERSION = 2
EXPORTER = "handoff 0.1.0"
IMPORTED = "import:"
"""A session's name (hint) that starts so was imported: ``import:<kind>:<id>``."""


def build(
    info: Mapping[str, Any],
    turns: Sequence[Mapping[str, Any]],
    now: float,
    memory: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A portable document from a reader's session summary, full turns and memory."""
    final = _final(turns)
    stamps = _first_seen(turns, len(final))
    system = next((m.get("content") for m in final if m.get("role") == "system"), None)
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "exporter": EXPORTER,
        "exported_at": dt.datetime.fromtimestamp(now, dt.UTC).isoformat(),
        "conversation_id": info["id"],
        "workspace": info["workspace"],
        "name": info.get("name"),
        "source": source_of(info.get("name")),
        "title": info.get("title") or "",
        "parent_conversation_id": info.get("parent_session"),
        "models": sorted({t["model"] for t in turns}),
        "system_prompt": system if isinstance(system, str) else None,
        "messages": [{"message": m, "timestamp": s} for m, s in zip(final, stamps, strict=True)],
        "turns": [_turn(t, final) for t in turns],
        "memory": None if memory is None else {k: memory[k] for k in MEMORY_FIELDS},
    }


def source_of(name: Any) -> dict[str, str] | None:
    """``{"kind", "id"}`` for an imported session's name, else None."""
    if not isinstance(name, str) or not name.startswith(IMPORTED):
        return None
    kind, _, source_id = name.removeprefix(IMPORTED).partition(":")
    return {"kind": kind, "id": source_id}


def upgrade(doc: Any) -> Any:
    """``doc`` brought to the current version (unchanged if it is not a document of an
    older version; :func:`validate` says what is wrong with it)."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        return doc
    version = doc.get("format_version")
    if version == 1:
        doc = {**doc, "format_version": 2, "source": source_of(doc.get("name"))}
    return doc


MEMORY_FIELDS = ("memory", "text", "source", "reason", "turns", "updated_at")


def _final(turns: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    if not turns:
        return []
    last = turns[-1]
    return [*last["history"], *([last["reply"]] if last["reply"] is not None else [])]


def _first_seen(turns: Sequence[Mapping[str, Any]], n: int) -> list[float | None]:
    stamps: list[float | None] = [None] * n
    for t in turns:
        hist_len = len(t["history"])
        for i in range(min(hist_len, n)):
            stamps[i] = stamps[i] if stamps[i] is not None else t["started_at"]
        if t["reply"] is not None and hist_len < n and stamps[hist_len] is None:
            stamps[hist_len] = t["started_at"] + t["latency_ms"] / 1000
    return stamps


def _turn(t: Mapping[str, Any], final: Sequence[Any]) -> dict[str, Any]:
    history = t["history"]
    ops = t["forwarded_ops"]
    fwd = t["forwarded"]
    out: dict[str, Any] = {
        "turn": t["turn"],
        "started_at": t["started_at"],
        "model": t["model"],
        "upstream": t["upstream"],
        "status": t["status"],
        "latency_ms": t["latency_ms"],
        "streamed": t["streamed"],
        "cancelled": t["cancelled"],
        "history_length": len(history),
        "reply": t["reply"],
        "decision": t["decision"],
        "forwarded": None if ops is None else _ops_out(ops, fwd),
        "usage": t["usage"],
        "finish_reason": t["finish_reason"],
        "error": t["error"],
        "request_params": t["request_params"],
        "handoff_from": t["handoff"]["from"] if t["handoff"] else None,
    }
    if list(final[: len(history)]) != list(history):
        out["history"] = history
    return out


def _ops_out(ops: Sequence[Any], forwarded: Sequence[Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    pos = 0
    for op in ops:
        if isinstance(op, list):
            out.append({"keep": list(op)})
            pos += op[1]
        else:
            out.append({"insert": forwarded[pos]})
            pos += 1
    return out


def turn_history(doc: Mapping[str, Any], turn: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A validated document turn's full original history."""
    if "history" in turn:
        return list(turn["history"])
    return [m["message"] for m in doc["messages"][: turn["history_length"]]]


def turn_forwarded(
    turn: Mapping[str, Any], history: Sequence[dict[str, Any]]
) -> list[dict[str, Any]] | None:
    """A validated document turn's forwarded messages (None: sent unchanged)."""
    if turn["forwarded"] is None:
        return None
    out: list[dict[str, Any]] = []
    for op in turn["forwarded"]:
        if "keep" in op:
            start, count = op["keep"]
            out.extend(history[start : start + count])
        else:
            out.append(op["insert"])
    return out


# -- validation --------------------------------------------------------------

Check = Callable[[Any, str], None]


def _type(*types: type, nullable: bool = False, name: str = "") -> Check:
    def check(v: Any, where: str) -> None:
        if v is None and nullable:
            return
        ok = isinstance(v, types) and not (isinstance(v, bool) and bool not in types)
        if not ok:
            want = name or " or ".join(t.__name__ for t in types)
            raise InvalidDocument(
                where, f"expected {want}{' or null' if nullable else ''}, got {type(v).__name__}"
            )

    return check


_STR, _NUM, _INT = _type(str, name="string"), _type(int, float, name="number"), _type(int)
_BOOL, _OBJ = _type(bool, name="boolean"), _type(dict, name="object")
_OSTR, _ONUM = (
    _type(str, nullable=True, name="string"),
    _type(int, float, nullable=True, name="number"),
)
_OOBJ, _LIST = _type(dict, nullable=True, name="object"), _type(list, name="array")

_TURN_FIELDS: dict[str, Check] = {
    "turn": _INT,
    "started_at": _NUM,
    "model": _STR,
    "upstream": _STR,
    "status": _INT,
    "latency_ms": _NUM,
    "streamed": _BOOL,
    "cancelled": _BOOL,
    "history_length": _INT,
    "reply": _OOBJ,
    "decision": _OOBJ,
    "usage": _OOBJ,
    "finish_reason": _OSTR,
    "error": _OOBJ,
    "request_params": _OBJ,
    "handoff_from": _OSTR,
}
_DECISION_FIELDS: dict[str, Check] = {
    "action": _STR,
    "window": _type(int, nullable=True),
    "budget": _type(int, nullable=True),
    "tokens": _type(int, nullable=True),
    "forwarded_tokens": _type(int, nullable=True),
    "exact": _BOOL,
    "policies": _LIST,
    "steps": _LIST,
}


def _fields(obj: Mapping[str, Any], spec: Mapping[str, Check], where: str, optional: bool) -> None:
    for key, check in spec.items():
        if key not in obj:
            if optional:
                continue
            raise InvalidDocument(f"{where}.{key}".lstrip("."), "required field is missing")
        check(obj[key], f"{where}.{key}".lstrip("."))


def _message(m: Any, where: str) -> None:
    _OBJ(m, where)
    if not isinstance(m.get("role"), str):
        raise InvalidDocument(f"{where}.role", "a message needs a string role")


def validate(doc: Any) -> dict[str, Any]:
    """``doc`` if it is a valid portable v1 document, else :class:`InvalidDocument`."""
    _OBJ(doc, "(document)")
    if doc.get("format") != FORMAT:
        raise InvalidDocument("format", f"expected {FORMAT!r}, got {doc.get('format')!r}")
    version = doc.get("format_version")
    if version != FORMAT_VERSION:
        newer = isinstance(version, int) and version > FORMAT_VERSION
        hint = "; upgrade handoff to read it" if newer else " (older ones: portable.upgrade)"
        raise InvalidDocument(
            "format_version", f"this handoff reads version {FORMAT_VERSION}, got {version!r}{hint}"
        )
    top = {
        "exporter": _STR,
        "exported_at": _STR,
        "conversation_id": _STR,
        "workspace": _STR,
        "title": _STR,
        "models": _LIST,
        "system_prompt": _OSTR,
        "messages": _LIST,
        "turns": _LIST,
    }
    _fields(doc, top, "", optional=False)
    _fields(doc, {"name": _OSTR, "parent_conversation_id": _OSTR}, "", optional=True)
    if "source" not in doc:
        raise InvalidDocument("source", "required field is missing")
    _source_check(doc["source"])
    _memory_check(doc.get("memory"))
    for i, m in enumerate(doc["messages"]):
        _OBJ(m, f"messages[{i}]")
        if "message" not in m:
            raise InvalidDocument(f"messages[{i}].message", "required field is missing")
        _message(m["message"], f"messages[{i}].message")
        _ONUM(m.get("timestamp"), f"messages[{i}].timestamp")
    if not doc["turns"]:
        raise InvalidDocument("turns", "a conversation needs at least one turn")
    for i, t in enumerate(doc["turns"]):
        _turn_check(doc, t, f"turns[{i}]")
    return dict(doc)


def _source_check(source: Any) -> None:
    if source is None:
        return
    _OBJ(source, "source")
    _fields(source, {"kind": _STR, "id": _STR}, "source", optional=False)


def _memory_check(mem: Any) -> None:
    if mem is None:
        return
    _OBJ(mem, "memory")
    spec = {
        "memory": _OBJ, "text": _STR, "source": _STR, "reason": _STR,
        "turns": _INT, "updated_at": _NUM,
    }  # fmt: skip
    _fields(mem, spec, "memory", optional=False)


def _turn_check(doc: Mapping[str, Any], t: Any, where: str) -> None:
    _OBJ(t, where)
    _fields(t, _TURN_FIELDS, where, optional=False)
    if t["reply"] is not None:
        _message(t["reply"], f"{where}.reply")
    if t["decision"] is not None:
        _fields(t["decision"], {"action": _STR}, f"{where}.decision", optional=False)
        _fields(t["decision"], _DECISION_FIELDS, f"{where}.decision", optional=True)
    if "history" in t:
        _LIST(t["history"], f"{where}.history")
        for j, m in enumerate(t["history"]):
            _message(m, f"{where}.history[{j}]")
        n = len(t["history"])
    else:
        n = len(doc["messages"])
    if not 0 <= t["history_length"] <= n:
        raise InvalidDocument(f"{where}.history_length", f"must be between 0 and {n}")
    if t.get("forwarded") is not None:
        _LIST(t["forwarded"], f"{where}.forwarded")
        for j, op in enumerate(t["forwarded"]):
            _op_check(op, f"{where}.forwarded[{j}]", t["history_length"])


def _op_check(op: Any, where: str, n: int) -> None:
    _OBJ(op, where)
    if "keep" in op:
        keep = op["keep"]
        if not (isinstance(keep, list) and len(keep) == 2 and all(type(x) is int for x in keep)):
            raise InvalidDocument(f"{where}.keep", "expected [start, count] integers")
        if keep[0] < 0 or keep[1] < 1 or keep[0] + keep[1] > n:
            raise InvalidDocument(f"{where}.keep", f"range outside the history (0..{n})")
    elif "insert" in op:
        _message(op["insert"], f"{where}.insert")
    else:
        raise InvalidDocument(where, 'expected {"keep": [start, count]} or {"insert": message}')
