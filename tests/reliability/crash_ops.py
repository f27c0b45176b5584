"""The workload of the crash harness: a deterministic sequence of KML commands and a model of
the graph they build.

Op `i` is generated from `random.Random(f"{seed}:{i}")` and the model state after ops
`0 .. i-1`, so the writer process (which replays the model up to where it restarts) and the
harness (which checks the database against the model) agree on every op without talking.
Every op is ONE KIP command and changes the graph (so two prefixes of the sequence never
give the same state):

* `upsert`  — a few concepts (new or existing) with attributes and metadata, SET PROPOSITIONS
  entries, PROPOSITION blocks, higher-order links, statement metadata; values travel as
  parameters or as KIP literals; a second UPSERT statement moves the shared counter;
* `large`   — hundreds of blocks: a whole new group of concepts with links among them;
* `del_concept` — DELETE CONCEPT ... DETACH of one concept (cascades to its links and the
  links about them), `del_group` — of every concept of a group (FILTER, hundreds at once);
* `del_props` — DELETE PROPOSITIONS of one link (cascades to the links about it);
* `del_attrs` / `del_meta` — DELETE ATTRIBUTES / METADATA of keys that are present.

Attributes include `aliases` (vector texts), so ops change vectors as well as postings.

Requests group consecutive ops: most are single commands, some are `commands` batches of
2..MAX_BATCH ops (each element its own transaction, acknowledged together).

The model knows KML's rules (CONTRACT §7): SET ATTRIBUTES is a shallow merge; metadata is
stored ⊕ statement ⊕ block (⊕ entry for SET PROPOSITIONS); deletes cascade to every link
that refers to a deleted element, transitively. Engine metadata (`_version`...) is not
modelled, only required to be present.
"""
from __future__ import annotations

import json
import random
from typing import Any

from nexus.syntax import value_text

SCHEMA = """
UPSERT {
  CONCEPT ?item { {type: "$ConceptType", name: "Item"} SET ATTRIBUTES { description: "a crash-test item" } }
  CONCEPT ?note { {type: "$ConceptType", name: "Note"} SET ATTRIBUTES { description: "a crash-test note" } }
  CONCEPT ?rel { {type: "$PropositionType", name: "rel"} SET ATTRIBUTES { description: "related", subject_types: ["*"], object_types: ["*"] } }
  CONCEPT ?about { {type: "$PropositionType", name: "about"} SET ATTRIBUTES { description: "a link about something", subject_types: ["*"], object_types: ["*"] } }
  CONCEPT ?next { {type: "$PropositionType", name: "next"} SET ATTRIBUTES { description: "sequence", subject_types: ["*"], object_types: ["*"] } }
}
"""
TYPES = ("Item", "Note")
PREDICATES = ("rel", "about", "next")
MAX_BATCH = 4
CROWDED = 4000          # concepts beyond which group deletes become frequent
COUNTER = ("Note", "counter")

Ident = tuple          # ("C", type, name) | ("L", subject ident, predicate, object ident)


def concept(t: str, name: str) -> Ident:
    return ("C", t, name)


# --- the model ---------------------------------------------------------------------------------

class Model:
    """The graph the ops build: identity → {"a": attributes, "m": user metadata}."""

    def __init__(self) -> None:
        self.concepts: dict[Ident, dict] = {}
        self.links: dict[Ident, dict] = {}
        self.groups: dict[int, int] = {}        # group → live concepts in it

    def copy(self) -> "Model":
        m = Model()
        m.concepts = {k: {"a": dict(v["a"]), "m": dict(v["m"])} for k, v in self.concepts.items()}
        m.links = {k: {"a": dict(v["a"]), "m": dict(v["m"])} for k, v in self.links.items()}
        m.groups = dict(self.groups)
        return m

    def canonical(self) -> dict[str, Any]:
        return canonical_state(self.concepts, self.links)

    # --- effects ---------------------------------------------------------------------------
    def upsert_concept(self, ident: Ident, attrs: dict | None, meta: dict | None) -> None:
        node = self.concepts.get(ident)
        if node is None:
            node = self.concepts[ident] = {"a": {}, "m": {}}
        if attrs:
            old = node["a"].get("group")
            node["a"].update(attrs)
            new = node["a"].get("group")
            if old != new:
                self._regroup(old, new)
        if meta:
            node["m"].update(meta)

    def _regroup(self, old: Any, new: Any) -> None:
        if isinstance(old, int):
            self.groups[old] -= 1
            if not self.groups[old]:
                del self.groups[old]
        if isinstance(new, int):
            self.groups[new] = self.groups.get(new, 0) + 1

    def upsert_link(self, ident: Ident, attrs: dict | None, meta: dict | None) -> None:
        link = self.links.setdefault(ident, {"a": {}, "m": {}})
        if attrs:
            link["a"].update(attrs)
        if meta:
            link["m"].update(meta)

    def delete_concepts(self, idents: list[Ident]) -> None:
        for ident in idents:
            node = self.concepts.pop(ident)
            self._regroup(node["a"].get("group"), None)
        self._cascade(set(idents))

    def delete_links(self, idents: list[Ident]) -> None:
        for ident in idents:
            del self.links[ident]
        self._cascade(set(idents))

    def _cascade(self, gone: set) -> None:
        while True:
            hit = [k for k in self.links if k[1] in gone or k[3] in gone]
            if not hit:
                return
            for k in hit:
                del self.links[k]
            gone = set(hit)

    def element(self, ident: Ident) -> dict:
        return (self.concepts if ident[0] == "C" else self.links)[ident]


def canonical_state(concepts: dict, links: dict) -> dict[str, Any]:
    """Identity → [attributes, metadata] as canonical JSON (1 and 1.0 differ, key order not)."""
    def canon(x: Any) -> str:
        return json.dumps(x, sort_keys=True, ensure_ascii=False, allow_nan=False)
    out = {}
    for table in (concepts, links):
        for ident, v in table.items():
            out[canon(ident)] = canon([v["a"], v["m"]])
    return out


# --- random values -------------------------------------------------------------------------------

_TEXT = ("alpha", "beta", "gamma", "delta", "Ωmega", "naïve café", "日本語のテキスト", "emoji 😀🚀",
         'quote " and \\ backslash', "line\nbreak\ttab", "{not: kip}", ":param", "?x", "//c",
         "")


def rand_value(rng: random.Random, depth: int = 0) -> Any:
    r = rng.random()
    if r < 0.2:
        return rng.choice((0, 1, -1, 42, 2**53 + 1, -(2**63), 2**63 - 1, rng.randint(-10**6, 10**6)))
    if r < 0.35:
        return rng.choice((0.5, -1.25, 1e300, 5e-324, 0.1, 1 / 3, rng.uniform(-1e6, 1e6)))
    if r < 0.6:
        return rng.choice(_TEXT) + ("" if rng.random() < 0.7 else str(rng.random()))
    if r < 0.68:
        return rng.choice((True, False, None))
    if depth < 2 and r < 0.84:
        return [rand_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if depth < 2:
        return {rng.choice(("k", "x", "név", "deep", "list")) + str(j): rand_value(rng, depth + 1)
                for j in range(rng.randint(0, 3))}
    return rng.choice(_TEXT)


def rand_map(rng: random.Random, keys: tuple[str, ...], n: int) -> dict:
    return {k: rand_aliases(rng) if k == "aliases" else rand_value(rng)
            for k in rng.sample(keys, min(n, len(keys)))}


def rand_aliases(rng: random.Random) -> Any:
    """Aliases are vector texts (`nexus.search.text`): changing them changes the element's
    vectors, which the deep check compares after every kill."""
    if rng.random() < 0.2:
        return rand_value(rng)
    return [rng.choice(_TEXT) + " " + str(rng.randrange(1000)) for _ in range(rng.randint(0, 3))]


ATTR_KEYS = ("color", "size", "weight", "label", "tags", "shape", "notes", "score", "aliases")
META_KEYS = ("source", "confidence", "tag", "author", "status")


# --- op generation --------------------------------------------------------------------------------

class Op:
    """One KIP command, and how it changes the model."""

    def __init__(self, index: int, kind: str, command: str, parameters: dict,
                 effect: Any) -> None:
        self.index, self.kind, self.command, self.parameters = index, kind, command, parameters
        self._effect = effect

    def apply(self, model: Model) -> None:
        self._effect(model)

    def request(self) -> dict:
        return {"command": self.command, "parameters": self.parameters} if self.parameters \
            else {"command": self.command}


class _Params:
    """Collects parameters (`:p0`, `:p1`, ...) or writes values as KIP literals."""

    def __init__(self, rng: random.Random, literal_share: float) -> None:
        self.rng = rng
        self.literal = rng.random() < literal_share
        self.values: dict[str, Any] = {}

    def __call__(self, value: Any) -> str:
        if self.literal:
            return value_text(value)
        name = f"p{len(self.values)}"
        self.values[name] = value
        return ":" + name


def _clause(ident: Ident, p: _Params) -> str:
    if ident[0] == "C":
        return f'{{type: {value_text(ident[1])}, name: {p(ident[2])}}}'
    return f'({_clause(ident[1], p)}, {value_text(ident[2])}, {_clause(ident[3], p)})'


def make_op(seed: int, index: int, model: Model, big: int = 300) -> Op:
    rng = random.Random(f"{seed}:{index}")
    r = rng.random()
    items = [c for c in model.concepts if c[1] == "Item"]
    if len(items) > CROWDED and rng.random() < 0.3:
        return _del_group(rng, index, model)      # keep the database (and each check) small
    if r < 0.06 or len(items) < 8:
        return _large(rng, index, model, big)
    if r < 0.56 or not items:
        return _upsert(rng, index, model, items)
    if r < 0.66:
        return _del_concept(rng, index, model, items)
    if r < 0.72 and len(model.groups) > 1:
        return _del_group(rng, index, model)
    if r < 0.82 and model.links:
        return _del_props(rng, index, model)
    if r < 0.91:
        op = _del_keys(rng, index, model, "attributes")
        if op is not None:
            return op
    op = _del_keys(rng, index, model, "metadata")
    return op if op is not None else _upsert(rng, index, model, items)


def _name(rng: random.Random, index: int, j: int) -> str:
    base = f"item {index}.{j}"
    return base if rng.random() < 0.8 else base + rng.choice((" — ünïcode", " \"quoted\"", " 😀"))


def _upsert(rng: random.Random, index: int, model: Model, items: list[Ident]) -> Op:
    p = _Params(rng, 0.3)
    blocks: list[str] = []
    effects: list = []
    handles: list[Ident] = []
    stmt_meta = rand_map(rng, META_KEYS, rng.randint(1, 2)) if rng.random() < 0.4 else None
    for j in range(rng.randint(1, 4)):
        if items and rng.random() < 0.4:
            ident = rng.choice(items)
        else:
            ident = concept("Item", _name(rng, index, j))
        if ident in handles:
            continue
        attrs = rand_map(rng, ATTR_KEYS, rng.randint(0, 3))
        if rng.random() < 0.15:
            attrs["payload"] = f"{index}:" + "x" * rng.choice((1000, 10_000, 100_000))
        if ident not in model.concepts and rng.random() < 0.5:
            attrs["group"] = index
        meta = rand_map(rng, META_KEYS, rng.randint(1, 2)) if rng.random() < 0.5 else None
        # The handle is named by its place in `handles` (what the blocks below refer to),
        # not by `j`: a repeated ident is skipped above.
        text = f"  CONCEPT ?h{len(handles)} {{\n    {_clause(ident, p)}\n"
        if attrs:
            text += f"    SET ATTRIBUTES {{ {', '.join(f'{k}: {p(v)}' for k, v in attrs.items())} }}\n"
        entries = []
        if items and rng.random() < 0.4:
            target = rng.choice(items)
            emeta = {"entry": rand_value(rng)} if rng.random() < 0.5 else None
            entries.append((target, emeta))
        if entries:
            text += "    SET PROPOSITIONS {\n"
            for target, emeta in entries:
                text += f'      ("rel", {_clause(target, p)})'
                text += f" WITH METADATA {{ entry: {p(emeta['entry'])} }}\n" if emeta else "\n"
            text += "    }\n"
        text += "  }"
        if meta:
            text += f" WITH METADATA {{ {', '.join(f'{k}: {p(v)}' for k, v in meta.items())} }}"
        blocks.append(text)
        handles.append(ident)
        effects.append(("c", ident, attrs, _merge(stmt_meta, meta), entries))
    # PROPOSITION blocks between this statement's concepts, and a link about a link.
    if len(handles) >= 2 and rng.random() < 0.7:
        a, b = rng.sample(range(len(handles)), 2)
        link = ("L", handles[a], "next", handles[b])
        lattrs = rand_map(rng, ATTR_KEYS, rng.randint(0, 2))
        lmeta = {"weight": rand_value(rng)} if rng.random() < 0.5 else None
        text = f'  PROPOSITION ?l0 {{\n    (?h{a}, "next", ?h{b})\n'
        if lattrs:
            text += f"    SET ATTRIBUTES {{ {', '.join(f'{k}: {p(v)}' for k, v in lattrs.items())} }}\n"
        text += "  }" + (f" WITH METADATA {{ weight: {p(lmeta['weight'])} }}" if lmeta else "")
        blocks.append(text)
        effects.append(("l", link, lattrs, _merge(stmt_meta, lmeta), []))
        if rng.random() < 0.5:
            about = ("L", link, "about", handles[rng.randrange(len(handles))])
            c = handles.index(about[3])
            blocks.append(f'  PROPOSITION ?l1 {{ (?l0, "about", ?h{c}) }}')
            effects.append(("l", about, {}, stmt_meta, []))
    elif model.links and rng.random() < 0.3:
        target = rng.choice(list(model.links))
        about = ("L", target, "about", handles[0])
        blocks.append(f'  PROPOSITION ?l1 {{ ({_clause(target, p)}, "about", ?h0) }}')
        effects.append(("l", about, {}, stmt_meta, []))
    text = "UPSERT {\n" + "\n".join(blocks) + "\n}"
    if stmt_meta:
        text += f"\nWITH METADATA {{ {', '.join(f'{k}: {p(v)}' for k, v in stmt_meta.items())} }}"
    text += f"\nUPSERT {{ CONCEPT ?k {{ {{type: \"Note\", name: \"counter\"}} " \
            f"SET ATTRIBUTES {{ last: {p(index)} }} }} }}"

    def effect(model: Model) -> None:
        for kind, ident, attrs, meta, entries in effects:
            if kind == "c":
                model.upsert_concept(ident, attrs, meta)
                block_meta = meta
                for target, emeta in entries:
                    model.upsert_link(("L", ident, "rel", target), None,
                                      _merge(block_meta, emeta))
            else:
                model.upsert_link(ident, attrs, meta)
        model.upsert_concept(concept(*COUNTER), {"last": index}, None)
    return Op(index, "upsert", text, p.values, effect)


def _merge(a: dict | None, b: dict | None) -> dict | None:
    if not a:
        return b
    if not b:
        return a
    return {**a, **b}


def _large(rng: random.Random, index: int, model: Model, big: int) -> Op:
    """Hundreds of blocks: `big` new concepts of group `index`, a chain of links through
    them and links about some of those links; all values as parameters (so the command
    text — and its parse — is shared by every large op)."""
    n = big
    meta = {"source": "large", "op": index}
    blocks = [f"  CONCEPT ?c{j} {{ {{type: \"Item\", name: :n{j}}} SET ATTRIBUTES "
              f"{{ group: :g, pos: {j}, label: :t{j % 7} }} }}" for j in range(n)]
    blocks += [f'  PROPOSITION ?l{j} {{ (?c{j}, "next", ?c{j + 1}) }}' for j in range(n // 2)]
    blocks += [f'  PROPOSITION ?a{j} {{ (?l{j}, "about", ?c{j + 2}) }}' for j in range(0, n // 2, 10)]
    text = ("UPSERT {\n" + "\n".join(blocks) + "\n} WITH METADATA { source: \"large\", op: :g }"
            "\nUPSERT { CONCEPT ?k { {type: \"Note\", name: \"counter\"} "
            "SET ATTRIBUTES { last: :g } } }")
    params: dict[str, Any] = {"g": index}
    names = [f"big {index}.{j}" for j in range(n)]
    params.update({f"n{j}": name for j, name in enumerate(names)})
    labels = [rng.choice(_TEXT) for _ in range(7)]
    params.update({f"t{j}": labels[j] for j in range(7)})

    def effect(model: Model) -> None:
        idents = [concept("Item", name) for name in names]
        for j, ident in enumerate(idents):
            model.upsert_concept(ident, {"group": index, "pos": j, "label": labels[j % 7]}, meta)
        for j in range(n // 2):
            model.upsert_link(("L", idents[j], "next", idents[j + 1]), None, meta)
        for j in range(0, n // 2, 10):
            model.upsert_link(("L", ("L", idents[j], "next", idents[j + 1]), "about",
                               idents[j + 2]), None, meta)
        model.upsert_concept(concept(*COUNTER), {"last": index}, None)
    return Op(index, "large", text, params, effect)


def _del_concept(rng: random.Random, index: int, model: Model, items: list[Ident]) -> Op:
    ident = rng.choice(items)
    text = 'DELETE CONCEPT ?c DETACH WHERE { ?c {type: "Item", name: :name} }'
    return Op(index, "del_concept", text, {"name": ident[2]},
              lambda model: model.delete_concepts([ident]))


def _del_group(rng: random.Random, index: int, model: Model) -> Op:
    groups = sorted(model.groups)
    big = [g for g in groups if model.groups[g] > 20]
    g = rng.choice(big if big and rng.random() < 0.8 else groups)
    text = ('DELETE CONCEPT ?c DETACH WHERE { ?c {type: "Item"} '
            'FILTER(?c.attributes.group == :g) }')

    def effect(model: Model) -> None:
        model.delete_concepts([k for k, v in model.concepts.items()
                               if k[1] == "Item" and v["a"].get("group") == g
                               and type(v["a"].get("group")) is int])
    return Op(index, "del_group", text, {"g": g}, effect)


def _del_props(rng: random.Random, index: int, model: Model) -> Op:
    link = rng.choice(list(model.links))
    p = _Params(rng, 0.0)
    text = f"DELETE PROPOSITIONS ?l WHERE {{ ?l {_clause(link, p)} }}"
    return Op(index, "del_props", text, p.values, lambda model: model.delete_links([link]))


def _del_keys(rng: random.Random, index: int, model: Model, field: str) -> Op | None:
    table = [k for k, v in model.concepts.items()
             if k[1] == "Item" and v["a" if field == "attributes" else "m"]]
    if not table:
        return None
    ident = rng.choice(table)
    present = sorted(model.concepts[ident]["a" if field == "attributes" else "m"])
    keys = rng.sample(present, rng.randint(1, min(2, len(present)))) + ["absent_key"]
    keys = [k for k in keys if k != "group"] or ["absent_key"]
    if keys == ["absent_key"]:
        return None
    word = "ATTRIBUTES" if field == "attributes" else "METADATA"
    text = (f"DELETE {word} {{{', '.join(value_text(k) for k in keys)}}} FROM ?c "
            f'WHERE {{ ?c {{type: "Item", name: :name}} }}')

    def effect(model: Model) -> None:
        m = model.concepts[ident]["a" if field == "attributes" else "m"]
        for k in keys:
            m.pop(k, None)
    return Op(index, f"del_{field[:4]}", text, {"name": ident[2]}, effect)


def batch_size(seed: int, index: int) -> int:
    """How many ops the request starting at op `index` carries (1 = a single command)."""
    rng = random.Random(f"{seed}:batch:{index}")
    return 1 if rng.random() < 0.75 else rng.randint(2, MAX_BATCH)


def replay(seed: int, upto: int, big: int = 300, model: Model | None = None,
           start: int = 0) -> Model:
    """The model after ops `start .. upto-1` applied to `model` (a new one by default)."""
    model = model or Model()
    for i in range(start, upto):
        make_op(seed, i, model, big).apply(model)
    return model


# --- reading a database back ---------------------------------------------------------------------

def read_state(nexus: Any) -> tuple[dict[str, Any], list[str]]:
    """The database's crash-test elements (types Item/Note, predicates rel/about/next) in the
    model's canonical form, and problems with their engine metadata."""
    from nexus.store.protocol import ConceptHead
    concepts: dict = {}
    links: dict = {}
    problems: list[str] = []
    with nexus.store.read() as txn:
        types = {txn.symbol_id(t) for t in TYPES} - {None}
        preds = {txn.symbol_id(p) for p in PREDICATES} - {None}
        memo: dict[int, Ident] = {}

        def ident(n: int) -> Ident:
            if n not in memo:
                h = txn.head(n)
                if type(h) is ConceptHead:
                    memo[n] = concept(txn.symbol_text(h.type_id), h.name)
                else:
                    memo[n] = ("L", ident(h.subject), txn.symbol_text(h.predicate_id),
                               ident(h.object))
            return memo[n]
        for n in txn.elements():
            h = txn.head(n)
            if type(h) is ConceptHead:
                if h.type_id not in types:
                    continue
                table = concepts
            else:
                if h.predicate_id not in preds:
                    continue
                table = links
            meta = txn.metadata(n)
            engine = {k: meta.pop(k) for k in list(meta) if k.startswith("_")}
            if not (isinstance(engine.get("_version"), int) and engine["_version"] >= 1
                    and isinstance(engine.get("_created_at"), str)
                    and isinstance(engine.get("_updated_at"), str)):
                problems.append(f"element {n}: engine metadata {engine}")
            table[ident(n)] = {"a": txn.attributes(n), "m": meta}
    return canonical_state(concepts, links), problems
