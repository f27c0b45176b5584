"""The agent session of tests/server/test_agent_session.py (a client written like the KIP
ecosystem's `execute_kip.py`: stdlib urllib, Bearer key, `{"method", "params"}`), run
against `/v1/{space}/kip` of a spaces server with a key scoped to that space; the session's
schema and memories stay in its space."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

_SESSION = Path(__file__).resolve().parents[1] / "server" / "test_agent_session.py"


def _session_module():
    spec = importlib.util.spec_from_file_location("agent_session_client", _SESSION)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_an_agent_session_against_a_space(spaces_server, tmp_path):
    session = _session_module()
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"agent-key": {"spaces": ["agent"], "mode": "write"},
                                "other-key": {"spaces": ["other"], "mode": "write"}}))
    server = spaces_server("--auto-create", "--keys", str(keys))
    base = f"http://{server.host}:{server.port}"

    def client(space: str, key: str):
        def call(*args, **kw):
            response = session.execute_kip(f"{base}/v1/{space}/kip", key, *args, **kw)
            session.check_shape(response)
            for item in response.get("result", []) if kw.get("commands") else []:
                session.check_shape(item)
            return response
        return call
    # the space does not exist yet: its first write (the session's schema) creates it
    assert "error" in client("agent", "agent-key")("DESCRIBE PRIMER", readonly=True)
    client("agent", "agent-key")('UPSERT { CONCEPT ?d { {type: "Domain", name: "Work"} } }')
    session.test_agent_session(client("agent", "agent-key"))
    other = client("other", "other-key")
    other('UPSERT { CONCEPT ?d { {type: "Domain", name: "Elsewhere"} } }')
    types = other("DESCRIBE CONCEPT TYPES", readonly=True)["result"]
    assert "Person" in types and "Project" not in types         # the session's schema
    assert "error" in client("agent", "other-key")("DESCRIBE PRIMER", readonly=True)
