"""Fixtures for the tool's tests: an isolated cache, a tiny upstream, a project."""

from __future__ import annotations

import pytest

from tests.tool.repos import Project, Upstream


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_OVERLAY_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("VLLM_OVERLAY_REMOTE", raising=False)
    return tmp_path / "cache"


@pytest.fixture
def upstream(tmp_path) -> Upstream:
    return Upstream(tmp_path / "upstream")


@pytest.fixture
def project(tmp_path) -> Project:
    return Project(tmp_path / "project")
