"""The graph store's tables by role: the names of the core tables, and `Tables`, the
backend's handles for them (and for the aux tables) that transactions pass to the
key-value layer.

A handle is whatever the backend's key-value layer takes as `db` — an LMDB `_Database`, or
in memory the table's name — hence the type parameter `Db`. Which keys a table holds is
`codec`'s.
"""
from __future__ import annotations

from typing import Generic, Mapping, TypeVar

CORE_TABLES = ("meta", "stats", "sym", "symx", "head", "attrs", "metas", "tn", "tid", "name",
               "spo", "ops", "pso")
AUX_PREFIX = "aux."     # backends store aux table `t` as table "aux.t"

Db = TypeVar("Db")


class Tables(Generic[Db]):
    """Backend table handles by role (attributes named as in CORE_TABLES) plus `aux`
    (aux table name -> handle)."""

    __slots__ = CORE_TABLES + ("aux",)

    meta: Db
    stats: Db
    sym: Db
    symx: Db
    head: Db
    attrs: Db
    metas: Db
    tn: Db
    tid: Db
    name: Db
    spo: Db
    ops: Db
    pso: Db

    def __init__(self, handles: Mapping[str, Db], aux: dict[str, Db]) -> None:
        for name in CORE_TABLES:
            setattr(self, name, handles[name])
        self.aux = aux

    def named(self, name: str) -> Db:
        """The handle of the core table `name` (for code that walks several tables)."""
        if name not in CORE_TABLES:
            raise KeyError(name)
        handle: Db = getattr(self, name)
        return handle
