"""Byte encodings of the graph store: keys, element heads and JSON-like values.

Owns every byte layout the stores write; nothing else in nexus builds a key. Integers are
big-endian and fixed-width, so lexical key order is numeric order and a fixed-width prefix
scan is an index range:

    table  key                                  value
    head   n(8)                                 concept: 01 type(4) name-utf8
                                                link:    03 s(4) p(4) o(4)
    attrs  n(8)                                 a map (below)  (absent when empty)
    metas  n(8)                                 a map (below)  (absent when empty)
    tn     type(4) tkey(name)                   n(8)          unique (type, name)
    tid    type(4) n(8)                         ''            type -> ids
    name   tkey(name) 00 n(8)                   ''            name -> ids (any type)
    spo    s(4) p(4) o(4) n(4)                  ''            out_links, link_id
    ops    o(4) p(4) s(4) n(4)                  ''            in_links
    pso    p(4) s(4) o(4) n(4)                  ''            links_of_predicate
    sym    sid(4)                               text-utf8
    symx   tkey(text)                           sid(4)
    stats  b'C' | b'L' | b'T' type(4) | b'P' p(4)   count(8)
    meta   b'format' | b'max_id' | b'max_sym'   format tag | counter(8) | counter(4)

Element ids are capped at MAX_ELEMENT_ID = 2**32 - 1 (`id_limit_error`: the id allocator
refuses to go past it), so the link indexes hold every id in 4 bytes: 16-byte keys instead
of the 28 of FORMAT_TAG_V1 (s(8) p(4) o(8) n(8) and the like), which took the three tables
of a 100k load from 63.5 to ~43 MB (bench/RESULTS.md, "Disk: the link indexes as 16-byte
keys"). A database of that earlier format is converted once when its owner opens it
(`link_upgrade`). Heads, maps and the concept indexes keep 8-byte id keys. A link's head
holds its ends in 4 bytes too (tag 03: 13 bytes); the 21-byte form with 8-byte ends (tag
02, `LINK_HEAD_WIDE`) that FORMAT_TAG_V2 and earlier wrote is read as well, so such a
database is not rewritten: its owner's open only sets the format tag (which makes an older
nexus refuse the database instead of misreading the new heads), and its old heads stay
until the link is rewritten (4.0 MB of `head` at 100k; bench/RESULTS.md, "Disk: the
per-element tables' entries").

The three link orders are chosen so that each ReadTxn scan is ONE prefix range whose key
tail unpacks, with a single C call, into exactly the tuple the protocol yields: spo gives
(p, o, n), ops gives (p, s, n), pso gives (s, o, n). The link id is the last key field
(values are empty), so scans read keys only. Ids within the cap keep their order as 4-byte
big-endian fields, so the 16-byte keys sort as the 28-byte ones did.

`tkey(text)` is the UTF-8 text itself when it is at most `MAX_INLINE_TEXT` bytes (LMDB keys
are limited to 511 bytes), else 0xFF + a 20-byte BLAKE2b digest; 0xFF never occurs in UTF-8,
so the two forms cannot collide, and readers verify hashed hits against the stored text.
The 00 terminator in the name index keeps a name's entries contiguous and stops a scan for
"A" from walking through every name that merely starts with "A".

A map is stored as msgpack, except a map ending with the engine's metadata (`_version`, an
int < 2**32, then `_created_at` and `_updated_at`, timestamps of the engine's form
YYYY-MM-DDTHH:MM:SS.mmmZ — every element's metadata as the engine writes it), which is

    C1 flag(1) header rest

    header, flag & 4 (narrow):  version(1) created-ms(6) [updated-ms(6) if flag & 1]
            else (wide):        version(4) created-ms(8) [updated-ms(8) if flag & 1]
    rest,   flag & 2 (keyed):   count(1) code(1)*count msgpack([value, ...])
            else:               msgpack({key: value, ...})      (the other items)

(integers big-endian, ms since the epoch, signed). The narrow header is written when the
version is below 256 and both times fit 48 bits, the keyed rest when every other key is
one of META_KEYS (KIP's recommended metadata keys, Appendix 1), each coded as its index + 1;
the values stay msgpack, in the map's order, but for the common shapes of metadata values:
a timestamp "YYYY-MM-DDTHH:MM:SS[.mmm]Z" and a float with few decimals are msgpack ext
values (`value_codes`: 6 bytes instead of 21, 4 instead of 9), in either rest. Of a
bulk-loaded link's ~150 bytes of metadata in plain msgpack, the engine's three items take 9
bytes here instead of ~83, the keys `source`, `confidence`, `created_at` 4 instead of 29,
and the values 20 instead of 40 (metas of the 100k load: 63.7 -> 44.9 -> 32.4 MB). 0xC1 is
the one byte msgpack never uses, so the first byte tells the forms apart; the wide header
with a msgpack map (flag 0 or 1) is what earlier versions wrote, plain msgpack throughout
what came before that: both read as they always did, and decoding gives back the same items
in the same order; a rest without ext values (what the code before the value codes wrote)
reads as it did.
"""
from __future__ import annotations

import hashlib
import struct
import threading
from itertools import repeat
from operator import itemgetter
from typing import Callable, Iterable, Literal, Sequence, cast

import msgpack
import numpy as np
from orjson import dumps as _json

from nexus.errors import ErrorCode, KipError
from nexus.timestamps import stamp_ms, stamp_text
from nexus.store.model import ConceptHead, Head, JsonMap, LinkHead
from nexus.store.value_codes import column_bytes, ext_value, join_ext, piece

MAX_INLINE_TEXT = 400        # longest text kept verbatim inside a key, in UTF-8 bytes
MAX_KEY = 511                # LMDB's default key-size limit; the memory store enforces it too

U32 = struct.Struct(">I")
U64 = struct.Struct(">Q")
pack_n = U64.pack            # element id -> 8-byte key
pack_sid = U32.pack          # symbol id  -> 4-byte key part
unpack_n = U64.unpack
unpack_sid = U32.unpack

# Element ids: positive and at most MAX_ELEMENT_ID (module doc).
MAX_ELEMENT_ID = (1 << 32) - 1

# Link index keys and the tuple each index yields (the leading field is the scan prefix).
# Every field is 4 bytes: packing an id above MAX_ELEMENT_ID is a struct.error (no such
# element can exist, so a read answers nothing).
SPO = struct.Struct(">IIII")                 # s p o n
OPS = SPO                                    # o p s n
PSO = SPO                                    # p s o n
LINK_KEY = SPO.size                          # 16
SP = struct.Struct(">II")                    # spo / ops prefix with the predicate
SPO3 = struct.Struct(">III")                 # the (s, p, o) part of an spo key
TRIPLE = SPO3.size                           # 12: the link id follows
pack_end = U32.pack                          # element id -> spo / ops scan prefix
TAIL_PON = struct.Struct(">4xIII").unpack    # spo key -> (p, o, n); ops key -> (p, s, n)
TAIL_SON = TAIL_PON                          # pso key -> (s, o, n)
TID_N = struct.Struct(">4xQ").unpack         # tid key -> (n,)
first = itemgetter(0)
BIG: repeat[Literal["big"]] = repeat("big")  # for map(int.from_bytes, keys, BIG)

CONCEPT_TAG = 1
LINK_TAG = 3                                 # a link head: 03 s(4) p(4) o(4)
LINK_HEAD = struct.Struct(">BIII")
LINK_TAG_WIDE = 2                            # 02 s(8) p(4) o(8): read only (module doc)
LINK_HEAD_WIDE = struct.Struct(">BQIQ")
HEAD_TAGS = (CONCEPT_TAG, LINK_TAG, LINK_TAG_WIDE)

# Keys of the `stats` and `meta` tables.
ST_CONCEPTS = b"C"
ST_LINKS = b"L"
ST_TYPE = b"T"
ST_PRED = b"P"
META_FORMAT = b"format"
META_MAX_ID = b"max_id"
META_MAX_SYM = b"max_sym"
# 13-byte link heads; also marks the search layer's concept entries that hold a digest of
# their document instead of its terms (nexus.search.lexical_entry), which an earlier nexus
# would misread: it must refuse such a database
FORMAT_TAG = b"nexus-store/3"
FORMAT_TAG_V2 = b"nexus-store/2"             # 16-byte link keys, ids <= MAX_ELEMENT_ID
FORMAT_TAG_V1 = b"nexus-store/1"             # 28-byte link keys (converted at open)


def bad_value(message: str) -> KipError:
    return KipError(ErrorCode.KIP_2003, message)


def id_limit_error(wanted: int | None = None) -> KipError:
    """The store's element ids are exhausted (or an id past the cap was given): nothing
    is written."""
    past = "" if wanted is None else f" (id {wanted} asked for)"
    return KipError(ErrorCode.KIP_4002,
                    f"element ids of this store are capped at {MAX_ELEMENT_ID} (2**32 - 1) "
                    f"and the next one would pass it{past}: nothing was written",
                    "This database has used every id it can (deleting elements frees none: "
                    "ids are never reused). Put further data in another database (a space).")


# --- texts (names, symbols) -----------------------------------------------------------------

def encode_text(text: str) -> bytes:
    """UTF-8 of a name or symbol; a lone surrogate (not valid Unicode) is KIP_2003."""
    try:
        return text.encode()
    except UnicodeEncodeError as exc:
        raise bad_value(f"text is not valid Unicode: {exc.reason} at {exc.start}") from None
    except AttributeError:
        raise bad_value(f"expected a string, got {type(text).__name__}") from None


def text_key(utf8: bytes) -> bytes:
    """The key form of a text: verbatim when short, else 0xFF + digest (see module doc)."""
    if len(utf8) <= MAX_INLINE_TEXT:
        return utf8
    return b"\xff" + hashlib.blake2b(utf8, digest_size=20).digest()


def is_hashed(tkey: bytes) -> bool:
    return tkey[:1] == b"\xff"


# --- heads ----------------------------------------------------------------------------------

def concept_head_value(type_key: bytes, name_utf8: bytes) -> bytes:
    return b"\x01" + type_key + name_utf8


def link_head_value(s: int, p: int, o: int) -> bytes:
    return LINK_HEAD.pack(LINK_TAG, s, p, o)


_LINK_LAYOUTS = {LINK_TAG: LINK_HEAD, LINK_TAG_WIDE: LINK_HEAD_WIDE}


def link_ends(v: bytes) -> tuple[int, int, int] | None:
    """(s, p, o) of a stored link head of either form, None when `v` is not one."""
    layout = _LINK_LAYOUTS.get(v[0]) if v else None
    if layout is None or len(v) != layout.size:
        return None
    _, s, p, o = layout.unpack(v)
    return s, p, o


_unpack_link = LINK_HEAD.unpack


def decode_head(n: int, v: bytes) -> Head:
    tag = v[0]
    if tag == LINK_TAG:
        _, s, p, o = _unpack_link(v)
    elif tag == CONCEPT_TAG:
        return ConceptHead(n, int.from_bytes(v[1:5], "big"), v[5:].decode())
    else:
        _, s, p, o = LINK_HEAD_WIDE.unpack(v)
    return LinkHead(n, s, p, o)


# --- JSON-like maps -------------------------------------------------------------------------

_SCALARS = frozenset((str, int, float, bool, type(None)))
_tls = threading.local()     # one msgpack Packer per thread: a Packer owns a buffer


def _packer() -> msgpack.Packer:
    packer: msgpack.Packer
    try:
        packer = _tls.packer
    except AttributeError:
        packer = _tls.packer = msgpack.Packer(use_bin_type=True)
    return packer


def _strict_packer() -> msgpack.Packer:
    """The thread's packer that refuses tuples and subclasses of the JSON types (their
    values pack like `_packer`'s; `encode_maps` relies on it to meet only JSON)."""
    packer: msgpack.Packer = msgpack.Packer(use_bin_type=True, strict_types=True)
    _tls.strict = packer
    return packer


def _check(value: object, where: str) -> None:
    """Reject what is not JSON (msgpack would accept bytes, int-keyed maps, tuples...)."""
    if type(value) is dict:
        for k, v in value.items():
            if type(k) is not str:
                raise bad_value(f"{where}: map key {k!r} is not a string")
            if type(v) not in _SCALARS:
                _check(v, f"{where}.{k}")
    elif type(value) is list:
        for i, v in enumerate(value):
            if type(v) not in _SCALARS:
                _check(v, f"{where}[{i}]")
    elif type(value) not in _SCALARS:
        raise bad_value(f"{where}: a {type(value).__name__} is not a JSON value")


def encode_map(value: JsonMap, what: str = "value") -> bytes | None:
    """msgpack bytes of a JSON-like map, or None when it is empty (stored as absent).

    Ints stay ints and floats stay floats. Anything that is not JSON, or an int outside the
    64-bit range, raises KIP_2003 naming the problem.
    """
    if type(value) is not dict:
        raise bad_value(f"{what}: expected a map, got {type(value).__name__}")
    if not value:
        return None
    try:
        for k, v in value.items():              # the top level inline: maps are small
            if type(k) is not str:
                raise bad_value(f"{what}: map key {k!r} is not a string")
            if type(v) not in _SCALARS:
                _check(v, f"{what}.{k}")
        pack: Callable[[object], bytes]
        try:
            pack = _tls.packer.pack
        except AttributeError:
            pack = _packer().pack
        if "_updated_at" in value and (stamps := engine_stamps(value)) is not None:
            return _compact(value, stamps, pack)
        return pack(value)
    except OverflowError:
        _tls.__dict__.pop("packer", None)    # a failed pack may leave bytes in the buffer
        raise bad_value(f"{what}: an integer is outside the 64-bit range") from None
    except RecursionError:
        _tls.__dict__.pop("packer", None)
        raise bad_value(f"{what}: nested too deeply") from None
    except (TypeError, ValueError) as exc:
        _tls.__dict__.pop("packer", None)
        raise bad_value(f"{what}: cannot encode: {exc}") from None


_MAP_OR_NONE = frozenset((dict, type(None)))
_FIXMAP_HEADERS = [bytes((0x80 | i,)) for i in range(16)]


def encode_maps(maps: Sequence[JsonMap | None], what: str = "value",
                extra: JsonMap | None = None) -> list[bytes | None]:
    """encode_map for a whole column of maps (None counts as {}), each merged with `extra`
    (`{**m, **extra}`; `extra`'s keys must not occur in the maps) — byte-identical to
    `[encode_map({**(m or {}), **extra}) for m in maps]`, several times faster.

    The checks run column-wise in C calls: one `orjson.dumps` of the whole column proves
    every key a string and every value JSON (nested ones too: no bytes, no int beyond 64
    bits), and a msgpack packer with `strict_types` refuses what JSON accepts but
    `encode_map` does not (tuples, subclasses). Every map is packed by one C call, and
    `extra` is packed once and spliced after each map's pairs (a msgpack map is a header
    then its pairs) — but when `extra` is the engine's metadata (new elements), the maps
    take the fixed layout, coded column by column (`_coded_rows`). Anything unusual — big
    maps, a value either refuses — goes through `encode_map` map by map, which also raises
    the precise KIP_2003.
    """
    if not maps:
        return []
    if not set(map(type, maps)) <= _MAP_OR_NONE:
        return _maps_slow(maps, what, extra)
    # Every entry is a map or None (checked above), so without a None all are maps.
    full = ([m or _EMPTY_MAP for m in maps] if None in maps
            else cast("Sequence[JsonMap]", maps))
    try:
        _json(full)
    except TypeError:                   # orjson's JSONEncodeError is a TypeError
        return _maps_slow(full, what, extra)
    k = len(extra) if extra else 0
    if max(map(len, full)) + k > 15:                       # not all fixmaps: rare
        return _maps_slow(full, what, extra)
    pack: Callable[[object], bytes]
    try:
        pack = _tls.strict.pack
    except AttributeError:
        pack = _strict_packer().pack
    stamps = engine_stamps(extra) if k == 3 and extra is not None else None
    try:
        if stamps is not None:  # the engine's metadata of new elements: one header for all
            shapes = list(map(tuple, full))
            fronts = {shape: (_header(0, *stamps) if prefix is None else
                              _header(_KEYED, *stamps) + prefix)
                      for shape in set(shapes) for prefix in (_shape_prefix(shape),)}
            if len(fronts) == 1:        # the usual load: one key set
                shape, front = next(iter(fronts.items()))
                return _coded_rows(front, shape, full, pack)
            groups: dict[tuple[str, ...], list[int]] = {}
            for i, shape in enumerate(shapes):
                groups.setdefault(shape, []).append(i)
            out: list[bytes | None] = [None] * len(full)
            for shape, rows in groups.items():
                for i, value in zip(rows, _coded_rows(fronts[shape], shape,
                                                      [full[i] for i in rows], pack)):
                    out[i] = value
            return out
        packed = list(map(pack, full))
    except Exception:  # noqa: BLE001 - e.g. a tuple: reported precisely below
        _tls.__dict__.pop("strict", None)
        return _maps_slow(full, what, extra)
    if not k:
        return [(p if "_updated_at" not in m or (stamps := engine_stamps(m)) is None
                 else _compact(m, stamps, pack)) if len(p) > 1 else None
                for m, p in zip(full, packed)]
    assert extra is not None
    if "_updated_at" in extra:  # keep encode_map's bytes (a compact form may apply)
        return _maps_slow(full, what, extra)
    tail = pack(extra)[1:]
    headers = _FIXMAP_HEADERS[k:]
    return [headers[p[0] & 15] + p[1:] + tail for p in packed]


def _coded_rows(front: bytes, keys: tuple[str, ...], maps: Sequence[JsonMap],
                pack: Callable[[object], bytes]) -> list[bytes | None]:
    """`_compact` of maps that all have these keys in this order (at most 15) and the same
    engine items (`front`: their header, and the codes when keyed), column by column: each
    column's values coded and packed at once (`column_bytes`), adjacent columns coded
    throughout joined in numpy (`join_ext`), then each row in one C call."""
    keyed = front[1] & _KEYED
    lead = front + bytes(((0x90 if keyed else 0x80) | len(keys),))
    parts: list[Iterable[bytes]] = []
    run: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []   # adjacent columns all coded
    for key in keys:
        column = column_bytes(list(map(itemgetter(key), maps)), pack)
        if not keyed:
            if run:
                parts.append(join_ext(run, len(maps)))
                run = []
            parts.append(repeat(pack(key)))
        if type(column) is tuple:
            run.append(column)
            continue
        if run:
            parts.append(join_ext(run, len(maps)))
            run = []
        parts.append(column)                    # type: ignore[arg-type]
    if run:
        parts.append(join_ext(run, len(maps)))
    if not parts:
        return [lead] * len(maps)
    return list(map(b"".join, zip(repeat(lead), *parts)))


def _maps_slow(maps: Sequence[JsonMap | None], what: str, extra: JsonMap | None
               ) -> list[bytes | None]:
    out = []
    for m in maps:
        if m is None:
            m = _EMPTY_MAP
        elif type(m) is not dict:
            encode_map(m, what)                             # raises the KIP_2003
        out.append(encode_map({**m, **extra} if extra else m, what))
    return out


_EMPTY_MAP: JsonMap = {}

# --- the engine's metadata in a fixed layout (module doc) -------------------------------------

COMPACT_TAG = 0xC1
_UPDATED, _KEYED, _NARROW = 1, 2, 4          # flag bits (module doc)
_ENGINE = struct.Struct(">BBIq")            # tag, flag, _version, _created_at ms
_MS = struct.Struct(">q")
_ENGINE48 = struct.Struct(">BBBhI")         # tag, flag, _version, _created_at ms (i48)
_MS48 = struct.Struct(">hI")                # an i48 as its high 16 and low 32 bits
_I48 = 1 << 47
_LOW32 = (1 << 32) - 1

# The metadata keys KIP's Appendix 1 recommends (and the engine's `_merged_from`), coded as
# their index + 1 in the keyed form (module doc). A stored format: append only.
META_KEYS = ("source", "author", "confidence", "evidence", "memory_strength", "created_at",
             "observed_at", "expires_at", "valid_from", "valid_until", "status",
             "memory_tier", "superseded", "superseded_by", "supersedes", "superseded_at",
             "relevance_tags", "access_level", "review_info", "_merged_from")
_CODE = {key: i + 1 for i, key in enumerate(META_KEYS)}
# key tuple -> count + codes (None: not every key has a code), and codes -> key tuple; both
# bounded (cleared when full): a graph's elements carry few distinct key sets.
_PREFIX: dict[tuple[str, ...], bytes | None] = {}
_KEYS_OF: dict[bytes, tuple[str, ...]] = {}
_SHAPES_MAX = 4096


def _shape_prefix(keys: tuple[str, ...]) -> bytes | None:
    """The keyed form's count and codes for a map with these keys (the user's, the engine's
    three not among them); None when one has no code, or there is none."""
    try:
        return _PREFIX[keys]
    except KeyError:
        pass
    codes = [_CODE.get(key) for key in keys]
    prefix = None if not keys or None in codes else bytes((len(keys), *codes))  # type: ignore
    if len(_PREFIX) >= _SHAPES_MAX:
        _PREFIX.clear()
    _PREFIX[keys] = prefix
    return prefix


def _keys_of(codes: bytes) -> tuple[str, ...]:
    try:
        return _KEYS_OF[codes]
    except KeyError:
        pass
    if 0 in codes:
        raise ValueError("metadata key code 0")
    keys = tuple(META_KEYS[c - 1] for c in codes)   # IndexError: a damaged value
    if len(_KEYS_OF) >= _SHAPES_MAX:
        _KEYS_OF.clear()
    _KEYS_OF[codes] = keys
    return keys


def engine_stamps(m: JsonMap) -> tuple[int, int, int] | None:
    """(`_version`, `_created_at` ms, `_updated_at` ms) of a map whose last items are the
    engine's metadata in its types and form (module doc), None when it has no such tail."""
    if len(m) < 3:
        return None
    it = reversed(m)
    if next(it) != "_updated_at" or next(it) != "_created_at" or next(it) != "_version":
        return None
    version = m["_version"]
    if type(version) is not int or not 0 <= version < 1 << 32:
        return None
    created = stamp_ms(m["_created_at"])
    updated = stamp_ms(m["_updated_at"])
    if created is None or updated is None:
        return None
    return version, created, updated


def _header(flags: int, version: int, created: int, updated: int) -> bytes:
    """The fixed-layout header (module doc): narrow when the version fits a byte and the
    times 48 bits, the updated time only when it differs from the creation time."""
    if version < 256 and -_I48 <= created < _I48 and -_I48 <= updated < _I48:
        head = _ENGINE48.pack(COMPACT_TAG, flags | _NARROW | (updated != created), version,
                              created >> 32, created & _LOW32)
        return head if updated == created else head + _MS48.pack(updated >> 32,
                                                                 updated & _LOW32)
    if updated == created:
        return _ENGINE.pack(COMPACT_TAG, flags, version, created)
    return _ENGINE.pack(COMPACT_TAG, flags | _UPDATED, version, created) + _MS.pack(updated)


def _compact(m: JsonMap, stamps: tuple[int, int, int], pack: Callable[[object], bytes]
             ) -> bytes:
    """The fixed-layout form of `m` (which ends with the engine's items, `stamps`)."""
    items = list(m.items())[:-3]
    prefix = _shape_prefix(tuple(k for k, _ in items))
    if prefix is not None:      # the values as a msgpack array, each coded when it can be
        return b"".join([_header(_KEYED, *stamps), prefix, _head(0x90, 0xDC, len(items)),
                         *[piece(v, pack) for _, v in items]])
    return b"".join([_header(0, *stamps), _head(0x80, 0xDE, len(items)),
                     *[b for k, v in items for b in (pack(k), piece(v, pack))]])


def _head(fix: int, wide: int, n: int) -> bytes:
    """The msgpack header of an array (fix 0x90, wide 0xDC) or map (0x80, 0xDE) of n."""
    if n < 16:
        return bytes((fix | n,))
    if n < 1 << 16:
        return bytes((wide,)) + n.to_bytes(2, "big")
    return bytes((wide + 1,)) + n.to_bytes(4, "big")


def _parse_header(data: bytes) -> tuple[int, int, int, int, int]:
    """(flag, version, created ms, updated ms, offset of the rest) of a fixed-layout value."""
    flag = data[1]
    if flag & _NARROW:
        _, _, version, high, low = _ENGINE48.unpack_from(data)
        created = (high << 32) + low
        if flag & _UPDATED:
            high, low = _MS48.unpack_from(data, 9)
            return flag, version, created, (high << 32) + low, 15
        return flag, version, created, created, 9
    _, _, version, created = _ENGINE.unpack_from(data)
    if flag & _UPDATED:
        return flag, version, created, _MS.unpack_from(data, 14)[0], 22
    return flag, version, created, created, 14


def bump_compact(data: bytes | None, now_ms: int) -> tuple[bytes, int, int] | None:
    """A stored map in the fixed layout (module doc) with `_version` +1 and `_updated_at`
    set to `now_ms`, patched in its header — the other items' bytes are not decoded —
    with the `_version` and `_updated_at` (ms) it had; None when `data` is not in that
    layout or the version would leave its 32 bits (the caller decodes and re-encodes)."""
    if data is None or data[:1] != b"\xc1" or len(data) < 9:
        return None
    try:
        flag, version, created, updated, at = _parse_header(data)
    except struct.error:
        return None
    if version + 1 >= 1 << 32:
        return None
    return _header(flag & _KEYED, version + 1, created, now_ms) + data[at:], version, updated


def _decode_compact(data: bytes) -> JsonMap:
    value: JsonMap
    if data[1] == _KEYED | _NARROW:     # a loaded element's: created = updated, keyed
        _, _, version, high, low = _ENGINE48.unpack_from(data)
        n = data[9]
        codes = data[10:10 + n]
        keys = _KEYS_OF.get(codes) or _keys_of(codes)
        values = msgpack.unpackb(data[10 + n:], raw=False, ext_hook=ext_value)
        if type(values) is not list or len(values) != n or len(keys) != n:
            raise ValueError("keyed metadata: keys and values do not match")
        value = dict(zip(keys, values))
        value["_version"] = version
        value["_created_at"] = value["_updated_at"] = stamp_text((high << 32) + low)
        return value
    flag, version, created, updated, at = _parse_header(data)
    if flag & _KEYED:
        n = data[at]
        keys = _keys_of(data[at + 1:at + 1 + n])
        values = msgpack.unpackb(data[at + 1 + n:], raw=False, ext_hook=ext_value)
        if type(values) is not list or len(values) != n or len(keys) != n:
            raise ValueError("keyed metadata: keys and values do not match")
        value = dict(zip(keys, values))
    else:
        value = msgpack.unpackb(data[at:], raw=False, ext_hook=ext_value)
        if type(value) is not dict or "_version" in value:
            raise ValueError("not a map with the engine's metadata after its header")
    value["_version"] = version
    value["_created_at"] = stamp_text(created)
    value["_updated_at"] = stamp_text(updated)
    return value


def decode_map(data: bytes) -> JsonMap:
    """The map `encode_map` stored (a damaged value may decode to something else, which
    the integrity check reports)."""
    try:
        if data[:1] == b"\xc1":
            return _decode_compact(data)
        value: JsonMap = msgpack.unpackb(data, raw=False)
        return value
    except Exception as exc:  # noqa: BLE001 - any decoder failure means a damaged value
        raise KipError(ErrorCode.KIP_4003,
                       f"stored value cannot be decoded ({type(exc).__name__}: {exc})") from None


def decode_maps(values: Sequence[bytes | None]) -> list[JsonMap]:
    """`decode_map` over many stored values (None: no map stored, an empty one)."""
    unpackb = msgpack.unpackb
    try:
        return [{} if v is None else unpackb(v, raw=False) if v[0] != COMPACT_TAG
                else _decode_compact(v) for v in values]
    except Exception:  # noqa: BLE001 - reported precisely, value by value
        return [{} if v is None else decode_map(v) for v in values]


def decode_count(v: bytes | None) -> int:
    """A counter or statistic value (big-endian); absent is 0."""
    return 0 if v is None else int.from_bytes(v, "big")


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with `prefix` (None: no bound)."""
    p = prefix.rstrip(b"\xff")
    if not p:
        return None
    return p[:-1] + bytes((p[-1] + 1,))
