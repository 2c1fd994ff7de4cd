"""Shared fixtures: one real embedded-model policy per session (loading takes seconds once cached)."""

import pytest


@pytest.fixture(scope="session")
def embedded_dir():
    from autotelic.backends.embedded import embedded_model_dir

    return embedded_model_dir()
