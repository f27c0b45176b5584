"""The engine's timestamp form (CONTRACT §3: ISO 8601 UTC, milliseconds, `Z`) and its exact
conversions to and from epoch milliseconds, which the store relies on to pack stamps."""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, strategies as st

from nexus.timestamps import iso_ms, now_iso, stamp_ms, stamp_text

STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\Z")
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def test_now_is_a_stamp_of_the_current_time() -> None:
    before = time.time()
    text = now_iso()
    after = time.time()
    assert STAMP.match(text)
    assert before - 0.002 <= stamp_ms(text) / 1000 <= after + 0.002


@given(st.integers(min_value=0, max_value=253_402_300_799_999))     # up to 9999-12-31
def test_stamp_text_and_ms_are_inverse(ms: int) -> None:
    text = stamp_text(ms)
    expected = (EPOCH + timedelta(milliseconds=ms)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    assert text == expected
    assert stamp_ms(text) == ms
    assert iso_ms(text) == ms


def test_same_second_other_milliseconds() -> None:
    # the last parsed second is reused: its other milliseconds must still be exact
    base = stamp_ms("2026-11-28T12:34:56.000Z")
    assert stamp_ms("2026-11-28T12:34:56.999Z") == base + 999
    assert stamp_ms("2026-11-28T12:34:57.001Z") == base + 1001
    assert stamp_text(base + 999) == "2026-11-28T12:34:56.999Z"


@pytest.mark.parametrize("text", [
    "2026-02-30T00:00:00.000Z",          # no such day
    "2016-12-31T23:59:60.000Z",          # a leap second: gmtime never formats it
    "2026-11-28T12:00:00Z",              # no milliseconds: not the engine's form
    "2026-11-28T12:00:00.000+00:00",     # an offset: not the engine's form
    "2026-11-28T12:00:00.0000Z",
    " 2026-11-28T12:00:00.000Z",
    "2026-11-28 12:00:00.000Z",
    "",
    None, 12, b"2026-11-28T12:00:00.000Z",
])
def test_only_the_exact_form_packs(text: object) -> None:
    assert stamp_ms(text) is None


@pytest.mark.parametrize("text, expected", [
    ("2026-11-28T12:00:00Z", "2026-11-28T12:00:00.000Z"),
    ("2026-11-28T13:00:00+01:00", "2026-11-28T12:00:00.000Z"),
    ("2026-11-28T12:00:00", "2026-11-28T12:00:00.000Z"),            # no offset: UTC
    ("2026-11-28T12:00:00.5z", "2026-11-28T12:00:00.500Z"),
    ("2026-11-28", "2026-11-28T00:00:00.000Z"),
])
def test_iso_ms_reads_what_users_write(text: str, expected: str) -> None:
    assert stamp_text(iso_ms(text)) == expected


@pytest.mark.parametrize("text", ["", "yesterday", "2026-13-01T00:00:00Z", "2026-02-30"])
def test_iso_ms_rejects_what_is_no_time(text: str) -> None:
    with pytest.raises(ValueError):
        iso_ms(text)
