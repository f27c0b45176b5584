"""A deterministic, realistic-looking corpus and labelled SEARCH queries (tests and bench).

`make_corpus(n, seed)` → (types, concepts, links): concepts of six types with plausible
names (drugs from pharmaceutical morphemes, people with accented names, organisations,
places, diseases, projects), descriptions built from a domain vocabulary, and aliases
(brand names, nicknames, acronyms, former names). `make_queries(concepts, per_category,
seed)` → labelled queries in seven categories: exact, case, typo1, typo2, prefix, alias,
description. Same arguments → same output, on any machine.
"""
from __future__ import annotations

import random

CATEGORIES = ("exact", "case", "typo1", "typo2", "prefix", "alias", "description")

_DRUG_PRE = ["Acet", "Amox", "Azith", "Bena", "Cefu", "Clopi", "Dexa", "Dolo", "Ena", "Flu",
             "Gaba", "Hydro", "Ibu", "Keto", "Lami", "Levo", "Lora", "Meto", "Napro", "Ome",
             "Para", "Predni", "Quina", "Rani", "Sima", "Tama", "Vala", "Zolpi", "Carba",
             "Doxy", "Eso", "Feno", "Glipi", "Halo", "Irbe", "Losa", "Mira", "Nebi", "Olme",
             "Pravi", "Risper", "Sertra", "Telmi", "Venla", "Warfa", "Xylo", "Zidu", "Abaca"]
_DRUG_MID = ["ci", "pro", "xa", "lo", "tri", "zo", "va", "mi", "ne", "ra", "sta", "cy", "du",
             "fe", "gli", "ta", ""]
_DRUG_SUF = ["pril", "statin", "mab", "cillin", "oxetine", "azole", "vir", "olol", "sartan",
             "dronate", "tidine", "profen", "mycin", "parin", "zepam", "triptan", "afil",
             "lukast", "semide", "tinib", "floxacin", "gliptin"]
_BRAND_A = ["Zen", "Clar", "Vel", "Nor", "Lum", "Prax", "Ori", "Tev", "Sol", "Mer", "Cor",
            "Ax", "Bri", "Dav", "Eu", "Fio", "Gal", "Hel", "Iv", "Jex", "Kal", "Lyr"]
_BRAND_B = ["trova", "itex", "ora", "ivex", "amax", "enta", "ixil", "omed", "uvia", "arex",
            "ilon", "essa", "ulin", "atrol", "ecta", "inza"]
_FIRST = ["James", "Mary", "Robert", "Patricia", "John", "Jennifer", "Michael", "Linda",
          "William", "Elizabeth", "David", "Barbara", "Richard", "Susan", "Joseph", "Jessica",
          "Thomas", "Sarah", "Charles", "Karen", "Christopher", "Nancy", "Daniel", "Lisa",
          "Matthew", "Margaret", "Anthony", "Sandra", "Mark", "Ashley", "José", "Zoë",
          "François", "Søren", "Łukasz", "Ingrid", "Hiroshi", "Priya", "Mateo", "Amélie",
          "Olusegun", "Chiara", "Dmitri", "Aisha", "Kenji", "Ximena", "Bjørn", "Yusuf",
          "Renée", "Tomasz", "Freya", "Anahí", "Magnus", "Leilani", "Rafael", "Noémie"]
_LAST = ["Smith", "Johnson", "Williams", "Brown", "Jones", "Garcia", "Miller", "Davis",
         "Rodriguez", "Martinez", "Hernandez", "Lopez", "Gonzalez", "Wilson", "Anderson",
         "Thomas", "Taylor", "Moore", "Jackson", "Martin", "Lee", "Perez", "Thompson", "White",
         "Harris", "Sanchez", "Clark", "Ramirez", "Lewis", "Robinson", "Müller", "Schröder",
         "Nakamura", "Okonkwo", "Kowalski", "Rossi", "Dubois", "Lindqvist", "Petrović",
         "Haldane", "Castellanos", "Van der Berg", "O'Connor", "Fitzgerald", "Yamamoto",
         "Brennan", "Achterberg", "Sørensen", "Quintero", "Abernathy", "Whitfield",
         "Delacroix", "Moreau", "Bianchi", "Novak", "Horvath", "Szabo", "Ivanova"]
_NICK = {"Robert": "Bob", "William": "Bill", "Elizabeth": "Liz", "Richard": "Dick",
         "Michael": "Mike", "Joseph": "Joe", "Thomas": "Tom", "Christopher": "Chris",
         "Daniel": "Dan", "Matthew": "Matt", "Anthony": "Tony", "Margaret": "Peggy",
         "Jennifer": "Jen", "Patricia": "Patty", "Jessica": "Jess", "Susan": "Sue"}
_ADJ = ["Chronic", "Acute", "Hereditary", "Idiopathic", "Juvenile", "Autoimmune", "Benign",
        "Congenital", "Progressive", "Recurrent", "Systemic", "Atypical"]
_ORGAN = ["Renal", "Gastric", "Pulmonary", "Cardiac", "Hepatic", "Dermal", "Ocular", "Neural",
          "Vascular", "Thyroid", "Pancreatic", "Spinal", "Cerebral", "Bronchial", "Muscular"]
_COND = ["Fibrosis", "Syndrome", "Dystrophy", "Inflammation", "Neuropathy", "Stenosis",
         "Sclerosis", "Insufficiency", "Hyperplasia", "Myopathy", "Degeneration", "Edema"]
_ORG_A = ["Northwind", "Bluestone", "Silverline", "Redwood", "Ironbridge", "Clearwater",
          "Summit", "Harbor", "Evergreen", "Brightpath", "Oakridge", "Stellar", "Granite",
          "Pinnacle", "Lighthouse", "Crescent", "Meridian", "Falcon", "Aurora", "Cobalt"]
_ORG_B = ["Pharma", "Biotech", "Analytics", "Robotics", "Logistics", "Energy", "Capital",
          "Health", "Foods", "Textiles", "Software", "Aerospace", "Media", "Minerals"]
_ORG_C = ["Labs", "Group", "Holdings", "Partners", "Systems", "Industries", "Institute",
          "Collective", "Works", "Corporation"]
_PLACE_A = ["Port", "Lake", "North", "South", "East", "West", "New", "Old", "Fort", "Mount",
            "Saint", "Glen", "Bay", "Castle", "Upper", "Lower"]
_PLACE_B = ["Alv", "Bren", "Cast", "Dun", "Elm", "Fen", "Gar", "Hal", "Ives", "Kel", "Lor",
            "Mor", "Nev", "Or", "Pell", "Quar", "Ros", "Sel", "Tor", "Wex", "Yar", "Zan"]
_PLACE_C = ["essa", "bridge", "mora", "ford", "haven", "wick", "ton", "dale", "mouth", "ridge",
            "field", "holm", "stead", "bury", "cliff", "moor"]
_PROJ_A = ["Aurora", "Falcon", "Granite", "Nimbus", "Orion", "Phoenix", "Quasar", "Sapphire",
           "Tundra", "Vortex", "Zephyr", "Cascade", "Ember", "Helix", "Lynx", "Monsoon",
           "Nebula", "Obsidian", "Polaris", "Raven", "Sierra", "Tempest", "Umbra", "Vesper"]
_PROJ_B = ["Bridge", "Harvest", "Beacon", "Shield", "Compass", "Forge", "Lantern", "Anchor",
           "Summit", "Canyon", "Meadow", "Harbor", "Glacier", "Prism", "Circuit", "Orchard"]
_PROJ_C = ["Alpha", "Beta", "Gamma", "Delta", "Omega", "Prime", "Nova", "Zero"]
VOCAB = """
absorption adhesion allergy altitude antibody archive artery asthma audit ballast bandwidth
battery biopsy bladder blueprint bone boron budget calcium calibration cargo cartilage catalyst
cholesterol circuit climate cobalt coffee collagen compliance copper cornea cortex cotton crystal
customs dairy dementia density dialysis diesel digestion dopamine drainage drought electrode
embryo emission enzyme erosion estrogen export fatigue fertilizer fiber filtration fishing
forestry freight fungus furnace gallbladder genome glucose granite gravel harvest hemoglobin
hormone humidity hydrogen immunity implant infection inflation insulin insurance irrigation
keratin kidney lactose laser lattice leather ledger lithium liver logistics lumber lymph magnet
malaria marble maritime membrane mercury metabolism microchip migraine mining mortgage mucus
muscle nerve nickel nitrogen nutrition obesity opioid orchard osmosis oxygen ozone packaging
pancreas parasite patent pension pesticide pigment plasma platelet pollen polymer porcelain
potassium pregnancy protein pulse quarantine radiation rainfall receptor recycling reservoir
resin retina rubber salinity satellite sediment seismic semiconductor serotonin shipping silicon
sleep sodium soil solvent spine steel sterility stomach sugar sulfur surgery synapse tariff
telescope tendon textile thermal tissue titanium toxin traffic transit tremor tumor turbine
ulcer uranium vaccine valve vapor vein venom vertigo viscosity vitamin voltage warehouse
wastewater wheat wool yeast zinc acoustics aviation banking ceramics dentistry ecology
geology hydraulics journalism linguistics navigation optics pediatrics robotics tourism
""".split()
_TYPE_WORD = {"Drug": "medication", "Disease": "condition", "Person": "researcher",
              "Organization": "company", "City": "town", "Project": "initiative"}
SHARES = (("Drug", 0.25), ("Person", 0.33), ("Disease", 0.12), ("Organization", 0.12),
          ("City", 0.08), ("Project", 0.10))


def _drug(r: random.Random) -> str:
    return r.choice(_DRUG_PRE) + r.choice(_DRUG_MID) + r.choice(_DRUG_SUF)


def _brand(r: random.Random) -> str:
    stem = r.choice(_BRAND_A) + r.choice(["", "a", "e", "i", "o"]) + r.choice(_BRAND_B)
    return (stem + " " + r.choice(["XR", "Forte", "Plus", "Duo", "Rapid"])
            if r.random() < 0.5 else stem)


def _name(r: random.Random, t: str) -> tuple[str, list[str]]:
    if t == "Drug":
        return _drug(r), [_brand(r) for _ in range(r.randint(1, 2))]
    if t == "Person":
        first, last = r.choice(_FIRST), r.choice(_LAST)
        handle = "".join(ch for ch in (first[0] + last).lower() if ch.isascii() and
                         ch.isalpha()) + str(r.randint(10, 99))
        aliases = [f"{_NICK[first]} {last}"] if first in _NICK else [handle]
        return f"{first} {last}", aliases
    if t == "Disease":
        if r.random() < 0.3:
            last, cond = r.choice(_LAST), r.choice(_COND)
            return f"{last}'s {cond}", [f"{last} {cond.lower()} disorder"]
        words = [r.choice(_ADJ), r.choice(_ORGAN), r.choice(_COND)]
        return " ".join(words), ["".join(w[0] for w in words).upper() + "-" +
                                 str(r.randint(1, 9))]
    if t == "Organization":
        words = [r.choice(_ORG_A), r.choice(_ORG_B), r.choice(_ORG_C)]
        return " ".join(words), [f"{words[0]} {words[1]}"]
    if t == "City":
        stem = r.choice(_PLACE_B) + r.choice(_PLACE_C)
        name = f"{r.choice(_PLACE_A)} {stem}" if r.random() < 0.5 else stem.capitalize()
        return name, [f"Old {stem.capitalize()}"]
    words = [r.choice(_PROJ_A), r.choice(_PROJ_B), r.choice(_PROJ_C)]
    return "Project " + " ".join(words), ["-".join(w[:3] for w in words).upper()]


def _variant(r: random.Random, t: str, name: str) -> str:
    if t == "Person":
        first, _, last = name.partition(" ")
        return f"{first} {chr(65 + r.randrange(26))}. {last}"
    if t == "Drug":
        return name[:-3] + r.choice(_DRUG_MID) + name[-3:]
    if t == "City":
        return f"{r.choice(_PLACE_A)} {name}"
    return f"{name} {r.choice(['II', 'III', 'IV', 'V', 'VI', 'VII', 'IX', 'X'])}" + \
        ("" if r.random() < 0.5 else f" {r.randint(2, 99)}")


def _description(r: random.Random, t: str) -> tuple[str, list[str]]:
    words = r.sample(VOCAB, 6)
    text = (f"A {r.choice(['notable', 'widely known', 'little known', 'established'])} "
            f"{_TYPE_WORD[t]} associated with {words[0]} and {words[1]}, studied for its "
            f"effects on {words[2]}, {words[3]} and {words[4]}; see also {words[5]}.")
    return text, words


def make_corpus(n: int = 6000, seed: int = 7):
    """(types, concepts, links). Each concept dict: {type, name, attributes, _words}."""
    r = random.Random(seed)
    concepts: list[dict] = []
    seen: set[tuple[str, str]] = set()
    for t, share in SHARES:
        want = int(n * share) if t != SHARES[-1][0] else n - len(concepts)
        made = misses = 0
        while made < want:
            name, aliases = _name(r, t)
            if (t, name) in seen:
                misses += 1
                if misses < 4:
                    continue
                name = _variant(r, t, name)    # big corpora exhaust the plain name space
                if (t, name) in seen:
                    continue
            misses = 0
            seen.add((t, name))
            desc, words = _description(r, t)
            concepts.append({"type": t, "name": name,
                             "attributes": {"description": desc, "aliases": aliases},
                             "_words": words})
            made += 1
    types = [t for t, _ in SHARES]
    links = []
    by_type: dict[str, list[dict]] = {}
    for c in concepts:
        by_type.setdefault(c["type"], []).append(c)
    for c in by_type["Person"]:
        org = r.choice(by_type["Organization"])
        links.append({"subject": {"type": "Person", "name": c["name"]}, "predicate": "works_for",
                      "object": {"type": "Organization", "name": org["name"]}})
    for c in by_type["Drug"]:
        dis = r.choice(by_type["Disease"])
        links.append({"subject": {"type": "Drug", "name": c["name"]}, "predicate": "treats",
                      "object": {"type": "Disease", "name": dis["name"]}})
    return types, concepts, links


def _typo(r: random.Random, text: str, avoid: set[int]) -> tuple[str, int]:
    positions = [i for i, ch in enumerate(text) if ch.isalpha() and i > 0 and i not in avoid
                 and text[i - 1] != " "]
    i = r.choice(positions)
    op = r.choice(("sub", "del", "ins", "swap"))
    letters = "abcdefghijklmnopqrstuvwxyz"
    if op == "sub":
        return text[:i] + r.choice(letters.replace(text[i].lower(), "")) + text[i + 1:], i
    if op == "del":
        return text[:i] + text[i + 1:], i
    if op == "ins":
        return text[:i] + r.choice(letters) + text[i:], i
    if i + 1 < len(text) and text[i + 1].isalpha() and text[i + 1] != text[i]:
        return text[:i] + text[i + 1] + text[i] + text[i + 2:], i
    return text[:i] + r.choice(letters.replace(text[i].lower(), "")) + text[i + 1:], i


def _case(r: random.Random, name: str) -> str:
    style = r.choice(("lower", "upper", "swap", "random"))
    if style == "lower":
        out = name.lower()
    elif style == "upper":
        out = name.upper()
    elif style == "swap":
        out = name.swapcase()
    else:
        out = "".join(c.upper() if r.random() < 0.5 else c.lower() for c in name)
    return out if out != name else name.lower() if name.lower() != name else name.upper()


def _prefix(name: str) -> str:
    return name[:max(4, int(len(name) * 0.6 + 0.5))].rstrip()


def _sharing(sorted_names: list[str], prefix: str) -> int:
    import bisect
    lo = bisect.bisect_left(sorted_names, prefix)
    hi = bisect.bisect_left(sorted_names, prefix + "\U0010ffff")
    return hi - lo


def make_queries(concepts: list[dict], per_category: int = 40, seed: int = 11
                 ) -> list[tuple[str, str, dict]]:
    """[(category, query text, target concept)], `per_category` of each category."""
    r = random.Random(seed)
    out = []
    # A labelled query has one right answer: alias queries use aliases no other concept has.
    alias_use: dict[str, int] = {}
    for c in concepts:
        for a in c["attributes"]["aliases"]:
            alias_use[a.casefold()] = alias_use.get(a.casefold(), 0) + 1
    folded = sorted(c["name"].casefold() for c in concepts)
    for cat in CATEGORIES:
        pool = [c for c in concepts if len(c["name"]) >= 6]
        if cat == "prefix":     # a prefix that a handful of names share is no label
            pool = [c for c in pool if _sharing(folded, _prefix(c["name"]).casefold()) <= 3]
        if cat == "alias":
            pool = [c for c in pool
                    if any(alias_use[a.casefold()] == 1 for a in c["attributes"]["aliases"])]
        for c in r.sample(pool, per_category):
            name = c["name"]
            if cat == "exact":
                q = name
            elif cat == "case":
                q = _case(r, name)
            elif cat == "typo1":
                q, _ = _typo(r, name, set())
            elif cat == "typo2":
                q, i = _typo(r, name, set())
                q, _ = _typo(r, q, {i - 1, i, i + 1})
            elif cat == "prefix":
                q = _prefix(name)
            elif cat == "alias":
                q = r.choice([a for a in c["attributes"]["aliases"]
                              if alias_use[a.casefold()] == 1])
            else:
                q = " ".join(r.sample(c["_words"], 3))
            out.append((cat, q, c))
    return out


def define_schema(nexus, types=None) -> None:
    """Define the corpus's concept types and predicates through KML."""
    types = types or [t for t, _ in SHARES]
    blocks = [f'CONCEPT ?t{i} {{ {{type: "$ConceptType", name: "{t}"}} '
              f'SET ATTRIBUTES {{description: "{_TYPE_WORD[t]}"}} }}'
              for i, t in enumerate(types)]
    for i, p in enumerate(("works_for", "treats")):
        blocks.append(f'CONCEPT ?p{i} {{ {{type: "$PropositionType", name: "{p}"}} '
                      f'SET ATTRIBUTES {{description: "{p}"}} }}')
    response = nexus.execute_kip({"command": "UPSERT { " + " ".join(blocks) + " }"})
    assert "result" in response, response


def load_corpus(nexus, n: int = 6000, seed: int = 7, batch_size: int = 100_000):
    """Define the schema and bulk-load the corpus; returns the concept dicts."""
    from nexus.ops.bulk_import import bulk_import
    types, concepts, links = make_corpus(n, seed)
    define_schema(nexus, types)
    bulk_import(nexus, [{k: v for k, v in c.items() if k != "_words"} for c in concepts],
                links, batch_size=batch_size)
    return concepts


def evaluate(nexus, queries, limit: int = 10) -> dict[str, dict]:
    """Recall@1 / recall@5 per category: {category: {"n", "r1", "r5", "misses"}}."""
    out: dict[str, dict] = {}
    for cat, q, c in queries:
        with nexus.store.read() as txn:
            hits = nexus.search.search(txn, "CONCEPT", q, None, limit)
            found = [(txn.known_head(n).name, txn.symbol_text(txn.known_head(n).type_id))
                     for n, _ in hits]
        rank = found.index((c["name"], c["type"])) if (c["name"], c["type"]) in found else 99
        row = out.setdefault(cat, {"n": 0, "r1": 0, "r5": 0, "misses": []})
        row["n"] += 1
        row["r1"] += rank < 1
        row["r5"] += rank < 5
        if rank >= 5:
            row["misses"].append((q, c["name"], found[:3]))
    for row in out.values():
        row["r1"] /= row["n"]
        row["r5"] /= row["n"]
    return out
