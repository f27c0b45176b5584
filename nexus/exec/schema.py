"""Define-before-use (spec §2.9): resolving concept types and predicates for KML.

Owns the rule that a concept's type must exist as `{type: "$ConceptType", name: T}` and a
predicate as `{type: "$PropositionType", name: p}` (else `KIP_2001`, whose hint names
`DESCRIBE CONCEPT TYPES` / `DESCRIBE PROPOSITION TYPES` and suggests the definition that
differs only in case, or a close spelling), the bootstrap exception that
`{type: "$ConceptType", name: "$ConceptType"}` may define itself, and the identifier rule for
the names of new types and predicates (`KIP_1002`).

Definitions are read through the command's own write transaction, so a definition made by an
earlier block of the same command counts. Only positive answers are cached (per command):
a definition cannot disappear in the middle of an UPSERT.

`instance_schema`, `subject_types` and `object_types` are guidance for agents, not
constraints: the spec calls the schema "a 'best practice' guideline for knowledge creation,
not a rigid constraint", so instances are never checked against them.
"""
from __future__ import annotations

import difflib
import re
from typing import Any

from ..errors import ErrorCode, KipError
from .writes import pos_kw

CONCEPT_TYPE = "$ConceptType"
PROPOSITION_TYPE = "$PropositionType"
_IDENT = re.compile(r"\$?[A-Za-z_][A-Za-z0-9_]*\Z")
_SUGGEST_SCAN = 20_000      # definitions scanned for a "did you mean" (error path only)


class Schema:
    """Per-command resolver of type and predicate names to interned symbol ids."""

    __slots__ = ("txn", "_types", "_predicates")

    def __init__(self, txn: Any) -> None:
        self.txn = txn
        self._types: dict[str, int] = {}
        self._predicates: dict[str, int] = {}

    # --- lookups (no error) --------------------------------------------------------------
    def definition(self, meta_type: str, name: str) -> int | None:
        """The id of the node `{type: meta_type, name: name}`, or None."""
        sid = self.txn.symbol_id(meta_type)
        return None if sid is None else self.txn.concept_id(sid, name)

    # --- resolution for writes (interns) -------------------------------------------------
    def concept_type(self, name: str, pos: Any = None, *, defining: str | None = None) -> int:
        """The symbol id of concept type `name` (interned), or KIP_2001 if undefined.
        `defining` is the name of the node being created, for the self-definition of
        `$ConceptType`."""
        sid = self._types.get(name)
        if sid is None:
            if not (self.definition(CONCEPT_TYPE, name) is not None
                    or (name == CONCEPT_TYPE and defining == CONCEPT_TYPE)):
                raise undefined_type(self.txn, name, pos)
            sid = self._types[name] = self.txn.intern(name)
        return sid

    def predicate(self, name: str, pos: Any = None) -> int:
        """The symbol id of predicate `name` (interned), or KIP_2001 if undefined."""
        sid = self._predicates.get(name)
        if sid is None:
            if self.definition(PROPOSITION_TYPE, name) is None:
                raise undefined_predicate(self.txn, name, pos)
            sid = self._predicates[name] = self.txn.intern(name)
        return sid

    # --- lookups for references (no interning: an unknown symbol matches nothing) --------
    def existing_type(self, name: str, pos: Any = None) -> int | None:
        """For a reference to an existing concept: KIP_2001 if the type is undefined, else
        its symbol id (None when no concept of that type was ever created)."""
        sid = self._types.get(name)
        if sid is None:
            if self.definition(CONCEPT_TYPE, name) is None:
                raise undefined_type(self.txn, name, pos)
            sid = self.txn.symbol_id(name)
            if sid is not None:
                self._types[name] = sid
        return sid

    def existing_predicate(self, name: str, pos: Any = None) -> int | None:
        sid = self._predicates.get(name)
        if sid is None:
            if self.definition(PROPOSITION_TYPE, name) is None:
                raise undefined_predicate(self.txn, name, pos)
            sid = self.txn.symbol_id(name)
            if sid is not None:
                self._predicates[name] = sid
        return sid


def check_definition_name(type_name: str, name: str, pos: Any = None) -> None:
    """The name of a concept about to be created: a new type or predicate must be named by
    an identifier (spec §2.8.1): KIP_1002; any other concept by a string that is not empty
    or only whitespace (its `{type, name}` is how agents find it again): KIP_2003."""
    if not name.strip():
        raise KipError(
            ErrorCode.KIP_2003,
            f"A concept name must not be {'empty' if not name else 'only whitespace'} "
            f"(creating a {type_name!r} named {name!r})",
            "Give the concept a name that says what it is, e.g. {type: \"Person\", name: "
            "\"Ada Lovelace\"}; concepts are found again by {type, name}.",
            **pos_kw(pos))
    if type_name == CONCEPT_TYPE or type_name == PROPOSITION_TYPE:
        if not _IDENT.match(name):
            what = "concept type" if type_name == CONCEPT_TYPE else "predicate"
            raise KipError(
                ErrorCode.KIP_1002,
                f"Cannot define the {what} {name!r}: its name is not a valid identifier",
                "Type and predicate names must match [A-Za-z_][A-Za-z0-9_]* (meta-types may "
                "start with '$'): UpperCamelCase for types (e.g. 'MedicalDevice'), "
                "snake_case for predicates (e.g. 'has_side_effect').",
                **pos_kw(pos))


def undefined_type(txn: Any, name: str, pos: Any = None) -> KipError:
    guess = suggest(txn, CONCEPT_TYPE, name)
    hint = (f"Define it first with UPSERT {{ CONCEPT ?t {{ {{type: \"$ConceptType\", name: "
            f"\"{name}\"}} SET ATTRIBUTES {{ description: \"...\" }} }} }}, or run DESCRIBE "
            f"CONCEPT TYPES to see the defined types (names are case-sensitive).")
    if guess is not None:
        hint = f"Did you mean '{guess}'? " + hint
    return KipError(ErrorCode.KIP_2001, f"Concept type '{name}' is not defined", hint,
                    data={"type": name, **({"suggestion": guess} if guess else {})},
                    **pos_kw(pos))


def undefined_predicate(txn: Any, name: str, pos: Any = None) -> KipError:
    guess = suggest(txn, PROPOSITION_TYPE, name)
    hint = (f"Define it first with UPSERT {{ CONCEPT ?p {{ {{type: \"$PropositionType\", "
            f"name: \"{name}\"}} SET ATTRIBUTES {{ description: \"...\", subject_types: "
            f"[\"*\"], object_types: [\"*\"] }} }} }}, or run DESCRIBE PROPOSITION TYPES to "
            f"see the defined predicates (names are case-sensitive).")
    if guess is not None:
        hint = f"Did you mean '{guess}'? " + hint
    return KipError(ErrorCode.KIP_2001, f"Predicate '{name}' is not defined", hint,
                    data={"predicate": name, **({"suggestion": guess} if guess else {})},
                    **pos_kw(pos))


def suggest(txn: Any, meta_type: str, name: str) -> str | None:
    """A defined name equal to `name` ignoring case, else a close spelling, else None."""
    sid = txn.symbol_id(meta_type)
    if sid is None:
        return None
    names = []
    for i, n in enumerate(txn.concepts_of_type(sid)):
        if i >= _SUGGEST_SCAN:
            break
        names.append(txn.head(n).name)
    folded = name.casefold()
    for candidate in names:
        if candidate.casefold() == folded:
            return candidate
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.8)
    return close[0] if close else None
