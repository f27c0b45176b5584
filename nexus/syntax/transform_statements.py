"""The transformer's rules for the KML, META and extension statements — UPSERT blocks, UPDATE
(RC11 §4.3), DELETE, DESCRIBE, SEARCH and its options (spec §5.2), MERGE (§4.4), EXPORT
(§5.3), and the version history extension (AS OF, DESCRIBE HISTORY, REVERT) — as a mixin of
`KipTransformer` (nexus/syntax/transformer.py, which owns FIND, the patterns, FILTER and JSON
values). Same contract as there: one method per grammar rule, shape rules reported with
their position as `KIP_1001`, value positions typed (nexus/syntax/transform_common.py).
"""
from __future__ import annotations

from typing import Any

from lark import Token, Transformer, v_args
from lark.tree import Meta

from . import ast as A
from .transform_common import (Children, Tagged, check_identifier, entry_key, fail, meta_pos,
                               slot, split_var, token_pos, token_value)


@v_args(meta=True)
class StatementRules(Transformer[Token, A.Command]):
    """Lark rule name → AST node for the statements other than FIND (see the module doc)."""

    # --- version history (nexus extension) -------------------------------------------------
    def as_of_time(self, meta: Meta, children: Children) -> Tagged:
        point = token_value(children[0], A.EXPECT_STRING, "AS OF")
        return ("as_of", A.AsOf(point, False, meta_pos(meta)), meta)

    def as_of_version(self, meta: Meta, children: Children) -> Tagged:
        point = token_value(children[0], A.EXPECT_POSITIVE_INT, "AS OF VERSION")
        return ("as_of", A.AsOf(point, True, meta_pos(meta)), meta)

    def _element_ref(self, meta: Meta, children: Children, link: bool) -> A.ElementRef:
        key = children[0]
        if str(key) != "id":
            raise fail(meta, f"'{key}' in a history target: only id is accepted here",
                       'Name the element by its id: {id: "C:12"} or (id: "P:13:treats").')
        return A.ElementRef(token_value(children[1], A.EXPECT_STRING, "id"), link, meta_pos(meta))

    def concept_ref(self, meta: Meta, children: Children) -> A.ElementRef:
        return self._element_ref(meta, children, False)

    def link_ref(self, meta: Meta, children: Children) -> A.ElementRef:
        return self._element_ref(meta, children, True)

    def history_cmd(self, meta: Meta, children: Children) -> A.DescribeHistory:
        element: A.ElementRef | None = None
        rest = list(children)
        if rest and isinstance(rest[0], A.ElementRef):
            element = rest.pop(0)
        return A.DescribeHistory(element, *_pages(rest), pos=meta_pos(meta))

    def revert_reason(self, meta: Meta, children: Children) -> tuple[A.Value, bool]:
        return token_value(children[0], A.EXPECT_STRING, "REASON"), len(children) == 2

    def revert_cmd(self, meta: Meta, children: Children) -> A.Revert:
        reason, force = children[-1]
        if isinstance(children[0], A.ElementRef):
            version = token_value(children[1], A.EXPECT_POSITIVE_INT, "TO VERSION")
            return A.Revert(reason, element=children[0], version=version, force=force,
                            pos=meta_pos(meta))
        command = token_value(children[0], A.EXPECT_POSITIVE_INT, "REVERT COMMAND")
        return A.Revert(reason, command=command, force=force, pos=meta_pos(meta))

    # --- KML ------------------------------------------------------------------------------
    def upsert_cmd(self, meta: Meta, children: Children) -> A.Upsert:
        return A.Upsert(tuple(children), meta_pos(meta))

    def upsert_statement(self, meta: Meta, children: Children) -> A.UpsertStatement:
        blocks, metadata = _split_metadata(children)
        upsert_blocks: tuple[A.UpsertBlock, ...] = tuple(blocks)
        return A.UpsertStatement(upsert_blocks, metadata, meta_pos(meta))

    def concept_block(self, meta: Meta, children: Children) -> A.ConceptBlock:
        handle, rest = _handle(children)
        match: A.ConceptMatch = rest[0]
        expect, rest = _expect(rest)
        clauses, metadata = _split_metadata(rest[1:])
        if match.id is None and (match.type is None or match.name is None):
            raise fail(match.pos, "A CONCEPT block identifies its concept by "
                       "{type: ..., name: ...} or by {id: ...}",
                       "Write {type: \"Drug\", name: \"Aspirin\"} (match or create) or "
                       "{id: \"C:12\"} (match only).")
        attributes: A.Value | None = None
        propositions: tuple[A.SetProposition, ...] | None = None
        tagged: list[Tagged] = clauses
        for tag, value, where in tagged:
            if tag == "attributes":
                if attributes is not None:
                    raise fail(where, "SET ATTRIBUTES is given twice in one CONCEPT block")
                attributes = value
            else:
                if propositions is not None:
                    raise fail(where, "SET PROPOSITIONS is given twice in one CONCEPT block")
                propositions = value
        return A.ConceptBlock(handle, match, attributes, propositions, metadata, meta_pos(meta),
                              expect)

    def proposition_block(self, meta: Meta, children: Children) -> A.PropositionBlock:
        handle, rest = _handle(children)
        match: A.PropositionMatch | A.PropositionIdMatch = rest[0]
        expect, rest = _expect(rest)
        clauses, metadata = _split_metadata(rest[1:])
        _check_kml_term(match)
        attributes: A.Value | None = None
        tagged: list[Tagged] = clauses
        for tag, value, where in tagged:
            if tag != "attributes":
                raise fail(where, "SET PROPOSITIONS belongs in a CONCEPT block",
                           "A PROPOSITION block takes SET ATTRIBUTES and WITH METADATA.")
            if attributes is not None:
                raise fail(where, "SET ATTRIBUTES is given twice in one PROPOSITION block")
            attributes = value
        return A.PropositionBlock(handle, match, attributes, metadata, meta_pos(meta), expect)

    def expect_version(self, meta: Meta, children: Children) -> Tagged:
        return ("expect", token_value(children[0], A.EXPECT_VERSION, "EXPECT VERSION"), meta)

    def set_attributes(self, meta: Meta, children: Children) -> Tagged:
        return ("attributes", _map_slot(children[0], "SET ATTRIBUTES"), meta)

    def set_propositions(self, meta: Meta, children: Children) -> Tagged:
        return ("propositions", tuple(children), meta)

    def set_proposition(self, meta: Meta, children: Children) -> A.SetProposition:
        predicate = token_value(children[0], A.EXPECT_STRING, "a predicate")
        target = _check_kml_term(children[1])
        children, metadata = _split_metadata(children)
        return A.SetProposition(predicate, target, metadata, meta_pos(meta))

    def with_metadata(self, meta: Meta, children: Children) -> _MetadataMark:
        return _MetadataMark(_map_slot(children[0], "WITH METADATA"))

    # --- UPDATE (RC11 §4.3) ---------------------------------------------------------------
    def update_cmd(self, meta: Meta, children: Children) -> A.Update:
        target = _plain_var(children[0])
        attributes: tuple[A.UpdateEntry, ...] | None = None
        metadata: tuple[A.UpdateEntry, ...] | None = None
        rest = list(children[1:])
        limit: A.Value | None = None
        if rest and isinstance(rest[-1], tuple) and rest[-1] and rest[-1][0] == "limit":
            limit = rest.pop()[1]
        where: tuple[A.Pattern, ...] = rest.pop()
        for tag, entries, where_ in rest:
            if tag == "attributes":
                if attributes is not None:
                    raise fail(where_, "SET ATTRIBUTES is given twice in one UPDATE")
                attributes = entries
            else:
                if metadata is not None:
                    raise fail(where_, "SET METADATA is given twice in one UPDATE")
                metadata = entries
        for entry in (attributes or ()) + (metadata or ()):
            _check_update_paths(entry.value, target)
        return A.Update(target, attributes, metadata, where, limit, meta_pos(meta))

    def update_attributes(self, meta: Meta, children: Children) -> Tagged:
        return ("attributes", children[0], meta)

    def update_metadata(self, meta: Meta, children: Children) -> Tagged:
        return ("metadata", children[0], meta)

    def update_map(self, meta: Meta, children: Children) -> tuple[A.UpdateEntry, ...]:
        entries = tuple(c for c in children if c is not None)
        seen: set[str] = set()
        for entry in entries:
            if entry.key in seen:
                raise fail(entry.pos, f"The key '{entry.key}' is given twice in one SET",
                           "Give each key once.")
            seen.add(entry.key)
        return entries

    def update_entry(self, meta: Meta, children: Children) -> A.UpdateEntry:
        tok: Token = children[0]
        key = entry_key(tok, "key")
        check_identifier(key, tok, "an attribute or metadata key")
        return A.UpdateEntry(key, children[1], token_pos(tok))

    def update_path(self, meta: Meta, children: Children) -> A.Path:
        tok: Token = children[0]
        var, segments = split_var(tok)
        return A.Path(var, tuple(segments), token_pos(tok))

    def update_call(self, meta: Meta, children: Children) -> A.UpdateCall:
        func = str(children[0])
        args = tuple(c for c in children[1:] if c is not None)
        arity = {"ADD": 2, "MUL": 2, "CLAMP": 3, "COALESCE": 2}[func]
        if len(args) != arity:
            raise fail(meta, f"{func} takes {arity} arguments, got {len(args)}",
                       "ADD(a, b), MUL(a, b), CLAMP(x, lo, hi), COALESCE(x, default).")
        return A.UpdateCall(func, args, meta_pos(meta))

    def delete_attributes(self, meta: Meta, children: Children) -> A.DeleteAttributes:
        keys: tuple[A.Value, ...] = children[0]
        where: tuple[A.Pattern, ...] = children[2]
        return A.DeleteAttributes(keys, _plain_var(children[1]), where, meta_pos(meta))

    def delete_metadata(self, meta: Meta, children: Children) -> A.DeleteMetadata:
        keys: tuple[A.Value, ...] = children[0]
        where: tuple[A.Pattern, ...] = children[2]
        return A.DeleteMetadata(keys, _plain_var(children[1]), where, meta_pos(meta))

    def delete_propositions(self, meta: Meta, children: Children) -> A.DeletePropositions:
        where: tuple[A.Pattern, ...] = children[1]
        return A.DeletePropositions(_plain_var(children[0]), where, meta_pos(meta))

    def delete_concept(self, meta: Meta, children: Children) -> A.DeleteConcept:
        where: tuple[A.Pattern, ...] = children[1]
        return A.DeleteConcept(_plain_var(children[0]), where, meta_pos(meta))

    def key_list(self, meta: Meta, children: Children) -> tuple[A.Value, ...]:
        keys = tuple(token_value(t, A.EXPECT_KEY, "a key to delete")
                     for t in children if t is not None)
        if not keys:
            raise fail(meta, "The list of keys to delete is empty",
                       "Name at least one key, e.g. DELETE ATTRIBUTES {\"old_id\"} FROM ?x ...")
        return keys

    # --- META -----------------------------------------------------------------------------
    def describe_primer(self, meta: Meta, children: Children) -> A.DescribePrimer:
        return A.DescribePrimer(meta_pos(meta))

    def describe_domains(self, meta: Meta, children: Children) -> A.DescribeDomains:
        return A.DescribeDomains(*_pages(children), pos=meta_pos(meta))

    def describe_concept_types(self, meta: Meta, children: Children
                               ) -> A.DescribeConceptTypes:
        return A.DescribeConceptTypes(*_pages(children), pos=meta_pos(meta))

    def describe_concept_type(self, meta: Meta, children: Children
                              ) -> A.DescribeConceptType:
        name = token_value(children[0], A.EXPECT_STRING, "the type name")
        return A.DescribeConceptType(name, meta_pos(meta))

    def describe_proposition_types(self, meta: Meta, children: Children
                                   ) -> A.DescribePropositionTypes:
        return A.DescribePropositionTypes(*_pages(children), pos=meta_pos(meta))

    def describe_proposition_type(self, meta: Meta, children: Children
                                  ) -> A.DescribePropositionType:
        name = token_value(children[0], A.EXPECT_STRING, "the predicate name")
        return A.DescribePropositionType(name, meta_pos(meta))

    def search_cmd(self, meta: Meta, children: Children) -> A.Search:
        target: str = children[0]
        term = token_value(children[1], A.EXPECT_STRING, "the search term")
        given: dict[str, A.Value] = {}
        options: list[Tagged] = children[2:]
        for tag, value, where in options:
            if tag in given:
                raise fail(where, f"{_SEARCH_OPTION[tag]} is given twice in SEARCH",
                           "Give each SEARCH option at most once.")
            given[tag] = value
        return A.Search(target, term, given.get("type"), given.get("limit"), meta_pos(meta),
                        mode=given.get("mode"), threshold=given.get("threshold"))

    def search_target(self, meta: Meta, children: Children) -> str:
        return str(children[0])

    def with_type(self, meta: Meta, children: Children) -> Tagged:
        return ("type", token_value(children[0], A.EXPECT_STRING, "WITH TYPE"), meta)

    # --- RC11 SEARCH options (spec §5.2) ------------------------------------------------
    def search_mode(self, meta: Meta, children: Children) -> Tagged:
        return ("mode", token_value(children[0], A.EXPECT_STRING, "MODE"), meta)

    def search_threshold(self, meta: Meta, children: Children) -> Tagged:
        return ("threshold", token_value(children[0], A.EXPECT_PRIMITIVE, "THRESHOLD"), meta)
    # --- end of RC11 SEARCH options

    # --- RC11: MERGE (spec §4.4) and EXPORT (spec §5.3) ---------------------------------
    def merge_cmd(self, meta: Meta, children: Children) -> A.Merge:
        where: tuple[A.Pattern, ...] = children[2]
        return A.Merge(_plain_var(children[0]), _plain_var(children[1]), where, meta_pos(meta))

    def export_cmd(self, meta: Meta, children: Children) -> A.Export:
        where: tuple[A.Pattern, ...] = children[1]
        limit, cursor = _pages(children[2:])
        return A.Export(_plain_var(children[0]), where, limit, cursor, meta_pos(meta))


class _MetadataMark:
    """A WITH METADATA clause on its way to the block that owns it."""
    __slots__ = ("value",)

    def __init__(self, value: A.Value) -> None:
        self.value = value


def _split_metadata(children: Children) -> tuple[Children, A.Value | None]:
    if children and isinstance(children[-1], _MetadataMark):
        return children[:-1], children[-1].value
    return children, None


def _handle(children: Children) -> tuple[str | None, Children]:
    if children and isinstance(children[0], Token) and children[0].type == "VAR":
        return _plain_var(children[0]), children[1:]
    return None, children


def _plain_var(tok: Token) -> str:
    var, segments = split_var(tok)
    if segments:
        raise fail(tok, f"Expected a plain variable here, not the dot path {tok}",
                   f"Write ?{var}.")
    return var


def _check_update_paths(value: Any, target: str) -> None:
    """RC11 §4.3: update expressions read only ?target's own state."""
    if isinstance(value, A.Path):
        if value.var != target:
            raise fail(value.pos, f"?{value.var} in an UPDATE expression: only paths on the "
                       f"target ?{target} are allowed",
                       f"Each element's new value is computed from its own state: write "
                       f"?{target}.attributes.<key> or ?{target}.metadata.<key>.")
        if not value.segments or value.segments[0] not in ("attributes", "metadata") or \
                len(value.segments) < 2:
            raise fail(value.pos, f"?{value.var}{''.join('.' + s for s in value.segments)}: "
                       "an UPDATE expression reads attributes or metadata",
                       f"Write ?{target}.attributes.<key> or ?{target}.metadata.<key>.")
    elif isinstance(value, A.UpdateCall):
        for arg in value.args:
            _check_update_paths(arg, target)


def _map_slot(value: A.Value, what: str) -> A.Value:
    # Keys of a written map were checked by map_entry (with their own position); a
    # placeholder's keys are checked by bind().
    return slot(value, A.EXPECT_OBJECT, what)


def _check_kml_term(term: A.Term) -> A.Term:
    """KML references name one element: {type, name} or {id}, one predicate, no paths."""
    if isinstance(term, A.ConceptMatch):
        if term.id is None and (term.type is None or term.name is None):
            raise fail(term.pos, "A concept referenced in KML needs {type: ..., name: ...} "
                       "or {id: ...}",
                       "KML links to exactly one existing concept; write both its type and "
                       "its name, or its id.")
    elif isinstance(term, A.PropositionMatch):
        predicate = term.predicate
        if isinstance(predicate, A.PredicateVar):
            raise fail(predicate.pos, f"A proposition in KML names its predicate, not a "
                       f"variable (?{predicate.name})",
                       "Write the predicate as a string, e.g. (?a, \"treats\", ?b); "
                       "predicate variables are for FIND, UPDATE, DELETE and EXPORT patterns.")
        if predicate.hops is not None or len(predicate.names) != 1:
            raise fail(predicate.pos, "A proposition in KML names exactly one predicate",
                       "Path ranges {m,n} and alternatives \"a\" | \"b\" are only allowed "
                       "in FIND.")
        _check_kml_term(term.subject)
        _check_kml_term(term.object)
    return term


def _expect(rest: list[Any]) -> tuple[A.Value | None, list[Any]]:
    """The EXPECT VERSION guard right after a block's identity clause, if any."""
    if len(rest) > 1 and isinstance(rest[1], tuple) and rest[1][0] == "expect":
        return rest[1][1], [rest[0], *rest[2:]]
    return None, rest


def _pages(children: list[Tagged]) -> tuple[A.Value | None, A.Value | None]:
    limit: A.Value | None = None
    cursor: A.Value | None = None
    for tag, value, where in children:
        if (tag == "limit" and limit is not None) or (tag == "cursor" and cursor is not None):
            raise fail(where, f"{tag.upper()} is given twice")
        if tag == "limit":
            limit = value
        else:
            cursor = value
    return limit, cursor


# --- RC11 SEARCH options (spec §5.2): how each option is named in messages ---------------
_SEARCH_OPTION = {"type": "WITH TYPE", "limit": "LIMIT", "mode": "MODE",
                  "threshold": "THRESHOLD"}
