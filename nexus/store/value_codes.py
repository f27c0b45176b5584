"""Value codes of stored metadata: common value shapes as short msgpack ext values.

Owns how a value of a map in the fixed layout (`codec`'s C1 form: the engine's metadata in a
header, the other items after it) may be stored shorter than its msgpack. KIP's recommended
metadata (spec Appendix 1) is mostly ISO 8601 timestamps and confidences between 0 and 1,
which msgpack stores as 21–25-byte strings and 9-byte floats. In the C1 form a top-level
value is stored as a msgpack ext value when it has one of these shapes:

    ext type  data (big-endian)                      decodes to
    1         u32 (fixext 4) or i64 (fixext 8)       "YYYY-MM-DDTHH:MM:SSZ" of that many
                                                     seconds since the epoch
    2         i64 (fixext 8)                         "YYYY-MM-DDTHH:MM:SS.mmmZ" of that many ms
    16 + e    m: i8, i16 or i32 (fixext 1, 2, 4:     the float m / 10**e   (e = 0..15)
              the shortest)

A string is coded only when it is one of the two texts exactly: ASCII digits, a date that
exists, in the years 0001–9999, hours < 24, minutes and seconds < 60 (no leap second), "Z"
— decoding formats the time back character for character; an offset ("+00:00"), other
fractions, a lower-case "z" or anything else stays a string. A float is coded with the
smallest e for which m = round(f * 10**e) (ties to even) gives f back as m / 10**e — a
division rounded once from the exact quotient in Python (int / int) and in numpy (m and
10**e are exact doubles) alike, so both paths pick the same code — when that m fits 32 bits
(a longer one would not be shorter than msgpack's 9 bytes); never for -0.0, nan or inf, nor
for a float that needs more than 15 decimals (0.1 + 0.2). A
value so coded decodes to the same type and text: 0.865 takes 4 bytes instead of 9,
"2025-06-21T13:37:42Z" 6 instead of 21.

`piece` gives the msgpack bytes of one value, coded when it can be (a map written by a
command); `column_bytes` those of a whole column of values (a bulk load's,
`codec.encode_maps`) with the checks and conversions done by numpy over the column,
byte-identical to `piece` value by value, and `join_ext` joins adjacent coded columns into
rows in numpy too (a Python step per value is what a bulk load cannot afford). `ext_value` is the
decoder's ext hook.
"""
from __future__ import annotations

import re
import struct
from datetime import date
from typing import Callable, Sequence

import numpy as np

__all__ = ["piece", "column_bytes", "join_ext", "ext_value", "SECONDS", "MILLIS", "DECIMAL"]

SECONDS, MILLIS, DECIMAL = 1, 2, 16         # ext types (module doc); DECIMAL + e, e <= 15
MAX_E = 15
_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1
_F53 = float(1 << 53)
_P10 = [10 ** e for e in range(MAX_E + 1)]
_P10F = [float(p) for p in _P10]
# A fixext's header byte, its type and its data (module doc).
_EXT4 = struct.Struct(">BBI").pack
_EXT8 = struct.Struct(">BBq").pack
_DEC1 = struct.Struct(">BBb").pack
_DEC2 = struct.Struct(">BBh").pack
_DEC4 = struct.Struct(">BBi").pack
_from_bytes = int.from_bytes
_EPOCH = 719_163                            # date(1970, 1, 1).toordinal()
_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{3})?Z\Z")

# Dates seen (bounded: cleared when full): a graph's timestamps share few days.
_DAY_OF: dict[str, int | None] = {}
_DATE_OF: dict[int, str] = {}
_TEXT_OF: dict[int, str] = {}               # seconds -> the text decoded last (Q1's re-reads)
_DATES_MAX = 8192


def _day(text: str) -> int | None:
    """Days since the epoch of "YYYY-MM-DD" (ASCII digits: checked by the caller), None when
    no such date exists."""
    try:
        return _DAY_OF[text]
    except KeyError:
        pass
    try:
        day: int | None = date(int(text[:4]), int(text[5:7]), int(text[8:10])).toordinal() \
            - _EPOCH
    except ValueError:
        day = None
    if len(_DAY_OF) >= _DATES_MAX:
        _DAY_OF.clear()
    _DAY_OF[text] = day
    return day


def _date(day: int) -> str:
    try:
        return _DATE_OF[day]
    except KeyError:
        pass
    text = date.fromordinal(day + _EPOCH).isoformat()   # ValueError: a damaged value
    if len(_DATE_OF) >= _DATES_MAX:
        _DATE_OF.clear()
    _DATE_OF[day] = text
    return text


_D2 = [f"{i:02d}" for i in range(60)]
_HM = [f"{h:02d}:{m:02d}:" for h in range(24) for m in range(60)]   # minute of the day


def _seconds_text(t: int) -> str:
    day, second = divmod(t, 86_400)
    minute, second = divmod(second, 60)
    return f"{_date(day)}T{_HM[minute]}{_D2[second]}"


def _time_code(text: str) -> bytes | None:
    n = len(text)
    if (n != 20 and n != 24) or text[10] != "T" or not _TIME.match(text):
        return None
    day = _day(text[:10])
    hour, second = divmod(int(text[11:19].replace(":", "")), 10_000)   # HHMMSS
    minute, second = divmod(second, 100)
    if day is None or hour > 23 or minute > 59 or second > 59:
        return None
    t = day * 86_400 + hour * 3_600 + minute * 60 + second
    if n == 20:
        return _EXT4(0xD6, SECONDS, t) if 0 <= t < 1 << 32 else _EXT8(0xD7, SECONDS, t)
    return _EXT8(0xD7, MILLIS, t * 1_000 + int(text[20:23]))


def _decimal_code(f: float) -> bytes | None:
    if not -_F53 < f < _F53 or (f == 0.0 and str(f)[0] == "-"):   # nan, inf, -0.0 too
        return None
    for e in range(MAX_E + 1):
        m = round(f * _P10F[e])
        if m / _P10[e] == f:
            if -128 <= m < 128:
                return _DEC1(0xD4, DECIMAL + e, m)
            if -32_768 <= m < 32_768:
                return _DEC2(0xD5, DECIMAL + e, m)
            return _DEC4(0xD6, DECIMAL + e, m) if _I32_MIN <= m <= _I32_MAX else None
    return None


def piece(value: object, pack: Callable[[object], bytes]) -> bytes:
    """The msgpack bytes of `value` in the C1 form: its ext value when it has a coded shape
    (module doc), else `pack(value)`."""
    kind = type(value)
    if kind is str:
        return _time_code(value) or pack(value)         # type: ignore[arg-type]
    if kind is float:
        return _decimal_code(value) or pack(value)      # type: ignore[arg-type]
    return pack(value)


def ext_value(code: int, data: bytes) -> object:
    """The value an ext value of the C1 form stands for (msgpack's `ext_hook`); ValueError
    or IndexError for a code or length this module never writes (a damaged value)."""
    if code >= DECIMAL:                         # the most common code first
        if len(data) > 4:
            raise ValueError(f"a decimal of {len(data)} bytes")
        return _from_bytes(data, "big", signed=True) / _P10[code - DECIMAL]
    n = len(data)
    if code == SECONDS and (n == 4 or n == 8):
        t = _from_bytes(data, "big", signed=n == 8)
        text = _TEXT_OF.get(t)
        if text is None:
            text = _seconds_text(t) + "Z"
            if len(_TEXT_OF) >= _DATES_MAX:
                _TEXT_OF.clear()
            _TEXT_OF[t] = text
        return text
    if code == MILLIS and n == 8:
        second, milli = divmod(_from_bytes(data, "big", signed=True), 1_000)
        return f"{_seconds_text(second)}.{milli:03d}Z"
    raise ValueError(f"unknown value code {code} of {n} bytes")


# --- a column at once (bulk loads) -------------------------------------------------------------

_FIXEXT = np.array([0, 0xD4, 0xD5, 0, 0xD6, 0, 0, 0, 0xD7], np.uint8)   # by data width
_MONTH_DAYS = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], np.int64)
_SEPARATORS = {4: ord("-"), 7: ord("-"), 10: ord("T"), 13: ord(":"), 16: ord(":")}
# By text length: the separators' places and bytes, the digits' places.
_SEPARATORS_OF = {
    20: (np.array([*_SEPARATORS, 19]), np.array([*_SEPARATORS.values(), ord("Z")], np.uint8)),
    24: (np.array([*_SEPARATORS, 19, 23]),
         np.array([*_SEPARATORS.values(), ord("."), ord("Z")], np.uint8))}
_DIGITS_OF = {20: np.array([i for i in range(19) if i not in _SEPARATORS]),
              24: np.array([i for i in range(23) if i not in _SEPARATORS and i != 19])}


def column_bytes(column: Sequence[object], pack: Callable[[object], bytes]
                 ) -> Ext | list[bytes]:
    """`[piece(v, pack) for v in column]`, the shapes found and converted column-wise: as
    the ext values' arrays when every value is coded (`join_ext` joins such columns), else
    as that list."""
    if len(column) < _NUMPY_FROM:
        return [piece(v, pack) for v in column]
    kinds = set(map(type, column))
    if kinds == {float}:
        coded = _floats(column)
    elif kinds == {str}:
        coded = _texts(column)
    elif float in kinds or str in kinds:        # e.g. confidences 1 and 0.9: ints and floats
        types = list(map(type, column))
        coded = _none
        for kind, code in ((float, _floats), (str, _texts)):
            at = np.array([i for i, t in enumerate(types) if t is kind], np.int64)
            if at.size:
                rows, codes, widths, values = code([column[i] for i in at.tolist()])
                coded = (np.concatenate((coded[0], at[rows])),
                         np.concatenate((coded[1], codes)),
                         np.concatenate((coded[2], widths)),
                         np.concatenate((coded[3], values)))
    else:
        return list(map(pack, column))
    rows, codes, widths, values = coded
    if rows.size == len(column):
        if rows.size > 1 and not bool(np.all(rows[1:] > rows[:-1])):
            order = np.argsort(rows)
            codes, widths, values = codes[order], widths[order], values[order]
        return codes, widths, values
    if not rows.size:
        return list(map(pack, column))
    out: list[bytes | None] = [None] * len(column)     # some coded: joined in Python
    for i, p in zip(rows.tolist(), join_ext([(codes, widths, values)], rows.size)):
        out[i] = p
    return [pack(column[i]) if p is None else p for i, p in enumerate(out)]


# The ext values of a column, row by row: their types, data widths and values (int64).
Ext = tuple[np.ndarray, np.ndarray, np.ndarray]
Coded = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]   # row numbers + Ext
_EMPTY = np.zeros(0, np.int64)
_none: Coded = (_EMPTY, _EMPTY, _EMPTY, _EMPTY)
_CHUNK = 32_768             # rows joined at a time: bounds the index arrays' memory
# Shorter columns (a command's few maps) are coded value by value: numpy's ~60 calls a
# column cost tens of µs, more than `piece` does for a few values.
_NUMPY_FROM = 64


def join_ext(columns: list[Ext], count: int) -> list[bytes]:
    """The bytes of `count` rows, each the fixext values of every column in turn: header,
    type, the last `width` bytes of the value as a big-endian i64 (its two's complement of
    that width when it fits; a u32 when it is one) — written into one buffer per chunk of
    rows by numpy, then cut into rows."""
    out: list[bytes] = []
    for first in range(0, count, _CHUNK):
        last = min(first + _CHUNK, count)
        sizes = sum((widths[first:last] + 2 for _, widths, _ in columns),
                    np.zeros(last - first, np.int64))
        ends = np.cumsum(sizes)
        buf = np.empty(int(ends[-1]), np.uint8)
        at = ends - sizes
        for codes, widths, values in columns:
            widths = widths[first:last]
            buf[at] = _FIXEXT[widths]
            buf[at + 1] = codes[first:last]
            big = values[first:last].astype(">i8").view(np.uint8).reshape(-1, 8)
            for w in (1, 2, 4, 8):
                rows = np.flatnonzero(widths == w)
                if not rows.size:
                    continue
                to, row_bytes = (at, big) if rows.size == len(widths) else (at[rows],
                                                                             big[rows])
                for j in range(w):      # byte by byte: no (rows x w) index array
                    buf[to + (2 + j)] = row_bytes[:, 8 - w + j]
            at = at + widths + 2
        data = buf.tobytes()
        ends_list = ends.tolist()
        out += [data[a:b] for a, b in zip([0, *ends_list], ends_list)]
    return out



def _floats(column: Sequence[object]) -> Coded:
    x = np.array(column, np.float64)
    with np.errstate(invalid="ignore"):
        todo = np.flatnonzero((np.abs(x) < _F53) & ~((x == 0.0) & np.signbit(x)))
    e_of = np.full(len(x), -1, np.int64)
    m_of = np.zeros(len(x), np.float64)
    xs = x[todo]
    for e in range(MAX_E + 1):
        if not todo.size:
            break
        m = np.rint(xs * _P10F[e])
        hit = m / _P10F[e] == xs
        e_of[todo[hit]] = e
        m_of[todo[hit]] = m[hit]
        todo, xs = todo[~hit], xs[~hit]
    rows = np.flatnonzero((e_of >= 0) & (m_of >= _I32_MIN) & (m_of <= _I32_MAX))
    m_int = m_of[rows].astype(np.int64)
    widths = np.where((m_int >= -128) & (m_int < 128), 1,
                      np.where((m_int >= -32_768) & (m_int < 32_768), 2, 4))
    return rows, DECIMAL + e_of[rows], widths.astype(np.int64), m_int


def _texts(column: Sequence[object]) -> Coded:
    lengths = np.fromiter(map(len, column), np.int64, len(column))   # type: ignore[arg-type]
    found: list[Coded] = []
    for n in (20, 24):
        rows = np.flatnonzero(lengths == n)
        if not rows.size:
            continue
        texts = column if rows.size == len(column) else [column[i] for i in rows.tolist()]
        # Non-ASCII characters become "?" (one byte each: the rows keep their width) and
        # fail the checks below.
        a = np.frombuffer("".join(texts).encode("ascii", "replace"),  # type: ignore[arg-type]
                          np.uint8).reshape(-1, n)
        separators = _SEPARATORS_OF[n]
        ok = (a[:, separators[0]] == separators[1]).all(axis=1)
        d = a[:, _DIGITS_OF[n]] - np.uint8(ord("0"))    # wraps below "0": > 9 as well
        ok &= (d <= 9).all(axis=1)
        d = d.astype(np.int32)
        year = d[:, 0] * 1000 + d[:, 1] * 100 + d[:, 2] * 10 + d[:, 3]
        month = d[:, 4] * 10 + d[:, 5]
        mday = d[:, 6] * 10 + d[:, 7]
        hour, minute, second = (d[:, 8] * 10 + d[:, 9], d[:, 10] * 10 + d[:, 11],
                                d[:, 12] * 10 + d[:, 13])
        ok &= (year >= 1) & (month >= 1) & (month <= 12) & (mday >= 1)
        leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
        ok &= mday <= _MONTH_DAYS[np.clip(month, 0, 12)] + ((month == 2) & leap)
        ok &= (hour < 24) & (minute < 60) & (second < 60)
        # Days since the epoch of a proleptic Gregorian date (H. Hinnant's days_from_civil).
        y = year - (month <= 2)
        era = y // 400
        yoe = y - era * 400
        doy = (153 * (month + np.where(month > 2, -3, 9)) + 2) // 5 + mday - 1
        days = (era * 146_097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719_468
                ).astype(np.int64)
        t = days * 86_400 + (hour * 3_600 + minute * 60 + second)
        good = np.flatnonzero(ok)
        if not good.size:
            continue
        t = t[good]
        if n == 20:
            codes = np.full(good.size, SECONDS, np.int64)
            widths = np.where((t >= 0) & (t < 1 << 32), 4, 8).astype(np.int64)
        else:
            codes = np.full(good.size, MILLIS, np.int64)
            widths = np.full(good.size, 8, np.int64)
            t = t * 1_000 + (d[good, 14] * 100 + d[good, 15] * 10 + d[good, 16])
        found.append((rows[good], codes, widths, t))
    if not found:
        return _none
    if len(found) == 1:
        return found[0]
    rows, codes, widths, t = (np.concatenate(parts) for parts in zip(*found))
    return rows, codes, widths, t
