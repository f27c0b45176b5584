"""The storage package's shape, kept: its modules import one another without cycles
(counting imports made only for type checking), and none reaches into another object's
private attributes — a backend's collaborators talk through public (if package-internal)
names."""
from __future__ import annotations

import ast
import pathlib

import grimp

import nexus.store

PACKAGE = pathlib.Path(nexus.store.__file__).parent


def test_store_modules_import_each_other_without_cycles():
    graph = grimp.build_graph("nexus", exclude_type_checking_imports=False, cache_dir=None)
    modules = sorted(m for m in graph.modules if m.startswith("nexus.store."))
    cycles = [graph.find_shortest_chain(importer=imported, imported=m)
              for m in modules
              for imported in graph.find_modules_directly_imported_by(m)
              if imported in modules and graph.chain_exists(importer=imported, imported=m)]
    assert cycles == []


def test_no_private_attribute_of_another_object_is_touched():
    found = []
    for path in sorted(PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                    and not node.attr.startswith("__")
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
                    and not (isinstance(node.value, ast.Call)          # super()._hook
                             and isinstance(node.value.func, ast.Name)
                             and node.value.func.id == "super")):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
            if isinstance(node, ast.ImportFrom):
                found += [f"{path.name}:{node.lineno}: import {a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    assert found == []
