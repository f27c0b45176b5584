"""SEARCH MODE (spec §5.2.1, CONTRACT §10): which mode is served, the fallback and its
hint, DESCRIBE PRIMER's account of it, `_score` and THRESHOLD (§5.2.2), the semantic
embedder chosen per database and recorded in it, and `reindex` progress.

Tests marked `needs_extra` skip when the `semantic` extra (wordllama) is not installed.
"""
from __future__ import annotations

import json
import os

import pytest

from nexus import Nexus
from nexus.search import embed, service
from nexus.search.embed import semantic_installed

needs_extra = pytest.mark.skipif(not semantic_installed(),
                                 reason="needs the semantic extra (wordllama)")

GRAPH = """UPSERT {
  CONCEPT ?t { {type: "$ConceptType", name: "Drug"} SET ATTRIBUTES {description: "A drug."} }
  CONCEPT ?a { {type: "Drug", name: "Aspirin"}
               SET ATTRIBUTES {description: "an analgesic medicine that reduces pain and fever"} }
  CONCEPT ?z { {type: "Drug", name: "Zolpidem"}
               SET ATTRIBUTES {description: "a sedative prescribed for insomnia"} }
  CONCEPT ?o { {type: "Drug", name: "Omeprazole"}
               SET ATTRIBUTES {description: "lowers stomach acid and treats heartburn"} } }"""


def run(nx, command, **parameters):
    return nx.execute_kip({"command": command, "parameters": parameters})


def hits(nx, command, **parameters):
    r = run(nx, command, **parameters)
    assert "result" in r, r
    return r["result"]


@pytest.fixture(autouse=True)
def product_default(monkeypatch):
    """These tests are about the product's choice of embedder ("auto" when no option is
    given), not the test suite's default (NEXUS_SEMANTIC=none, tests/conftest.py)."""
    monkeypatch.delenv("NEXUS_SEMANTIC", raising=False)


@pytest.fixture
def plain(monkeypatch):
    """A nexus whose engine has no semantic embedder installed."""
    monkeypatch.setattr(service, "semantic_installed", lambda spec="wordllama": False)
    nx = Nexus.open(None)
    assert "result" in run(nx, GRAPH)
    yield nx
    nx.close()


@pytest.fixture
def semantic():
    nx = Nexus.open(None, semantic="wordllama")
    assert "result" in run(nx, GRAPH)
    yield nx
    nx.close()


# --- without a semantic embedder: every mode is keyword, and says so ---------------------

@pytest.mark.parametrize("mode", ["semantic", "hybrid"])
def test_without_the_extra_semantic_modes_are_served_as_keyword_with_a_hint(plain, mode):
    asked = run(plain, 'SEARCH CONCEPT "aspirn" MODE :m', m=mode)
    keyword = run(plain, 'SEARCH CONCEPT "aspirn" MODE "keyword"')
    assert asked["result"] == keyword["result"] and asked["result"]
    assert '"keyword"' in asked["hint"] and "nexus-kip[semantic]" in asked["hint"]
    assert "hint" not in keyword


def test_without_the_extra_an_omitted_mode_is_keyword_without_a_hint(plain):
    r = run(plain, 'SEARCH CONCEPT "Aspirin"')
    assert r["result"][0]["name"] == "Aspirin" and "hint" not in r


def test_without_the_extra_the_primer_says_what_semantic_falls_back_to(plain):
    primer = hits(plain, "DESCRIBE PRIMER")
    assert primer["search_modes"] == ["keyword"]
    search = primer["extensions"]["search"]
    assert search["default_mode"] == "keyword" and search["semantic_embedder"] is None
    assert '"keyword"' in search["semantic_fallback"]
    assert "nexus-kip[semantic]" in search["semantic_fallback"]


def test_semantic_none_turns_it_off_and_says_so():
    nx = Nexus.open(None, semantic="none")
    try:
        r = run(nx, 'SEARCH CONCEPT "x" MODE "semantic"')
        assert "turned off" in r["hint"]
        assert hits(nx, "DESCRIBE PRIMER")["search_modes"] == ["keyword"]
    finally:
        nx.close()


def test_the_environment_gives_the_default_and_an_option_beats_it(monkeypatch):
    monkeypatch.setenv("NEXUS_SEMANTIC", "none")
    nx = Nexus.open(None)
    try:
        assert nx.search.semantic_choice == "none" and nx.search.semantic is None
    finally:
        nx.close()
    monkeypatch.setattr(service, "semantic_installed", lambda spec="wordllama": False)
    nx = Nexus.open(None, semantic="auto")       # nothing recorded, nothing installed
    try:
        assert nx.search.semantic_choice is None
    finally:
        nx.close()


def test_an_unknown_semantic_embedder_is_refused():
    with pytest.raises(Exception) as info:
        Nexus.open(None, semantic="word2vec")
    assert "word2vec" in str(info.value)


# --- _score and THRESHOLD (§5.2.2) ---------------------------------------------------------

@pytest.mark.parametrize("mode", ["keyword", "semantic", "hybrid"])
def test_scores_are_normalized_descending_and_thresholded(plain, mode):
    for nx in [plain]:      # (the semantic index: test_semantic_scores_...)
        found = hits(nx, 'SEARCH CONCEPT "Aspirin" MODE :m LIMIT 10', m=mode)
        scores = [h["metadata"]["_score"] for h in found]
        assert scores and all(0.0 <= s <= 1.0 for s in scores)
        assert scores == sorted(scores, reverse=True)
        cut = hits(nx, 'SEARCH CONCEPT "Aspirin" MODE :m THRESHOLD :t LIMIT 10', m=mode,
                   t=scores[0])
        assert cut and all(h["metadata"]["_score"] >= scores[0] for h in cut)


def test_over_long_text_is_refused_in_every_mode(plain):
    for mode in ("keyword", "semantic", "hybrid"):
        r = run(plain, "SEARCH CONCEPT :t MODE :m", t="x" * 5000, m=mode)
        assert r["error"]["code"] == "KIP_4002" and r["error"]["hint"]


# --- with the extra ------------------------------------------------------------------------

@needs_extra
@pytest.mark.parametrize("mode", ["semantic", "hybrid"])
def test_semantic_scores_are_normalized_descending_and_thresholded(semantic, mode):
    found = hits(semantic, 'SEARCH CONCEPT "pain" MODE :m LIMIT 10', m=mode)
    scores = [h["metadata"]["_score"] for h in found]
    assert scores and all(0.0 <= s <= 1.0 for s in scores)
    assert scores == sorted(scores, reverse=True)
    cut = hits(semantic, 'SEARCH CONCEPT "pain" MODE :m THRESHOLD :t LIMIT 10', m=mode,
               t=scores[1] if len(scores) > 1 else scores[0])
    assert len(cut) < len(found) or len(found) == 1
    assert all(h["metadata"]["_score"] >= scores[min(1, len(scores) - 1)] for h in cut)


@needs_extra
def test_with_the_extra_all_modes_are_served_and_hybrid_is_the_default(semantic):
    primer = hits(semantic, "DESCRIBE PRIMER")
    assert primer["search_modes"] == ["keyword", "semantic", "hybrid"]
    search = primer["extensions"]["search"]
    assert search["default_mode"] == "hybrid" and search["semantic_fallback"] is None
    assert search["semantic_embedder"].startswith("wordllama/")
    r = run(semantic, 'SEARCH CONCEPT "insomnia" MODE "semantic"')
    assert "hint" not in r


@needs_extra
@pytest.mark.parametrize("query, target", [
    ("headache relief", "Aspirin"),
    ("pill to help me fall asleep", "Zolpidem"),
    ("burning chest after a big dinner", "Omeprazole"),
])
def test_semantic_and_hybrid_find_by_meaning_where_keyword_cannot(semantic, query, target):
    keyword = hits(semantic, 'SEARCH CONCEPT :q WITH TYPE "Drug" MODE "keyword"', q=query)
    assert target not in [h["name"] for h in keyword[:1]]
    for mode in ("semantic", "hybrid"):
        found = hits(semantic, 'SEARCH CONCEPT :q WITH TYPE "Drug" MODE :m LIMIT 3',
                     q=query, m=mode)
        assert found[0]["name"] == target, (mode, found)
        assert 0.0 < found[0]["metadata"]["_score"] <= 1.0


@needs_extra
def test_hybrid_keeps_names_and_typos_first(semantic):
    assert hits(semantic, 'SEARCH CONCEPT "Aspirin"')[0]["metadata"]["_score"] == 1.0
    assert hits(semantic, 'SEARCH CONCEPT "zolpidme"')[0]["name"] == "Zolpidem"


@needs_extra
def test_semantic_index_follows_writes_and_deletes(semantic):
    assert "result" in run(semantic, 'UPSERT { CONCEPT ?c { {type: "Drug", name: "Loratadine"}'
                                     ' SET ATTRIBUTES {description: "an antihistamine for '
                                     'hay fever and allergies"} } }')
    q = 'SEARCH CONCEPT "sneezing from pollen" WITH TYPE "Drug" MODE "semantic" LIMIT 1'
    assert hits(semantic, q)[0]["name"] == "Loratadine"
    run(semantic, 'DELETE CONCEPT ?c DETACH WHERE { ?c {type: "Drug", name: "Loratadine"} }')
    assert all(h["name"] != "Loratadine" for h in hits(semantic, q))


# --- the embedder is chosen per database and recorded in it --------------------------------

@needs_extra
def test_the_choice_is_recorded_in_the_database(tmp_path):
    path = str(tmp_path / "db")
    nx = Nexus.open(path, durable=False, semantic="wordllama")
    assert "result" in run(nx, GRAPH)
    nx.close()
    assert os.path.exists(os.path.join(path, "semantic.json"))
    nx = Nexus.open(path, durable=False)             # "auto": what the database recorded
    try:
        assert nx.search.semantic_choice == "wordllama" and nx.search.semantic is not None
        found = hits(nx, 'SEARCH CONCEPT "headache relief" WITH TYPE "Drug" MODE "semantic"')
        assert found[0]["name"] == "Aspirin"
    finally:
        nx.close()
    nx = Nexus.open(path, durable=False, semantic="none")   # an explicit change is recorded
    nx.close()
    nx = Nexus.open(path, durable=False)
    try:
        assert nx.search.semantic_choice == "none" and nx.search.semantic is None
    finally:
        nx.close()


def test_a_database_recording_an_uninstalled_embedder_falls_back_with_a_hint(tmp_path,
                                                                             monkeypatch):
    path = str(tmp_path / "db")
    nx = Nexus.open(path, durable=False, semantic="none", bootstrap=False)
    with nx.write_session(privileged=True) as session:
        session.txn.aux("vecq").put(service.KEY_SEMANTIC, b"wordllama")
    nx.close()
    monkeypatch.setattr(service, "semantic_installed", lambda spec="wordllama": False)
    nx = Nexus.open(path, durable=False, bootstrap=False)
    try:
        r = run(nx, 'SEARCH CONCEPT "x" MODE "hybrid"')
        assert "'wordllama'" in r["hint"] and "nexus-kip[semantic]" in r["hint"]
    finally:
        nx.close()


@needs_extra
def test_reindex_reports_the_semantic_index_progress(semantic):
    phases = []
    report = semantic.reindex(lambda phase, done, total: phases.append(phase))
    # (the default embedder's typo candidates are gram postings: no n-gram vectors)
    assert "grams" in phases and "semantic vectors" in phases
    assert report["semantic_embedder"].startswith("wordllama/")


@needs_extra
def test_the_model_ships_in_the_package_and_never_downloads(monkeypatch):
    """The embedder loads the model from the installed package's own files: read directly
    where this version of the wheel puts them, and otherwise through `WordLlama.load` with
    downloads disabled and the package's folder as its cache."""
    import wordllama
    monkeypatch.setattr(embed, "_WORDLLAMA", {})
    embedder = embed.WordLlamaEmbedder()
    assert embedder.embed(["a"]).shape == (1, embedder.dim)     # (loaded by the first text)
    assert isinstance(embedder._model, embed._LightWordLlama)
    calls = {}
    real = wordllama.WordLlama.load

    def spy(*args, **kwargs):
        calls.update(kwargs)
        return real(*args, **kwargs)
    monkeypatch.setattr(wordllama.WordLlama, "load", spy)
    monkeypatch.setattr(embed, "_WORDLLAMA", {})
    monkeypatch.setattr(embed, "_TOKENIZER_FILE", "tokenizers/not-in-this-wheel.json")
    embedder = embed.WordLlamaEmbedder()
    assert embedder.embed(["a"]).shape == (1, embedder.dim)
    assert not isinstance(embedder._model, embed._LightWordLlama)
    assert calls["disable_download"] is True
    assert str(calls["cache_dir"]) == os.path.dirname(wordllama.__file__)


@needs_extra
def test_kip_reindex_chooses_the_embedder_and_shows_its_progress(tmp_path, capsys):
    from nexus.cli import main
    path = str(tmp_path / "db")
    nx = Nexus.open(path, durable=False, semantic="none")
    assert "result" in run(nx, GRAPH)
    nx.close()
    assert main(["reindex", "--db", path, "--semantic", "wordllama"]) == 0
    out = capsys.readouterr()
    assert "semantic vectors" in out.err
    assert json.loads(out.out)["semantic_embedder"].startswith("wordllama/")
    nx = Nexus.open(path, durable=False)        # the choice stays with the database
    try:
        assert nx.search.semantic_choice == "wordllama"
    finally:
        nx.close()


@needs_extra
def test_check_covers_the_semantic_index(semantic):
    report = semantic.search.check()
    assert report["ok"], report
    assert report["semantic_missing"] == 0 and report["semantic_orphans"] == 0
    assert report["semantic_lag"] == 0
