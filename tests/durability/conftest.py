"""Fixtures for the durability tests (real processes, real LMDB directories)."""
from __future__ import annotations

import os

import pytest


@pytest.fixture
def writer_script() -> str:
    return os.path.join(os.path.dirname(__file__), "writer.py")
