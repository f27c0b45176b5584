"""The `kip` CLI: every subcommand's --help, `exec` (local and --url), `info`, `load`,
`export --domain`, `reindex`/`check` wiring, and exit statuses (0 ok, 1 KIP error, 2 usage
or environment error)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from nexus import KIP_VERSION, __version__

from .conftest import run_kip

SUBCOMMANDS = ["serve", "shell", "exec", "load", "export", "info", "reindex", "check"]
TYPE_DEF = ('UPSERT { CONCEPT ?t { {type: "$ConceptType", name: "Gadget"} '
            'SET ATTRIBUTES {description: "A test gadget"} } }')


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    """A bootstrapped database with the Gadget type."""
    path = tmp_path_factory.mktemp("cli") / "db"
    proc = run_kip("exec", "--db", str(path), TYPE_DEF)
    assert proc.returncode == 0, proc.stderr
    return path


def test_console_script_and_version():
    kip = shutil.which("kip", path=os.path.dirname(sys.executable))
    assert kip, "the `kip` console script is installed next to the interpreter"
    proc = subprocess.run([kip, "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert __version__ in proc.stdout and KIP_VERSION in proc.stdout


@pytest.mark.parametrize("sub", SUBCOMMANDS)
def test_help_of_every_subcommand(kip_main, sub):
    code, out, _ = kip_main(sub, "--help")
    assert code == 0
    assert "usage:" in out.lower()


def test_top_level_help_lists_the_subcommands(kip_main):
    code, out, _ = kip_main("--help")
    assert code == 0
    for sub in SUBCOMMANDS:
        assert sub in out


def test_no_subcommand_and_unknown_subcommand(kip_main):
    assert kip_main()[0] == 2
    assert kip_main("frobnicate")[0] == 2


# --- exec ----------------------------------------------------------------------------------

def test_exec_write_and_read_with_params(kip_main, db):
    code, out, _ = kip_main("exec", "--db", str(db),
                            'UPSERT { CONCEPT ?g { {type: "Gadget", name: :name} '
                            'SET ATTRIBUTES {n: :n, label: :label, raw: :raw} } }',
                            "--param", "name=widget", "--param", "n=5",
                            "--param", 'label="5"', "--param", "raw={not json")
    assert code == 0, out
    assert json.loads(out)["result"]["upsert_concept_nodes"]
    code, out, _ = kip_main("exec", "--db", str(db), "--readonly",
                            'FIND(?g.attributes) WHERE { ?g {type: "Gadget", name: :name} }',
                            "-p", "name=widget")
    assert code == 0
    assert json.loads(out) == {"result": [{"n": 5, "label": "5", "raw": "{not json"}]}


def test_exec_kip_error_exits_1(kip_main, db):
    code, out, _ = kip_main("exec", "--db", str(db), "FIND(?x WHERE")
    assert code == 1
    assert json.loads(out)["error"]["code"] == "KIP_1001"
    code, out, _ = kip_main("exec", "--db", str(db), "--readonly",
                            'UPSERT { CONCEPT ?g { {type: "Gadget", name: "ro"} } }')
    assert code == 1 and json.loads(out)["error"]["code"] == "KIP_1001"


def test_exec_file_and_dry_run(kip_main, db, tmp_path):
    capsule = tmp_path / "two.kip"
    capsule.write_text('// two statements\nUPSERT { CONCEPT ?a { {type: "Gadget", name: "f1"} } }'
                       '\nUPSERT { CONCEPT ?b { {type: "Gadget", name: "f2"} } }\n')
    code, out, _ = kip_main("exec", "--db", str(db), "-f", str(capsule), "--dry-run")
    assert code == 0 and json.loads(out)["result"]["upsert_concept_nodes"] == []
    code, out, _ = kip_main("exec", "--db", str(db), "--readonly",
                            'FIND(?g) WHERE { ?g {type: "Gadget", name: "f1"} }')
    assert code == 1                                    # the dry run wrote nothing
    code, out, _ = kip_main("exec", "--db", str(db), "-f", str(capsule))
    assert code == 0 and json.loads(out)["result"]["blocks"] == 2


def test_exec_usage_errors_exit_2(kip_main, db, tmp_path):
    assert kip_main("exec", "--db", str(db))[0] == 2                      # nothing to run
    assert kip_main("exec", "--db", str(db), "X", "-f", "y")[0] == 2       # both
    code, _, err = kip_main("exec", "--db", str(db), "-f", str(tmp_path / "missing.kip"))
    assert code == 2 and "cannot read" in err
    code, _, err = kip_main("exec", "--db", str(db), "DESCRIBE PRIMER", "--param", "novalue")
    assert code == 2 and "NAME=VALUE" in err


def test_exec_stdin_subprocess_exit_codes(db):
    proc = run_kip("exec", "--db", str(db), "-f", "-",
                   input='FIND(?g.name) WHERE { ?g {type: "Gadget", name: "widget"} }')
    assert proc.returncode == 0 and json.loads(proc.stdout) == {"result": ["widget"]}
    proc = run_kip("exec", "--db", str(db), 'FIND(?x) WHERE { ?x {id: "C:999999"} }')
    assert proc.returncode == 1 and json.loads(proc.stdout)["error"]["code"] == "KIP_3002"


def test_exec_against_a_server(tmp_path):
    db = tmp_path / "served"
    log = tmp_path / "serve.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "nexus.cli", "serve", "--db", str(db),
                                 "--port", "0", "--api-key", "cli-key"],
                                stderr=fh, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        url = None
        while time.monotonic() < deadline and url is None:
            m = re.search(rb"on (http://\S+)/kip", log.read_bytes())
            url = m.group(1).decode() if m else None
            time.sleep(0.05)
        assert url, log.read_text()
        time.sleep(0.3)
        ok = run_kip("exec", "--url", url, "--api-key", "cli-key", TYPE_DEF)
        assert ok.returncode == 0, ok.stdout + ok.stderr
        env_key = run_kip("exec", "--url", url, "--readonly",
                          'FIND(?t.name) WHERE { ?t {type: "$ConceptType", name: "Gadget"} }',
                          env={"KIP_API_KEY": "cli-key"})
        assert env_key.returncode == 0 and json.loads(env_key.stdout) == {"result": ["Gadget"]}
        denied = run_kip("exec", "--url", url, "--api-key", "nope", "DESCRIBE PRIMER")
        assert denied.returncode == 1 and json.loads(denied.stdout)["error"]
    finally:
        proc.terminate()
        assert proc.wait(30) == 0
    unreachable = run_kip("exec", "--url", url, "DESCRIBE PRIMER")
    assert unreachable.returncode == 2 and "cannot reach" in unreachable.stderr


# --- info / load / export ----------------------------------------------------------------

def test_info(kip_main, db):
    code, out, _ = kip_main("info", "--db", str(db))
    assert code == 0
    info = json.loads(out)
    assert info["path"] == str(db.resolve())
    assert info["concepts"] > 0 and info["propositions"] > 0
    assert info["concept_types"] >= 5 and info["proposition_types"] >= 1  # Genesis + Gadget
    assert info["disk_bytes"] > 0
    assert info["nexus_version"] == __version__ and info["kip_version"] == KIP_VERSION
    code, _, err = kip_main("info", "--db", str(db.parent / "nowhere"))
    assert code == 2 and "no database" in err


def test_load_prints_counts_and_fails_cleanly(kip_main, tmp_path):
    db = tmp_path / "db"
    good = tmp_path / "good.kip"
    good.write_text(TYPE_DEF + '\nUPSERT { CONCEPT ?g { {type: "Gadget", name: "loaded"} } }\n')
    code, out, _ = kip_main("load", "--db", str(db), str(good))
    assert code == 0, out
    report = json.loads(out)
    assert report[0]["concepts_created"] == 2
    bad = tmp_path / "bad.kip"
    bad.write_text('UPSERT { CONCEPT ?g { {type: "Gadget", name: "half"} } }\n'
                   'UPSERT { CONCEPT ?x { {type: "Undefined", name: "x"} } }\n')
    code, out, _ = kip_main("load", "--db", str(db), str(bad))
    assert code == 1 and json.loads(out)[0]["error"]["code"] == "KIP_2001"
    code, out, _ = kip_main("exec", "--db", str(db),
                            'FIND(?g) WHERE { ?g {type: "Gadget", name: "half"} }')
    assert code == 1                                   # the failing file left nothing
    code, _, err = kip_main("load", "--db", str(db), str(tmp_path / "missing.kip"))
    assert code == 2 and "no such file" in err


def test_export_one_domain_loads_into_a_fresh_database(kip_main, tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    capsule = tmp_path / "lab.kip"
    capsule.write_text("""
UPSERT {
  CONCEPT ?lab { {type: "Domain", name: "Lab"} SET ATTRIBUTES {description: "the lab"} }
  CONCEPT ?other { {type: "Domain", name: "Other"} }
  CONCEPT ?t { {type: "$ConceptType", name: "Sample"} SET ATTRIBUTES {description: "s"}
    SET PROPOSITIONS { ("belongs_to_domain", ?lab) } }
  CONCEPT ?p { {type: "$PropositionType", name: "derived_into"}
    SET ATTRIBUTES {description: "d", subject_types: ["Sample"], object_types: ["Sample"]} }
  CONCEPT ?a { {type: "Sample", name: "a"} SET ATTRIBUTES {ph: 7.0}
    SET PROPOSITIONS { ("belongs_to_domain", ?lab) } }
  CONCEPT ?b { {type: "Sample", name: "b"}
    SET PROPOSITIONS { ("belongs_to_domain", ?lab) ("derived_into", ?a) } }
  CONCEPT ?c { {type: "Sample", name: "c-outside"}
    SET PROPOSITIONS { ("belongs_to_domain", ?other) ("derived_into", ?a) } }
} WITH METADATA {source: "lab"}
""")
    assert kip_main("load", "--db", str(src), str(capsule))[0] == 0
    out_file = tmp_path / "lab-export.kip"
    code, _, err = kip_main("export", "--db", str(src), "--domain", "Lab", "-o", str(out_file))
    assert code == 0, err
    text = out_file.read_text()
    assert '"c-outside"' not in text and '"Other"' not in text
    assert kip_main("load", "--db", str(dst), str(out_file))[0] == 0
    code, out, _ = kip_main("exec", "--db", str(dst), "--readonly",
                            'FIND(?s.name, ?s.attributes.ph) WHERE { ?s {type: "Sample"} '
                            '(?s, "belongs_to_domain", {type: "Domain", name: "Lab"}) } '
                            'ORDER BY ?s.name')
    assert json.loads(out) == {"result": [["a", "b"], [7.0, None]]}
    code, out, _ = kip_main("exec", "--db", str(dst), "--readonly",
                            'FIND(?x.name) WHERE { (?x, "derived_into", ?y) }')
    assert json.loads(out) == {"result": ["b"]}
    code, _, err = kip_main("export", "--db", str(src), "--domain", "Nope")
    assert code == 2 and "no domain" in err


def test_export_to_stdout_leaves_out_engine_metadata_and_core(kip_main, db):
    code, out, _ = kip_main("export", "--db", str(db))
    assert code == 0
    assert "_version" not in out and "_created_at" not in out
    assert '{type: "$ConceptType", name: "Gadget"}' in out
    assert '{type: "Domain", name: "CoreSchema"}\n' not in out     # core: never re-written
    assert "core_directives: [" not in out              # protected actor attribute


# --- reindex / check ------------------------------------------------------------------------

def test_reindex_then_check(kip_main, db):
    code, out, _ = kip_main("reindex", "--db", str(db))
    assert code == 0
    assert json.loads(out)["elements"] > 0
    code, out, _ = kip_main("check", "--db", str(db), "--deep")
    assert code == 0
    report = json.loads(out)
    assert report["search"]["ok"] is True


@pytest.mark.parametrize("sub", ["reindex", "check", "export"])
def test_maintenance_commands_need_an_existing_database(kip_main, db, sub):
    code, _, err = kip_main(sub, "--db", str(db.parent / "nowhere"))
    assert code == 2 and "no database" in err
    assert not (db.parent / "nowhere").exists()
