"""`from nexus import Nexus` from the repository root works with a `python3` that is not the
checkout's virtualenv, once the README's first command made `.venv`: the package finds its
dependencies there (nexus/__init__.py) instead of failing for lack of msgpack."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig

import nexus


def test_a_bare_interpreter_in_the_checkout_finds_the_dependencies_in_its_venv(tmp_path):
    checkout = tmp_path / "checkout"
    shutil.copytree(os.path.dirname(nexus.__file__), checkout / "nexus",
                    ignore=shutil.ignore_patterns("__pycache__"))
    code = "from nexus import Nexus; print(Nexus.__module__)"
    # -S -E: no site-packages and no PYTHONPATH, as a python3 outside the virtualenv
    bare = [sys.executable, "-S", "-E", "-c", code]
    without = subprocess.run(bare, cwd=checkout, capture_output=True, text=True, timeout=120)
    assert without.returncode != 0 and "is not installed" in without.stderr
    venv = checkout / ".venv" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    venv.mkdir(parents=True)
    (venv / "site-packages").symlink_to(sysconfig.get_paths()["purelib"])
    found = subprocess.run(bare, cwd=checkout, capture_output=True, text=True, timeout=120)
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == "nexus.api"


def test_a_venv_of_another_python_version_is_named_in_the_error(tmp_path):
    checkout = tmp_path / "checkout"
    shutil.copytree(os.path.dirname(nexus.__file__), checkout / "nexus",
                    ignore=shutil.ignore_patterns("__pycache__"))
    # a .venv made by another Python: its compiled dependencies are not this one's
    (checkout / ".venv" / "lib" / "python2.7" / "site-packages").mkdir(parents=True)
    bare = [sys.executable, "-S", "-E", "-c", "from nexus import Nexus"]
    run = subprocess.run(bare, cwd=checkout, capture_output=True, text=True, timeout=120)
    assert run.returncode != 0
    assert "is not installed" in run.stderr and "Python 2.7" in run.stderr
    assert ".venv/bin/python" in run.stderr
