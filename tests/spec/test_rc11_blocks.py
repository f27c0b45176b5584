"""Every KIP command of the RC11 texts parses (tests/spec/rc11_blocks.py says what a block is).

Blocks that need what nexus does not parse yet are listed in EXPECTED_FAILURES with the
reason; each is a strict expected failure, so the list must shrink when the feature lands
(the test then fails until the entry is removed), and any unlisted block that fails to parse
fails the test. Skipped when ../shared is absent.
"""

from __future__ import annotations

import pytest

from nexus.errors import KipError
from nexus.language import parse

from .rc11_blocks import READS, SHARED, TEXTS, Block, blocks

# Empty since predicate variables and SEARCH MODE landed: every block of the four texts parses.
EXPECTED_FAILURES: dict[str, str] = {}

_ALL = blocks()
pytestmark = pytest.mark.skipif(not (SHARED / TEXTS[0]).exists(), reason="../shared absent")


def _params(found: list[Block]) -> list[object]:
    out = []
    for block in found:
        reason = EXPECTED_FAILURES.get(block.ident)
        marks = [pytest.mark.xfail(strict=True, raises=KipError, reason=reason)] if reason else []
        out.append(pytest.param(block, id=block.ident, marks=marks))
    return out


@pytest.mark.parametrize("block", _params(_ALL))
def test_spec_block_parses(block: Block) -> None:
    parse(block.text)


def test_every_expected_failure_names_a_block() -> None:
    assert set(EXPECTED_FAILURES) <= {b.ident for b in _ALL}


def test_every_read_block_is_accepted_or_listed() -> None:
    reads = [b for b in _ALL if b.keyword in READS]
    assert len(reads) >= 30, "the RC11 texts hold over 30 FIND/DESCRIBE/SEARCH commands"
    for block in reads:
        if block.ident not in EXPECTED_FAILURES:
            parse(block.text)
