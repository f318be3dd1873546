"""Shared fixtures: the shipped example model, compiled once."""
import os

import pytest

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESBLOCK = os.path.join(SOURCE_DIR, "examples", "models", "resblock.onnxtxt")


@pytest.fixture(scope="session")
def resblock_path():
    return RESBLOCK


@pytest.fixture(scope="session")
def compiled():
    import fusec
    return fusec.compile(RESBLOCK, dims={"N": 2})
