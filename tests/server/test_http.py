"""The HTTP transport of CONTRACT §1 against a real `kip serve`: routes, auth, body limits,
malformed bodies, JSON-RPC 2.0 framing, status codes."""
from __future__ import annotations

import json
import socket
import time

from nexus import KIP_VERSION

FIND = 'FIND(?t.name) WHERE { ?t {type: "$ConceptType"} } LIMIT 3'


def kip_error(data, code):
    """`data` is a KIP error response with `code` and the CONTRACT §2 fields."""
    assert set(data) == {"error"}, data
    err = data["error"]
    assert err["code"] == code, err
    assert {"code", "name", "message", "hint"} <= set(err), err
    assert err["message"] and err["hint"]
    return err


# --- GET ---------------------------------------------------------------------------------

def test_root_describes_the_server(server):
    status, data, headers = server.request("GET", "/")
    assert status == 200
    assert data["name"] == "nexus" and data["kip_version"] == KIP_VERSION == "1.0-RC11"
    assert isinstance(data["version"], str) and data["version"]
    assert headers["content-type"] == "application/json"


def test_healthz(server):
    status, data, _ = server.request("GET", "/healthz")
    assert status == 200 and data == {"status": "ok"}


def test_unknown_route_and_wrong_verb(server):
    status, data, _ = server.request("GET", "/nope")
    assert status == 404
    kip_error(data, "KIP_1001")
    status, data, headers = server.request("GET", "/kip")
    assert status == 405 and headers["allow"] == "POST"
    kip_error(data, "KIP_1001")


# --- auth --------------------------------------------------------------------------------

def test_auth_missing_wrong_right(server):
    status, data = server.kip(FIND, key=None)
    assert status == 401
    kip_error(data, "KIP_4003")
    status, data = server.kip(FIND, key="wrong-key")
    assert status == 401
    assert "invalid API key" in kip_error(data, "KIP_4003")["message"]
    status, data = server.post({"method": "execute_kip", "params": {"command": FIND}},
                               key=None, headers={"Authorization": f"Basic {server.key}"})
    assert status == 401
    status, data = server.kip(FIND)
    assert status == 200 and isinstance(data["result"], list)


def test_auth_is_checked_before_the_body_is_read(server):
    """A wrong key with a huge announced body is refused at once: the server answers 401
    without waiting for (or reading) the 500 MB it was promised."""
    started = time.monotonic()
    reply = _raw_exchange(server, (f"POST /kip HTTP/1.1\r\nHost: x\r\nContent-Type: "
                                   f"application/json\r\nAuthorization: Bearer wrong\r\n"
                                   f"Content-Length: {500 * 1024 * 1024}\r\n\r\n").encode(),
                          [b"{" + b" " * 65535])
    assert reply.startswith(b"HTTP/1.1 401"), reply[:200]
    assert time.monotonic() - started < 2
    kip_error(json.loads(reply.split(b"\r\n\r\n", 1)[1]), "KIP_4003")


def test_get_routes_need_no_key(server):
    assert server.request("GET", "/")[0] == 200
    assert server.request("GET", "/healthz")[0] == 200


# --- body --------------------------------------------------------------------------------

def _raw_exchange(server, head: bytes, body_parts) -> bytes:
    """Send a request by hand (the server may answer and close before the body is all
    sent: that is the point) and return the start of the response."""
    sock = socket.create_connection((server.host, server.port), timeout=10)
    try:
        sock.sendall(head)
        try:
            for part in body_parts:
                sock.sendall(part)
        except OSError:
            pass
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
            try:
                part = sock.recv(65536)
            except OSError:
                break
            if not part:
                break
            reply += part
        return reply
    finally:
        sock.close()


def test_oversized_body_by_content_length(server):
    size = 2 * 1024 * 1024
    reply = _raw_exchange(server, (f"POST /kip HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                                   f"{server.key}\r\nContent-Length: {size}\r\n\r\n").encode(),
                          [b"{" + b" " * 65535])
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    data = json.loads(reply.split(b"\r\n\r\n", 1)[1])
    kip_error(data, "KIP_4002")
    assert "limit" in data["error"]["message"]


def test_oversized_body_while_streaming(server):
    """Chunked transfer (no Content-Length): the limit is enforced as the body arrives."""
    chunk = b"x" * 65536
    reply = _raw_exchange(server, (f"POST /kip HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                                   f"{server.key}\r\nTransfer-Encoding: chunked\r\n\r\n"
                                   ).encode(),
                          [b"%x\r\n" % len(chunk) + chunk + b"\r\n"] * 40)   # 2.5 MiB
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    kip_error(json.loads(reply.split(b"\r\n\r\n", 1)[1]), "KIP_4002")


def test_malformed_json(server):
    status, data = server.post(None, raw=b'{"method": "execute_kip", "params": {')
    assert status == 400
    kip_error(data, "KIP_1001")
    status, data = server.post(None, raw=b"\xff\xfe garbage")
    assert status == 400
    kip_error(data, "KIP_1001")
    status, data = server.post(None, raw=b"")
    assert status == 400
    kip_error(data, "KIP_1001")


def test_body_must_be_an_object_with_a_known_method(server):
    status, data = server.post("just a string")
    assert status == 400
    kip_error(data, "KIP_1001")
    status, data = server.call("drop_database", {})
    assert status == 400
    err = kip_error(data, "KIP_1001")
    assert "drop_database" in err["message"] and "execute_kip" in err["hint"]
    status, data = server.post({"params": {"command": FIND}})
    assert status == 400
    kip_error(data, "KIP_1001")
    status, data = server.post({"method": "execute_kip", "params": {"command": FIND},
                                "extra": 1})
    assert status == 400
    assert "extra" in kip_error(data, "KIP_1001")["message"]


def test_request_validation_names_the_field(server):
    status, data = server.call("execute_kip", {"command": FIND, "commands": [FIND]})
    assert status == 400
    assert "both" in kip_error(data, "KIP_1001")["message"]
    status, data = server.call("execute_kip", {"cmd": FIND})
    assert status == 400
    assert "cmd" in kip_error(data, "KIP_1001")["message"]
    status, data = server.call("execute_kip", {})
    assert status == 400
    assert "neither" in kip_error(data, "KIP_1001")["message"]


# --- JSON-RPC 2.0 framing ------------------------------------------------------------------

def test_jsonrpc_success_is_framed(server):
    status, data = server.post({"jsonrpc": "2.0", "id": 7, "method": "execute_kip",
                                "params": {"command": FIND}})
    assert status == 200
    assert data["jsonrpc"] == "2.0" and data["id"] == 7
    assert set(data) == {"jsonrpc", "id", "result"}
    assert isinstance(data["result"]["result"], list)


def test_jsonrpc_kip_error_is_the_result(server):
    """The method ran: its KIP response (an error here) is the JSON-RPC result."""
    status, data = server.post({"jsonrpc": "2.0", "id": "a", "method": "execute_kip",
                                "params": {"command": "FIND(?x WHERE"}})
    assert status == 400
    assert data["id"] == "a" and "error" not in data
    kip_error(data["result"], "KIP_1001")


def test_jsonrpc_protocol_errors(server):
    status, data = server.post({"jsonrpc": "2.0", "id": 1, "method": "nope", "params": {}})
    assert status == 400
    assert data["id"] == 1 and data["error"]["code"] == -32601
    assert data["error"]["data"]["code"] == "KIP_1001"
    status, data = server.post(None, raw=b'{"jsonrpc": "2.0", "id": 1, "method": ')
    assert status == 400
    assert data["id"] is None and data["error"]["code"] == -32700
    assert data["error"]["data"]["code"] == "KIP_1001"
    status, data = server.post({"jsonrpc": "1.0", "id": 2, "method": "execute_kip"})
    assert status == 400 and data["error"]["code"] == -32600
    status, data = server.post({"jsonrpc": "2.0", "id": 3, "params": {}})
    assert status == 400 and data["error"]["code"] == -32600


def test_jsonrpc_batch_and_notification(server):
    status, data = server.post([
        {"jsonrpc": "2.0", "id": 1, "method": "execute_kip_readonly",
         "params": {"command": FIND}},
        {"jsonrpc": "2.0", "method": "execute_kip_readonly", "params": {"command": FIND}},
        {"jsonrpc": "2.0", "id": 2, "method": "unknown"},
    ])
    assert status == 200
    assert [d["id"] for d in data] == [1, 2]          # the notification gets no answer
    assert "result" in data[0] and data[1]["error"]["code"] == -32601
    status, data, _ = server.request(
        "POST", "/kip", json.dumps({"jsonrpc": "2.0", "method": "execute_kip_readonly",
                                    "params": {"command": FIND}}).encode(),
        {"Authorization": f"Bearer {server.key}"})
    assert status == 204 and data is None


def test_keep_alive_connection_serves_many_requests(server):
    conn = server.connect()
    try:
        body = json.dumps({"method": "execute_kip_readonly",
                           "params": {"command": FIND}}).encode()
        for _ in range(20):
            conn.request("POST", "/kip", body, {"Authorization": f"Bearer {server.key}"})
            resp = conn.getresponse()
            assert resp.status == 200
            assert "result" in json.loads(resp.read())
    finally:
        conn.close()
