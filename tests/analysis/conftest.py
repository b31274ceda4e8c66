"""Shared fixtures of the analysis tests: the seeded random models, loaded once per session."""

import pytest
from attnlab.model.registry import load


@pytest.fixture(scope="session")
def dec():
    return load("random-decoder")


@pytest.fixture(scope="session")
def decoder(dec):
    return dec


@pytest.fixture(scope="session")
def encdec():
    return load("random-encdec")


@pytest.fixture(scope="session")
def vit():
    return load("lecture-vit")


@pytest.fixture(scope="session")
def vit_image():
    from attnlab.model.lecture.shapes import shape_images

    return shape_images(1, 0, "eval")[0]
