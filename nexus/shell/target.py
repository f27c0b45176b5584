"""Where a client's commands go — one resolution for `kip shell` (`nexus.shell.app`) and the
`kip` commands that take a database (`exec`, `load`, `export`, `check`, … in `nexus.cli`):

* `--db DIR` — a database on this machine;
* `--space NAME --spaces DIR` — the space's own database, `DIR/NAME` (the name is checked
  first, `nexus.spaces.check_name`, and the space must exist: `kip space create` makes one);
  `--spaces` may also be a `postgresql://` URL, whose space NAME is `URL?space=NAME`;
* `--url URL` — a running `kip serve` (`URL/kip`); with `--space NAME`, that space of a spaces
  server (`URL/v1/NAME/kip`; the name is URL-quoted, so it cannot leave its path segment, and
  the server checks it).

A combination that says two places, or a name that is not a space's, is a `ValueError`
whose message says what to give instead.
"""
from __future__ import annotations

import urllib.parse
from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    """A local database directory (`db`; None: the caller's default) or an endpoint (`url`)."""
    db: str | None = None
    url: str | None = None


def kip_endpoint(url: str, space: str | None = None) -> str:
    """The endpoint to POST to: `URL/kip`, or `URL/v1/SPACE/kip` for a space (a URL given
    with its `/kip` ending is taken either way)."""
    base = url.rstrip("/")
    if space is None:
        return base if base.endswith("/kip") else base + "/kip"
    base = base[:-len("/kip")] if base.endswith("/kip") else base
    return f"{base}/v1/{urllib.parse.quote(space, safe='')}/kip"


def resolve(*, db: str | None = None, url: str | None = None, spaces: str | None = None,
            space: str | None = None) -> Target:
    """The target of `--db`, `--url`, `--spaces` and `--space` (see the module doc)."""
    if spaces and not space:
        raise ValueError("--spaces DIR needs --space NAME")
    if space is not None and not (url or spaces):
        raise ValueError("--space NAME needs --spaces DIR or the --url of a spaces server")
    if sum(1 for given in (db, url, spaces) if given) > 1:
        raise ValueError("give one of --db DIR, --url URL and --spaces DIR (with --space "
                         "NAME for a space)")
    if url:
        return Target(url=kip_endpoint(url, space))
    if spaces and space is not None:
        from ..errors import KipError
        from ..location import shown
        from ..spaces import locate     # a local database loads the engine anyway
        try:
            found = locate(spaces, space)
        except KipError as exc:
            raise ValueError(exc.message) from None
        if found is None:
            raise ValueError(f"no space named {space!r} in {shown(spaces)} (create it with "
                             f"`kip space create {space} --spaces {shown(spaces)}`)")
        return Target(db=found)
    return Target(db=db)
