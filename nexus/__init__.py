"""nexus — a Python engine for KIP, the Knowledge Interaction Protocol.

    from nexus import Nexus
    with Nexus.open("./nexus-data") as nx:
        nx.execute_kip({"command": "DESCRIBE PRIMER"})
"""
from .errors import ErrorCode, KipError

__version__ = "0.1.0"
KIP_VERSION = "1.0-RC6"

__all__ = ["ErrorCode", "KipError", "__version__", "KIP_VERSION"]
