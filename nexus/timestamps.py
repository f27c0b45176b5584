"""The engine's timestamps: their one text form, and its conversions to and from epoch ms.

Every time the engine writes — `_created_at` / `_updated_at`, the version log's `at`, the
audit and access logs — is ISO 8601 UTC with milliseconds and `Z`,
`YYYY-MM-DDTHH:MM:SS.mmmZ` (CONTRACT §3). This module owns that form:

* `now_iso()` stamps the current time;
* `stamp_text(ms)` and `stamp_ms(text)` convert a stamp to epoch milliseconds and back
  exactly (the store packs the engine's stamps as ms; `stamp_ms` answers None for any text
  that `stamp_text` would not give back character for character, so such a text is stored
  as it is);
* `iso_ms(text)` reads any ISO 8601 time a user gives (AS OF, HISTORY bounds), with an
  offset or without one (UTC), and raises ValueError for anything else.

Formatting or parsing the date and time of day is the costly part (~5–8 µs, a visible share
of a durable upsert), and the engine stamps and reads many times within one second: each
direction keeps the last second it handled as one immutable pair, which one assignment
replaces, so threads share it without a lock.
"""

from __future__ import annotations

import calendar
import re
import time
from datetime import datetime, timezone

__all__ = ["now_iso", "stamp_text", "stamp_ms", "iso_ms"]

_STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\Z")

# (epoch second, "YYYY-MM-DDTHH:MM:SS.") of the last stamp formatted / parsed
_FORMATTED: tuple[int, str] = (-1, "")
_PARSED: tuple[str, int] = ("", 0)
# Stamps seen whole: a load stamps one time on every element, and reading a loaded graph
# decodes the same few stamps again and again (bounded: cleared when full).
_TEXT_OF: dict[int, str] = {}
_MS_OF: dict[str, int] = {}
_CACHE_MAX = 4096


def _format(ms: int) -> str:
    global _FORMATTED
    seconds, milli = divmod(ms, 1000)
    last = _FORMATTED
    if last[0] != seconds:
        last = _FORMATTED = (seconds,
                             time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(seconds)))
    return f"{last[1]}{milli:03d}Z"


def now_iso() -> str:
    """The current UTC time as the engine's stamp."""
    return _format(time.time_ns() // 1_000_000)


def stamp_text(ms: int) -> str:
    """The engine's stamp of `ms` milliseconds since the epoch."""
    text = _TEXT_OF.get(ms)
    if text is None:
        text = _format(ms)
        if len(_TEXT_OF) >= _CACHE_MAX:
            _TEXT_OF.clear()
        _TEXT_OF[ms] = text
    return text


def stamp_ms(text: object) -> int | None:
    """Epoch milliseconds of an engine stamp; None when `text` is not a string that
    `stamp_text` gives back exactly (another form, an impossible date, a leap second)."""
    ms = _MS_OF.get(text) if type(text) is str else None
    if ms is not None:
        return ms
    if type(text) is not str or not _STAMP.match(text):
        return None
    ms = _parse(text)
    if ms is not None:
        if len(_MS_OF) >= _CACHE_MAX:
            _MS_OF.clear()
        _MS_OF[text] = ms
    return ms


def _parse(text: str) -> int | None:
    global _PARSED
    last = _PARSED
    if text[:20] == last[0]:
        return last[1] + int(text[20:23])
    try:
        day = time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return None
    second = calendar.timegm(day) * 1000
    # strptime accepts texts (a 60th or 61st second) that gmtime never formats
    if _format(second) != text[:20] + "000Z":
        return None
    _PARSED = (text[:20], second)
    return second + int(text[20:23])


def iso_ms(text: str) -> int:
    """Epoch milliseconds of an ISO 8601 time (`…Z`, an offset, or none: UTC); ValueError
    when `text` is not one."""
    ms = stamp_ms(text)
    if ms is not None:
        return ms
    body = text.strip()
    if body[-1:] in ("Z", "z"):
        body = body[:-1] + "+00:00"
    when = datetime.fromisoformat(body)
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return int(round(when.timestamp() * 1000))
