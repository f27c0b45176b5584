"""Reads under a time budget (`Engine.execute_kip_within`), what `kip serve` uses to answer
cheap reads on its event loop: the same answer as `execute_kip_readonly` / `execute_kip` when
the command is done within the budget; None — nothing ran that changed anything — when it is
not, when it writes, or when it is a batch, so that the server runs it again as before."""
from __future__ import annotations

import pytest

from nexus.api import Nexus

from .conftest import SLOW_QUERY, SLOW_RESULT

POINT = 'FIND(?p.name, ?p.attributes.k) WHERE { ?p {type: "Item", name: :name} }'


@pytest.fixture
def nx(tmp_path):
    from .conftest import make_slow_db
    make_slow_db(tmp_path / "db", items=40)
    with Nexus.open(str(tmp_path / "db"), bootstrap=False) as nexus:
        yield nexus


def test_a_read_within_its_budget_answers_as_execute_kip_readonly(nx):
    request = {"command": POINT, "parameters": {"name": "i7"}}
    expected = nx.execute_kip_readonly(request)
    assert expected == {"result": [["i7"], [7]]}
    assert nx.execute_kip_within(request, 60.0) == expected
    assert nx.execute_kip_within(request, 60.0, readonly=False) == nx.execute_kip(request)


def test_errors_are_answered_within_the_budget_too(nx):
    assert nx.execute_kip_within({"command": "FIND(?x) WHERE {"}, 60.0) == \
        nx.execute_kip_readonly({"command": "FIND(?x) WHERE {"})
    assert nx.execute_kip_within({"commandz": POINT}, 60.0) == \
        nx.execute_kip_readonly({"commandz": POINT})


def test_a_read_past_its_budget_is_left_to_the_caller(tmp_path):
    """(A budget never goes past the fast lane: a read under one never waits for a heavy
    slot, nexus.exec.admission.)"""
    from .conftest import make_slow_db
    make_slow_db(tmp_path / "slow", items=200)
    with Nexus.open(str(tmp_path / "slow"), bootstrap=False) as nexus:
        assert nexus.execute_kip_within({"command": SLOW_QUERY}, 0.0) is None
        # the engine is left as it was: the same command runs as usual
        assert nexus.execute_kip_readonly({"command": SLOW_QUERY}) == {
            "result": 200 * 199 // 2}
        assert SLOW_RESULT > 0


def test_a_write_or_a_batch_never_runs_under_a_budget(nx):
    upsert = ('UPSERT { CONCEPT ?n { {type: "Item", name: "new"} SET ATTRIBUTES {k: 1} } }')
    assert nx.execute_kip_within({"command": upsert}, 60.0, readonly=False) is None
    missing = nx.execute_kip_readonly({"command": POINT, "parameters": {"name": "new"}})
    assert missing["error"]["code"] == "KIP_3002"       # not written
    batch = {"commands": [{"command": POINT, "parameters": {"name": "i1"}}]}
    assert nx.execute_kip_within(batch, 60.0) is None
    # refused as execute_kip_readonly refuses it, nothing written
    refused = nx.execute_kip_within({"command": upsert}, 60.0)
    assert refused == nx.execute_kip_readonly({"command": upsert})
    assert refused["error"]["code"] == "KIP_1001"


def _counting(nexus):
    """Count the calls of `nexus.execute_kip_within` (what KipApp tries on its loop)."""
    calls = []
    within = nexus.execute_kip_within

    def counted(*args, **kw):
        calls.append(args[0])
        return within(*args, **kw)
    nexus.execute_kip_within = counted
    return calls


def test_the_server_stops_trying_a_text_on_its_loop_once_it_overran_there(tmp_path):
    """`KipApp` tries a FIND text on its event loop only while it is marked cheap; one that
    overruns the budget there is answered from the pool, the same answer, and not tried on
    the loop again with the same parameter values."""
    import asyncio

    from nexus.server.app import KipApp
    from nexus.server.wire import Call
    from .conftest import make_slow_db
    make_slow_db(tmp_path / "slow", items=200)
    with Nexus.open(str(tmp_path / "slow"), bootstrap=False) as nexus:
        app = KipApp(nexus, audit=None)
        tried = _counting(nexus)
        try:
            app.cheap[SLOW_QUERY] = True        # as if it had been answered in 2 ms
            for _ in range(2):
                response = asyncio.run(app._run("execute_kip_readonly",
                                                {"command": SLOW_QUERY}, Call()))
                assert response == {"result": 200 * 199 // 2}
            assert len(tried) == 1              # overran once, then straight to the pool
            assert (SLOW_QUERY, ()) in app.dear
        finally:
            app.close()


def test_a_text_that_overran_with_several_parameter_values_is_never_tried_again(
        tmp_path, monkeypatch):
    """Each parameter value overruns at most once; after INLINE_STRIKES overruns the text
    goes to the pool whatever its values — cheap ones too."""
    import asyncio

    from nexus.server import app as app_module
    from nexus.server.app import KipApp
    from nexus.server.wire import Call
    from .conftest import make_slow_db
    monkeypatch.setattr(app_module, "INLINE_STRIKES", 2)
    make_slow_db(tmp_path / "slow", items=200)
    with Nexus.open(str(tmp_path / "slow"), bootstrap=False) as nexus:
        app = KipApp(nexus, audit=None)
        tried = _counting(nexus)
        try:
            app.cheap[SLOW_QUERY] = True

            def run(x):
                return asyncio.run(app._run("execute_kip_readonly", {
                    "command": SLOW_QUERY, "parameters": {"x": x}}, Call()))
            assert run(1) == {"result": 200 * 199 // 2}
            assert app.cheap[SLOW_QUERY] is True and len(tried) == 1
            run(1)
            assert len(tried) == 1              # the same values: not tried again
            run(2)
            assert len(tried) == 2 and app.cheap[SLOW_QUERY] is False
            assert run(3) == {"result": 200 * 199 // 2}
            assert len(tried) == 2              # a third value: never tried on the loop
        finally:
            app.close()


def test_a_read_under_a_budget_takes_the_row_path(tmp_path, monkeypatch):
    """The columnar executor has no deadline check inside a step (a predicate's arrays
    built, a numpy pass), so a read under a budget never runs there: its deadline checks
    stay a few thousand units of work apart, even with columns forced."""
    from nexus.exec import columnar
    from .conftest import make_slow_db
    make_slow_db(tmp_path / "db", items=40)
    ran = []
    real = columnar.execute

    def spied(*args, **kwargs):
        ran.append(1)
        return real(*args, **kwargs)
    monkeypatch.setattr(columnar, "execute", spied)
    scan = {"command": 'FIND(?p.name) WHERE { ?p {type: "Item"} } ORDER BY ?p.name LIMIT 5'}
    with Nexus.open(str(tmp_path / "db"), bootstrap=False, columnar="always") as nexus:
        within = nexus.execute_kip_within(scan, 60.0)
        assert ran == []
        expected = nexus.execute_kip_readonly(scan)
        assert ran, "without a budget, columnar='always' runs the columnar executor"
    assert within == expected
    assert len(expected["result"]) == 5
