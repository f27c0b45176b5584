"""KML entry point: `run_kml(ctx, command) -> result dict`.

The API (`nexus.api.Nexus`) opens one write transaction per KML command, builds the
`ExecContext` and calls this; it aborts the transaction on a dry run or on any error, so a
command is all-or-nothing (CONTRACT §7). This module only dispatches:

* `UPSERT` → `nexus.exec.upsert` (blocks, handles, merge rules, metadata precedence);
* `DELETE ...` → `nexus.exec.delete` (WHERE solutions, cascade, counts);

with define-before-use in `nexus.exec.schema`, protected targets in `nexus.exec.protect` and
every element write (engine metadata, `ctx.touched` / `ctx.removed`) in `nexus.exec.writes`.
"""
from __future__ import annotations

from typing import Any

from ..errors import ErrorCode, KipError
from ..syntax import ast as A
from . import delete, upsert
from .context import ExecContext


def run_kml(ctx: ExecContext, command: A.Command) -> dict[str, Any]:
    kind = type(command)
    if kind is A.Upsert:
        return upsert.run_upsert(ctx, command)
    if kind is A.DeleteAttributes or kind is A.DeleteMetadata:
        return delete.run_delete_keys(ctx, command)
    if kind is A.DeletePropositions:
        return delete.run_delete_propositions(ctx, command)
    if kind is A.DeleteConcept:
        return delete.run_delete_concept(ctx, command)
    raise KipError(ErrorCode.KIP_4003, f"run_kml got a non-KML command: {kind.__name__}")
