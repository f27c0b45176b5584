"""Which function executes which statement: one table, filled by the executor modules.

Each executor module registers its functions with `@executes(StatementClass)`; the engine
looks the function up by the command's class. What a statement *is* (query, meta, write)
is declared in `nexus.syntax.statements`, beside the AST class; this table only says who
runs it. An executor is `fn(ctx, command, parameters) -> (result, next_cursor | None)`: a
read statement gets an `ExecContext` over a snapshot, a write statement a `WriteContext`
inside the engine's write session. Parameters are already bound into `command`, except
for statements registered with `late_binding` (FIND, UPSERT), which read `parameters`
themselves.

The executor modules are imported on first use (FIND pulls in numpy and the planners), in
the order of `EXECUTOR_MODULES`: adding a statement adds its module there.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping, TypeVar

from ..errors import ErrorCode, KipError

Outcome = tuple[Any, "str | None"]
Executor = Callable[[Any, Any, Mapping[str, Any]], Outcome]
F = TypeVar("F", bound=Executor)

EXECUTOR_MODULES = ("kql", "meta", "upsert", "delete", "history", "update", "merge",
                    "export")

_EXECUTORS: dict[type, Executor] = {}
_loaded = False


def executes(*classes: type) -> Callable[[F], F]:
    """Decorator: `fn` executes commands of these AST classes."""
    def register(fn: F) -> F:
        for cls in classes:
            if cls in _EXECUTORS:
                raise ValueError(f"{cls.__name__} already has an executor")
            _EXECUTORS[cls] = fn
        return fn
    return register


def executor_for(cls: type) -> Executor:
    """The executor of an AST statement class (KIP_4003 when none is registered)."""
    fn = _EXECUTORS.get(cls)
    if fn is None:
        load_executors()
        # (a subclass of a statement class runs as that statement: ast.ColumnUpsert)
        fn = next(filter(None, map(_EXECUTORS.get, cls.__mro__)), None)
        if fn is None:
            raise KipError(ErrorCode.KIP_4003, f"No executor for {cls.__name__} statements")
    return fn


def load_executors() -> None:
    """Import every executor module (registering their functions); idempotent."""
    global _loaded
    if not _loaded:
        for name in EXECUTOR_MODULES:
            importlib.import_module(f"{__package__}.{name}")
        _loaded = True


def executors() -> dict[type, Executor]:
    """Every registered executor by statement class (all modules loaded)."""
    load_executors()
    return dict(_EXECUTORS)
