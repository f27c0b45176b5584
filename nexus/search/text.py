"""Text for search: normalisation, tokens, and the searchable document of an element.

Owns how a concept or a link is seen by the search indexes (`element_doc`), and the one
normalisation both the indexes and the queries go through: NFKC, case-folded, accent-folded
(`fold`), split into word tokens (`tokens`). Keeping both sides on the same functions is what
makes "ASPIRIN", "aspirin" and "Aspírin" the same query. Knows nothing about storage layout
or scoring (`nexus.search.lexical`, `nexus.search.vectors`).
"""
from __future__ import annotations

import re
import sys
import unicodedata
from itertools import chain, compress
from dataclasses import dataclass, field
from typing import Any, Collection

import regex

from ..store.protocol import ConceptHead

# Word characters without "_" (snake_case splits into words); CJK scripts, which do not put
# spaces between words, are cut into single characters by _CJK below.
_WORD = regex.compile(r"[^\W_]+")
_CJK = regex.compile(r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}]")
_CAMEL_ANY = regex.compile(r"[\p{Ll}\p{Nd}]\p{Lu}|\p{Lu}\p{Lu}\p{Ll}")
_CAMEL = regex.compile(r"(?<=[\p{Ll}\p{Nd}])(?=\p{Lu})|(?<=\p{Lu})(?=\p{Lu}\p{Ll})")

MAX_FIELD_CHARS = 2000      # text indexed per field: bounds index cost of huge attributes
MAX_TEXT_CHARS = 6000       # string attribute text indexed per element
MAX_TERM_BYTES = 96         # longer tokens are cut (aux keys are at most 511 bytes)
MAX_NAME_BYTES = 300
MAX_ALIASES = 7             # vector slots: the name + at most 7 aliases (see vectors.SLOTS)

# Field kinds of a document; lexical.FIELDS gives each its BM25F weight and length norm.
F_NAME, F_ALIAS, F_TYPE, F_TEXT, F_PREDICATE, F_ENDPOINT = range(6)

ALIAS_KEYS = ("aliases", "alias", "synonyms")


def fold(text: str) -> str:
    """NFKC, case-folded and accent-folded text ("Ångström" → "angstrom")."""
    t = unicodedata.normalize("NFKC", text).casefold()
    if t.isascii():
        return t
    t = unicodedata.normalize("NFD", t)
    return unicodedata.normalize("NFC", "".join(c for c in t if not unicodedata.combining(c)))


def tokens(text: str, *, camel: bool = False) -> list[str]:
    """Folded word tokens of `text`. With `camel`, "MedicalDevice" also yields its parts
    (type names and identifiers are written that way)."""
    if camel and _CAMEL_ANY.search(text):
        raw = _WORD.findall(text)
        parts: list[str] = []
        for w in raw:
            pieces = _CAMEL.split(w)
            if len(pieces) > 1:
                parts.extend(p for p in pieces if p)
        if parts:
            text = text + " " + " ".join(parts)
    folded = fold(text)
    words = _WORD.findall(folded)
    if folded.isascii():        # the common case: no CJK, one byte a character
        if words and max(map(len, words)) > MAX_TERM_BYTES:
            return [w[:MAX_TERM_BYTES] for w in words]
        return words
    out: list[str] = []
    for w in words:
        if w.isascii():                     # the common case: no CJK, one byte per char
            out.append(w if len(w) <= MAX_TERM_BYTES else w[:MAX_TERM_BYTES])
        elif _CJK.search(w):
            out.extend(_cjk_tokens(w))
        else:
            out.append(_clip(w))
    return out


# The short way for ASCII texts (`tokens_many`): NFKC leaves ASCII as it is and casefolds
# it as `lower` does, and `_WORD`'s words of ASCII text are its runs of letters and digits,
# so every other character (but NUL, which separates the texts) becomes a space and
# `str.split` cuts the words; `_CAMEL_ANY` over ASCII is `_CAMEL_ASCII`.
_ASCII_SPACES = str.maketrans({i: " " for i in range(1, 128) if not chr(i).isalnum()})
_CAMEL_ASCII = re.compile(r"[a-z0-9][A-Z]|[A-Z][A-Z][a-z]")


def tokens_many(texts: list[str], camel: bool = False) -> list[list[str]]:
    """`tokens` of each of `texts` (a bulk load's texts, many at once): the same lists.
    The ASCII texts that need no camelCase split are cut into words together, in C (one
    string for all of them: lowered, every character but a letter or digit a space, then
    split); the others go through `tokens`."""
    n = len(texts)
    joined = "\x00".join(texts)
    fast: Any = range(n)
    if not joined.isascii() or joined.count("\x00") != max(n - 1, 0):
        fast = [i for i, t in enumerate(texts) if t.isascii() and "\x00" not in t]
        joined = "\x00".join([texts[i] for i in fast])
    out: list[Any] = [None] * n
    if len(fast):
        words = map(str.split, joined.lower().translate(_ASCII_SPACES).split("\x00"))
        if type(fast) is range:
            out = list(words)
        else:
            for i, ws in zip(fast, words):
                out[i] = ws
    if camel:
        for i in compress(range(n), map(_CAMEL_ASCII.search, texts)):
            out[i] = None
    for i in [i for i, ws in enumerate(out) if ws is None]:
        out[i] = tokens(texts[i], camel=camel)
    if max(map(len, chain.from_iterable(out)), default=0) > MAX_TERM_BYTES:
        out = [ws if not ws or max(map(len, ws)) <= MAX_TERM_BYTES
               else [w[:MAX_TERM_BYTES] for w in ws] for ws in out]
    return out


def norm_names(names: list[str]) -> list[str]:
    """`norm_name` of each of `names`, many at once (the same strings)."""
    out = list(map(" ".join, tokens_many(names)))
    for i in [i for i, nn in enumerate(out) if len(nn) > MAX_NAME_BYTES or not nn.isascii()]:
        out[i] = norm_name(names[i])
    return out


def _cjk_tokens(word: str) -> list[str]:
    # Unigrams and bigrams of the CJK runs; non-CJK stretches stay words.
    out: list[str] = []
    run = ""
    for piece in regex.split(r"([\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}]+)", word):
        if not piece:
            continue
        if _CJK.match(piece):
            run = piece
            out.extend(run)
            out.extend(run[i:i + 2] for i in range(len(run) - 1))
        else:
            out.append(_clip(piece))
    return out


def _clip(term: str) -> str:
    raw = term.encode()
    if len(raw) <= MAX_TERM_BYTES:
        return term
    return raw[:MAX_TERM_BYTES].decode(errors="ignore")


def norm_name(text: str) -> str:
    """The key under which a name or alias is matched exactly or by prefix: its folded
    tokens joined by one space ("Non-Steroidal  Drug" → "non steroidal drug")."""
    joined = " ".join(tokens(text))
    raw = joined.encode()
    if len(raw) > MAX_NAME_BYTES:
        joined = raw[:MAX_NAME_BYTES].decode(errors="ignore")
    return joined


def grams(text: str) -> frozenset[str]:
    """The character 2- and 3-grams of the folded words, with word boundaries ("<a", "<as"
    ...): the default embedder's features, unhashed, for exact fuzzy rescoring."""
    return _grams_of_words(tokens(text))


# Names rescored by SEARCH (each query's candidates) -> their grams, bounded to GRAM_CACHE
# entries and emptied when full. Held as a tuple of interned strings: names share most of
# their grams, so the cache keeps one string per distinct gram, and a tuple of ~30 is ~0.3
# KB where a frozenset of them was ~1.5 KB and its strings ~1.3 KB more (after 2,000
# SEARCHes at N=100k, ~17k names: 48 MB → ~6 MB; bench/RESULTS.md, "Memory of a serving
# process"). `dice` takes it as it is.
GRAM_CACHE = 20_000
_GRAM_CACHE: dict[str, tuple[str, ...]] = {}


def norm_grams(norm: str) -> tuple[str, ...]:
    """The distinct grams() of a name already normalised by norm_name() (cached: names
    recur), in no particular order."""
    hit = _GRAM_CACHE.get(norm)
    if hit is None:
        if len(_GRAM_CACHE) >= GRAM_CACHE:
            _GRAM_CACHE.clear()
        found = _grams_of_words(norm.split(" ") if norm else [])
        hit = _GRAM_CACHE[norm] = tuple(map(sys.intern, found))
    return hit


def _grams_of_words(words: list[str]) -> frozenset[str]:
    out: set[str] = set()
    for w in words:
        padded = f"<{w}>"
        out.update(padded[k:k + 2] for k in range(len(padded) - 1))
        out.update(padded[k:k + 3] for k in range(len(padded) - 2))
    return frozenset(out)


def dice(a: frozenset[str], b: Collection[str]) -> float:
    """Dice similarity of a gram set and distinct grams (a set, or `norm_grams`' tuple), in
    [0, 1] (the intersection runs in C)."""
    if not a or not b:
        return 0.0
    return 2.0 * len(a.intersection(b)) / (len(a) + len(b))


@dataclass(slots=True)
class Doc:
    """What the search indexes know about one element."""
    n: int
    kind: int                 # KIND_CONCEPT or KIND_LINK
    group: int                # type id (concepts) / predicate id (links): WITH TYPE filters on it
    names: list[str]          # name (or predicate) first, then aliases — exact/prefix matching
    fields: list[tuple[int, str]] = field(default_factory=list)   # (F_* field kind, text)
    vec_texts: list[str] = field(default_factory=list)   # one vector per text (slot order)
    context: str = ""         # name + description, for contextual (sentence) embedders


KIND_CONCEPT, KIND_LINK = 0, 1


def element_doc(txn: Any, n: int, ends: dict[int, str] | None = None) -> Doc | None:
    """The searchable document of element `n` in `txn`'s snapshot (None if absent).
    `ends`, when given, remembers the names of link ends across calls (a caller deriving
    many documents of one snapshot: the links MERGE repointed all share an end)."""
    head = txn.head(n)
    if head is None:
        return None
    attrs = txn.attributes(n)
    if type(head) is ConceptHead:
        type_name = txn.symbol_text(head.type_id)
        aliases, text, context = concept_texts(head.name, attrs)
        doc = Doc(n, KIND_CONCEPT, head.type_id, [head.name] + aliases,
                  concept_fields(head.name, aliases, type_name, text))
        doc.vec_texts = [head.name] + aliases
        doc.context = context
        return doc
    pred = txn.symbol_text(head.predicate_id)
    subj, obj = end_names(txn, head, ends)
    doc = Doc(n, KIND_LINK, head.predicate_id, [pred])
    doc.fields.append((F_PREDICATE, pred))
    doc.fields.append((F_ENDPOINT, subj))
    doc.fields.append((F_ENDPOINT, obj))
    text = attribute_text(attrs)
    if text:
        doc.fields.append((F_TEXT, text))
    doc.vec_texts = [link_vec_text(pred, subj, obj)]
    doc.context = doc.vec_texts[0]
    return doc


def concept_fields(name: str, aliases: list[str], type_name: str, text: str
                   ) -> list[tuple[int, str]]:
    """The fields of the document of a concept (`element_doc`; a bulk load's derived
    entries digest the same, `lexical_cols`): its name, aliases, type name and attribute
    text (none when empty)."""
    fields = [(F_NAME, name)]
    fields.extend((F_ALIAS, alias) for alias in aliases)
    fields.append((F_TYPE, type_name))
    if text:
        fields.append((F_TEXT, text))
    return fields


def concept_texts(name: str, attrs: dict) -> tuple[list[str], str, str]:
    """(aliases, attribute text, context) of the document of a concept named `name` with
    attributes `attrs` (`element_doc`; a bulk load derives its documents from the same)."""
    desc = attrs.get("description")
    return (_aliases(attrs), attribute_text(attrs),
            name + (f": {desc}" if isinstance(desc, str) and desc else ""))


def concept_texts_many(names: list[str], attrs: list[dict | None]
                       ) -> list[tuple[list[str], str, str]]:
    """`concept_texts` of each (name, attributes) pair (None: no attributes), many at once
    (a bulk load's concepts): the same values. Attributes without aliases whose values are
    strings or scalars (the common shape) are read here with their keys' order worked out
    once per key set; the others go through `concept_texts`."""
    plans: dict[tuple, tuple[str, ...] | None] = {}
    out: list[tuple[list[str], str, str]] = []
    append = out.append
    for name, a in zip(names, attrs):
        if not a:
            append(([], "", name))
            continue
        keys = tuple(a)
        plan = plans.get(keys, ())
        if plan == ():
            plan = plans[keys] = None if any(k in ALIAS_KEYS for k in keys) else \
                tuple(sorted(keys, key=lambda k: (k != "description", k)))
        values = None if plan is None else [a[k] for k in plan]
        if values is None or any(isinstance(v, (list, dict)) for v in values):
            append(concept_texts(name, a))
            continue
        parts = [v[:MAX_FIELD_CHARS] for v in values if isinstance(v, str) and v]
        text = " ".join(parts)
        if len(parts) > 1 and sum(map(len, parts)) >= MAX_TEXT_CHARS:
            text = attribute_text(a)    # (the size cap: where `attribute_text` stops)
        desc = a.get("description")
        append(([], text, name + (f": {desc}" if isinstance(desc, str) and desc else "")))
    return out


def end_names(txn: Any, head: Any, ends: dict[int, str] | None = None) -> tuple[str, str]:
    """The texts a link's document shows for its subject and its object (`ends`: as in
    `element_doc`)."""
    if ends is None:
        return endpoint_text(txn, head.subject), endpoint_text(txn, head.object)
    known = ends.get(head.subject)
    subj = ends[head.subject] = endpoint_text(txn, head.subject) if known is None else known
    known = ends.get(head.object)
    obj = ends[head.object] = endpoint_text(txn, head.object) if known is None else known
    return subj, obj


def link_vec_text(pred: str, subj: str, obj: str) -> str:
    """What the vector index embeds for a link (its one vector text, also its context)."""
    words = pred.replace("_", " ")
    return f"{subj} {words} {obj}".strip()


def endpoint_text(txn: Any, n: int) -> str:
    """The text a link's document shows for its end `n` (in its F_ENDPOINT field)."""
    # A higher-order link's endpoint is itself a link: it reads as its predicate.
    head = txn.head(n)
    if head is None:
        return ""
    if type(head) is ConceptHead:
        return head.name
    return txn.symbol_text(head.predicate_id).replace("_", " ")


def _aliases(attrs: dict) -> list[str]:
    out: list[str] = []
    for key in ALIAS_KEYS:
        value = attrs.get(key)
        if isinstance(value, str):
            value = [value]
        if isinstance(value, list):
            for v in value:
                if isinstance(v, str) and v.strip() and v not in out:
                    out.append(v[:MAX_FIELD_CHARS])
    return out[:MAX_ALIASES]


def attribute_text(attrs: dict) -> str:
    """The string values of the attributes (not aliases: they are a field of their own),
    `description` first, nested one level into lists and objects, bounded in size."""
    parts: list[str] = []
    size = 0
    keys = sorted(attrs, key=lambda k: (k != "description", k))
    for key in keys:
        if key in ALIAS_KEYS:
            continue
        for s in _strings(attrs[key], 2):
            s = s[:MAX_FIELD_CHARS]
            parts.append(s)
            size += len(s)
            if size >= MAX_TEXT_CHARS:
                return " ".join(parts)[:MAX_TEXT_CHARS]
    return " ".join(parts)


def _strings(value: Any, depth: int):
    if isinstance(value, str):
        if value:
            yield value
    elif depth > 0 and isinstance(value, list):
        for v in value:
            yield from _strings(v, depth - 1)
    elif depth > 0 and isinstance(value, dict):
        for v in value.values():
            yield from _strings(v, depth - 1)
