"""Protected targets (CONTRACT §7, spec Appendix 4 `KIP_3004`).

Owns which elements KML may not change, and how:

* the definition nodes of `$ConceptType`, `$PropositionType`, `Domain` and
  `belongs_to_domain`, and the `CoreSchema` domain node ("core nodes"): no change to their
  attributes or metadata, no delete;
* their `belongs_to_domain` links to `CoreSchema` ("core links"): no change, no delete;
* the actors `{type: "Person", name: "$self"}` and `{type: "Person", name: "$system"}`: no
  delete, and no setting or deleting of their `core_directives` attribute (their other
  attributes and their metadata evolve freely). Their identity (type + name) cannot change
  anyway: a head is immutable.

A *bare reference* is always fine: an UPSERT block that names a core node (or an entry that
re-states a core link) without SET ATTRIBUTES or its own WITH METADATA does not write it — no
outer metadata merge, no `_version` bump — and SET PROPOSITIONS from a core node may add new
links. So is an *identical re-application* (CONTRACT §10: re-applying the bundled capsules
or the ecosystem's RC11 capsules is never `KIP_3004`): a write of a protected element that
would leave it as it is — every attribute and metadata key it sets already holds an equal
JSON value (`same_json`; the engine's `_` keys are never set by KML) — writes nothing at
all (`unchanged`), and an actor's `core_directives` set to the value it already has is not
a change of them. Protection concerns existing elements: creating them (a database opened without the
bundled capsules) is ordinary KML. `ctx.privileged` (the capsule bootstrap) bypasses it all.
"""
from __future__ import annotations

from typing import Any, Callable

from ..errors import ErrorCode, KipError
from ..store.protocol import ConceptHead, LinkHead
from .writes import pos_kw

CORE_NODES = frozenset({
    ("$ConceptType", "$ConceptType"),
    ("$ConceptType", "$PropositionType"),
    ("$ConceptType", "Domain"),
    ("$PropositionType", "belongs_to_domain"),
    ("Domain", "CoreSchema"),
})
CORE_DEFINITIONS = CORE_NODES - {("Domain", "CoreSchema")}
ACTORS = frozenset({("Person", "$self"), ("Person", "$system")})
ACTOR_PROTECTED_ATTRIBUTE = "core_directives"
_HINT = ("Operation prohibited: the meta-type definitions, the CoreSchema domain and its "
         "belongs_to_domain links, and the identity and core_directives of $self/$system are "
         "immutable. Reference them without SET ATTRIBUTES / WITH METADATA; ordinary attributes "
         "of $self (persona, strengths, identity_narrative...) may evolve freely.")


def _key(txn: Any, head: ConceptHead) -> tuple[str, str]:
    return txn.symbol_text(head.type_id), head.name


def label(txn: Any, head: ConceptHead | LinkHead) -> str:
    if isinstance(head, ConceptHead):
        t, name = _key(txn, head)
        return f"{{type: {t!r}, name: {name!r}}}"
    return f"the {txn.symbol_text(head.predicate_id)!r} link P:{head.n}"


def is_core_node(txn: Any, head: Any) -> bool:
    return type(head) is ConceptHead and _key(txn, head) in CORE_NODES


def is_actor(txn: Any, head: Any) -> bool:
    return type(head) is ConceptHead and _key(txn, head) in ACTORS


def is_core_link(txn: Any, head: Any) -> bool:
    """A `belongs_to_domain` link from a core definition to the CoreSchema domain (the four
    links of the Genesis capsule). A link a user adds into CoreSchema — even from the
    CoreSchema node itself — is an ordinary link: what can be added can be deleted."""
    if type(head) is not LinkHead or txn.symbol_text(head.predicate_id) != "belongs_to_domain":
        return False
    subject, obj = txn.head(head.subject), txn.head(head.object)
    return (type(subject) is ConceptHead and _key(txn, subject) in CORE_DEFINITIONS
            and type(obj) is ConceptHead and _key(txn, obj) == ("Domain", "CoreSchema"))


def is_immutable(txn: Any, head: Any) -> bool:
    """Core node or core link: no attribute or metadata change at all."""
    return is_core_node(txn, head) or is_core_link(txn, head)


def is_protected(txn: Any, head: Any) -> bool:
    """Core node, core link or actor: an element `KIP_3004` guards in some way."""
    return is_immutable(txn, head) or is_actor(txn, head)


def same_json(a: Any, b: Any) -> bool:
    """JSON equality: same JSON type and value. Numbers compare by value (`1` and `1.0` are
    the same JSON number), booleans are not numbers, object key order does not matter."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(v, b[k]) for k, v in a.items())
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _holds(stored: dict, values: dict | None) -> bool:
    return not values or all(k in stored and same_json(v, stored[k]) for k, v in values.items())


def unchanged(txn: Any, n: int, attributes: dict | None, metadata: dict | None) -> bool:
    """Whether setting `attributes` and merging `metadata` into element `n` would leave it
    exactly as it is (every key already holds an equal value)."""
    return _holds(txn.attributes(n), attributes) and _holds(txn.metadata(n), metadata)


def _refuse(message: str, pos: Any = None) -> KipError:
    return KipError(ErrorCode.KIP_3004, message, _HINT, **pos_kw(pos))


def check_write(ctx: Any, head: Any, attributes: dict | None, pos: Any = None) -> None:
    """An UPSERT is about to write `head` (set `attributes`, merge metadata)."""
    if ctx.privileged:
        return
    txn = ctx.txn
    if is_immutable(txn, head):
        raise _refuse(f"Cannot change {label(txn, head)}: it is a protected system "
                      f"definition", pos)
    if attributes and ACTOR_PROTECTED_ATTRIBUTE in attributes and is_actor(txn, head):
        stored = txn.attributes(head.n).get(ACTOR_PROTECTED_ATTRIBUTE)
        if not same_json(attributes[ACTOR_PROTECTED_ATTRIBUTE], stored):
            raise _refuse(f"Cannot set core_directives of {label(txn, head)}: an actor's "
                          f"core directives are protected (only the value they already "
                          f"have may be re-stated)", pos)


def write_checker(ctx: Any, pos: Any = None) -> Callable[[Any, dict | None], None]:
    """`check_write` for the many targets of one command (an UPDATE sweep): a link whose
    predicate is not `belongs_to_domain` is never protected (only core links are, and
    actors are concepts), which this decides by symbol id, without a lookup per link."""
    if ctx.privileged:
        return lambda head, attributes: None
    core = ctx.txn.symbol_id("belongs_to_domain")

    def check(head: Any, attributes: dict | None) -> None:
        if type(head) is LinkHead and head.predicate_id != core:
            return
        check_write(ctx, head, attributes, pos)
    return check


def check_remove_keys(ctx: Any, head: Any, present: list[str], field: str) -> None:
    """DELETE ATTRIBUTES / METADATA is about to remove `present` keys from `head`."""
    if ctx.privileged or not present:
        return
    txn = ctx.txn
    if is_immutable(txn, head):
        raise _refuse(f"Cannot delete {field} {present} of {label(txn, head)}: it is a "
                      f"protected system definition")
    if (field == "attributes" and ACTOR_PROTECTED_ATTRIBUTE in present
            and is_actor(txn, head)):
        raise _refuse(f"Cannot delete core_directives of {label(txn, head)}: an actor's core "
                      f"directives are protected")


def check_delete(ctx: Any, head: Any) -> None:
    """DELETE PROPOSITIONS / CONCEPT (or its cascade) is about to remove `head`."""
    if ctx.privileged:
        return
    txn = ctx.txn
    if is_immutable(txn, head) or is_actor(txn, head):
        raise _refuse(f"Cannot delete {label(txn, head)}: it is a protected system element")


def check_definitions_unused(ctx: Any, heads: list[Any], concepts: set[int],
                             links: set[int]) -> None:
    """DELETE CONCEPT is about to remove `heads` (with the concepts `concepts` and the links
    `links`): a type or predicate definition among them must not be in use by anything that
    stays. A type that a protected actor is an instance of (Person, for $self and $system)
    is part of that actor's protected identity: KIP_3004. Any other type or predicate that
    instances or links still use: KIP_2002 — deleting it would leave them undefined, and
    whoever re-created the definition would own what they mean."""
    if ctx.privileged:
        return
    txn = ctx.txn
    for head in heads:
        if type(head) is not ConceptHead:
            continue
        kind = txn.symbol_text(head.type_id)
        if kind not in ("$ConceptType", "$PropositionType"):
            continue
        sid = txn.symbol_id(head.name)
        if sid is None:
            continue
        if kind == "$ConceptType":
            for actor_type, actor in sorted(ACTORS):
                n = txn.concept_id(sid, actor) if actor_type == head.name else None
                if n is not None and n not in concepts:
                    raise _refuse(f"Cannot delete the concept type {head.name!r}: the "
                                  f"protected actor {actor!r} is one of its instances")
            users = (n for n in txn.concepts_of_type(sid) if n not in concepts)
            what, how = "instances", (f"DELETE CONCEPT ?x DETACH WHERE {{ ?x {{type: "
                                      f"\"{head.name}\"}} }}")
        else:
            users = (link for _, _, link in txn.links_of_predicate(sid) if link not in links)
            what, how = "propositions", (f"DELETE PROPOSITIONS ?l WHERE {{ ?l (?s, "
                                         f"\"{head.name}\", ?o) }}")
        if next(users, None) is not None:
            count = txn.count_type(sid) if kind == "$ConceptType" else \
                txn.count_predicate(sid)
            raise KipError(
                ErrorCode.KIP_2002,
                f"Cannot delete the definition of {head.name!r}: {count} {what} still use it",
                f"Delete or move its {what} first ({how}), then the definition; to change "
                f"what the definition says, UPSERT it with SET ATTRIBUTES instead.")
