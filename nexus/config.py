"""Engine configuration: limits (budgets) and options, with documented defaults.

Every limit here is an explicit input to execution (carried in the `ExecContext`) and maps to
a KIP error when exceeded: oversized or too deeply nested commands and result sets →
`KIP_4002`, deadlines → `KIP_4001`. The README's "Limits" table is generated from these
docstrings' values; change both together.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from typing import Any

from .errors import ErrorCode, KipError

DEFAULT_DB = "./nexus-data"   # the documented default database of `kip serve`, `shell`, `exec`


def semantic_default() -> str:
    """The `semantic` option when none is given: $NEXUS_SEMANTIC, else "auto"."""
    return os.environ.get("NEXUS_SEMANTIC", "").strip().lower() or "auto"


def wal_default() -> bool:
    """The `wal` option when none is given: on, unless $NEXUS_WAL says off ("0", "off",
    "false", "no"). (On since the log passed the whole suite and 120 crash-harness kills
    with 0 lost: bench/RESULTS.md, docs/guarantees.md.)"""
    return os.environ.get("NEXUS_WAL", "").strip().lower() not in ("0", "off", "false", "no")


@dataclass(frozen=True)
class Limits:
    max_command_bytes: int = 8 * 1024 * 1024   # one command's text
    max_nesting: int = 64                      # bracket depth of a command
    max_batch: int = 1000                      # commands in one `commands` batch
    max_body_bytes: int = 32 * 1024 * 1024     # HTTP request body (server)
    query_timeout: float = 30.0                # seconds per command (KIP_4001)
    max_rows: int = 1_000_000                  # solutions a query may produce (KIP_4002)
    max_hops: int = 20                         # upper bound of a path range {m,n}
    max_path_visits: int = 2_000_000           # nodes a path walk may visit per query
    max_link_scan: int = 100_000               # links a (?s, ?p, ?o) with nothing bound may scan
    max_regex_length: int = 1000               # characters of a REGEX pattern
    regex_timeout: float = 0.25                # seconds per REGEX match
    max_search_limit: int = 100                # SEARCH ... LIMIT n cap
    max_search_chars: int = 4096               # characters of a SEARCH text (KIP_4002)
    max_result_bytes: int = 256 * 1024 * 1024  # JSON size of one command's result (KIP_4002)
    default_search_limit: int = 10


@dataclass(frozen=True)
class Config:
    limits: Limits = field(default_factory=Limits)
    durable: bool = True              # fsync every commit (LMDB sync)
    # With durable: a commit is made durable by one write-ahead log append + fdatasync
    # (LMDB runs without sync and is checkpointed: nexus.store.wal). Default on;
    # NEXUS_WAL=0 in the environment, or wal=False, turns it off (LMDB's synced commits).
    wal: bool = field(default_factory=wal_default)
    bootstrap: bool = True            # apply the bundled capsules on first open
    self_id: str | None = None        # the deployment's principal id, set into $self.id
    embedder: str = "hashed-ngrams"   # SEARCH vector embedder (see nexus.search)
    save_vectors: bool = True         # save the vector index files (`kip check`: False)
    # SEARCH MODE "semantic"/"hybrid" embedder, recorded per database (nexus.search.service):
    # "auto" (what the database recorded, else "wordllama" when installed), "wordllama",
    # "none". Default "auto", or the environment's NEXUS_SEMANTIC (the test suite sets it
    # to "none", tests/conftest.py).
    semantic: str = field(default_factory=semantic_default)
    audit_max_entries: int = 10_000   # list_logs retention by count
    audit_max_age_days: float = 30.0  # list_logs retention by age
    audit_command_chars: int = 500    # command text kept per audit entry
    parse_cache_size: int = 4096
    # Admission control (nexus.exec.admission): a read command still running after
    # `fast_lane_seconds` waits for one of `heavy_slots`, handed on every `heavy_quantum` s.
    heavy_slots: int = 1
    fast_lane_seconds: float = 0.02
    heavy_quantum: float = 0.1

    @classmethod
    def from_options(cls, **options: Any) -> "Config":
        """Build a Config from flat keyword options (`query_timeout=5`, `durable=False`...)."""
        limit_names = {f.name for f in fields(Limits)}
        config_names = {f.name for f in fields(cls)} - {"limits"}
        limits = options.pop("limits", None) or Limits()
        limit_changes = {k: options.pop(k) for k in list(options) if k in limit_names}
        unknown = [k for k in options if k not in config_names]
        if unknown:
            raise KipError(ErrorCode.KIP_1001, f"Unknown configuration option(s): "
                           f"{', '.join(sorted(unknown))}",
                           f"Known options: {', '.join(sorted(limit_names | config_names))}.")
        return cls(limits=replace(limits, **limit_changes), **options)
