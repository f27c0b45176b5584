"""The structure the code promises (docs/architecture.md), held by tests.

* every AST statement class is registered with its kind, and an unregistered statement is
  treated as a write: `execute_kip_readonly` refuses it;
* one write path: no module but the engine opens a store write transaction;
* no import cycles, counting imports made only for type checking;
* no module touches another module's private attributes.
"""
from __future__ import annotations

import ast as pyast
import dataclasses
import re
import typing
from pathlib import Path

import grimp
import pytest

import nexus
from nexus import Nexus
from nexus.exec import registry
from nexus.syntax import ParsedCommand, StatementKind, ast as A, kind_of, statements

PACKAGE = Path(nexus.__file__).parent


# --- the statement registry ------------------------------------------------------------------

def test_every_statement_class_is_registered_with_an_executor():
    commands = typing.get_args(A.Command)
    assert commands, "nexus.syntax.ast.Command lists the statement classes"
    executors = registry.executors()
    for cls in commands:
        info = statements.info(cls)
        assert info is not None, f"{cls.__name__} has no @statement declaration"
        assert info.keywords, f"{cls.__name__} declares no leading keyword"
        assert cls in executors, f"{cls.__name__} has no executor"
    assert {i.cls for i in statements.registered()} == set(commands)


def test_kinds_as_kip_defines_them():
    assert kind_of(A.Find) is StatementKind.QUERY
    assert kind_of(A.Upsert) is StatementKind.WRITE and StatementKind.WRITE.writes
    assert kind_of(A.DescribePrimer) is StatementKind.META
    assert not StatementKind.META.writes and not StatementKind.QUERY.writes
    assert statements.kind_of_text("  // note\nDELETE CONCEPT ?x DETACH WHERE {}") \
        is StatementKind.WRITE
    assert statements.kind_of_text("FROBNICATE") is None


@dataclasses.dataclass(frozen=True)
class Frobnicate:
    """A write statement somebody added without declaring its kind."""
    pos: object = None


def test_an_unregistered_statement_counts_as_a_write(monkeypatch):
    ran = []
    assert kind_of(Frobnicate) is StatementKind.WRITE
    monkeypatch.setitem(registry._EXECUTORS, Frobnicate,
                        lambda ctx, command, params: (ran.append(ctx.txn) or {"done": 1}, None))

    def parse(text, **kw):
        return ParsedCommand(Frobnicate(), kind_of(Frobnicate), frozenset())
    monkeypatch.setattr("nexus.engine.syntax.parse", parse)
    monkeypatch.setattr("nexus.engine.syntax.bind", lambda parsed, params: parsed.command)
    with Nexus.open(None, bootstrap=False) as nx:
        refused = nx.execute_kip_readonly({"command": "FROBNICATE"})
        assert refused["error"]["code"] == "KIP_1001" and not ran
        assert nx.execute_kip({"command": "FROBNICATE"}) == {"result": {"done": 1}}
        assert len(ran) == 1 and hasattr(ran[0], "intern"), "ran in a write transaction"


# --- one write path ----------------------------------------------------------------------------

def _sources():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, path.read_text(encoding="utf-8")


def test_only_the_engine_opens_store_write_transactions():
    offenders = []
    for path, text in _sources():
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == "engine.py" or rel.startswith("store/"):
            continue
        for no, line in enumerate(text.splitlines(), 1):
            if re.search(r"\bstore\.write\(\)", line):
                offenders.append(f"{rel}:{no}: {line.strip()}")
    assert not offenders, "write through Engine.write_session():\n" + "\n".join(offenders)


# --- imports --------------------------------------------------------------------------------------

def _cycles(graph) -> list[list[str]]:
    index, low, stack, on, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_no_import_cycles():
    graph = grimp.build_graph("nexus", exclude_type_checking_imports=False)
    # A package's __init__ re-exporting its modules is not a cycle of logic.
    for module in list(graph.modules):
        for child in graph.find_children(module):
            for importer in (module,):
                if graph.direct_import_exists(importer=importer, imported=child):
                    graph.remove_import(importer=importer, imported=child)
    assert _cycles(graph) == []


# --- private attributes ---------------------------------------------------------------------------

def _own_names(tree: pyast.Module) -> set[str]:
    """Names a module defines or assigns anywhere (its own private names may be used)."""
    names = set()
    for node in pyast.walk(tree):
        if isinstance(node, (pyast.FunctionDef, pyast.AsyncFunctionDef, pyast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, pyast.Attribute) and isinstance(node.ctx, pyast.Store):
            names.add(node.attr)
        elif isinstance(node, pyast.Name) and isinstance(node.ctx, pyast.Store):
            names.add(node.id)
        elif isinstance(node, pyast.ClassDef):
            names.add(node.name)
    for node in pyast.walk(tree):
        if isinstance(node, pyast.Assign):
            for t in node.targets:
                if isinstance(t, pyast.Tuple):
                    names.update(e.id for e in t.elts if isinstance(e, pyast.Name))
        elif isinstance(node, pyast.Constant) and isinstance(node.value, str) and \
                re.fullmatch(r"_\w+", node.value):
            names.add(node.value)              # __slots__ entries
    return names


def test_no_module_uses_another_modules_private_attributes():
    offenders = []
    for path, text in _sources():
        tree = pyast.parse(text)
        own = _own_names(tree)
        for node in pyast.walk(tree):
            if not isinstance(node, pyast.Attribute):
                continue
            attr = node.attr
            if not attr.startswith("_") or attr.startswith("__") or attr in own:
                continue
            if isinstance(node.value, pyast.Name) and node.value.id in ("self", "cls"):
                continue
            offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: .{attr}")
    assert not offenders, "\n".join(offenders)


def test_imports_nothing_from_the_tests_or_the_benchmarks():
    for path, text in _sources():
        assert not re.search(r"^\s*(from|import) (tests|bench)\b", text, re.M), path


@pytest.mark.parametrize("module", ["nexus.syntax", "nexus.store"])
def test_lower_layers_import_nothing_of_the_engine(module):
    graph = grimp.build_graph("nexus", exclude_type_checking_imports=False)
    above = {"nexus.plan", "nexus.exec", "nexus.search", "nexus.engine", "nexus.ops",
             "nexus.api", "nexus.language", "nexus.server", "nexus.cli", "nexus.shell"}
    for target in above:
        chain = graph.find_shortest_chain(importer=module, imported=target)
        assert chain is None, chain


# --- the public import ----------------------------------------------------------------------------

def test_importing_nexus_without_its_dependencies_says_to_install_them():
    """`from nexus import Nexus` in a checkout that was never installed names the missing
    package and the command that installs it (a dependency is made unimportable here)."""
    import subprocess
    import sys
    code = ("import sys; sys.modules['msgpack'] = None\n"
            "from nexus import Nexus\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=PACKAGE.parent, timeout=120)
    assert run.returncode != 0
    assert "ModuleNotFoundError" in run.stderr
    assert "'msgpack'" in run.stderr and "pip install ." in run.stderr
