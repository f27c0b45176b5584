"""Where commands go: a local database (`Nexus.open`) or a running `kip serve` (HTTP).

Both backends answer KIP responses exactly as the wire contract shapes them (CONTRACT §1–§2):
`{"result": ..., "next_cursor"?}` or `{"error": {code, name, message, hint, data?}}`. A
failure of the transport itself (connection refused, a body that is not JSON) is reported in
the same error shape with the code `SHELL`, so the shell renders every failure one way.

`execute_batch(commands)` sends several commands in one request (`commands`; the shell looks
up the names of link ends this way) and returns one response per command, or None when the
batch as a whole failed. `load(path, progress)` applies a capsule file: locally through
`Nexus.load_capsules` (the whole file in one transaction), over HTTP by sending the file's
commands one by one with `execute_kip` (each its own transaction; the first error stops the
load). `progress(done, total, unit)` is called as it goes.
"""
from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from . import entry

Response = dict[str, Any]
Progress = Callable[[int, int, str], None]     # (done, total, unit: "bytes" | "commands")


def shell_error(name: str, message: str, hint: str | None = None) -> Response:
    """A failure outside the engine (transport, files), in the KIP error shape."""
    err: dict[str, Any] = {"code": "SHELL", "name": name, "message": message}
    if hint:
        err["hint"] = hint
    return {"error": err}


@dataclass
class LoadReport:
    """What `:load` did: counts by name ("statements", "concepts_created"...) and the first
    error (a KIP response with "error"), if any."""
    counts: dict[str, int] = field(default_factory=dict)
    error: Response | None = None

    def bump(self, key: str, n: int = 1) -> None:
        self.counts[key] = self.counts.get(key, 0) + n

    def add_result(self, result: Any) -> None:
        """Count one KML response (`execute_kip`) of a file sent command by command."""
        self.bump("statements")
        if isinstance(result, dict):
            self.bump("concepts", len(result.get("upsert_concept_nodes") or ()))
            self.bump("propositions", len(result.get("upsert_proposition_links") or ()))
            for key, value in result.items():
                if isinstance(value, int) and not isinstance(value, bool) and key != "blocks":
                    self.bump(key, value)

    def summary(self) -> str:
        """`2 statements, 3 concepts created, 1 proposition` (zero counts left out)."""
        parts = []
        for key, n in self.counts.items():
            if n or key == "statements":
                noun, *rest = key.split("_")
                if n == 1 and noun.endswith("s"):
                    noun = noun[:-1]
                parts.append(" ".join([str(n), noun, *rest]))
        return ", ".join(parts)


class Backend(Protocol):
    label: str

    def execute(self, command: str, parameters: dict[str, Any], *,
                readonly: bool = False) -> Response: ...

    def execute_batch(self, commands: list[dict[str, Any]], *,
                      readonly: bool = True) -> list[Response] | None: ...

    def load(self, path: str, progress: Progress) -> LoadReport: ...

    def close(self) -> None: ...


def batch_answers(response: Response) -> list[Response] | None:
    """The per-command responses of a `commands` batch response, or None on an error."""
    result = response.get("result")
    if "error" in response or not isinstance(result, list):
        return None
    return [r if isinstance(r, dict) else {} for r in result]


def _load_by_commands(backend: Backend, path: str, progress: Progress) -> LoadReport:
    """Send the KIP commands of a file one at a time (each is its own transaction)."""
    report = LoadReport()
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        report.error = shell_error("FileError", f"Cannot read {path}: {exc.strerror or exc}")
        return report
    chunks = [c for c in entry.split_commands(text) if c.kind == "kip"]
    progress(0, len(chunks), "commands")
    for done, chunk in enumerate(chunks, 1):
        response = backend.execute(chunk.text, {})
        if "error" in response:
            err = response["error"]
            if isinstance(err, dict):
                err.setdefault("data", {})["file_line"] = chunk.line
            report.error = response
            return report
        report.add_result(response.get("result"))
        progress(done, len(chunks), "commands")
    return report


class LocalBackend:
    """A nexus database opened in this process."""

    def __init__(self, path: str, *, bootstrap: bool = True,
                 progress: Callable[[str, int, int], None] | None = None) -> None:
        from ..api import Nexus   # imported here: `--url` use never loads the engine
        self.path = path
        self.nexus = Nexus.open(path, bootstrap=bootstrap, progress=progress)
        self.label = os.path.basename(os.path.abspath(path)) or path

    def execute(self, command: str, parameters: dict[str, Any], *,
                readonly: bool = False) -> Response:
        request = {"command": command, "parameters": dict(parameters)}
        if readonly:
            return self.nexus.execute_kip_readonly(request)
        return self.nexus.execute_kip(request)

    def execute_batch(self, commands: list[dict[str, Any]], *,
                      readonly: bool = True) -> list[Response] | None:
        request = {"commands": commands}
        run = self.nexus.execute_kip_readonly if readonly else self.nexus.execute_kip
        return batch_answers(run(request))

    def load(self, path: str, progress: Progress) -> LoadReport:
        return _load_with_engine(self.nexus.load_capsules, path, progress)

    def close(self) -> None:
        self.nexus.close()


def _load_with_engine(load_capsules: Callable[..., Any], path: str,
                      progress: Progress) -> LoadReport:
    """Adapt `Nexus.load_capsules(paths, progress)`: the file is applied in
    one transaction; progress comes as (path, done_bytes, total_bytes); the result is one
    dict of counts per file, or `{"path", "error": <KIP error object>}`."""
    def on_progress(*args: Any) -> None:
        nums = [a for a in args if isinstance(a, int) and not isinstance(a, bool)]
        if len(nums) >= 2:
            progress(nums[-2], nums[-1], "bytes")

    report = LoadReport()
    try:
        outcome = load_capsules([path], on_progress)
    except Exception as exc:  # noqa: BLE001 - a KipError or an OS error from the loader
        to_dict = getattr(exc, "to_dict", None)
        report.error = {"error": to_dict()} if callable(to_dict) else shell_error(
            "LoadError", f"{type(exc).__name__}: {exc}")
        return report
    for item in outcome if isinstance(outcome, list) else [outcome]:
        if not isinstance(item, dict):
            continue
        if "error" in item:
            err = item["error"]
            report.error = {"error": err} if isinstance(err, dict) else shell_error(
                "LoadError", str(err))
            break
        for key, value in item.items():
            # "statements" counts the loader's parse pieces, not the file's statements.
            if isinstance(value, int) and not isinstance(value, bool) and key != "statements":
                report.bump(key, value)
    return report


class HttpBackend:
    """A `kip serve` reached over HTTP: POST {"method", "params"} to /kip, Bearer key."""

    def __init__(self, url: str, api_key: str | None = None, timeout: float = 300.0) -> None:
        url = url.rstrip("/")
        self.endpoint = url if url.endswith("/kip") else url + "/kip"
        self.api_key = api_key
        self.timeout = timeout
        self.label = url.split("://", 1)[-1]

    def execute(self, command: str, parameters: dict[str, Any], *,
                readonly: bool = False) -> Response:
        body = {"method": "execute_kip_readonly" if readonly else "execute_kip",
                "params": {"command": command, "parameters": dict(parameters)}}
        return self._post(body)

    def execute_batch(self, commands: list[dict[str, Any]], *,
                      readonly: bool = True) -> list[Response] | None:
        body = {"method": "execute_kip_readonly" if readonly else "execute_kip",
                "params": {"commands": commands}}
        return batch_answers(self._post(body))

    def _post(self, body: dict[str, Any]) -> Response:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        request = urllib.request.Request(self.endpoint, data=data, headers=headers,
                                         method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as reply:
                raw, status = reply.read(), reply.status
        except urllib.error.HTTPError as exc:   # the body is still a KIP response
            raw, status = exc.read(), exc.code
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            return shell_error("ConnectionError", f"Cannot reach {self.endpoint}: {reason}",
                               "Is `kip serve` running there? Check --url.")
        try:
            response = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            response = None
        if isinstance(response, dict) and ("result" in response or "error" in response):
            return response
        if status == 401:
            return shell_error("Unauthorized", "The server refused the API key (HTTP 401)",
                               "Pass --api-key KEY or set KIP_API_KEY.")
        text = raw.decode("utf-8", "replace").strip()[:200]
        return shell_error("HTTPError", f"HTTP {status} from {self.endpoint}: {text}")

    def load(self, path: str, progress: Progress) -> LoadReport:
        return _load_by_commands(self, path, progress)

    def close(self) -> None:
        pass
