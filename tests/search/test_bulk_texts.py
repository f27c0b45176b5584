"""A bulk load's texts counted many at once give what the per-document path gives for each:
`tokens_many` = `tokens`, `norm_names` = `norm_name`, `concept_texts_many` =
`concept_texts`, the load's table of counted texts = `count_text`, the gram columns =
`_postings_of` (the lexical and gram rows of a load must be the same bytes either way)."""
from __future__ import annotations

import random

from nexus.search import gram_index, lexical_terms
from nexus.search.text import (concept_texts, concept_texts_many, norm_name, norm_names,
                               tokens, tokens_many)

TRICKY = [
    "", " ", "Aspirin", "aspirin tablet", "MedicalDevice", "HTTPServer", "aB_cD",
    "snake_case_name", "Non-Steroidal  Drug", "Ångström café", "ﬁne print", "İstanbul",
    "日本語のテキスト", "a\tb\nc\rd", "12abC", "ABc", "ΣΑΣ", "K\u0301elvin", "x" * 120 + " yy",
    "y" * 97, "\x01a\x7fb", "a\x00b", "don't-stop", "C++ / C#", "e.g. 3.5mg", "UPPER lower",
]


def _random_texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    alphabet = "aBz19 _-.\x00\téÇ日Zq'"
    return ["".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 14)))
            for _ in range(n)]


def test_tokens_many_are_the_tokens_of_each_text():
    for texts in (TRICKY, _random_texts(3000, 1), ["plain ascii words"] * 5 + TRICKY, [],
                  ["only ascii", "NoCamel here"], ["z" * 200]):
        for camel in (False, True):
            assert tokens_many(texts, camel) == [tokens(t, camel=camel) for t in texts]


def test_norm_names_are_the_norm_name_of_each():
    texts = TRICKY + _random_texts(2000, 2) + ["word " * 80]
    assert norm_names(texts) == [norm_name(t) for t in texts]


def test_concept_texts_many_are_the_concept_texts_of_each():
    attrs = [
        None, {}, {"description": "a pain killer"}, {"description": ""},
        {"risk": 3, "formula": "H2O", "approved": False, "description": "x"},
        {"country": "France", "birth_year": 1950, "occupation": "chemist"},
        {"aliases": ["ASA", "acetylsalicylic acid"], "description": "d"},
        {"alias": "ASA", "note": "n"}, {"tags": ["a", "b", ["c"]], "info": {"k": "v"}},
        {"b": "second", "a": "first", "description": "zero"}, {"description": 5},
        {"long": "x" * 2500, "longer": "y" * 2500, "description": "z" * 1500},
        {"p": "q" * 1999, "r": "s" * 1999, "t": "u" * 1999, "v": "w" * 10},
        {"b": "second", "a": "first", "description": "zero"},
    ]
    names = [f"Name {i}" for i in range(len(attrs))]
    assert concept_texts_many(names, attrs) == \
        [concept_texts(n, a or {}) for n, a in zip(names, attrs)]


def test_the_loads_table_counts_each_text_as_count_text_does():
    lexical_terms.drop_caches()
    table = lexical_terms.LOAD_TEXTS
    try:
        for camel in (False, True):
            texts = TRICKY + ["word " * 450, "a a b a c b", "Beta alpha beta ALPHA"]
            rows = table.rows_of(camel, texts + texts[:3])
            assert rows[-3:] == rows[:3]
            starts, sizes, codes, reps = table.arrays()
            for text, row in zip(texts, rows):
                size, counted = lexical_terms.count_text(text, camel)
                got = [(table.terms[c], r) for c, r in zip(
                    codes[starts[row]:starts[row + 1]].tolist(),
                    reps[starts[row]:starts[row + 1]].tolist())]
                assert (int(sizes[row]), got) == (size, list(counted)), text
    finally:
        lexical_terms.drop_caches()


def test_the_loads_table_stays_exact_over_many_chunks():
    """Chunk after chunk (the table's arrays growing past their room many times, and the
    rows of both camel kinds interleaved), every row reads what `count_text` counts, and
    arrays taken before a later chunk still read what they did."""
    lexical_terms.drop_caches()
    table = lexical_terms.LOAD_TEXTS
    try:
        rng = random.Random(7)
        words = ["alpha", "Beta", "gammaRay", "delta", "EPS", "zeta9", "été", "x"]
        seen: list[tuple[bool, str, int]] = []
        taken = []
        for chunk in range(60):
            camel = chunk % 3 == 0
            texts = [" ".join(rng.choice(words) for _ in range(rng.randrange(0, 30)))
                     + f" w{chunk}x{i}" for i in range(rng.randrange(1, 90))]
            rows = table.rows_of(camel, texts + texts[:2])
            assert rows[-2:] == rows[:2]
            seen += [(camel, t, r) for t, r in zip(texts, rows)]
            arrays = table.arrays()
            taken.append((arrays, [a.copy() for a in arrays]))
        starts, sizes, codes, reps = table.arrays()
        assert len(starts) == len(sizes) + 1 == len(seen) + 1
        for camel, text, row in seen:
            size, counted = lexical_terms.count_text(text, camel)
            got = [(table.terms[c], r) for c, r in zip(
                codes[starts[row]:starts[row + 1]].tolist(),
                reps[starts[row]:starts[row + 1]].tolist())]
            assert (int(sizes[row]), got) == (size, list(counted)), text
        for arrays, copies in taken:
            for a, c in zip(arrays, copies):
                assert a.tolist() == c.tolist()
    finally:
        lexical_terms.drop_caches()


def test_gram_columns_are_the_postings_of_each_concept():
    added = {8: (3, ["aspirin", "asa"]), 9: (4, []), 12: (3, ["willow bark extract"]),
             13: (5, ["a", "b c", "d", "e", "f", "g", "h", "i", "j"])}
    names, codes, keys, weights, groups = gram_index._columns(added)
    got = list(zip([names[c] for c in codes.tolist()], keys.tolist(), weights.tolist(),
                   groups.tolist()))
    want = [(g, key, w, added[n][0]) for n in added
            for g, key, w in gram_index._postings_of(n, added[n][1])]
    assert got == want
