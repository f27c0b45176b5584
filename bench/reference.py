"""Reference answers for the workload's queries, and the peer harness's answer canonical form.

`Reference` evaluates Q1–Q6 and the W2 upsert over plain dicts built from the parsed
dataset, with the semantics of the peers README ("Queries and their semantics") and of its
reference peer (`bench_peers.NetworkxPeer`). `python -m bench` uses it to check nexus's
answers without the peer harness; when the harness runs too, the digests are also compared
with the harness's own reference digests (so this module is itself checked).

`canon` and `digest` reproduce `bench_peers.canon` / `bench_peers.digest`: result lists
sorted, null attributes dropped, timestamps as `YYYY-MM-DDTHH:MM:SSZ`, then a sha256 of the
sorted-keys JSON, 16 hex digits. Equal digests = identical answers.
"""
from __future__ import annotations

import hashlib
import json
from collections import Counter
from datetime import datetime

QUERIES = ("Q1", "Q2", "Q3", "Q4", "Q5", "Q6")
TS_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def _cv(v):
    return v.strftime(TS_FORMAT) if isinstance(v, datetime) else v


def canon(q: str, res):
    if q == "Q1":
        if res is None:
            return None
        return {"type": res["type"], "name": res["name"],
                "attributes": {k: _cv(v) for k, v in sorted(res["attributes"].items())
                               if v is not None},
                "metadata": {k: _cv(v) for k, v in sorted(res["metadata"].items())
                             if v is not None}}
    if q in ("Q2", "Q3", "Q4"):
        return sorted(res)
    if q == "Q5":
        return sorted([n, int(c)] for n, c in res)
    if q == "Q6":
        return sorted(([d, s] for d, s in res), key=lambda x: (x[0], x[1] is None, x[1] or ""))
    raise ValueError(q)


def digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False).encode()
                          ).hexdigest()[:16]


def describe_diff(got, want, limit: int = 3) -> str:
    """What differs between two canonical answers (`bench_peers.describe_diff`'s form)."""
    if isinstance(got, list) and isinstance(want, list):
        cg = Counter(json.dumps(x, sort_keys=True, ensure_ascii=False) for x in got)
        cw = Counter(json.dumps(x, sort_keys=True, ensure_ascii=False) for x in want)
        extra, missing = list((cg - cw).elements()), list((cw - cg).elements())
        return (f"{len(got)} rows, expected {len(want)}; unexpected {len(extra)}: "
                f"{extra[:limit]}; missing {len(missing)}: {missing[:limit]}")
    return (f"got {json.dumps(got, sort_keys=True, ensure_ascii=False)[:300]}, expected "
            f"{json.dumps(want, sort_keys=True, ensure_ascii=False)[:300]}")


def answer_digests(run, params: dict, queries=QUERIES) -> dict[str, list[str]]:
    """{query: [digest per parameter set]} of `run(query, **params)`."""
    return {q: [digest(canon(q, run(q, **p))) for p in params[q]] for q in queries}


def post_w2_checks(run, upserts: list) -> dict[str, list[str]]:
    """The harness's post-write check after W2 (`bench_peers.run_peer`): Q1 of every
    upserted drug, Q2 of (up to 8 of) their symptoms, Q5 — as digests."""
    names = sorted({it["concept"]["name"] for it in upserts})
    symptoms = sorted({it["links"][0]["object"]["name"] for it in upserts})[:8]
    return {"W2.Q1": [digest(canon("Q1", run("Q1", type="Drug", name=n))) for n in names],
            "W2.Q2": [digest(canon("Q2", run("Q2", symptom=s))) for s in symptoms],
            "W2.Q5": [digest(canon("Q5", run("Q5")))]}


class Reference:
    """Dict indexes: concept (type, name) → {attributes, metadata}; per predicate the
    out-links subject → {object: metadata} and in-links object → {subjects}."""

    def __init__(self, concepts: list, props: list) -> None:
        self.nodes: dict = {}
        self.by_type: dict = {}
        self.out: dict = {}
        self.inc: dict = {}
        for c in concepts:
            self._put_concept(c)
        for p in props:
            s, o = p["subject"], p["object"]
            self._put_link((s["type"], s["name"]), p["predicate"], (o["type"], o["name"]),
                           p["metadata"])

    def _put_concept(self, c: dict) -> None:
        key = (c["type"], c["name"])
        node = self.nodes.get(key)
        if node is None:
            self.nodes[key] = {"attributes": dict(c["attributes"]),
                               "metadata": dict(c["metadata"])}
            self.by_type.setdefault(c["type"], []).append(key)
        else:                                   # update: key by key
            node["attributes"].update(c["attributes"])
            node["metadata"].update(c["metadata"])

    def _put_link(self, s: tuple, pred: str, o: tuple, meta: dict) -> None:
        targets = self.out.setdefault(pred, {}).setdefault(s, {})
        if o in targets:
            targets[o].update(meta)
        else:
            targets[o] = dict(meta)
            self.inc.setdefault(pred, {}).setdefault(o, set()).add(s)

    # --- queries ---------------------------------------------------------------------------
    def q1(self, type, name):
        node = self.nodes.get((type, name))
        if node is None:
            return None
        return {"type": type, "name": name, "attributes": dict(node["attributes"]),
                "metadata": dict(node["metadata"])}

    def q2(self, symptom):
        return [s[1] for s in self.inc.get("treats", {}).get(("Symptom", symptom), ())
                if s[0] == "Drug"]

    def q3(self, symptom, max_risk, excluded_class):
        excluded = ("DrugClass", excluded_class)
        classes = self.out.get("is_class_of", {})
        out = []
        for s in self.inc.get("treats", {}).get(("Symptom", symptom), ()):
            if s[0] != "Drug":
                continue
            risk = self.nodes[s]["attributes"].get("risk_level")
            if risk is not None and risk < max_risk and excluded not in classes.get(s, {}):
                out.append(s[1])
        return out

    def q4(self, drug_class, min_hops, max_hops):
        start = ("DrugClass", drug_class)
        if start not in self.nodes:
            return []
        up = self.out.get("is_subclass_of", {})
        seen, frontier, found = {start}, [start], set()
        for depth in range(1, max_hops + 1):
            nxt = []
            for u in frontier:
                for v in up.get(u, ()):
                    if v[0] != "DrugClass":
                        continue
                    if depth >= min_hops:
                        found.add(v)
                    if v not in seen:
                        seen.add(v)
                        nxt.append(v)
            frontier = nxt
        return [v[1] for v in found]

    def q5(self):
        classes = self.out.get("is_class_of", {})
        counts: Counter = Counter()
        for d in self.by_type.get("Drug", ()):
            for c in classes.get(d, ()):
                if c[0] == "DrugClass":
                    counts[c[1]] += 1
        return list(counts.items())

    def q6(self):
        effects = self.out.get("has_side_effect", {})
        rows = []
        for d in self.by_type.get("Drug", ()):
            ses = effects.get(d)
            if ses:
                rows.extend((d[1], s[1]) for s in ses)
            else:
                rows.append((d[1], None))
        return rows

    def run(self, q: str, **params):
        return getattr(self, q.lower())(**params)

    def upsert(self, item: dict) -> None:
        c = item["concept"]
        self._put_concept(c)
        s = (c["type"], c["name"])
        for link in item["links"]:
            o = (link["object"]["type"], link["object"]["name"])
            if o not in self.nodes:
                raise KeyError(f"link target {o} missing")
            self._put_link(s, link["predicate"], o, link["metadata"])
