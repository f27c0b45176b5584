"""The spaces side of `kip serve --spaces DIR` (nexus.server): the keys file (`--keys FILE`:
which spaces a Bearer key reaches and in which mode, reread on SIGHUP) and the routes
`POST /v1/{space}/kip` and `/v1/admin/spaces`, as a mixin of `KipApp`
(nexus/server/app.py), which owns the auth, the body reading and the JSON-RPC handling these
routes hand the request to.
"""
from __future__ import annotations

import asyncio
import hmac
import json
import re
import sys
from typing import Any, Callable

from ..errors import ErrorCode, KipError
from ..spaces import Spaces, check_name, unknown_space
from .pool import WorkerPool
from .wire import Call, Reject, asks_to_write, kip_error, loads

SPACE_ROUTE = re.compile(r"/v1/([^/]*)/kip/?")
_MODES = ("read", "write", "admin")


def bearer(scope: dict) -> bytes:
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, token = value.partition(b" ")
            return token.strip() if scheme.lower() == b"bearer" else b""
    return b""


class Grant:
    """What one key may do: its spaces (a set, or None for all) and its mode."""

    def __init__(self, spaces: frozenset[str] | None, mode: str) -> None:
        self.spaces, self.mode = spaces, mode

    def covers(self, name: str) -> bool:
        return self.spaces is None or name in self.spaces


class Keys:
    """The `--keys FILE` table, `{"<key>": {"spaces": [...] | "*", "mode": ...}}`;
    `reload()` rereads it (SIGHUP), keeping the old table if the file is now invalid."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.table: dict[bytes, Grant] = {}
        self.reload(strict=True)

    def reload(self, strict: bool = False) -> None:
        try:
            with open(self.path, "rb") as f:
                raw = json.loads(f.read())
            table: dict[bytes, Grant] = {}
            if not isinstance(raw, dict):
                raise ValueError("the keys file must be a JSON object")
            for key, entry in raw.items():
                if not isinstance(entry, dict) or not key.strip():
                    raise ValueError(f"bad entry for a key in {self.path}")
                spaces, mode = entry.get("spaces"), entry.get("mode", "read")
                if mode not in _MODES:
                    raise ValueError(f"mode must be one of {_MODES}, not {mode!r}")
                if spaces == "*":
                    table[key.strip().encode()] = Grant(None, mode)
                elif isinstance(spaces, list) and all(isinstance(s, str) for s in spaces):
                    table[key.strip().encode()] = Grant(frozenset(spaces), mode)
                else:
                    raise ValueError('"spaces" must be a list of names or "*"')
        except (OSError, ValueError) as exc:
            if strict:
                raise ValueError(f"cannot read the keys file {self.path}: {exc}") from None
            sys.stderr.write(f"nexus: keys not reloaded, {self.path}: {exc}\n")
            return
        self.table = table

    def grant(self, given: bytes) -> Grant | None:
        found = None
        for key, grant in self.table.items():
            if hmac.compare_digest(given, key):
                found = grant
        return found


class SpaceRoutes:
    """The /v1 routes of `KipApp` (see the module doc)."""

    # Provided by KipApp (nexus/server/app.py).
    spaces: Spaces | None
    keys: Keys | None
    pool: WorkerPool
    shutting_down: bool

    def _check_auth(self, headers: list[tuple[bytes, bytes]]) -> None:
        raise NotImplementedError

    async def _read_body(self, scope: dict, receive: Callable) -> bytes:
        raise NotImplementedError

    async def _handle_body(self, body: bytes, call: Call) -> tuple[int, Any]:
        raise NotImplementedError

    async def route_admin(self, name: str, scope: dict, receive: Callable
                           ) -> tuple[int, Any, list[tuple[bytes, bytes]]]:
        """GET /v1/admin/spaces (list), POST /v1/admin/spaces {"name"} (create),
        DELETE /v1/admin/spaces/{name} (drop). With --keys only an `admin` key may create or
        drop, and a list shows only the key's spaces."""
        spaces = self.spaces
        assert spaces is not None
        verb = scope["method"]
        grant: Grant | None = None
        if self.keys is not None:
            grant = self.keys.grant(bearer(scope))
            if grant is None:
                raise Reject(401, kip_error(ErrorCode.KIP_4003,
                                              "Unauthorized: missing or invalid API key",
                                              "Send `Authorization: Bearer <key>`."))
        else:
            self._check_auth(scope["headers"])
        loop = asyncio.get_running_loop()
        if verb == "GET" and not name:
            names = await loop.run_in_executor(self.pool, spaces.names)
            return 200, {"result": [n for n in names if grant is None or grant.covers(n)]}, []
        if grant is not None and grant.mode != "admin":
            raise Reject(403, kip_error(ErrorCode.KIP_4003,
                                          "Forbidden: creating and dropping spaces needs an "
                                          "admin key", "Use a key whose mode is \"admin\"."))
        try:
            if verb == "POST" and not name:
                body = await self._read_body(scope, receive)
                try:
                    request = loads(body)
                except ValueError as exc:
                    raise Reject(400, kip_error(ErrorCode.KIP_1001, f"Invalid JSON: {exc}",
                                                  'Send {"name": "SPACE"}.')) from None
                new = check_name(request.get("name") if isinstance(request, dict) else None)
                created = await loop.run_in_executor(self.pool, spaces.create, new)
                return 200, {"result": {"name": new, "created": created}}, []
            if verb == "DELETE" and name:
                check_name(name)
                if grant is not None and not grant.covers(name):
                    raise unknown_space(name)
                dropped = await loop.run_in_executor(self.pool, spaces.drop, name)
                if not dropped:
                    raise unknown_space(name)
                return 200, {"result": {"name": name, "dropped": True}}, []
        except KipError as exc:
            status = 404 if exc.message.startswith("No space") else exc.code.http_status
            raise Reject(status, exc.to_dict()) from None
        raise Reject(405, kip_error(ErrorCode.KIP_1001, f"{verb} {scope['path']} is not "
                                      f"allowed", "GET or POST /v1/admin/spaces, DELETE "
                                      "/v1/admin/spaces/NAME."))

    async def route_space(self, name: str, scope: dict, receive: Callable, call: Call
                           ) -> tuple[int, Any, list[tuple[bytes, bytes]]]:
        """POST /v1/{space}/kip: the /kip handling over the space's own store. A key that
        does not cover the space gets exactly the answer of a space that does not exist."""
        if scope["method"] != "POST":
            raise Reject(405, kip_error(ErrorCode.KIP_1001,
                                          f"{scope['method']} {scope['path']} is not allowed",
                                          "Send requests as POST with a JSON body."),
                          [(b"allow", b"POST")])
        if self.shutting_down:
            raise Reject(503, kip_error(ErrorCode.KIP_4003, "The server is shutting down",
                                          "Retry the request in a moment."),
                          [(b"connection", b"close"), (b"retry-after", b"1")])
        spaces = self.spaces
        assert spaces is not None
        try:
            check_name(name)
        except KipError as exc:
            raise Reject(400, exc.to_dict()) from None
        if self.keys is not None:
            grant = self.keys.grant(bearer(scope))
            if grant is None:
                raise Reject(401, kip_error(ErrorCode.KIP_4003,
                                              "Unauthorized: missing or invalid API key",
                                              "Send `Authorization: Bearer <key>`."))
            if not grant.covers(name):
                raise Reject(404, unknown_space(name).to_dict())
            call.read_only = grant.mode == "read"
            create = spaces.auto_create and not call.read_only
        else:
            self._check_auth(scope["headers"])
            create = spaces.auto_create
        body = await self._read_body(scope, receive)
        # --auto-create: only a request that writes creates its missing space; a read of a
        # missing space answers as missing (and leaves no trace on disk).
        create = create and not spaces.exists(name) and asks_to_write(body)
        loop = asyncio.get_running_loop()
        held = spaces.acquire(name, create=create)
        try:
            call.nexus = await loop.run_in_executor(self.pool, held.__enter__)
        except KipError as exc:
            raise Reject(404, exc.to_dict()) from None
        call.audit = spaces.audit_log(name)
        try:
            status, payload = await self._handle_body(body, call)
        finally:
            await loop.run_in_executor(self.pool, held.__exit__, None, None, None)
        return status, payload, []
