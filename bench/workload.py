"""The peers workload: a deterministic KIP-shaped knowledge graph (Drug, Symptom, DrugClass,
Person, Event concepts and six predicates), its query parameters and the W2 upserts.

This reproduces the generator of the peer benchmark that sits beside the repository,
`../shared/peers/gen.py` ("gen.py v1", described in `../shared/peers/README.md`, section
"Dataset"), so that `python -m bench` runs without it: for the same `(n, seed)` the files
written here — `concepts.jsonl`, `propositions.jsonl` and `meta.json` — are byte-identical
to gen.py's (checked by `python -m bench.workload --verify PATH/TO/gen.py`, and by
`python -m bench` whenever the peers directory is present). `make_upserts` reproduces the
harness's W2 items (`bench_peers.make_upserts`).

Determinism: only `random.Random` (Mersenne Twister; `random()`, `randrange()` and
`randint()` give the same sequences on every CPython version and platform) and
`json.dumps(..., ensure_ascii=False, separators=(",", ":"))`. Since the output is a pure
function of the draw sequence, the *order of the draws* below is the format: each
function notes the order it consumes the generator in, and changing it changes the data.

Shape (per gen.py): N concepts, Drug 30%, Symptom 15%, DrugClass max(20, N/100), Person
34%, Event the rest; about 5 links per concept —

    treats          Drug → Symptom         1–5 per drug (+ Headache for 60% of NSAIDs)
    has_side_effect Drug → Symptom         0–4 per drug (a third have none)
    is_class_of     Drug → DrugClass       1 class (NSAID for 5% of drugs), a 2nd for 25%
    is_subclass_of  DrugClass → DrugClass  binary-heap tree + 10% second parents (a DAG)
    knows           Person → Person        1–11 per person
    mentions        Event → Person/Drug/Symptom  1–11 per event

Symptoms are picked 85% uniformly and 15% Zipf(1), so "Headache" and "Fever" are hubs.
"""
from __future__ import annotations

import argparse
import bisect
import filecmp
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

GENERATOR = "gen.py v1"          # the semantics reproduced (recorded in meta.json as gen.py does)
DEFAULT_SEED = 42

TYPES = ("Drug", "Symptom", "DrugClass", "Person", "Event")
PREDICATES = ("treats", "has_side_effect", "is_class_of", "is_subclass_of", "mentions", "knows")

SOURCES = ("pubmed", "fda_label", "user_chat", "wikidata", "ehr_extract", "agent_inference")
SYMPTOM_HEAD = ("Headache", "Fever", "Nausea", "Fatigue", "Cough", "Dizziness", "Insomnia",
                "Back pain", "Rash", "Anxiety", "Joint pain", "Heartburn")
DRUGCLASS_HEAD = ("Pharmaceutical agent", "Analgesic", "Anti-infective", "NSAID", "Opioid",
                  "Antibiotic", "Antiviral", "Salicylate", "Propionic acid derivative",
                  "Beta-lactam", "Macrolide", "Nucleoside analogue")
NSAID = DRUGCLASS_HEAD.index("NSAID")
HUB_SYMPTOMS = SYMPTOM_HEAD[:2]   # the Q2/Q3 hub parameters (Zipf ranks 1 and 2)
SYLLABLES = ("ab ac al am an ar ba be bi ce ci co da de di do fa fe ga ge ha he ka ki la le li "
             "lo ma me mi mo na ne ni no pa pe pi po ra re ri ro sa se si so ta te ti to va ve "
             "vi xa za ze zo").split()
DRUG_SUFFIXES = ("mab", "nib", "pril", "sartan", "olol", "azole", "cillin", "mycin", "vir",
                 "statin", "profen", "oxacin", "dipine", "tidine", "prazole", "parin")
WORDS = ("acute chronic mild severe oral topical systemic daily dose reported observed patient "
         "clinical trial study effect response onset relief pain immune cardiac renal hepatic "
         "neural gastric agent compound therapy treatment condition marker signal risk benefit "
         "adverse rare common long short term evidence cohort review label update").split()
BODY_SYSTEMS = ("nervous", "digestive", "respiratory", "cardiovascular", "musculoskeletal",
                "integumentary", "immune", "endocrine")
COUNTRIES = ("US", "CN", "DE", "FR", "JP", "BR", "IN", "GB", "CA", "NG")
OCCUPATIONS = ("physician", "pharmacist", "nurse", "researcher", "patient", "engineer", "teacher")
EVENT_KINDS = ("Conversation", "ClinicalVisit", "Publication", "RecallNotice", "TrialReport")
ELEMENTS = ("C", "H", "N", "O", "S", "Cl", "F")
SIDE_EFFECT_COUNTS = (0, 0, 1, 2, 3, 4)

# sha256 of gen.py's files for the default seed, as published with the peer results
# (`../shared/peers/results/peers-<N>.json`, meta.dataset_sha256): `ensure` checks that
# what it generates matches, so a clone without ../shared still knows it has the same data.
KNOWN_SHA256 = {
    (10_000, 42): {
        "concepts.jsonl": "47dd59c724564bd439d04d729a48a6dc505fb534e588f11e26363e7cfe3f39c3",
        "propositions.jsonl": "8d82797de87c8541f9f91c5ebdc66101ab6453a14002af682095ee1b7ec8d96e"},
    (100_000, 42): {
        "concepts.jsonl": "eed8f29d9b04d26672ce29c849f03b3545cf0b7131233fd45bec2fdf59e24d87",
        "propositions.jsonl": "6cec9a89706f46d020985de8bb17ccdb0fa8d76a7594a9d9cd37ea5f308eb149"},
}

EPOCH = datetime(2024, 1, 1, tzinfo=timezone.utc)
TWO_YEARS_S = 2 * 365 * 86400
TS_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


# --- small draws (each comment: what it consumes, in order) ---------------------------------
def _pick(rng: random.Random, seq):
    """One randrange(len(seq))."""
    return seq[rng.randrange(len(seq))]


def _timestamp(rng: random.Random) -> str:
    """One randrange: a second within two years of 2024-01-01."""
    return (EPOCH + timedelta(seconds=rng.randrange(0, TWO_YEARS_S))).strftime(TS_FORMAT)


def _metadata(rng: random.Random) -> dict:
    """source (randrange), confidence (random), created_at (randrange)."""
    source = _pick(rng, SOURCES)
    confidence = round(0.5 + rng.random() * 0.5, 3)
    return {"source": source, "confidence": confidence, "created_at": _timestamp(rng)}


def _text(rng: random.Random, lo: int = 5, hi: int = 12) -> str:
    """randint(lo, hi) words, then one randrange per word."""
    count = rng.randint(lo, hi)
    return " ".join(_pick(rng, WORDS) for _ in range(count))


def _word(rng: random.Random, syllables: int) -> str:
    return "".join(_pick(rng, SYLLABLES) for _ in range(syllables))


def type_counts(n: int) -> dict[str, int]:
    n_class = max(20, n // 100)
    n_drug, n_symptom, n_person = int(n * 0.30), int(n * 0.15), int(n * 0.34)
    n_event = n - n_class - n_drug - n_symptom - n_person
    if n_event <= 0:
        raise ValueError(f"N={n} is too small for this workload")
    return {"Drug": n_drug, "Symptom": n_symptom, "DrugClass": n_class, "Person": n_person,
            "Event": n_event}


def _name(rng: random.Random, typ: str, i: int) -> str:
    if typ == "Symptom" and i < len(SYMPTOM_HEAD):
        return SYMPTOM_HEAD[i]
    if typ == "DrugClass" and i < len(DRUGCLASS_HEAD):
        return DRUGCLASS_HEAD[i]
    if typ == "Drug":               # randint(1, 3) syllables, the syllables, the suffix
        stem = _word(rng, rng.randint(1, 3))
        return (stem + _pick(rng, DRUG_SUFFIXES)).capitalize()
    if typ == "Symptom":
        stem = _word(rng, 2).capitalize()
        return f"{stem} {_pick(rng, BODY_SYSTEMS)} syndrome"
    if typ == "DrugClass":
        return f"{_word(rng, 2).capitalize()} class"
    if typ == "Person":
        first = _word(rng, 2).capitalize()
        return f"{first} {_word(rng, 3).capitalize()}"
    kind = _pick(rng, EVENT_KINDS)  # Event
    return f"{kind} {_word(rng, 2)}"


def _names(rng: random.Random, typ: str, count: int) -> list[str]:
    """Names unique within the type: a repeat gets its index appended (not re-checked)."""
    names, seen = [], set()
    for i in range(count):
        name = _name(rng, typ, i)
        if name in seen:
            name = f"{name} {i}"
        seen.add(name)
        names.append(name)
    return names


def _attributes(rng: random.Random, typ: str) -> dict:
    """Attributes in gen.py's key order; draws in the order the values are listed."""
    if typ == "Drug":
        parts = rng.randint(2, 4)
        formula = "".join(f"{_pick(rng, ELEMENTS)}{rng.randint(1, 30)}" for _ in range(parts))
        risk = rng.randint(1, 5)
        approved = rng.random() < 0.7
        return {"risk_level": risk, "molecular_formula": formula, "approved": approved,
                "description": _text(rng)}
    if typ == "Symptom":
        severity = rng.randint(1, 5)
        system = _pick(rng, BODY_SYSTEMS)
        return {"severity": severity, "body_system": system, "description": _text(rng)}
    if typ == "DrugClass":
        letter = chr(65 + rng.randrange(26))
        number = rng.randint(0, 99)
        tail = chr(65 + rng.randrange(26)) + chr(65 + rng.randrange(26))
        return {"code": f"{letter}{number:02d}{tail}", "description": _text(rng)}
    if typ == "Person":
        year = rng.randint(1940, 2006)
        country = _pick(rng, COUNTRIES)
        occupation = _pick(rng, OCCUPATIONS)
        return {"birth_year": year, "country": country, "occupation": occupation,
                "description": _text(rng, 3, 8)}
    kind = _pick(rng, EVENT_KINDS)  # Event
    date = (EPOCH + timedelta(days=rng.randrange(0, 730))).strftime("%Y-%m-%d")
    return {"event_kind": kind, "date": date, "description": _text(rng, 6, 16)}


# --- the graph -------------------------------------------------------------------------------
@dataclass
class Workload:
    n: int
    seed: int
    concepts: list          # {type, name, attributes, metadata}
    props: list             # {subject {type,name}, predicate, object {type,name}, metadata}
    meta: dict              # what meta.json holds (without the sha256 of the files)


def generate(n: int, seed: int = DEFAULT_SEED) -> Workload:
    rng = random.Random(seed)
    counts = type_counts(n)
    names = {t: _names(rng, t, counts[t]) for t in TYPES}
    concepts = [{"type": t, "name": name, "attributes": _attributes(rng, t),
                 "metadata": _metadata(rng)}
                for t in TYPES for name in names[t]]

    links: list[tuple] = []     # (subject type, index, predicate, object type, index), unique
    seen: set[tuple] = set()

    def link(*key) -> None:
        if key not in seen:
            seen.add(key)
            links.append(key)

    n_drug, n_symptom, n_class, n_person, n_event = (counts[t] for t in TYPES)

    # DrugClass DAG: parent (i-1)//2 (a binary heap: depth ~ log2), and for i > 2 a second
    # parent drawn with probability 0.1 (the draw is skipped for i <= 2).
    parents: list[list[int]] = [[] for _ in range(n_class)]
    for i in range(1, n_class):
        first = (i - 1) // 2
        parents[i].append(first)
        link("DrugClass", i, "is_subclass_of", "DrugClass", first)
        if i > 2 and rng.random() < 0.10:
            second = rng.randrange(0, i - 1)
            if second != first:
                parents[i].append(second)
                link("DrugClass", i, "is_subclass_of", "DrugClass", second)

    # Symptom popularity: 15% of picks Zipf(1) over the symptom index, 85% uniform.
    zipf = []
    total = 0.0
    for i in range(n_symptom):
        total += 1.0 / (i + 1)
        zipf.append(total)

    def symptom() -> int:       # random(), then random() (Zipf) or randrange (uniform)
        if rng.random() < 0.15:
            return min(bisect.bisect_left(zipf, rng.random() * total), n_symptom - 1)
        return rng.randrange(n_symptom)

    for d in range(n_drug):
        in_nsaid = rng.random() < 0.05
        classes = [NSAID] if in_nsaid else [rng.randrange(n_class)]
        if rng.random() < 0.25:
            classes.append(rng.randrange(n_class))
        for c in classes:
            link("Drug", d, "is_class_of", "DrugClass", c)
        if in_nsaid and rng.random() < 0.6:           # drawn only for NSAIDs
            link("Drug", d, "treats", "Symptom", 0)   # Headache
        for _ in range(rng.randint(1, 5)):
            link("Drug", d, "treats", "Symptom", symptom())
        for _ in range(_pick(rng, SIDE_EFFECT_COUNTS)):
            link("Drug", d, "has_side_effect", "Symptom", symptom())

    for p in range(n_person):
        for _ in range(rng.randint(1, 11)):
            q = rng.randrange(n_person)
            if q != p:
                link("Person", p, "knows", "Person", q)

    for e in range(n_event):
        for _ in range(rng.randint(1, 11)):
            r = rng.random()
            if r < 0.4:
                link("Event", e, "mentions", "Person", rng.randrange(n_person))
            elif r < 0.8:
                link("Event", e, "mentions", "Drug", rng.randrange(n_drug))
            else:
                link("Event", e, "mentions", "Symptom", symptom())

    # metadata is drawn last, one per link, in link order
    props = [{"subject": {"type": st, "name": names[st][si]}, "predicate": pred,
              "object": {"type": ot, "name": names[ot][oi]}, "metadata": _metadata(rng)}
             for (st, si, pred, ot, oi) in links]

    # Query parameters, from their own generator (seed + 1).
    prng = random.Random(seed + 1)
    depth = [0] * n_class                     # parents have lower indexes
    for i, ps in enumerate(parents):
        if ps:
            depth[i] = 1 + max(depth[p] for p in ps)
    deepest = sorted(range(n_class), key=lambda i: (-depth[i], i))[:8]
    lookups = [concepts[prng.randrange(len(concepts))] for _ in range(64)]
    symptoms = list(HUB_SYMPTOMS) + [names["Symptom"][prng.randrange(len(SYMPTOM_HEAD), n_symptom)]
                                     for _ in range(6)]
    params = {
        "Q1": [{"type": c["type"], "name": c["name"]} for c in lookups],
        "Q2": [{"symptom": s} for s in symptoms],
        "Q3": [{"symptom": s, "max_risk": 3, "excluded_class": "NSAID"} for s in symptoms],
        "Q4": [{"drug_class": names["DrugClass"][i], "min_hops": 1, "max_hops": 5}
               for i in deepest],
        "Q5": [{}],
        "Q6": [{}],
    }
    predicate_counts: dict[str, int] = {}
    for p in props:
        predicate_counts[p["predicate"]] = predicate_counts.get(p["predicate"], 0) + 1
    meta = {"n": n, "seed": seed, "generator": GENERATOR, "concepts": len(concepts),
            "propositions": len(props),
            "links_per_concept": round(len(props) / len(concepts), 3),
            "type_counts": counts, "predicate_counts": predicate_counts, "params": params,
            "class_tree_max_depth": max(depth), "q4_param_depths": [depth[i] for i in deepest]}
    return Workload(n, seed, concepts, props, meta)


# --- files -----------------------------------------------------------------------------------
def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write(w: Workload, out: str) -> str:
    """Write data/n<N>/{concepts,propositions}.jsonl and meta.json as gen.py does."""
    d = os.path.join(out, f"n{w.n}")
    os.makedirs(d, exist_ok=True)
    files = {"concepts.jsonl": w.concepts, "propositions.jsonl": w.props}
    for fname, rows in files.items():
        tmp = os.path.join(d, fname + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n")
        os.replace(tmp, os.path.join(d, fname))
    meta = dict(w.meta, sha256={f: _sha256(os.path.join(d, f)) for f in files})
    tmp = os.path.join(d, "meta.json.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1, ensure_ascii=False)
    os.replace(tmp, os.path.join(d, "meta.json"))     # written last: marks the set complete
    return d


def ensure(n: int, out: str, seed: int = DEFAULT_SEED) -> str:
    """The dataset directory for (n, seed) under `out`, generated unless already cached.

    A cached copy is reused only if its meta.json says the same (n, seed, generator) and
    the files still have the recorded sha256.
    """
    d = os.path.join(out, f"n{n}")
    try:
        with open(os.path.join(d, "meta.json"), encoding="utf-8") as f:
            meta = json.load(f)
        known = KNOWN_SHA256.get((n, seed))
        if (meta.get("n"), meta.get("seed"), meta.get("generator")) == (n, seed, GENERATOR) \
                and (known is None or meta["sha256"] == known) \
                and all(_sha256(os.path.join(d, k)) == v for k, v in meta["sha256"].items()):
            return d
    except (OSError, ValueError, KeyError):
        pass
    d = write(generate(n, seed), out)
    known = KNOWN_SHA256.get((n, seed))
    if known is not None:
        with open(os.path.join(d, "meta.json"), encoding="utf-8") as f:
            if json.load(f)["sha256"] != known:
                raise RuntimeError(f"generated N={n} seed={seed} differs from gen.py's "
                                   "published sha256 (bench/workload.py out of step)")
    return d


def read(d: str) -> tuple[list, list, dict, float]:
    """(concepts, propositions, meta, parse seconds) of a dataset directory."""
    try:
        from orjson import loads
    except ImportError:                 # pragma: no cover - orjson is a nexus dependency
        loads = json.loads
    t0 = time.perf_counter()
    with open(os.path.join(d, "concepts.jsonl"), "rb") as f:
        concepts = [loads(line) for line in f]
    with open(os.path.join(d, "propositions.jsonl"), "rb") as f:
        props = [loads(line) for line in f]
    parse_s = time.perf_counter() - t0
    with open(os.path.join(d, "meta.json"), encoding="utf-8") as f:
        meta = json.load(f)
    return concepts, props, meta, parse_s


# --- W2 --------------------------------------------------------------------------------------
def make_upserts(concepts: list, meta: dict, k: int = 200) -> list[dict]:
    """The harness's W2 items (`bench_peers.make_upserts`, same seed and draws): k upserts of
    a Drug with all attributes + `treats` → Symptom + `is_class_of` → DrugClass, each with
    metadata; every 4th (once there is one) re-upserts an earlier new drug with new values.
    Targets avoid the Q2 symptoms and NSAID, so the queries' answers are not disturbed."""
    rng = random.Random(meta["seed"] + 7)
    q_symptoms = {p["symptom"] for p in meta["params"]["Q2"]}
    symptoms = [c["name"] for c in concepts
                if c["type"] == "Symptom" and c["name"] not in q_symptoms]
    classes = [c["name"] for c in concepts if c["type"] == "DrugClass" and c["name"] != "NSAID"]

    def link_meta() -> dict:        # random(), randint(1, 28), randint(0, 23)
        confidence = round(0.5 + rng.random() * 0.5, 3)
        day, hour = rng.randint(1, 28), rng.randint(0, 23)
        return {"source": "w2_upsert", "confidence": confidence,
                "created_at": f"2026-01-{day:02d}T{hour:02d}:00:00Z"}

    items, new = [], []
    for i in range(k):
        again = i % 4 == 3 and bool(new)
        if again:
            base = _pick(rng, new)
            name = base["concept"]["name"]
            targets = [link["object"]["name"] for link in base["links"]]
        else:
            name = f"W2 drug {i:05d}"
            targets = [_pick(rng, symptoms), _pick(rng, classes)]
        risk = rng.randint(1, 5)
        approved = rng.random() < 0.5
        item = {"concept": {"type": "Drug", "name": name,
                            "attributes": {"risk_level": risk, "molecular_formula": f"C{i}H{k}",
                                           "approved": approved,
                                           "description": f"upserted drug {i}"},
                            "metadata": link_meta()},
                "links": [{"predicate": "treats",
                           "object": {"type": "Symptom", "name": targets[0]},
                           "metadata": link_meta()},
                          {"predicate": "is_class_of",
                           "object": {"type": "DrugClass", "name": targets[1]},
                           "metadata": link_meta()}]}
        items.append(item)
        if not again:
            new.append(item)
    return items


# --- verification against gen.py -------------------------------------------------------------
def verify_against(gen_py: str, n: int, seed: int = DEFAULT_SEED) -> dict:
    """Run gen.py and this module for (n, seed) into temporary directories and compare
    the three files byte for byte. Returns {file: identical?}."""
    with tempfile.TemporaryDirectory(prefix="bench-workload-") as tmp:
        theirs, ours = os.path.join(tmp, "gen"), os.path.join(tmp, "ours")
        subprocess.run([sys.executable, gen_py, "--n", str(n), "--seed", str(seed),
                        "--out", theirs], check=True, stdout=subprocess.DEVNULL)
        write(generate(n, seed), ours)
        return {f: filecmp.cmp(os.path.join(theirs, f"n{n}", f), os.path.join(ours, f"n{n}", f),
                               shallow=False)
                for f in ("concepts.jsonl", "propositions.jsonl", "meta.json")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Generate the peers workload (gen.py semantics).")
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "data"))
    ap.add_argument("--verify", metavar="GEN_PY",
                    help="instead: compare with gen.py's output for the same --n/--seed")
    a = ap.parse_args(argv)
    if a.verify:
        same = verify_against(a.verify, a.n, a.seed)
        print(json.dumps(same))
        return 0 if all(same.values()) else 1
    t0 = time.perf_counter()
    d = write(generate(a.n, a.seed), a.out)
    print(f"wrote {d} in {time.perf_counter() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
