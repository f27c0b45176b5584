"""bench/RESULTS.md is shared: each benchmark script owns one `## ` section and replaces only
that one, keeping every other section byte for byte."""
from __future__ import annotations

import os
import re

TITLE = "# nexus benchmark results\n"
_NEXT = re.compile(r"^## ", re.M)


def replace_section(path: str | os.PathLike, heading: str, text: str, *,
                    first: bool = False) -> None:
    """Replace the section whose heading line is `heading` (up to the next `## ` heading)
    by `text`, which starts with that heading. A missing section is appended, or with
    `first` put before the first section. Written to a temporary file, then renamed."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            current = f.read()
    except FileNotFoundError:
        current = TITLE
    body = text.rstrip("\n") + "\n"
    found = re.search(r"^" + re.escape(heading) + r"$", current, re.M)
    if found:
        nxt = _NEXT.search(current, found.end())
        new = current[:found.start()] + body + ("\n" + current[nxt.start():] if nxt else "")
    elif first and (nxt := _NEXT.search(current)):
        new = current[:nxt.start()] + body + "\n" + current[nxt.start():]
    else:
        new = current.rstrip("\n") + "\n\n" + body
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(new.rstrip("\n") + "\n")
    os.replace(tmp, path)
