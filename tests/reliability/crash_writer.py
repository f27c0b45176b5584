"""The process the crash harness kills: runs the ops of `crash_ops` against an LMDB nexus and
acknowledges each request once `execute_kip` has returned it successfully.

Usage: python crash_writer.py DB_DIR MODEL_PICKLE SEED START BIG [nosync]

Loads the model (the state after ops 0 .. START-1, written by the harness), opens the nexus
with the default options (durable; `nosync`: `durable=False`), prints "ready", then sends
requests for ops START,
START+1, ... for ever: a single command, or a `commands` batch of consecutive ops
(`crash_ops.batch_size`), printing "ack <last op index>" after each. Any KIP error is printed
as "error ..." and ends the process with status 3 (the model said the op was valid).
"""
from __future__ import annotations

import json
import os
import pickle
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from crash_ops import batch_size, make_op  # noqa: E402

from nexus.api import Nexus  # noqa: E402


def main() -> None:
    path, model_file, seed, start, big = sys.argv[1:6]
    seed, i, big = int(seed), int(start), int(big)
    with open(model_file, "rb") as fh:
        model = pickle.load(fh)
    nx = Nexus.open(path, durable=sys.argv[6:7] != ["nosync"])
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    while True:
        ops = []
        for _ in range(batch_size(seed, i)):
            op = make_op(seed, i + len(ops), model, big)
            op.apply(model)
            ops.append(op)
        if len(ops) == 1:
            responses = [nx.execute_kip(ops[0].request())]
        else:
            response = nx.execute_kip({"commands": [op.request() for op in ops]})
            responses = response.get("result", [response])
        bad = [r for r in responses if "error" in r]
        if bad or len(responses) != len(ops):
            out.write(f"error at op {i}: {json.dumps(bad or responses)[:2000]}\n")
            out.flush()
            sys.exit(3)
        i += len(ops)
        out.write(f"ack {i - 1}\n")
        out.flush()


if __name__ == "__main__":
    main()
