"""`kip export`: the graph, or one domain, as a `.kip` capsule that `kip load` re-imports.

Owns the choice of what is written (the whole graph, or a domain with what it needs); how
it prints and in which order is `nexus.exec.capsule`'s, the same code as the `EXPORT`
statement's. Reads one consistent snapshot through the store protocol.

What the capsule holds:
* every concept as a `CONCEPT` block identified by `{type, name}`, with `SET ATTRIBUTES` and
  its own `WITH METADATA`; every link as a `PROPOSITION` block `(subject, "predicate",
  object)` whose ends are local handles (an element of the same statement), `{type, name}`
  clauses or, for higher-order links, nested `(s, "p", o)` clauses — so ids never appear
  and a load gets fresh ones;
* engine metadata (`_version`, `_created_at`, `_updated_at`, any `_` key) is left out: the
  loading engine stamps its own;
* order: concept types, then predicates, then domains, then the other concepts, then links,
  each after the links it refers to — every definition comes before its first use;
* left out: the protected Genesis core (the definitions of `$ConceptType`,
  `$PropositionType`, `Domain`, `belongs_to_domain`, the `CoreSchema` domain and their links
  to it — every nexus database has them and KML may not rewrite them) and the protected
  `core_directives` of `$self`/`$system` (their other attributes and metadata are exported),
  and their `id` (the deployment's principal, `Config.self_id`: loading an export elsewhere
  must not make that agent claim this one's identity).
  Nothing outside the graph is read: no configuration, no audit log, no secrets.

Statements hold at most `STATEMENT_BLOCKS` blocks so that a loader may run them one by one.
`progress("elements", done, total)`, when given, is called after each statement.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Callable, Iterator

from ..exec.capsule import CapsuleWriter
from ..store.protocol import ConceptHead
from ..syntax import value_text
from ..version import KIP_VERSION, __version__

STATEMENT_BLOCKS = 200


Progress = Callable[[str, int, int], None]


def export_text(nexus: Any, domain: str | None = None, progress: Progress | None = None
                ) -> str:
    """The capsule text; `domain` limits it to that domain (LookupError if unknown)."""
    return "".join(export_lines(nexus, domain, progress))


def export_lines(nexus: Any, domain: str | None = None, progress: Progress | None = None
                 ) -> Iterator[str]:
    with nexus.store.read() as txn:
        snap = _Snapshot(txn)
        if domain is None:
            concepts, links = snap.whole_graph()
        else:
            concepts, links = snap.domain(domain)
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        scope = "the whole graph" if domain is None else f"domain {value_text(domain)}"
        yield (f"// nexus {__version__} export of {scope} (KIP {KIP_VERSION}), {stamp}\n"
               f"// {len(concepts)} concepts, {len(links)} propositions. Load into a nexus "
               f"database (which has the Genesis capsule) with: kip load FILE\n")
        total, done = len(concepts) + len(links), 0
        if progress is not None:
            progress("elements", 0, total)
        for chunk in _chunks(concepts):
            yield "\n" + snap.statement(chunk, [])
            done += len(chunk)
            if progress is not None:
                progress("elements", done, total)
        for chunk in _chunks(links):
            yield "\n" + snap.statement([], chunk)
            done += len(chunk)
            if progress is not None:
                progress("elements", done, total)


def _chunks(items: list[int]) -> Iterator[list[int]]:
    for i in range(0, len(items), STATEMENT_BLOCKS):
        yield items[i:i + STATEMENT_BLOCKS]


class _Snapshot(CapsuleWriter):
    """What to export from one read transaction; the printing is `CapsuleWriter`'s."""

    # --- selection ------------------------------------------------------------------------
    def whole_graph(self) -> tuple[list[int], list[int]]:
        concepts: list[int] = []
        links: list[int] = []
        for n in self.txn.elements():
            head = self.txn.known_head(n)
            if self.is_core(head):
                continue
            (concepts if type(head) is ConceptHead else links).append(n)
        return self.order(concepts + links)

    def domain(self, name: str) -> tuple[list[int], list[int]]:
        """The domain node, its members, the definitions of every type and predicate they
        need (with those definitions' own domain links and domains), and the links among
        all of these."""
        txn = self.txn
        dom_t, bel = txn.symbol_id("Domain"), txn.symbol_id("belongs_to_domain")
        dom = txn.concept_id(dom_t, name) if dom_t is not None else None
        if dom is None:
            raise LookupError(f"no domain named {name!r}")
        chosen: set[int] = {dom}
        # (a None predicate would mean "any predicate" to the store: no symbol, no links)
        for _p, subject, _link in (txn.in_links(dom, bel) if bel is not None else ()):
            if type(txn.known_head(subject)) is ConceptHead:
                chosen.add(subject)
        ct, pt = txn.symbol_id("$ConceptType"), txn.symbol_id("$PropositionType")
        links: list[int] = []
        while True:
            before = len(chosen)
            links = self._links_within(chosen)
            needed_types = {self.sym(txn.known_head(n).type_id) for n in chosen
                            if type(txn.known_head(n)) is ConceptHead}
            needed_preds = {self.sym(txn.known_head(n).predicate_id) for n in links}
            for names, meta in ((needed_types, ct), (needed_preds, pt)):
                for t in names:
                    d = txn.concept_id(meta, t) if meta is not None else None
                    if d is not None:
                        chosen.add(d)
                        for _p, obj, _l in (txn.out_links(d, bel)   # its domains
                                            if bel is not None else ()):
                            if type(txn.known_head(obj)) is ConceptHead:
                                chosen.add(obj)
            if len(chosen) == before:
                break
        return self.order([n for n in [*chosen, *links] if not self.is_core(txn.known_head(n))])

    def _links_within(self, concepts: set[int]) -> list[int]:
        """Links whose ends are in `concepts` or are such links, in id order."""
        txn = self.txn
        found: set[int] = set()
        frontier = set(concepts)
        while frontier:
            new: set[int] = set()
            for n in frontier:
                for _p, obj, link in txn.out_links(n):
                    if link not in found and (obj in concepts or obj in found):
                        new.add(link)
            for n in frontier:      # links whose object is a link found late
                for _p, subj, link in txn.in_links(n):
                    if link not in found and (subj in concepts or subj in found or
                                              subj in new):
                        new.add(link)
            new -= found
            found |= new
            frontier = new
        return sorted(found)
