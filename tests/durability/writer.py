"""The process the durability test kills: writes UPSERTs in a loop and acknowledges each.

Usage: python writer.py DB_DIR START — opens the LMDB nexus at DB_DIR (bootstrapping it if
new), defines its schema, prints "ready", then for i = START, START+1, ... runs one UPSERT
command (marker i: three concepts, two links, one higher-order link, and the shared counter)
and prints "ack i" once `execute_kip` has returned successfully.
"""
import sys

from nexus.api import Nexus

SCHEMA = """
UPSERT {
  CONCEPT ?t { {type: "$ConceptType", name: "Item"} SET ATTRIBUTES { description: "test item" } }
  CONCEPT ?n { {type: "$PropositionType", name: "next"} SET ATTRIBUTES { description: "n", subject_types: ["*"], object_types: ["*"] } }
  CONCEPT ?a { {type: "$PropositionType", name: "about"} SET ATTRIBUTES { description: "a", subject_types: ["*"], object_types: ["*"] } }
}
"""

COMMAND = """
UPSERT {
  CONCEPT ?a { {type: "Item", name: :a} SET ATTRIBUTES { marker: :i, payload: :payload } }
  CONCEPT ?b { {type: "Item", name: :b} SET ATTRIBUTES { marker: :i } }
  CONCEPT ?c { {type: "Item", name: :c} SET ATTRIBUTES { marker: :i } SET PROPOSITIONS { ("next", ?a) } }
  PROPOSITION ?l { (?a, "next", ?b) SET ATTRIBUTES { marker: :i } }
  PROPOSITION ?h { (?l, "about", ?c) } WITH METADATA { marker: :i }
}
WITH METADATA { source: "durability" }
UPSERT {
  CONCEPT ?k { {type: "Item", name: "counter"} SET ATTRIBUTES { last: :i } }
}
"""


def main() -> None:
    path, start = sys.argv[1], int(sys.argv[2])
    nx = Nexus.open(path)
    response = nx.execute_kip({"command": SCHEMA})
    assert "error" not in response, response
    print("ready", flush=True)
    i = start
    while True:
        params = {"i": i, "a": f"m{i}-a", "b": f"m{i}-b", "c": f"m{i}-c",
                  "payload": f"{i}:" + "x" * 2000}
        response = nx.execute_kip({"command": COMMAND, "parameters": params})
        if "error" in response:
            print("error", response, flush=True)
            sys.exit(1)
        print(f"ack {i}", flush=True)
        i += 1


if __name__ == "__main__":
    main()
