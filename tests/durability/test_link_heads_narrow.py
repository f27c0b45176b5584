"""A link's head holds its ends in 4 bytes (`codec.LINK_HEAD`: 03 s p o, 13 bytes; element
ids are capped at 2**32 - 1). A database of the previous format (`nexus-store/2`: heads 02
s(8) p(4) o(8), 21 bytes) reads as it is — by its owner, which sets the current format tag
and rewrites nothing, and by a read-only open, which writes nothing — with the same answers,
link reads and a clean `check --deep`; old and new heads live side by side."""
from __future__ import annotations

import lmdb
import pytest

from nexus import Nexus
from nexus.ops.bulk_import import bulk_import
from nexus.ops.check import verify
from nexus.store import codec, link_upgrade
from nexus.store.lmdb_store import LmdbGraphStore
from nexus.store.model import ConceptHead, LinkHead

from .test_link_keys_upgrade import (_answers, _as_an_earlier_version, _links, _made,
                                     _opens_the_same_and_writes)

WIDE = codec.LINK_HEAD_WIDE


def _heads(path: str) -> dict[int, bytes]:
    env = lmdb.open(path, subdir=True, max_dbs=64, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            return {int.from_bytes(k, "big"): v
                    for k, v in txn.cursor(env.open_db(b"head", txn=txn))}
    finally:
        env.close()


def _format(path: str) -> bytes:
    env = lmdb.open(path, subdir=True, max_dbs=64, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            return txn.get(codec.META_FORMAT, db=env.open_db(b"meta", txn=txn))
    finally:
        env.close()


def _with_wide_heads(path: str) -> int:
    """Rewrite the closed database at `path` as the previous version left it: every link
    head in the 21-byte form and the format tag `nexus-store/2`; the number of links."""
    env = lmdb.open(path, subdir=True, max_dbs=64)
    count = 0
    with env.begin(write=True) as txn:
        db = env.open_db(b"head", txn=txn)
        for k, v in list(txn.cursor(db)):
            if v[0] == codec.LINK_TAG:
                _, s, p, o = codec.LINK_HEAD.unpack(v)
                txn.put(k, WIDE.pack(codec.LINK_TAG_WIDE, s, p, o), db=db)
                count += 1
    env.close()
    _as_an_earlier_version(path, codec.FORMAT_TAG_V2)      # the tag, and the log's checkpoint
    return count


def test_new_link_heads_are_13_bytes_by_every_write_path(tmp_path):
    path = str(tmp_path / "db")
    _made(path)                                             # KIP UPSERT
    with Nexus.open(path, semantic="none", bootstrap=False) as nx:
        concepts = [{"type": "Person", "name": f"P{i}"} for i in range(300)]
        links = [{"subject": {"type": "Person", "name": f"P{i}"}, "predicate": "knows",
                  "object": {"type": "Person", "name": f"P{(i * 7 + 1) % 300}"},
                  "metadata": {"source": "test", "confidence": 0.5}} for i in range(300)]
        bulk_import(nx, concepts, links)                    # the column path
        with nx.store.read() as r:
            n_links = sum(1 for n in r.elements() if isinstance(r.head(n), LinkHead))
    heads = _heads(path)
    kinds = {(v[0], len(v)) for v in heads.values() if v[0] != codec.CONCEPT_TAG}
    assert kinds == {(codec.LINK_TAG, 13)}
    assert sum(v[0] == codec.LINK_TAG for v in heads.values()) == n_links >= 305
    with LmdbGraphStore(path) as store, store.read() as r:
        for n, v in heads.items():
            h = r.head(n)
            if v[0] == codec.LINK_TAG:
                assert (h.subject, h.predicate_id, h.object) == codec.LINK_HEAD.unpack(v)[1:]
            else:
                assert isinstance(h, ConceptHead)


def test_both_head_forms_decode_to_the_same_link():
    for s, p, o in ((1, 2, 3), (codec.MAX_ELEMENT_ID, 1 << 31, 7)):
        narrow = codec.link_head_value(s, p, o)
        wide = WIDE.pack(codec.LINK_TAG_WIDE, s, p, o)
        assert len(narrow) == 13 and len(wide) == 21
        assert codec.decode_head(9, narrow) == codec.decode_head(9, wide) == \
            LinkHead(9, s, p, o)
        assert codec.link_ends(narrow) == codec.link_ends(wide) == (s, p, o)
    assert codec.link_ends(codec.concept_head_value(b"\0\0\0\1", b"Ada")) is None
    assert codec.link_ends(codec.link_head_value(1, 2, 3) + b"\0") is None
    assert codec.link_ends(b"\x03" + WIDE.pack(2, 1, 2, 3)[1:]) is None
    with pytest.raises(Exception):
        codec.link_head_value(codec.MAX_ELEMENT_ID + 1, 1, 1)


@pytest.mark.parametrize("wal", [True, False])
def test_a_database_with_wide_heads_reads_the_same_and_gets_the_current_tag(tmp_path, wal):
    path = str(tmp_path / "db")
    answers, links = _made(path)
    n_links = _with_wide_heads(path)
    wide = _heads(path)
    assert n_links >= 5 and _format(path) == codec.FORMAT_TAG_V2
    _opens_the_same_and_writes(path, wal, answers, links)
    assert _format(path) == codec.FORMAT_TAG
    heads = _heads(path)
    # nothing rewritten: the old heads as they were, the new link's narrow
    assert {n: heads[n] for n in wide} == wide
    (new,) = set(heads) - set(wide)
    assert heads[new][0] == codec.LINK_TAG and len(heads[new]) == 13
    with Nexus.open(path, semantic="none", wal=wal, bootstrap=False) as nx:
        assert verify(nx, deep=True)["ok"]
        ada_knows = nx.execute_kip_readonly({"command": 'FIND(?a.name, ?b.name) WHERE { '
                                                        '?a {type: "Person"} (?a, "knows", ?b) '
                                                        '} ORDER BY ?a.name'})["result"]
        assert ("Cy", "Ada") in set(zip(*ada_knows))


def test_a_read_only_open_reads_a_database_with_wide_heads_and_writes_nothing(tmp_path):
    path = str(tmp_path / "db")
    _, links = _made(path)
    _with_wide_heads(path)
    with LmdbGraphStore(path, readonly=True) as store:
        assert _links(store) == links
        with store.read() as r:
            assert store.check_tables(r).report["ok"]
    assert _format(path) == codec.FORMAT_TAG_V2


def test_a_disk_that_refuses_the_tag_leaves_it_to_a_later_open(tmp_path, monkeypatch):
    path = str(tmp_path / "db")
    answers, links = _made(path)
    _with_wide_heads(path)

    def refused(*args, **kwargs):
        raise lmdb.DiskError("No space left on device")
    monkeypatch.setattr(link_upgrade, "convert", refused)
    with Nexus.open(path, semantic="none", bootstrap=False) as nx:      # opens, reads
        assert _links(nx.store) == links
        assert _answers(nx) == answers
    assert _format(path) == codec.FORMAT_TAG_V2
    monkeypatch.undo()
    LmdbGraphStore(path).close()
    assert _format(path) == codec.FORMAT_TAG


def test_a_damaged_link_head_is_reported(tmp_path):
    path = str(tmp_path / "db")
    _made(path)
    heads = _heads(path)
    n = next(n for n, v in heads.items() if v[0] == codec.LINK_TAG)
    env = lmdb.open(path, subdir=True, max_dbs=64)
    with env.begin(write=True) as txn:                      # the tag of the other form
        txn.put(codec.pack_n(n), bytes((codec.LINK_TAG_WIDE,)) + heads[n][1:],
                db=env.open_db(b"head", txn=txn))
    env.close()
    with LmdbGraphStore(path, readonly=True) as store, store.read() as r:
        report = store.check_tables(r).report
    assert not report["ok"]
    assert "heads_undecodable" in str(report) and "spo_orphans" in str(report)
