"""The syntax AST: frozen, slotted dataclasses in closed unions, one per grammar rule.

The AST resolves nothing: variable names are strings, types and predicates are values as
written. It carries source positions (`pos`, excluded from equality) so that later stages can
point errors at the text. Values that may be `:name` placeholders are `Value` nodes; after
`bind()` every `Param` has become a `Literal`, and objects/arrays whose members are all
literal are folded into one `Literal` holding the plain Python value.

Naming mirrors `grammar/kip.lark`: rule `concept_match` → `ConceptMatch`, and so on.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Union

from .statements import StatementKind, kind_of, statement


@dataclass(frozen=True, slots=True)
class Pos:
    line: int
    column: int


def _pos() -> Any:
    return field(default=None, compare=False, repr=False)


# --- values ------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Literal:
    """A plain JSON value (None/bool/int/float/str/list/dict)."""
    value: Any
    pos: Pos | None = _pos()


# What a placeholder must hold where it stands; checked by bind() (and by the transformer
# for literals in the same positions), so both give the same error.
EXPECT_ANY = "any"
EXPECT_STRING = "string"
EXPECT_OBJECT = "object"
EXPECT_POSITIVE_INT = "positive integer"
EXPECT_VERSION = "non-negative integer"                                   # EXPECT VERSION n
EXPECT_ARRAY = "array"
EXPECT_PRIMITIVE = "primitive value (string, number, boolean or null)"   # FILTER operands
EXPECT_KEY = "key name (a string that is an identifier)"                 # DELETE ... {keys}


def suits(expect: str, value: Any) -> bool:
    """Whether `value` is of the JSON kind a position of kind `expect` needs — for a literal
    (the transformer) and a bound placeholder (bind) alike. EXPECT_KEY asks only for a
    string here: whether it is an identifier is checked by the caller, whose error differs."""
    if expect in (EXPECT_STRING, EXPECT_KEY):
        return isinstance(value, str)
    if expect == EXPECT_OBJECT:
        return isinstance(value, dict)
    if expect == EXPECT_ARRAY:
        return isinstance(value, list)
    if expect in (EXPECT_POSITIVE_INT, EXPECT_VERSION):
        return (isinstance(value, int) and not isinstance(value, bool)
                and value >= (1 if expect == EXPECT_POSITIVE_INT else 0))
    if expect == EXPECT_PRIMITIVE:
        return not isinstance(value, (list, dict))
    return True


def article(expect: str) -> str:
    """'an object', 'a string'... for messages about an EXPECT_* kind."""
    return ("an " if expect[:1] in "aeiou" else "a ") + expect


@dataclass(frozen=True, slots=True)
class Param:
    """A `:name` placeholder; `expect` is what its bound value must be."""
    name: str
    expect: str = EXPECT_ANY
    pos: Pos | None = _pos()


@dataclass(frozen=True, slots=True)
class ObjectValue:
    """A JSON object that contains a placeholder somewhere (else it is a Literal)."""
    entries: tuple[tuple[str, "Value"], ...]
    pos: Pos | None = _pos()


@dataclass(frozen=True, slots=True)
class ArrayValue:
    """A JSON array that contains a placeholder somewhere (else it is a Literal)."""
    items: tuple["Value", ...]
    pos: Pos | None = _pos()


Value = Union[Literal, Param, ObjectValue, ArrayValue]


# --- expressions (FIND items, FILTER, ORDER BY) -------------------------------------------

@dataclass(frozen=True, slots=True)
class Path:
    """`?var` (segments == ()) or `?var.name`, `?var.attributes.k`, `?var.metadata.k`..."""
    var: str
    segments: tuple[str, ...] = ()
    pos: Pos | None = _pos()


@dataclass(frozen=True, slots=True)
class Aggregate:
    func: str          # COUNT | SUM | AVG | MIN | MAX
    distinct: bool
    arg: Path
    pos: Pos | None = _pos()


@dataclass(frozen=True, slots=True)
class Compare:
    op: str            # == != < > <= >=
    left: "Expr"
    right: "Expr"
    pos: Pos | None = _pos()


@dataclass(frozen=True, slots=True)
class BoolOp:
    op: str            # && or ||
    operands: tuple["Expr", ...]
    pos: Pos | None = _pos()


@dataclass(frozen=True, slots=True)
class NotOp:
    operand: "Expr"
    pos: Pos | None = _pos()


@dataclass(frozen=True, slots=True)
class Call:
    func: str          # IN IS_NULL IS_NOT_NULL CONTAINS STARTS_WITH ENDS_WITH REGEX
    args: tuple["Expr", ...]
    pos: Pos | None = _pos()


Expr = Union[Path, Literal, Param, ObjectValue, ArrayValue, Compare, BoolOp, NotOp, Call]
FindItem = Union[Path, Aggregate]


def item_path(item: FindItem) -> Path:
    """The path a FIND item (or ORDER BY key) reads: itself, or an aggregate's argument."""
    return item.arg if isinstance(item, Aggregate) else item


# --- graph patterns ---------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ConceptMatch:
    """`{id: ...}` or `{type: ..., name: ...}` (either of type/name may be absent)."""
    id: Value | None = None
    type: Value | None = None
    name: Value | None = None
    pos: Pos | None = _pos()


@dataclass(frozen=True, slots=True)
class VarTerm:
    """A variable (KQL) or local handle (KML) used as subject/object."""
    name: str
    pos: Pos | None = _pos()


@dataclass(frozen=True, slots=True)
class Predicate:
    """One or more alternative predicate names, optionally with a hop range.

    `hops is None`: one hop over any of `names`. Otherwise `names` has one element and
    `hops == (min, max)`, `max is None` for an open range `{m,}`.
    """
    names: tuple[Value, ...]
    hops: tuple[int, int | None] | None = None
    pos: Pos | None = _pos()


# --- RC11 §3.4.2: predicate variables ------------------------------------------------------

@dataclass(frozen=True, slots=True)
class PredicateVar:
    """`?p` in the predicate position: binds the predicate name (a string) of each match."""
    name: str
    pos: Pos | None = _pos()


@dataclass(frozen=True, slots=True)
class PropositionMatch:
    """`(subject, predicate, object)`."""
    subject: "Term"
    predicate: Predicate | PredicateVar
    object: "Term"
    pos: Pos | None = _pos()


@dataclass(frozen=True, slots=True)
class PropositionIdMatch:
    """`(id: "P:...")`."""
    id: Value
    pos: Pos | None = _pos()


Term = Union[VarTerm, ConceptMatch, PropositionMatch, PropositionIdMatch]


@dataclass(frozen=True, slots=True)
class ConceptPattern:
    var: str | None
    match: ConceptMatch
    pos: Pos | None = _pos()


@dataclass(frozen=True, slots=True)
class PropositionPattern:
    var: str | None
    match: PropositionMatch | PropositionIdMatch
    pos: Pos | None = _pos()


@dataclass(frozen=True, slots=True)
class FilterPattern:
    expr: Expr
    pos: Pos | None = _pos()


@dataclass(frozen=True, slots=True)
class NotPattern:
    body: tuple["Pattern", ...]
    pos: Pos | None = _pos()


@dataclass(frozen=True, slots=True)
class OptionalPattern:
    body: tuple["Pattern", ...]
    pos: Pos | None = _pos()


@dataclass(frozen=True, slots=True)
class UnionPattern:
    body: tuple["Pattern", ...]
    pos: Pos | None = _pos()


Pattern = Union[ConceptPattern, PropositionPattern, FilterPattern, NotPattern,
                OptionalPattern, UnionPattern]


# --- KQL commands ------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class OrderKey:
    expr: FindItem
    descending: bool = False
    pos: Pos | None = _pos()


@statement(StatementKind.QUERY, "FIND", late_binding=True)
@dataclass(frozen=True, slots=True)
class Find:
    items: tuple[FindItem, ...]
    where: tuple[Pattern, ...]
    order_by: tuple[OrderKey, ...] = ()
    limit: Value | None = None
    cursor: Value | None = None
    pos: Pos | None = _pos()
    as_of: "AsOf | None" = None         # the history extension: read the graph as it was


@statement(StatementKind.QUERY, "EXPLAIN", late_binding=True)
@dataclass(frozen=True, slots=True)
class Explain:
    """`EXPLAIN FIND ...` — an extension: show the plan without running it."""
    query: Find
    pos: Pos | None = _pos()


# --- KML commands ------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class SetProposition:
    """One `("predicate", target) [WITH METADATA {...}]` entry of SET PROPOSITIONS."""
    predicate: Value
    target: Term
    metadata: Value | None = None
    pos: Pos | None = _pos()


@dataclass(frozen=True, slots=True)
class ConceptBlock:
    handle: str | None
    match: ConceptMatch
    attributes: Value | None = None
    propositions: tuple[SetProposition, ...] | None = None   # None: no SET PROPOSITIONS
    metadata: Value | None = None
    pos: Pos | None = _pos()
    expect: Value | None = None         # EXPECT VERSION n (RC11 §2.11.2); 0: create-only


@dataclass(frozen=True, slots=True)
class PropositionBlock:
    handle: str | None
    match: PropositionMatch | PropositionIdMatch
    attributes: Value | None = None
    metadata: Value | None = None
    pos: Pos | None = _pos()
    expect: Value | None = None         # EXPECT VERSION n (RC11 §2.11.2); 0: create-only


UpsertBlock = Union[ConceptBlock, PropositionBlock]


@dataclass(frozen=True, slots=True)
class UpsertStatement:
    blocks: tuple[UpsertBlock, ...]
    metadata: Value | None = None
    pos: Pos | None = _pos()


@statement(StatementKind.WRITE, "UPSERT", late_binding=True)
@dataclass(frozen=True, slots=True)
class Upsert:
    """One or more `UPSERT {...}` statements (capsules chain several)."""
    statements: tuple[UpsertStatement, ...]
    pos: Pos | None = _pos()


# A value of the columnar form: a placeholder's name, or a string literal as a 1-tuple.
Slot = Union[str, tuple[str]]


@dataclass(frozen=True, slots=True)
class UpsertColumns:
    """A loader-shaped UPSERT (nexus/syntax/fastclause.py: one statement of CONCEPT blocks
    `{type: T, name: N}` with optional `SET ATTRIBUTES :a`, `SET PROPOSITIONS { (P,
    {type: T, name: N}) [WITH METADATA :m], ... }` and `WITH METADATA :m`) as columns, one
    entry per block and one per link, without a node per value. T, N and P are `Slot`s;
    attributes and metadata are placeholder names (None: absent). Block i's links are
    entries `ends[i-1]` (0 for the first) to `ends[i]`."""
    types: tuple[Slot, ...]
    names: tuple[Slot, ...]
    attributes: tuple[str | None, ...]
    metadata: tuple[str | None, ...]
    ends: tuple[int, ...]
    predicates: tuple[Slot, ...]
    target_types: tuple[Slot, ...]
    target_names: tuple[Slot, ...]
    link_metadata: tuple[str | None, ...]


_UPSERT_STATEMENTS = Upsert.__dict__["statements"]     # the slot under the property below
_UPSERT_POS = Upsert.__dict__["pos"]


class ColumnUpsert(Upsert):
    """An `Upsert` the parser read as columns (`columns`: what the UPSERT executor of a
    load consumes, nexus/exec/upsert_columns.py). It is the same command: its
    `statements` — the AST the grammar builds, positions included — are built from the
    text when first asked for (`build`, the clause reader: the block-by-block executor, a
    printer, binding), and it compares and hashes as that `Upsert`. Registered through its
    base: `kind_of` and the executors look a subclass up by its bases."""

    __slots__ = ("columns", "_build")
    columns: UpsertColumns
    _build: Callable[[], tuple[UpsertStatement, ...]]
    built_as = Upsert               # what binding rebuilds it as (nexus/syntax/bind.py)

    def __init__(self, columns: UpsertColumns, pos: Pos | None,
                 build: Callable[[], tuple[UpsertStatement, ...]]) -> None:
        object.__setattr__(self, "columns", columns)
        object.__setattr__(self, "_build", build)
        _UPSERT_POS.__set__(self, pos)

    @property
    def statements(self) -> tuple[UpsertStatement, ...]:
        try:
            return _UPSERT_STATEMENTS.__get__(self)  # type: ignore[no-any-return]
        except AttributeError:
            built = self._build()
            _UPSERT_STATEMENTS.__set__(self, built)
            return built

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Upsert):
            return self.statements == other.statements
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.statements,))

    def __reduce__(self) -> tuple[Any, ...]:
        return (Upsert, (self.statements, self.pos))     # a copy is the plain command


@statement(StatementKind.WRITE, "DELETE")
@dataclass(frozen=True, slots=True)
class DeleteAttributes:
    keys: tuple[Value, ...]
    target: str
    where: tuple[Pattern, ...]
    pos: Pos | None = _pos()


@statement(StatementKind.WRITE, "DELETE")
@dataclass(frozen=True, slots=True)
class DeleteMetadata:
    keys: tuple[Value, ...]
    target: str
    where: tuple[Pattern, ...]
    pos: Pos | None = _pos()


@statement(StatementKind.WRITE, "DELETE")
@dataclass(frozen=True, slots=True)
class DeletePropositions:
    target: str
    where: tuple[Pattern, ...]
    pos: Pos | None = _pos()


@statement(StatementKind.WRITE, "DELETE")
@dataclass(frozen=True, slots=True)
class DeleteConcept:
    target: str
    where: tuple[Pattern, ...]
    pos: Pos | None = _pos()


# --- META commands -----------------------------------------------------------------------

@statement(StatementKind.META, "DESCRIBE")
@dataclass(frozen=True, slots=True)
class DescribePrimer:
    pos: Pos | None = _pos()


@statement(StatementKind.META, "DESCRIBE")
@dataclass(frozen=True, slots=True)
class DescribeDomains:
    limit: Value | None = None
    cursor: Value | None = None
    pos: Pos | None = _pos()


@statement(StatementKind.META, "DESCRIBE")
@dataclass(frozen=True, slots=True)
class DescribeConceptTypes:
    limit: Value | None = None
    cursor: Value | None = None
    pos: Pos | None = _pos()


@statement(StatementKind.META, "DESCRIBE")
@dataclass(frozen=True, slots=True)
class DescribeConceptType:
    name: Value
    pos: Pos | None = _pos()


@statement(StatementKind.META, "DESCRIBE")
@dataclass(frozen=True, slots=True)
class DescribePropositionTypes:
    limit: Value | None = None
    cursor: Value | None = None
    pos: Pos | None = _pos()


@statement(StatementKind.META, "DESCRIBE")
@dataclass(frozen=True, slots=True)
class DescribePropositionType:
    name: Value
    pos: Pos | None = _pos()


@statement(StatementKind.META, "SEARCH")
@dataclass(frozen=True, slots=True)
class Search:
    target: str                  # CONCEPT | PROPOSITION
    term: Value
    type: Value | None = None
    limit: Value | None = None
    pos: Pos | None = _pos()
    # RC11 (spec §5.2): MODE "keyword" | "semantic" | "hybrid" (None: the engine's default)
    # and THRESHOLD (a number in [0, 1]; None: no threshold). Both may be placeholders.
    mode: Value | None = None
    threshold: Value | None = None


# --- UPDATE (RC11 §4.3) ------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class UpdateCall:
    """`ADD(a, b)`, `MUL(a, b)`, `CLAMP(x, lo, hi)`, `COALESCE(x, default)`."""
    func: str
    args: tuple["UpdateValue", ...]
    pos: Pos | None = _pos()


UpdateValue = Union[Value, UpdateCall, Path]


@dataclass(frozen=True, slots=True)
class UpdateEntry:
    key: str
    value: UpdateValue
    pos: Pos | None = _pos()


@statement(StatementKind.WRITE, "UPDATE")
@dataclass(frozen=True, slots=True)
class Update:
    """`UPDATE ?target SET ATTRIBUTES {…} SET METADATA {…} WHERE {…} [LIMIT n]`."""
    target: str
    attributes: tuple[UpdateEntry, ...] | None
    metadata: tuple[UpdateEntry, ...] | None
    where: tuple[Pattern, ...]
    limit: Value | None = None
    pos: Pos | None = _pos()


# --- version history: a nexus extension beyond KIP 1.x (docs/history.md) -------------------

@dataclass(frozen=True, slots=True)
class AsOf:
    """`AS OF "<ISO time>"` (`version` False) or `AS OF VERSION <log seq>` (True)."""
    point: Value
    version: bool
    pos: Pos | None = _pos()


@dataclass(frozen=True, slots=True)
class ElementRef:
    """`{id: "C:12"}` (a concept) or `(id: "P:13:treats")` (a proposition link)."""
    id: Value
    link: bool
    pos: Pos | None = _pos()


@statement(StatementKind.META, "DESCRIBE")
@dataclass(frozen=True, slots=True)
class DescribeHistory:
    """`DESCRIBE HISTORY [element] [LIMIT n] [CURSOR c]`: an element's versions, or the
    log's records, newest first."""
    element: ElementRef | None = None
    limit: Value | None = None
    cursor: Value | None = None
    pos: Pos | None = _pos()


# --- RC11: MERGE (spec §4.4) and EXPORT (spec §5.3) -----------------------------------------

@statement(StatementKind.WRITE, "MERGE")
@dataclass(frozen=True, slots=True)
class Merge:
    """`MERGE CONCEPT ?source INTO ?target WHERE {...}`: consolidate two concept nodes."""
    source: str
    target: str
    where: tuple[Pattern, ...]
    pos: Pos | None = _pos()


@statement(StatementKind.META, "EXPORT")
@dataclass(frozen=True, slots=True)
class Export:
    """`EXPORT ?x WHERE {...} [LIMIT n] [CURSOR "..."]`: the matched elements as a capsule."""
    target: str
    where: tuple[Pattern, ...]
    limit: Value | None = None
    cursor: Value | None = None
    pos: Pos | None = _pos()


# --- version history (continued) -------------------------------------------------------------

@statement(StatementKind.WRITE, "REVERT")
@dataclass(frozen=True, slots=True)
class Revert:
    """`REVERT COMMAND <seq> REASON "…" [FORCE]` or
    `REVERT {id: …} TO VERSION <v> REASON "…" [FORCE]`."""
    reason: Value
    command: Value | None = None
    element: ElementRef | None = None
    version: Value | None = None
    force: bool = False
    pos: Pos | None = _pos()


Command = Union[Find, Explain, Upsert, DeleteAttributes, DeleteMetadata, DeletePropositions,
                DeleteConcept, DescribePrimer, DescribeDomains, DescribeConceptTypes,
                DescribeConceptType, DescribePropositionTypes, DescribePropositionType, Search,
                DescribeHistory, Revert, Update, Merge, Export]



def command_kind(command: Command) -> str:
    """'KML' for writes, 'META' for DESCRIBE/SEARCH, 'KQL' for FIND/EXPLAIN (the statement
    registry's label; an unregistered class counts as a write)."""
    return kind_of(command).label
