"""The postgresql:// location: what libpq gets, the space, and the masked form that is the
only one ever shown (issue 22: passwords never in errors, logs or DESCRIBE output)."""
from __future__ import annotations

import pytest

pytest.importorskip("psycopg", reason="the postgres extra is not installed")

from nexus.errors import ErrorCode, KipError  # noqa: E402
from nexus.store.pg_conn import PgLocation  # noqa: E402


def test_password_is_masked_in_the_shown_form_and_kept_for_libpq():
    loc = PgLocation("kip:p%40ss-W0rd@db.example:5433/memory?space=team-a&sslmode=require")
    assert loc.space == "team-a"
    assert loc.shown == "postgresql://kip:***@db.example:5433/memory?space=team-a&sslmode=require"
    assert "p%40ss-W0rd" in loc.conninfo and "space=" not in loc.conninfo
    assert "connect_timeout=10" in loc.conninfo        # a default bound on connecting
    assert loc.scrub("auth failed for p%40ss-W0rd") == "auth failed for ***"


def test_a_password_parameter_is_masked_too():
    loc = PgLocation("kip@/memory?host=/run/pg&password=hunter2&connect_timeout=2")
    assert "hunter2" not in loc.shown and "password=***" in loc.shown
    assert "connect_timeout=2" in loc.conninfo and loc.conninfo.count("connect_timeout") == 1
    assert loc.scrub("x hunter2 y") == "x *** y"
    assert loc.space == "default"


@pytest.mark.parametrize("space", ["", "..", "a/b", "UPPER", "x" * 64, "é"])
def test_a_bad_space_is_refused(space):
    with pytest.raises(KipError) as e:
        PgLocation(f"kip@/memory?space={space}")
    assert e.value.code is ErrorCode.KIP_4003
