"""Helpers for the KML tests: run commands, read the store directly, compare dumps."""
from __future__ import annotations

from pathlib import Path

from nexus.api import Nexus
from nexus.store.protocol import ConceptHead


def run(nx: Nexus, command: str, parameters: dict | None = None, *, dry_run: bool = False,
        privileged: bool = False) -> dict:
    """The KIP response of one command (privileged runs go through `run_command`)."""
    if privileged:
        return nx.run_command(command, parameters or {}, privileged=True,
                              dry_run=dry_run)[0]
    request: dict = {"command": command}
    if parameters:
        request["parameters"] = parameters
    if dry_run:
        request["dry_run"] = True
    return nx.execute_kip(request)


def ok(nx: Nexus, command: str, parameters: dict | None = None, **kw) -> object:
    response = run(nx, command, parameters, **kw)
    assert "error" not in response, response
    return response["result"]


def err(nx: Nexus, command: str, code: str, parameters: dict | None = None, **kw) -> dict:
    """Assert `command` fails with `code` and leaves the store byte-for-byte unchanged."""
    before = raw_dump(nx)
    response = run(nx, command, parameters, **kw)
    assert "error" in response, response
    assert response["error"]["code"] == code, response
    assert raw_dump(nx) == before, "a failed command changed the store"
    return response["error"]


def raw_dump(nx: Nexus) -> dict:
    """Every table of the store (elements, indexes, counters, statistics, aux), as bytes."""
    return nx.store.dump()


def elements(nx: Nexus) -> dict[str, dict]:
    """Every element as {wire id: {type,name | subject,predicate,object, attributes,
    metadata}} — the logical view of the whole store."""
    out = {}
    with nx.store.read() as t:
        for n in t.elements():
            h = t.head(n)
            if type(h) is ConceptHead:
                key = f"C:{n}"
                item = {"type": t.symbol_text(h.type_id), "name": h.name}
            else:
                key = f"P:{n}:{t.symbol_text(h.predicate_id)}"
                item = {"subject": h.subject, "predicate": t.symbol_text(h.predicate_id),
                        "object": h.object}
            item["attributes"] = t.attributes(n)
            item["metadata"] = t.metadata(n)
            out[key] = item
    return out


def resolve(t, ref) -> int | None:
    """A concept ref {"type", "name"} or a link ref [s, "p", o] (recursively) → id."""
    if isinstance(ref, dict):
        sid = t.symbol_id(ref["type"])
        return None if sid is None else t.concept_id(sid, ref["name"])
    s, p, o = ref
    s, o, pid = resolve(t, s), resolve(t, o), t.symbol_id(p)
    if None in (s, o, pid):
        return None
    return t.link_id(s, pid, o)


def element(nx: Nexus, ref) -> dict | None:
    """{"id", "attributes", "metadata"} of the element `ref` names, or None."""
    with nx.store.read() as t:
        n = resolve(t, ref)
        if n is None:
            return None
        return {"id": n, "attributes": t.attributes(n), "metadata": t.metadata(n)}


def concept(nx: Nexus, type_: str, name: str) -> dict | None:
    return element(nx, {"type": type_, "name": name})


# The schema the KML tests start from, shared with the `.kiptest` cases (`@graph medical_schema`).
MEDICAL_SCHEMA = (Path(__file__).parents[1] / "cases" / "graphs" / "medical_schema.kip").read_text(
    encoding="utf-8")
