"""Versions: of this package, and of the KIP specification it implements."""

__version__ = "0.1.0"
KIP_VERSION = "1.0-RC11"
