"""The nexus plug-in peer for `../shared/peers/bench_peers.py` (see its README).

    python ../shared/peers/bench_peers.py --n 10000 --data /tmp/peers-data \\
        --peer-module bench/nexus_peer.py

Everything goes through the public API: the load through the engine's bulk importer
(`nexus.ops.capsules.bulk_import` when it exists, else `nexus.ops.bulk_import.bulk_import`, else KIP
UPSERT batches), every query through `execute_kip` with the KQL of the peers README (parse
and plan caches warm after the harness's warm-up round), every W2 upsert through
`execute_kip` with the README's UPSERT. The store is LMDB on disk, durable (an fsync per
commit, like Kùzu/Ladybug). Columnar KIP results are zipped into the harness's row shapes;
that work is inside the timing, as the README asks.
"""
from __future__ import annotations

import os
import shutil
import sys
import time
from importlib import metadata as importlib_metadata
from typing import Any

try:
    from bench_peers import Peer
except ImportError:                     # imported outside the harness (bench/queries.py)
    class Peer:                         # type: ignore[no-redef]
        name = "peer"

from nexus.api import Nexus

ENGINE_META = ("_version", "_created_at", "_updated_at")

TYPES = ("Drug", "Symptom", "DrugClass", "Person", "Event")
PREDICATES = ("treats", "has_side_effect", "is_class_of", "is_subclass_of", "mentions", "knows")

SCHEMA = "UPSERT {\n" + "".join(
    f'  CONCEPT {{ {{type: "$ConceptType", name: "{t}"}} '
    f'SET ATTRIBUTES {{ description: "benchmark type {t}" }} }}\n' for t in TYPES) + "".join(
    f'  CONCEPT {{ {{type: "$PropositionType", name: "{p}"}} '
    f'SET ATTRIBUTES {{ description: "benchmark predicate {p}", subject_types: ["*"], '
    f'object_types: ["*"] }} }}\n' for p in PREDICATES) + "}"

Q1 = 'FIND(?c) WHERE { ?c {type: :type, name: :name} }'
Q2 = '''FIND(?d.name)
WHERE {
  ?d {type: "Drug"}
  (?d, "treats", {type: "Symptom", name: :symptom})
}'''
Q3 = '''FIND(?d.name)
WHERE {
  ?d {type: "Drug"}
  (?d, "treats", {type: "Symptom", name: :symptom})
  FILTER(?d.attributes.risk_level < :max_risk)
  NOT { (?d, "is_class_of", {type: "DrugClass", name: :excluded_class}) }
}'''
Q4 = '''FIND(?a.name)
WHERE {
  ?c {type: "DrugClass", name: :drug_class}
  (?c, "is_subclass_of"{%d,%d}, ?a)
}'''
Q5 = '''FIND(?cls.name, COUNT(?d))
WHERE {
  ?d {type: "Drug"}
  ?cls {type: "DrugClass"}
  (?d, "is_class_of", ?cls)
}'''
Q6 = '''FIND(?d.name, ?se.name)
WHERE {
  ?d {type: "Drug"}
  OPTIONAL { (?d, "has_side_effect", ?se) }
}'''
W2 = '''UPSERT {
  CONCEPT ?d {
    {type: "Drug", name: :name}
    SET ATTRIBUTES { risk_level: :risk_level, molecular_formula: :molecular_formula,
                     approved: :approved, description: :description }
    SET PROPOSITIONS {
      ("treats", {type: "Symptom", name: :symptom})
        WITH METADATA { source: :l0_source, confidence: :l0_confidence, created_at: :l0_created_at }
      ("is_class_of", {type: "DrugClass", name: :drug_class})
        WITH METADATA { source: :l1_source, confidence: :l1_confidence, created_at: :l1_created_at }
    }
  }
  WITH METADATA { source: :source, confidence: :confidence, created_at: :created_at }
}'''


def find_bulk_import():
    """The engine's bulk importer, wherever this checkout has it (None: none)."""
    for module in ("nexus.ops.capsules", "nexus.ops.bulk_import"):
        try:
            mod = __import__(module, fromlist=["bulk_import"])
        except ImportError:
            continue
        fn = getattr(mod, "bulk_import", None)
        if fn is not None:
            return fn
    return None


def w2_params(item: dict) -> dict:
    """The parameters of the W2 command for one harness upsert item (`make_upserts`)."""
    c, (l0, l1) = item["concept"], item["links"]
    a, m = c["attributes"], c["metadata"]
    return {
        "name": c["name"], "risk_level": a["risk_level"],
        "molecular_formula": a["molecular_formula"], "approved": a["approved"],
        "description": a["description"],
        "symptom": l0["object"]["name"], "l0_source": l0["metadata"]["source"],
        "l0_confidence": l0["metadata"]["confidence"],
        "l0_created_at": l0["metadata"]["created_at"],
        "drug_class": l1["object"]["name"], "l1_source": l1["metadata"]["source"],
        "l1_confidence": l1["metadata"]["confidence"],
        "l1_created_at": l1["metadata"]["created_at"],
        "source": m["source"], "confidence": m["confidence"], "created_at": m["created_at"]}


def kip(nx: Nexus, command: str, **params: Any) -> Any:
    response = nx.execute_kip({"command": command, "parameters": params})
    if "error" in response:
        raise RuntimeError(f"{response['error']['code']}: {response['error']['message']}")
    return response["result"]


def settle(nx: Nexus) -> float:
    """Wait until the background vector indexer has caught up with the load (so that it
    does not compete with timed queries); returns the seconds waited."""
    t0 = time.perf_counter()
    search = getattr(nx, "search", None)
    drain = getattr(search, "drain", None)
    if drain is not None:
        drain(None)
    return round(time.perf_counter() - t0, 3)


def open_nexus(path: str | None, **options: Any) -> Nexus:
    nx = Nexus.open(path, **options)
    kip(nx, SCHEMA)
    return nx


def load_into(nx: Nexus, concepts: list, props: list) -> str:
    """W1: returns how it loaded ("bulk_import" or "upsert")."""
    bulk = find_bulk_import()
    if bulk is not None:
        bulk(nx, concepts, props)
        return "bulk_import"
    batch = 500
    for i in range(0, len(concepts), batch):
        blocks = [f"CONCEPT {{ {{type: :t{j}, name: :n{j}}} SET ATTRIBUTES :a{j} }} "
                  f"WITH METADATA :m{j}" for j in range(len(concepts[i:i + batch]))]
        params = {}
        for j, c in enumerate(concepts[i:i + batch]):
            params.update({f"t{j}": c["type"], f"n{j}": c["name"], f"a{j}": c["attributes"],
                           f"m{j}": c["metadata"]})
        kip(nx, "UPSERT {\n" + "\n".join(blocks) + "\n}", **params)
    for i in range(0, len(props), batch):
        chunk = props[i:i + batch]
        blocks = [f"PROPOSITION {{ ({{type: :st{j}, name: :sn{j}}}, :p{j}, "
                  f"{{type: :ot{j}, name: :on{j}}}) }} WITH METADATA :m{j}"
                  for j in range(len(chunk))]
        params = {}
        for j, p in enumerate(chunk):
            params.update({f"st{j}": p["subject"]["type"], f"sn{j}": p["subject"]["name"],
                           f"p{j}": p["predicate"], f"ot{j}": p["object"]["type"],
                           f"on{j}": p["object"]["name"], f"m{j}": p["metadata"]})
        kip(nx, "UPSERT {\n" + "\n".join(blocks) + "\n}", **params)
    return "upsert"


class NexusQueries:
    """Q1–Q6 and W2 over an open Nexus, shaped as the harness wants them."""

    def __init__(self, nx: Nexus) -> None:
        self.nx = nx
        self._q4: dict[tuple[int, int], str] = {}

    def _run(self, command: str, params: dict) -> Any:
        response = self.nx.execute_kip({"command": command, "parameters": params})
        if "error" in response:
            raise RuntimeError(f"{response['error']['code']}: {response['error']['message']}")
        if "next_cursor" in response:
            raise RuntimeError("unexpected paging (the engine capped the result)")
        return response["result"]

    def q1(self, type: str, name: str) -> dict | None:
        rows = self._run(Q1, {"type": type, "name": name})
        if not rows:
            return None
        c = rows[0]
        meta = c.get("metadata", {})
        return {"type": c["type"], "name": c["name"], "attributes": c.get("attributes", {}),
                "metadata": {k: v for k, v in meta.items() if k not in ENGINE_META}}

    def q2(self, symptom: str) -> list:
        return self._run(Q2, {"symptom": symptom})

    def q3(self, symptom: str, max_risk: int, excluded_class: str) -> list:
        return self._run(Q3, {"symptom": symptom, "max_risk": max_risk,
                              "excluded_class": excluded_class})

    def q4(self, drug_class: str, min_hops: int, max_hops: int) -> list:
        text = self._q4.get((min_hops, max_hops))
        if text is None:
            text = self._q4[(min_hops, max_hops)] = Q4 % (min_hops, max_hops)
        return self._run(text, {"drug_class": drug_class})

    def q5(self) -> list:
        names, counts = self._run(Q5, {})
        return list(zip(names, counts))

    def q6(self) -> list:
        names, effects = self._run(Q6, {})
        return list(zip(names, effects))

    def upsert(self, item: dict) -> None:
        self._run(W2, w2_params(item))


class NexusPeer(Peer):
    name = "nexus"
    modelling = ("nexus KIP engine: LMDB store (durable), one counter of integer ids, type/name "
                 "and s-p-o/o-p-s/p-s-o indexes; load via bulk import; Q1–Q6 as the README's "
                 "KQL through execute_kip(); W2 as the README's UPSERT")
    query_text = {"Q1": Q1, "Q2": Q2, "Q3": Q3, "Q4": Q4 % (1, 5), "Q5": Q5, "Q6": Q6, "W2": W2}

    def versions(self) -> dict:
        try:
            version = importlib_metadata.version("nexus-kip")
        except importlib_metadata.PackageNotFoundError:
            version = "dev"
        return {"nexus": version, "python": sys.version.split()[0]}

    def load(self, ds, workdir: str):
        path = os.path.join(workdir, "nexus")
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(workdir, exist_ok=True)
        t0 = time.perf_counter()
        nx = open_nexus(path)
        t1 = time.perf_counter()
        if os.environ.get("NEXUS_PEER_PROFILE"):       # diagnose the load inside the harness
            import cProfile
            prof = cProfile.Profile()
            self.how = prof.runcall(load_into, nx, ds.concepts, ds.props)
            prof.dump_stats(os.environ["NEXUS_PEER_PROFILE"])
        else:
            self.how = load_into(nx, ds.concepts, ds.props)
        self.split = {"open_and_schema_s": round(t1 - t0, 3),
                      "import_s": round(time.perf_counter() - t1, 3)}
        return NexusQueries(nx)

    def extra_load_stats(self, h) -> dict:
        # Called by the harness after the timed load: the vector index catches up in a
        # background thread, which would otherwise share the GIL with the timed queries.
        drain_s = settle(h.nx)
        return {"load_path": getattr(self, "how", "?"), **getattr(self, "split", {}),
                "search_catch_up_s": drain_s}

    def close(self, h) -> None:
        h.nx.close()

    def q1(self, h, type, name):
        return h.q1(type, name)

    def q2(self, h, symptom):
        return h.q2(symptom)

    def q3(self, h, symptom, max_risk, excluded_class):
        return h.q3(symptom, max_risk, excluded_class)

    def q4(self, h, drug_class, min_hops, max_hops):
        return h.q4(drug_class, min_hops, max_hops)

    def q5(self, h):
        return h.q5()

    def q6(self, h):
        return h.q6()

    def upsert(self, h, item):
        h.upsert(item)


PEER = NexusPeer()
