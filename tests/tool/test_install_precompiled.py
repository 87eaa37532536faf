"""ci/install.py and ci/common.py: which upstream binaries an install may use, and the refusals.

No network: index look-ups and nightly metadata are faked, wheels are small local files.
"""

from __future__ import annotations

import hashlib
import json
import urllib.error
from pathlib import Path

import common
import install
import pytest
from common import BaseId, CIError

ROOT = Path(__file__).resolve().parents[2]

COMMIT = "62d4bc3c7" + "a" * 31


@pytest.fixture
def pin():
    return common.load_pin()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_OVERLAY_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def pinned_base(pin) -> BaseId:
    return BaseId(kind="pypi", spec=f"pypi:{pin.vllm}", version=pin.vllm, commit=pin.commit,
                  sdist_sha256=pin.sdist_sha256)


def fake_tree(tmp_path: Path, main_cuda: str = "13.0") -> Path:
    tree = tmp_path / "build" / "vllm"
    (tree / "vllm").mkdir(parents=True)
    (tree / "setup.py").write_text("# upstream setup.py stands here\n")
    (tree / "vllm" / "envs.py").write_text(f'    VLLM_MAIN_CUDA_VERSION: str = "{main_cuda}"\n')
    return tree


def file_url(path: Path) -> str:
    return path.resolve().as_uri()


# --- sha256 verification and the cache ---------------------------------------------------------------

def test_download_refuses_a_wheel_whose_sha256_is_not_the_pin(tmp_path, cache):
    served = tmp_path / "served.whl"
    served.write_bytes(b"not the upstream wheel")
    wheel = common.UpstreamWheel("vllm-0.34.0-cp38-abi3-manylinux_2_28_x86_64.whl", file_url(served),
                                 "0" * 64, "pinned")
    with pytest.raises(common.ToolError, match="sha256 mismatch"):
        common.fetch_wheel(wheel)
    assert not (cache / "wheels" / wheel.filename).exists()
    assert not any((cache / "wheels").glob(".part-*"))


def test_download_once_then_cached_and_reverified(tmp_path, cache):
    served = tmp_path / "served.whl"
    served.write_bytes(b"upstream wheel bytes")
    sha = hashlib.sha256(b"upstream wheel bytes").hexdigest()
    wheel = common.UpstreamWheel("vllm-x.whl", file_url(served), sha, "pinned")
    got = common.fetch_wheel(wheel)
    assert got == cache / "wheels" / "vllm-x.whl" and got.read_bytes() == b"upstream wheel bytes"
    served.unlink()  # a second call must not download
    assert common.fetch_wheel(wheel) == got
    got.write_bytes(b"tampered")
    with pytest.raises(CIError, match="cached file has sha256"):
        common.fetch_wheel(wheel)


def test_a_local_wheel_given_by_the_user_is_verified_too(tmp_path, cache):
    local = tmp_path / "mine.whl"
    local.write_bytes(b"something else")
    wheel = common.UpstreamWheel("vllm-x.whl", None, "1" * 64, "pinned")
    with pytest.raises(CIError, match="refusing it"):
        common.fetch_wheel(wheel, local=local)


def test_release_wheel_is_the_one_pinned_in_version(pin):
    found = common.index.IndexFile(pin.wheel, "https://files.example/" + pin.wheel, pin.wheel_sha256)
    w = common.release_wheel(pin, pinned_base(pin), arch="x86_64", find=lambda project, name: found)
    assert (w.filename, w.sha256) == (pin.wheel, pin.wheel_sha256)
    assert "VERSION" in w.why


def test_release_wheel_refuses_an_index_whose_hash_differs_from_the_pin(pin):
    found = common.index.IndexFile(pin.wheel, "https://files.example/x.whl", "f" * 64)
    with pytest.raises(CIError, match="VERSION pins"):
        common.release_wheel(pin, pinned_base(pin), arch="x86_64", find=lambda project, name: found)


# --- git bases: the exact commit's binaries or a refusal ---------------------------------------------

def nightly_entry(version: str, variant: str | None = "cu130") -> dict:
    name = f"vllm-{version}-cp38-abi3-manylinux_2_28_x86_64.whl"
    return {"package_name": "vllm", "version": version, "platform_tag": "manylinux_2_28_x86_64",
            "variant": variant, "filename": name, "path": f"../{name}"}


def test_git_base_without_published_binaries_is_refused_with_the_reason():
    def missing(url):
        raise urllib.error.HTTPError(url, 404, "Not Found", {}, None)

    with pytest.raises(CIError) as e:
        common.nightly_wheel(COMMIT, "cu130", arch="x86_64", fetch_json=missing)
    msg = str(e.value)
    assert COMMIT in msg and "cu130" in msg and "#52544" in msg and "#13047" in msg


def test_git_base_refuses_another_commits_binaries():
    other = nightly_entry("0.34.1.dev3+gdeadbeef1")
    with pytest.raises(CIError, match="not built from"):
        common.nightly_wheel(COMMIT, "cu130", arch="x86_64", fetch_json=lambda url: [other])


def test_git_base_refuses_another_cuda_variant():
    entry = nightly_entry(f"0.34.1.dev3+g{COMMIT[:9]}", variant="cu129")
    with pytest.raises(CIError, match="variant cu129"):
        common.nightly_wheel(COMMIT, "cu130", arch="x86_64", fetch_json=lambda url: [entry])


def test_git_base_takes_the_wheel_built_for_that_commit_and_variant():
    seen = []
    entry = nightly_entry(f"0.34.1.dev3+g{COMMIT[:9]}")

    def fetch(url):
        seen.append(url)
        return [entry]

    w = common.nightly_wheel(COMMIT, "cu130", arch="x86_64", fetch_json=fetch)
    assert seen == [f"https://wheels.vllm.ai/{COMMIT}/cu130/vllm/metadata.json"]
    assert w.filename == entry["filename"] and w.url.startswith(f"https://wheels.vllm.ai/{COMMIT}/cu130/")
    assert w.sha256 is None  # none published: hashed on first download, then verified


def test_git_base_needs_a_full_sha():
    with pytest.raises(CIError, match="not a full sha"):
        common.nightly_wheel("62d4bc3c7", "cu130", arch="x86_64", fetch_json=lambda url: [])


def test_install_refuses_a_torch_of_another_cuda_variant(tmp_path, pin, monkeypatch):
    tree = fake_tree(tmp_path, main_cuda="13.0")
    monkeypatch.setattr(install, "installed_torch", lambda: ("2.14.0+cu129", "12.9"))
    with pytest.raises(CIError, match="CUDA 12.9 build"):
        install.precompiled_wheel(tree, pin, pinned_base(pin), None, None)


def test_install_git_base_picks_the_variant_of_the_installed_torch(tmp_path, pin, monkeypatch):
    tree = fake_tree(tmp_path)
    monkeypatch.setattr(install, "installed_torch", lambda: ("2.14.0+cu129", "12.9"))
    base = BaseId(kind="git", spec="nightly", version=None, commit=COMMIT)
    urls = []

    def fetch(url):
        urls.append(url)
        return [nightly_entry(f"0.35.0.dev1+g{COMMIT[:10]}", variant="cu129")]

    wheel, variant = install.precompiled_wheel(tree, pin, base, None, None, fetch_json=fetch)
    assert variant == "cu129" and "/cu129/" in urls[0]


def test_precompiled_install_of_a_bad_local_wheel_fails(tmp_path, pin, cache, monkeypatch, capsys):
    tree = fake_tree(tmp_path)
    bad = tmp_path / pin.wheel
    bad.write_bytes(b"corrupt")
    monkeypatch.setattr(install, "installed_torch", lambda: None)
    monkeypatch.setattr(common.index, "find_file", lambda project, name, settings=None: common.index.IndexFile(
        name, "https://files.example/" + name, pin.wheel_sha256))
    assert install.main([str(tree), "--route", "precompiled", "--wheel", str(bad)]) == 1
    assert "refusing it" in capsys.readouterr().err


# --- base identity, versions, the plan -----------------------------------------------------------------

def test_base_comes_from_the_report_beside_the_tree(tmp_path, pin):
    tree = fake_tree(tmp_path)
    assert common.read_base(tree, pin).is_pinned(pin)  # no report: VERSION
    (tree.parent / "vllm-report.json").write_text(json.dumps({"base": {
        "spec": "nightly", "kind": "git", "commit": COMMIT, "version": None}}))
    base = common.read_base(tree, pin)
    assert (base.kind, base.commit, base.is_pinned(pin)) == ("git", COMMIT, False)


def test_versions_carry_the_overlay_label(pin):
    label = common.local_label(pin)
    assert pin.overlay_version == f"{pin.vllm}+{label}"
    assert common.package_version(pin, pinned_base(pin), python_only=False) == pin.overlay_version
    assert common.package_version(pin, pinned_base(pin), python_only=True) == pin.overlay_version + ".empty"
    nightly = BaseId(kind="git", spec="nightly", version="0.35.0.dev12+g1234", commit=COMMIT)
    assert common.package_version(pin, nightly, False) == f"0.35.0.dev12+{label}.g{COMMIT[:9]}"
    assert common.package_version(pin, BaseId("git", "nightly", None, COMMIT), False) is None


def test_python_only_plan_is_upstreams_empty_target_without_build_isolation(tmp_path, capsys):
    tree = fake_tree(tmp_path)
    assert install.main([str(tree), "--route", "python-only", "--print"]) == 0
    out = capsys.readouterr().out.splitlines()
    editable = [line for line in out if " -e " in line]
    assert len(editable) == 1
    assert "VLLM_TARGET_DEVICE=empty" in editable[0] and "--no-build-isolation" in editable[0]
    assert "VLLM_VERSION_OVERRIDE=" in editable[0] and ".empty" in editable[0]
    assert any("ci/requirements/build.txt" in line for line in out)
