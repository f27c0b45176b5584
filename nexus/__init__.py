"""nexus — a Python engine for KIP, the Knowledge Interaction Protocol.

    from nexus import Nexus
    with Nexus.open("./nexus-data") as nx:
        nx.execute_kip({"command": "DESCRIBE PRIMER"})

The public names are `Nexus` (nexus.api), `KipError` and `ErrorCode` (nexus.errors).
`Nexus` is imported on first use, so `import nexus` stays cheap for tools that only need
the error types or the versions.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import ErrorCode, KipError
from .version import KIP_VERSION, __version__

if TYPE_CHECKING:
    from .api import Nexus

__all__ = ["Nexus", "ErrorCode", "KipError", "__version__", "KIP_VERSION"]


def _checkout_venv() -> bool:
    """Put the checkout's own virtualenv (`.venv` beside the package, made by the README's
    first command) on sys.path, when this interpreter has the same version: a `python3`
    started in the repository root without activating it then finds the dependencies
    there. False when there is no such virtualenv or it is already on the path."""
    import os
    import site
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    packages = os.path.join(root, ".venv", "lib", f"python{sys.version_info[0]}."
                            f"{sys.version_info[1]}", "site-packages")
    if not os.path.isdir(packages) or packages in sys.path:
        return False
    site.addsitedir(packages)
    return True


def _other_venvs() -> list[str]:
    """The Python versions of the checkout's `.venv` when it is not for this interpreter
    (its `lib/pythonX.Y` folders: a `python3` of another version started in the repository
    root cannot use its compiled dependencies)."""
    import os
    import sys
    lib = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".venv",
                       "lib")
    mine = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    try:
        names = sorted(os.listdir(lib))
    except OSError:
        return []
    return [f"Python {n[6:]}" for n in names if n.startswith("python") and n != mine]


def __getattr__(name: str) -> Any:
    if name == "Nexus":
        try:
            try:
                from .api import Nexus
            except ModuleNotFoundError as exc:
                if not (exc.name and exc.name.split(".")[0] != "nexus" and _checkout_venv()):
                    raise
                from .api import Nexus
        except ModuleNotFoundError as exc:
            # Run from a checkout that was never installed: say what to do, not only what
            # is missing (the README's first command installs the dependencies).
            if exc.name and exc.name.split(".")[0] != "nexus":
                other = _other_venvs()
                hint = (f"the checkout's .venv is for {', '.join(other)}, not this "
                        f"interpreter: run `.venv/bin/python`, or `. .venv/bin/activate` "
                        f"first" if other else
                        "install nexus with its dependencies first (the README's first "
                        "command: `pip install .` in a virtualenv)")
                raise ModuleNotFoundError(
                    f"nexus needs the package {exc.name!r}, which is not installed: {hint}",
                    name=exc.name) from exc
            raise
        return Nexus
    raise AttributeError(f"module 'nexus' has no attribute {name!r}")
