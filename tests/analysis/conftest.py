"""Shared fixtures of the analysis tests: the seeded random models, loaded once per session."""

import pytest

from model.registry import load


@pytest.fixture(scope="session")
def dec():
    return load("random-decoder")


@pytest.fixture(scope="session")
def decoder(dec):
    return dec


@pytest.fixture(scope="session")
def encdec():
    return load("random-encdec")
