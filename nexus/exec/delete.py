"""DELETE (spec §4.2, CONTRACT §7): attributes, metadata, propositions, concepts.

Owns the four DELETE commands over the solutions of their WHERE pattern:

* `DELETE ATTRIBUTES {k...} FROM ?t` / `DELETE METADATA {k...} FROM ?t` remove keys from
  every element bound to `?t`; an element is written (and counted, and its `_version`
  bumped) only when one of the keys was present → `{"updated_concepts", "updated_propositions"}`;
* `DELETE PROPOSITIONS ?l` → `{"deleted_propositions"}` and `DELETE CONCEPT ?c DETACH` →
  `{"deleted_concepts", "deleted_propositions"}`; both cascade transitively to every
  higher-order link that references a deleted link (as subject or object) and count it, so
  no link is left dangling.

A DELETE PROPOSITIONS target bound to concepts, or a DELETE CONCEPT target bound to links, is
`KIP_1001`; a target bound nowhere in WHERE is `KIP_3001`; `_`-prefixed keys are `KIP_2002`;
protected targets are `KIP_3004` (`nexus.exec.protect`). Everything to delete is collected
before the first write (store iterators must not run over their own writes). On a dry run
the counts are zero (the API aborts the transaction anyway).
"""
from __future__ import annotations

from typing import Any, Iterable

from ..errors import ErrorCode, KipError
from ..store.protocol import ConceptHead, LinkHead
from ..syntax import ast as A
from . import protect, writes
from .context import WriteContext
from .registry import executes
from .upsert import literal
from .writes import pos_kw


def targets(ctx: WriteContext, command: Any) -> list[int]:
    """Distinct ids bound to the command's target variable, in first-found order."""
    from .kql import solutions  # the KQL engine's WHERE matcher (imported late: no cycle)
    seen = dict.fromkeys(row[0] for row in solutions(ctx, command.where, [command.target]))
    # None: unbound in an OPTIONAL branch, nothing to delete
    return [n for n in seen if n is not None]


@executes(A.DeleteAttributes, A.DeleteMetadata, A.DeletePropositions, A.DeleteConcept)
def execute_delete(ctx: WriteContext, command: Any, params: Any = None
                   ) -> tuple[dict[str, int], None]:
    kind = type(command)
    if kind is A.DeletePropositions:
        return run_delete_propositions(ctx, command), None
    if kind is A.DeleteConcept:
        return run_delete_concept(ctx, command), None
    return run_delete_keys(ctx, command), None


def run_delete_keys(ctx: WriteContext, command: A.DeleteAttributes | A.DeleteMetadata
                    ) -> dict[str, int]:
    field = "attributes" if type(command) is A.DeleteAttributes else "metadata"
    what = "DELETE ATTRIBUTES" if field == "attributes" else "DELETE METADATA"
    keys = [literal(k) for k in command.keys]
    for key, node in zip(keys, command.keys):
        if not isinstance(key, str):
            raise KipError(ErrorCode.KIP_1001, f"The keys of {what} are strings, got {key!r}",
                           **pos_kw(node.pos))
        writes.check_keys((key,), what, node.pos)
    keys = list(dict.fromkeys(keys))
    txn = ctx.txn
    concepts = links = 0
    for n in targets(ctx, command):
        head = txn.head(n)
        if head is None:
            continue

        def check(present: list[str], head=head) -> None:
            protect.check_remove_keys(ctx, head, present, field)

        if writes.remove_keys(ctx, n, keys, field, check):
            if type(head) is ConceptHead:
                concepts += 1
            else:
                links += 1
    if ctx.dry_run:
        concepts = links = 0
    return {"updated_concepts": concepts, "updated_propositions": links}


def run_delete_propositions(ctx: WriteContext, command: A.DeletePropositions
                            ) -> dict[str, int]:
    txn = ctx.txn
    found = targets(ctx, command)
    for n in found:
        if type(txn.head(n)) is not LinkHead:
            raise KipError(ErrorCode.KIP_1001,
                           f"DELETE PROPOSITIONS ?{command.target}: ?{command.target} is bound "
                           f"to the concept C:{n}, not to a proposition",
                           f"Bind ?{command.target} to links, e.g. ?{command.target} (?s, "
                           f"\"predicate\", ?o); to delete a concept use DELETE CONCEPT "
                           f"?{command.target} DETACH.", **pos_kw(command.pos))
    doomed = cascade(txn, found)
    _delete_all(ctx, doomed)
    return {"deleted_propositions": 0 if ctx.dry_run else len(doomed)}


def run_delete_concept(ctx: WriteContext, command: A.DeleteConcept) -> dict[str, int]:
    txn = ctx.txn
    found = targets(ctx, command)
    direct: list[int] = []
    for n in found:
        head = txn.known_head(n)
        if not isinstance(head, ConceptHead):
            raise KipError(ErrorCode.KIP_1001,
                           f"DELETE CONCEPT ?{command.target}: ?{command.target} is bound to "
                           f"the proposition P:{n}:{txn.symbol_text(head.predicate_id)}, not "
                           f"to a concept",
                           f"Bind ?{command.target} to concepts, e.g. ?{command.target} "
                           f"{{type: \"...\", name: \"...\"}}; to delete links use DELETE "
                           f"PROPOSITIONS ?{command.target}.", **pos_kw(command.pos))
        protect.check_delete(ctx, head)
        direct.extend(link for _, _, link in txn.out_links(n))
        direct.extend(link for _, _, link in txn.in_links(n))
    doomed = cascade(txn, direct)
    protect.check_definitions_unused(ctx, [txn.known_head(n) for n in found], set(found),
                                     set(doomed))
    _delete_all(ctx, doomed)
    for n in found:
        writes.delete(ctx, n)
    if ctx.dry_run:
        return {"deleted_concepts": 0, "deleted_propositions": 0}
    return {"deleted_concepts": len(found), "deleted_propositions": len(doomed)}


def cascade(txn: Any, links: Iterable[int]) -> list[int]:
    """`links` plus, transitively, every link whose subject or object is one of them."""
    doomed = dict.fromkeys(links)
    stack = list(doomed)
    while stack:
        n = stack.pop()
        for _, _, up in list(txn.out_links(n)) + list(txn.in_links(n)):
            if up not in doomed:
                doomed[up] = None
                stack.append(up)
    return list(doomed)


def _delete_all(ctx: WriteContext, links: list[int]) -> None:
    txn = ctx.txn
    for n in links:
        protect.check_delete(ctx, txn.head(n))
    for n in links:
        writes.delete(ctx, n)
