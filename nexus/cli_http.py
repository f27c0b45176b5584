"""The `kip` commands' side over HTTP (`--url`): one JSON-RPC call to a running `kip serve`,
a capsule loaded command by command, a graph exported page by page through EXPORT — and what
every `kip` command shares with them: the CLI's error type, the API key and the progress
reporter. `nexus.cli` parses the arguments and runs the commands on a local database.
"""
from __future__ import annotations

import argparse
import json
import os
from typing import Any, Iterable

from .errors import KipError
from .version import KIP_VERSION, __version__


class CliError(Exception):
    """A usage or environment error: printed as `kip: <message>`, exit status 2."""


def api_key_of(args: argparse.Namespace) -> str | None:
    return args.api_key or os.environ.get("KIP_API_KEY") or None


def progress_reporter(what: str, **options: Any) -> Any:
    """A progress reporter on stderr (`nexus.shell.progress.Progress`)."""
    from .shell.progress import Progress
    return Progress(f"kip {what}", **options)




def post_kip(url: str, method: str, params: Any, api_key: str | None = None,
             timeout: float = 300.0) -> dict[str, Any]:
    """POST one call to the `kip serve` endpoint `url` (`nexus.shell.target.kip_endpoint`;
    stdlib only); returns the KIP response. HTTP error statuses still carry a KIP response
    body, which is returned as is."""
    import urllib.error
    import urllib.request
    body = json.dumps({"method": method, "params": params}).encode("utf-8")
    req = urllib.request.Request(url, data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        data = exc.read()
        try:
            return json.loads(data)
        except ValueError:
            raise CliError(f"{url}: HTTP {exc.code}: {data[:200]!r}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise CliError(f"cannot reach {url}: {getattr(exc, 'reason', exc)}") from None


def load_over_http(args: argparse.Namespace) -> list[dict[str, Any]]:
    """`kip load --url`: each file's commands sent one by one to the endpoint with
    `execute_kip`, as the shell's `:load` sends them (`nexus.shell.backend`): every command
    is its own transaction there, so the first failing command stops its file with the
    commands before it applied (the report counts them); then the next file."""
    if args.privileged:
        raise CliError("--privileged loads into a database on this machine only (--db DIR or "
                       "--space NAME --spaces DIR): a server never runs a request privileged")
    from .api import capsule_files
    from .shell.backend import HttpBackend
    try:
        files = capsule_files(args.paths)
    except KipError as err:
        raise CliError(err.message) from None
    backend = HttpBackend(args.endpoint, api_key_of(args))
    report: list[dict[str, Any]] = []
    with progress_reporter("load", unit="commands") as progress:
        for path in files:
            def step(done: int, total: int, unit: str, path: str = path) -> None:
                progress(path, done, total)
            outcome = backend.load(path, step)
            entry: dict[str, Any] = {"path": path, **outcome.counts}
            if outcome.error is not None:
                entry["error"] = outcome.error.get("error")
            report.append(entry)
    return report


EXPORT_PAGE = 1000     # elements per EXPORT page over HTTP (the statement's own cap)


def export_over_http(args: argparse.Namespace) -> Iterable[str]:
    """`kip export --url`: the whole graph through the EXPORT statement (spec §5.3), page by
    page: every element whose type is a concept type or whose predicate is a proposition
    type — which is every element, less the Genesis core EXPORT leaves out as `kip export`
    does. Each page is its own read on the server (not one snapshot)."""
    if args.domain is not None:
        raise CliError("kip export --domain needs the database itself (--db DIR or --space "
                       "NAME --spaces DIR); over --url, export what a pattern binds with "
                       "kip exec --url URL 'EXPORT ?x WHERE { ... }'")
    key = api_key_of(args)

    def ask(command: str, parameters: dict[str, Any]) -> dict[str, Any]:
        response = post_kip(args.endpoint, "execute_kip_readonly",
                            {"command": command, "parameters": parameters}, key)
        if "error" in response:
            err = response["error"] if isinstance(response["error"], dict) else {}
            hint = f"\n  hint: {err['hint']}" if err.get("hint") else ""
            raise CliError(f"export from {args.endpoint} failed: {err.get('code')} "
                           f"{err.get('message')}{hint}")
        return response

    def names(kind: str) -> list[str]:
        found: list[str] = []
        cursor = None
        while True:
            page = 'CURSOR :c' if cursor else ''
            response = ask(f'FIND(?t.name) WHERE {{ ?t {{type: "{kind}"}} }} {page}',
                           {"c": cursor} if cursor else {})
            found += response.get("result") or []
            cursor = response.get("next_cursor")
            if not cursor:
                return found
    types, predicates = names("$ConceptType"), names("$PropositionType")
    params: dict[str, Any] = {f"t{i}": t for i, t in enumerate(types)}
    params.update({f"p{i}": p for i, p in enumerate(predicates)})
    branches = [f"?x {{type: :t{i}}}" for i in range(len(types))]
    branches += [f"?x (?s, :p{i}, ?o)" for i in range(len(predicates))]
    yield (f"// nexus {__version__} export of the whole graph at {args.endpoint} (KIP "
           f"{KIP_VERSION}), by EXPORT over HTTP\n// Load into a nexus database (which has "
           f"the Genesis capsule) with: kip load FILE\n")
    concepts = propositions = 0
    if not branches:        # not even the meta-types: nothing to export
        yield "\n// 0 concepts, 0 propositions.\n"
        return
    where = branches[0] + "".join(f" UNION {{ {b} }}" for b in branches[1:])
    command = f"EXPORT ?x WHERE {{ {where} }} LIMIT {EXPORT_PAGE}"
    cursor = None
    with progress_reporter("export", unit="elements") as progress:
        while True:
            page = ask(command + (" CURSOR :cursor" if cursor else ""),
                       {**params, "cursor": cursor} if cursor else params)
            result = page.get("result") or {}
            concepts += result.get("concepts", 0)
            propositions += result.get("propositions", 0)
            progress("elements", concepts + propositions, concepts + propositions)
            if result.get("capsule"):
                yield "\n" + result["capsule"]
            cursor = page.get("next_cursor")
            if not cursor:
                break
    yield f"\n// {concepts} concepts, {propositions} propositions.\n"
