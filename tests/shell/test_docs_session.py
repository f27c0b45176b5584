"""docs/shell.md's session, replayed in the real shell in a pseudo-terminal.

The session is the ```text block under "## A session". Its first line is the command
(`$ kip shell ARGS`, run in an empty directory); a line that starts with a prompt (`kip> `,
`...> `, `..{> `, `..(> `) is typed, followed by Enter; every other line is what the shell
must print. After a typed line the next prompt must be the one the doc shows (a continuation
prompt says the command is waiting, and what is open); a line ending in `[Y/n] yes` (or `no`)
is a question the test answers with one key. Ids (`C:12`, `P:13:treats`) and timings may
differ from the doc's, and so may the padding of columns that hold them.
"""
from __future__ import annotations

import re
import shlex
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "shell.md"
PROMPT = re.compile(r"^(kip|\.\.\.|\.\.[{(\[])> ?(.*)$")
QUESTION = re.compile(r"^(.*\[Y/n\]) (yes|no)$")


def session() -> tuple[list[str], list[str]]:
    """(the shell's arguments, the session's lines) from docs/shell.md."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("\n## A session\n", 1)[1]
    block = section.split("```text\n", 1)[1].split("\n```", 1)[0]
    lines = block.splitlines()
    first = lines[0]
    assert first.startswith("$ kip shell "), first
    return shlex.split(first[len("$ kip shell "):]), lines[1:]


def pattern(line: str) -> str:
    """A regex for one expected output line: ids, timings and padding may differ."""
    out = re.escape(line)
    out = re.sub(r"C:\d+", r"C:\\d+", out)
    out = re.sub(r"P:\d+:", r"P:\\d+:", out)
    out = re.sub(r"\d+\\\.\d+\\ (m?s)\\\)", r"[\\d.]+\\ m?s\\)", out)
    out = re.sub(r"(\\ ){2,}", r" +", out)
    out = re.sub(r"(\\-){2,}", r"-+", out)
    return out


def test_the_session_of_docs_shell_md_replays(spawn_shell, tmp_path):
    args, lines = session()
    term = spawn_shell(cwd=str(tmp_path), args=args, cols=100)
    # the banner (printed before the first prompt, which spawn_shell waited for)
    assert re.search(pattern(lines[0]), term.text), term.text
    i, exit_typed = 1, False
    while i < len(lines):
        m = PROMPT.match(lines[i])
        assert m, f"the session should go on with a prompt: {lines[i]!r}"
        typed = m.group(2)
        term.line(typed)
        exit_typed = typed.strip().lower() in ("quit", "exit", "\\q")
        i += 1
        nxt = PROMPT.match(lines[i]) if i < len(lines) else None
        if nxt and nxt.group(1) != "kip":
            # waiting for more: the continuation prompt is the doc's, at the end of the screen
            term.expect(r"\n\s*" + re.escape(nxt.group(1) + ">") + r"\s*$")
            continue
        block: list[str] = []
        while i < len(lines) and not PROMPT.match(lines[i]):
            q = QUESTION.match(lines[i])
            if q:
                term.expect(r"\n".join(pattern(x) for x in block + [q.group(1)]))
                term.send("y" if q.group(2) == "yes" else "n")
                block = []
            else:
                block.append(lines[i])
            i += 1
        if block:
            term.expect(r"\n".join(pattern(x) for x in block))
        if i < len(lines):
            term.prompt()
    assert exit_typed, "the session ends by leaving the shell"
    assert term.wait_exit() == 0
    assert (tmp_path / "demo-data").is_dir()
