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
        pairs = [(g.drug, "Aspirin"), (g.symptom, "Aspirin"), (g.symptom, "Fever"),
                 (g.drug, "Aspirin"), (g.drug, "x" * 300), (999, "Aspirin"), (-1, "Fever")]
        assert r.concept_ids(pairs) == [r.concept_id(t, name) for t, name in pairs]
        assert r.concept_ids(pairs)[:3] == [g.aspirin, None, g.fever]
        assert r.known_heads([]) == [] and r.link_ids([]) == [] and r.out_links_of([]) == {}
        assert r.concept_ids([]) == []


def test_batched_reads_in_a_write_follow_its_own_writes(graph):
    """A write transaction's batched answers (remembered on PostgreSQL) follow what it
    creates, moves and deletes, link by link and concept by concept."""
    g = graph
    with g.store.write() as w:
        new = w.new_id()
        probes = [(g.aspirin, g.treats, g.headache), (new, g.treats, g.headache),
                  (g.ibu, g.treats, g.fever), (g.aspirin, g.treats, new)]
        assert w.link_ids(probes) == [g.l1, None, None, None]
        assert w.concept_ids([(g.drug, "Paracetamol")]) == [None]
        w.create_concept(new, g.drug, "Paracetamol", {}, {})
        assert w.concept_ids([(g.drug, "Paracetamol")]) == [new]
        link = w.new_id()
        w.create_link(link, new, g.treats, g.headache, {}, {})
        assert w.link_ids(probes) == [g.l1, link, None, None]
        assert w.link_id(new, g.treats, g.headache) == link
        w.repoint_link(g.l1, g.ibu, g.fever)
        assert w.link_ids(probes) == [None, link, g.l1, None]
        assert w.delete(link)
        assert w.link_ids(probes) == [None, None, g.l1, None]
        assert [w.link_id(*t) for t in probes] == [None, None, g.l1, None]
        w.abort()
