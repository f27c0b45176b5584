"""Properties of the version log over random command sequences (memory store):

- `FIND … AS OF VERSION k` on the graph equals the same FIND on a graph rebuilt by replaying
  the commands up to k (compared by names and values: ids may differ);
- REVERT of the last command gives back the state before it (modulo `_version` /
  `_updated_at`, which move forward).
"""
from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nexus import Nexus

SCHEMA = '''UPSERT {
  CONCEPT ?d { {type: "$ConceptType", name: "Drug"} SET ATTRIBUTES { description: "a drug" } }
  CONCEPT ?t { {type: "$PropositionType", name: "treats"} SET ATTRIBUTES { description: "t" } }
}'''
NAMES = ["A", "B", "C", "D"]
KEYS = ["a", "b"]

upsert = st.builds(
    lambda name, key, value, with_meta: (
        f'UPSERT {{ CONCEPT ?x {{ {{type: "Drug", name: "{name}"}} SET ATTRIBUTES '
        f'{{ {key}: {value} }} }} }}' + (f' WITH METADATA {{ source: "s{value}" }}'
                                          if with_meta else "")),
    st.sampled_from(NAMES), st.sampled_from(KEYS), st.integers(0, 3), st.booleans())
link = st.builds(
    lambda s, o: (f'UPSERT {{ CONCEPT ?s {{ {{type: "Drug", name: "{s}"}} }} '
                  f'CONCEPT ?o {{ {{type: "Drug", name: "{o}"}} }} '
                  f'PROPOSITION ?l {{ (?s, "treats", ?o) SET ATTRIBUTES {{ w: 1 }} }} }}'),
    st.sampled_from(NAMES), st.sampled_from(NAMES))
drop_key = st.builds(
    lambda name, key: (f'DELETE ATTRIBUTES {{"{key}"}} FROM ?x WHERE {{ ?x {{type: "Drug", '
                       f'name: "{name}"}} }}'),
    st.sampled_from(NAMES), st.sampled_from(KEYS))
drop_concept = st.builds(
    lambda name: (f'DELETE CONCEPT ?x DETACH WHERE {{ ?x {{type: "Drug", name: "{name}"}} }}'),
    st.sampled_from(NAMES))
drop_link = st.builds(
    lambda s: f'DELETE PROPOSITIONS ?l WHERE {{ ?l ({{type: "Drug", name: "{s}"}}, "treats", ?o) }}',
    st.sampled_from(NAMES))
commands = st.lists(st.one_of(upsert, upsert, link, drop_key, drop_concept, drop_link),
                    min_size=1, max_size=12)

NODES = 'FIND(?d.name, ?d.attributes, ?d.metadata.source) WHERE { ?d {type: "Drug"} }'
LINKS = ('FIND(?s.name, ?o.name, ?l.attributes) WHERE { ?l (?s, "treats", ?o) '
         '?s {type: "Drug"} }')


def state(nx: Nexus, suffix: str = "") -> tuple:
    out = []
    for query in (NODES, LINKS):
        response = nx.execute_kip({"command": query + suffix})
        assert "result" in response, response
        columns = response["result"]
        # JSON objects are unordered (RFC 8259): the key order of a restored map is not state.
        out.append(sorted(json.dumps(row, sort_keys=True) for row in zip(*columns))
                   if columns and columns[0] else [])
    return tuple(out)


def fresh() -> Nexus:
    nx = Nexus.open(None)
    assert "result" in nx.execute_kip({"command": SCHEMA})
    return nx


def last_seq(nx: Nexus) -> int:
    return nx.execute_kip({"command": "DESCRIBE HISTORY LIMIT 1"})["result"][0]["seq"]


SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(commands)
def test_as_of_equals_the_graph_rebuilt_by_replay(sequence):
    with fresh() as live, fresh() as replay:
        points = []
        for command in sequence:
            a = live.execute_kip({"command": command})
            b = replay.execute_kip({"command": command})
            assert ("error" in a) == ("error" in b), (a, b)
            points.append((last_seq(live), state(replay)))
        for seq, expected in points:
            assert state(live, f" AS OF VERSION {seq}") == expected, seq
        assert live.check()["ok"]


@SETTINGS
@given(commands, st.one_of(upsert, link, drop_key, drop_concept, drop_link))
def test_revert_of_the_last_command_gives_back_the_state_before_it(prefix, last):
    with fresh() as nx:
        for command in prefix:
            nx.execute_kip({"command": command})
        before = state(nx)
        seq = last_seq(nx)
        response = nx.execute_kip({"command": last})
        if "error" in response or last_seq(nx) == seq:
            return                                  # nothing was written: nothing to undo
        reverted = nx.execute_kip({"command": f'REVERT COMMAND {last_seq(nx)} REASON "test"'})
        assert "result" in reverted, reverted
        assert state(nx) == before
        assert nx.check()["ok"]
