"""Shared fixtures: an isolated reference cache for the whole test session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    # The session's own cache: tests never read a user's, and workers inherit it.
    if "SCIML_BENCH_TEST_CACHE" in os.environ:
        os.environ["SCIML_BENCH_CACHE"] = os.environ["SCIML_BENCH_TEST_CACHE"]
    else:
        os.environ["SCIML_BENCH_CACHE"] = str(tmp_path_factory.mktemp("reference-cache"))
