"""The paraphrase set of SEARCH MODE "semantic" (bench/data/paraphrases.json, issue 15).

What the set must be: at least 200 queries, each naming one concept of the set by meaning
only — sharing no content word with the target's name or description. "Content word" is
checked here independently of the engine: every run of letters and digits of three or more
characters that is not a function word, compared by its first five letters (so "sleeping"
and "sleep", "medicine" and "medical" count as shared).

What the engine must do with it (with the `semantic` extra): MODE "semantic" and "hybrid"
find the target among the first 5 hits for most queries, keyword mode for almost none (the
set is not solvable lexically). bench/paraphrase.py records the figures in bench/RESULTS.md.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from nexus import Nexus
from nexus.search.embed import semantic_installed

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "bench" / "data" / "paraphrases.json"
FUNCTION_WORDS = set("""
a an the of to in on for and or with by from at as is are be it its that this which who when
what where how my me i you your we our they their them he she his her something thing things
use used using up down into over under out off one two than then so very can get got make
made go see take keep do does did not no need needs many much more most some any all each
other another way ways being been was were has have had about after before like such only
also just""".split())


def content_words(text: str) -> set[str]:
    return {w[:5] for w in re.findall(r"[a-z0-9]+", text.lower())
            if len(w) >= 3 and w not in FUNCTION_WORDS}


def load() -> dict:
    with open(DATA, encoding="utf-8") as f:
        return json.load(f)


def test_the_set_is_big_enough_and_well_formed():
    data = load()
    keys = [f'{c["type"]}:{c["name"]}' for c in data["concepts"]]
    assert len(keys) == len(set(keys))
    assert len(data["queries"]) >= 200
    assert all(q["target"] in keys for q in data["queries"])
    assert all(c["description"].strip() for c in data["concepts"])


def test_no_query_shares_a_content_word_with_its_target():
    data = load()
    by_key = {f'{c["type"]}:{c["name"]}': c for c in data["concepts"]}
    shared = []
    for q in data["queries"]:
        c = by_key[q["target"]]
        common = content_words(q["query"]) & content_words(f'{c["name"]} {c["description"]}')
        if common:
            shared.append((q["query"], q["target"], sorted(common)))
    assert not shared, shared


def test_the_property_check_catches_shared_words():
    """The checker itself: inflections and case count as shared, function words do not."""
    assert content_words("Sleeping pills") & content_words("a sedative for sleep")
    assert content_words("MEDICINE") & content_words("medical care")
    assert not content_words("a pill for the night") & content_words("the sedative of a")


@pytest.mark.skipif(not semantic_installed(), reason="needs the semantic extra (wordllama)")
def test_semantic_and_hybrid_find_paraphrases_keyword_does_not():
    sys.path.insert(0, str(ROOT))
    from bench.paraphrase import load_paraphrase_graph
    data = load()
    nx = Nexus.open(None, semantic="wordllama")
    try:
        load_paraphrase_graph(nx, data)
        recall = {}
        for mode in ("keyword", "semantic", "hybrid"):
            found = 0
            for q in data["queries"]:
                r = nx.execute_kip_readonly({"command": "SEARCH CONCEPT :q MODE :m LIMIT 5",
                                             "parameters": {"q": q["query"], "m": mode}})
                found += q["target"] in [f'{h["type"]}:{h["name"]}' for h in r["result"]]
            recall[mode] = found / len(data["queries"])
    finally:
        nx.close()
    assert recall["keyword"] <= 0.15, recall
    assert recall["semantic"] >= 0.7 and recall["hybrid"] >= 0.7, recall
