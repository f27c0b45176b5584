"""HTTP/1.1 framing of `POST /kip` against a real `kip serve` over raw sockets: pipelined
requests answered in order whichever way each is answered (on the event loop, in the worker
pool, or by the ASGI app for the other routes), keep-alive and HTTP/1.0, `Expect:
100-continue`, chunked bodies in pieces, refusals that close the connection, the access
log's client behind a loopback proxy (RFC 9112 §9.3: a server answers pipelined requests in
the order received; RFC 9110 §10.1.1: 100 Continue)."""
from __future__ import annotations

import json
import socket
import time

FIND = 'FIND(?t.name) WHERE { ?t {type: "$ConceptType"} } LIMIT 1'


def _connect(server) -> socket.socket:
    return socket.create_connection((server.host, server.port), timeout=30)


def _post(server, payload, *, key=True, path="/kip", version="1.1", extra=b"",
          body: bytes | None = None) -> bytes:
    data = body if body is not None else json.dumps(payload).encode()
    head = (f"POST {path} HTTP/{version}\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n").encode()
    if key:
        head += f"Authorization: Bearer {server.key}\r\n".encode()
    return head + extra + b"\r\n" + data


def _rpc(command: str, rpc_id: int, parameters: dict | None = None) -> dict:
    params: dict = {"command": command}
    if parameters:
        params["parameters"] = parameters
    return {"jsonrpc": "2.0", "id": rpc_id, "method": "execute_kip_readonly",
            "params": params}


class _Reader:
    """HTTP/1.1 responses read off a socket, one at a time (Content-Length framed)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buf = sock, b""

    def _fill(self) -> bool:
        part = self.sock.recv(65536)
        self.buf += part
        return bool(part)

    def head(self) -> tuple[int, dict[str, str]] | None:
        while b"\r\n\r\n" not in self.buf:
            if not self._fill():
                return None
        raw, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        return status, headers

    def response(self) -> tuple[int, dict[str, str], bytes] | None:
        head = self.head()
        if head is None:
            return None
        status, headers = head
        size = int(headers.get("content-length", "0"))
        while len(self.buf) < size:
            if not self._fill():
                raise AssertionError(f"the body ended early: {self.buf!r}")
        body, self.buf = self.buf[:size], self.buf[size:]
        return status, headers, body

    def closed(self) -> bool:
        """Whether the server closed the connection (nothing more comes)."""
        try:
            return not self.buf and not self._fill()
        except ConnectionResetError:
            return True


def test_pipelined_requests_are_answered_in_order(server):
    """Five requests in one write: a text never seen (answered in the worker pool), a
    GET (the ASGI app), invalid JSON, a text seen cheap (answered on the loop), a JSON-RPC
    batch: the answers come back in the order sent."""
    seen = 'FIND(?t.name) WHERE { ?t {type: "$ConceptType", name: :n} }'
    for _ in range(3):          # answered in the pool, then cheap: tried on the loop
        assert server.kip(seen, {"n": "Person"}, readonly=True)[0] == 200
    fresh = f'FIND(?t.name) WHERE {{ ?t {{type: "$ConceptType"}} }} LIMIT {time.time_ns() % 97 + 2}'
    sock = _connect(server)
    try:
        sock.sendall(_post(server, _rpc(fresh, 1))
                     + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                     + _post(server, None, body=b'{"jsonrpc": "2.0", "id": 3, ')
                     + _post(server, _rpc(seen, 4, {"n": "Person"}))
                     + _post(server, [_rpc(FIND, 5), _rpc(seen, 6, {"n": "Person"})],
                             path="/kip/"))
        reader = _Reader(sock)
        answers = [reader.response() for _ in range(5)]
    finally:
        sock.close()
    assert [a[0] for a in answers if a] == [200, 200, 400, 200, 200], answers
    first, health, bad, cheap, batch = (json.loads(a[2]) for a in answers)
    assert first["id"] == 1 and len(first["result"]["result"]) >= 2
    assert health == {"status": "ok"}
    assert bad["id"] is None and bad["error"]["code"] == -32700
    assert cheap == {"jsonrpc": "2.0", "id": 4, "result": {"result": ["Person"]}}
    assert [item["id"] for item in batch] == [5, 6]


def test_keep_alive_serves_many_requests_on_one_connection(server):
    sock = _connect(server)
    try:
        reader = _Reader(sock)
        for rpc_id in range(4):
            sock.sendall(_post(server, _rpc(FIND, rpc_id)))
            status, headers, body = reader.response()
            assert status == 200 and json.loads(body)["id"] == rpc_id
            assert headers["content-type"] == "application/json"
            assert "connection" not in headers and "date" in headers
    finally:
        sock.close()


def test_http_1_0_is_answered_then_closed(server):
    sock = _connect(server)
    try:
        sock.sendall(_post(server, _rpc(FIND, 9), version="1.0"))
        reader = _Reader(sock)
        status, headers, body = reader.response()
        assert status == 200 and json.loads(body)["id"] == 9
        assert headers["connection"] == "close"
        assert reader.closed()
    finally:
        sock.close()


def test_expect_100_continue_once_admitted(server):
    """The interim answer comes after the headers are accepted, before the body is sent;
    a refused request gets its refusal instead, and the connection is closed."""
    body = json.dumps(_rpc(FIND, 11)).encode()
    request = _post(server, None, body=body, extra=b"Expect: 100-continue\r\n")
    head, _ = request.split(b"\r\n\r\n", 1)
    sock = _connect(server)
    try:
        sock.sendall(head + b"\r\n\r\n")
        reader = _Reader(sock)
        assert reader.head() == (100, {})
        sock.sendall(body)
        status, _, answer = reader.response()
        assert status == 200 and json.loads(answer)["id"] == 11
    finally:
        sock.close()
    refused = _post(server, None, body=body, key=False, extra=b"Expect: 100-continue\r\n")
    sock = _connect(server)
    try:
        sock.sendall(refused.split(b"\r\n\r\n", 1)[0] + b"\r\n\r\n")
        reader = _Reader(sock)
        status, headers, answer = reader.response()
        assert status == 401 and json.loads(answer)["error"]["code"] == "KIP_4003"
        assert headers["connection"] == "close" and reader.closed()
    finally:
        sock.close()


def test_a_refusal_closes_the_connection_and_what_was_pipelined_after_it(server):
    sock = _connect(server)
    try:
        sock.sendall(_post(server, _rpc(FIND, 1), key=False) + _post(server, _rpc(FIND, 2)))
        reader = _Reader(sock)
        status, headers, _ = reader.response()
        assert status == 401 and headers["connection"] == "close"
        assert reader.closed()
    finally:
        sock.close()


def test_chunked_body_in_pieces(server):
    """A chunked body that arrives in several writes, the request line and headers in
    another: one request, answered once the last chunk is in."""
    payload = json.dumps(_rpc(FIND, 21)).encode()
    parts = [payload[:7], payload[7:30], payload[30:]]
    sock = _connect(server)
    try:
        sock.sendall(f"POST /kip HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {server.key}\r\n"
                     f"Transfer-Encoding: chunked\r\n\r\n".encode())
        for part in parts:
            time.sleep(0.05)
            sock.sendall(b"%x\r\n%s\r\n" % (len(part), part))
        sock.sendall(b"0\r\n\r\n")
        status, _, body = _Reader(sock).response()
        assert status == 200 and json.loads(body)["id"] == 21
    finally:
        sock.close()


def test_the_other_routes_and_forms_still_answer(server):
    """What the lean path leaves to the ASGI app: a query string on /kip, other verbs,
    HEAD, unknown routes."""
    sock = _connect(server)
    try:
        sock.sendall(_post(server, _rpc(FIND, 31), path="/kip?trace=1")
                     + b"GET /kip HTTP/1.1\r\nHost: x\r\n\r\n"
                     + b"POST /nope HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        reader = _Reader(sock)
        first, second, third = (reader.response() for _ in range(3))
    finally:
        sock.close()
    assert first[0] == 200 and json.loads(first[2])["id"] == 31
    assert second[0] == 405 and second[1]["allow"] == "POST"
    assert third[0] == 404 and json.loads(third[2])["error"]["code"] == "KIP_1001"


def test_access_log_names_the_client_behind_a_loopback_proxy(server):
    """uvicorn trusts X-Forwarded-For from 127.0.0.1 (its proxy-headers default): the
    access-log line of a /kip request names the forwarded client, as for any route."""
    sock = _connect(server)
    try:
        sock.sendall(_post(server, _rpc(FIND, 41),
                           extra=b"X-Forwarded-For: 203.0.113.9\r\n"))
        assert _Reader(sock).response()[0] == 200
    finally:
        sock.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if any(line.get("client") == "203.0.113.9" and line.get("http") == "POST /kip"
               and line.get("status") == 200 for line in server.log_lines()):
            return
        time.sleep(0.05)
    raise AssertionError("no access-log line with the forwarded client")
