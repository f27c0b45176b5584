"""What the reliability test modules share besides fixtures: the full/short switch, the
fixture graph, `seeded` and `dump`.

Kept out of conftest.py because test modules import it by name and every test directory has
a conftest.py (`from conftest import ...` would pick whichever was imported first).
"""
from __future__ import annotations

import os
from typing import Any

from nexus.api import Nexus

FULL = os.environ.get("NEXUS_FULL", "") not in ("", "0")

SCHEMA = """
UPSERT {
  CONCEPT ?drug { {type: "$ConceptType", name: "Drug"} SET ATTRIBUTES { description: "a medicine" } }
  CONCEPT ?sym { {type: "$ConceptType", name: "Symptom"} SET ATTRIBUTES { description: "a symptom" } }
  CONCEPT ?treats { {type: "$PropositionType", name: "treats"} SET ATTRIBUTES { description: "treats", subject_types: ["Drug"], object_types: ["Symptom"] } }
  CONCEPT ?about { {type: "$PropositionType", name: "about"} SET ATTRIBUTES { description: "about", subject_types: ["*"], object_types: ["*"] } }
}
"""
DATA = """
UPSERT {
  CONCEPT ?a { {type: "Drug", name: "Aspirin"} SET ATTRIBUTES { dose_mg: 500, tags: ["nsaid", "old"], risk: 0.2 } }
  CONCEPT ?i { {type: "Drug", name: "Ibuprofen"} SET ATTRIBUTES { dose_mg: 200 } }
  CONCEPT ?h { {type: "Symptom", name: "Headache"} }
  CONCEPT ?f { {type: "Symptom", name: "Fever"} SET ATTRIBUTES { severity: "high" } }
  PROPOSITION ?t1 { (?a, "treats", ?h) SET ATTRIBUTES { evidence: "strong" } }
  PROPOSITION ?t2 { (?i, "treats", ?f) }
  PROPOSITION ?t3 { (?t1, "about", ?f) }
} WITH METADATA { source: "fixture", confidence: 0.9 }
"""


def seeded(nx: Nexus) -> Nexus:
    for command in (SCHEMA, DATA):
        response = nx.execute_kip({"command": command})
        assert "result" in response, response
    return nx


def dump(nx: Nexus) -> dict[str, list]:
    """Every table of the store, byte for byte (both stores offer `dump()`)."""
    return nx.store.dump()


def full_or(ci: Any, full: Any) -> Any:
    return full if FULL else ci
