"""The request reader's guard for integers orjson cannot read exactly (nexus/server/wire.py):
a run of 19 or more digits sends the body to the stdlib reader, which keeps every integer
exact; shorter runs stay on orjson. Both readers must give the same JSON for what they
both read exactly."""
import json
import random
import re

from nexus.server.wire import has_long_digit_run, loads


def test_the_guard_finds_exactly_the_runs_of_nineteen_digits_or_more():
    rng = random.Random(5)
    alphabet = b"0123456789 ,:-+.eE\"[]{}a\xc3\xa9\x00\xff"
    for _ in range(3000):
        body = bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
        if rng.random() < 0.5:      # plant a run of 17..21 digits
            run = "".join(rng.choice("0123456789") for _ in range(rng.randint(17, 21)))
            at = rng.randint(0, len(body))
            body = body[:at] + run.encode() + body[at:]
        assert has_long_digit_run(body) == bool(re.search(rb"[0-9]{19}", body)), body


def test_integers_at_the_edges_of_orjsons_range_are_read_exactly():
    for value in (2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 10**18, 10**19, 2**70 + 1,
                  999_999_999_999_999_999):
        body = json.dumps({"v": value, "s": "x" * 3}).encode()
        got = loads(body)["v"]
        assert got == value and type(got) is int, (value, got)


def test_a_long_digit_run_inside_a_string_reads_the_same():
    body = json.dumps({"command": "FIND(?x) // 12345678901234567890123", "n": 7}).encode()
    assert has_long_digit_run(body)
    assert loads(body) == json.loads(body)
