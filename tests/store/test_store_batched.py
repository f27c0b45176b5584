"""The batched reads answer exactly what the one-element reads answer, element by element
(every backend: on PostgreSQL each is one statement, elsewhere a loop)."""
from __future__ import annotations


def test_batched_reads_equal_the_single_reads(graph):
    g = graph
    elements = [g.aspirin, g.l1, g.headache, g.meta_link, g.aspirin, g.fever]
    with g.store.read() as r:
        assert isinstance(r.prefers_batches(), bool)
        assert r.known_heads(elements) == [r.known_head(n) for n in elements]
        assert r.attributes_of(elements + [10_000]) == \
            [r.attributes(n) for n in elements + [10_000]]
        assert r.metadata_of(elements) == [r.metadata(n) for n in elements]
        triples = [(g.aspirin, g.treats, g.headache), (g.headache, g.treats, g.aspirin),
                   (g.l1, g.source, g.fever), (g.aspirin, g.treats, g.headache),
                   (-1, g.treats, 2**70)]
        assert r.link_ids(triples) == [r.link_id(*t) for t in triples]
        ends = [g.aspirin, g.headache, g.l1, g.fever, 10_000, g.aspirin]
        for p in (None, g.treats, g.source, 999):
            out = {n: list(r.out_links(n, p)) for n in ends}
            assert r.out_links_of(ends, p) == {n: v for n, v in out.items() if v}
            inn = {n: list(r.in_links(n, p)) for n in ends}
            assert r.in_links_of(ends, p) == {n: v for n, v in inn.items() if v}
        assert r.known_heads([]) == [] and r.link_ids([]) == [] and r.out_links_of([]) == {}
