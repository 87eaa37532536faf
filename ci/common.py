"""Shared pieces of ci/install.py, ci/build_wheel.py and ci/smoke_wheel.py.

What base is the build tree on (build/vllm-report.json, else VERSION), which upstream wheel
carries that base's precompiled binaries, where it is cached, and how it is verified. The
package-index client and VERSION reader are tools/patchstack's (one implementation for the
sdist and the wheel).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from patchstack import index  # noqa: E402
from patchstack.errors import ToolError  # noqa: E402
from patchstack.pin import Pin, read_pin  # noqa: E402
from patchstack.sources import cache_dir  # noqa: E402

DEFAULT_TREE = ROOT / "build" / "vllm"
# upstream's mapping from a CUDA major version to its wheel variant (setup.py,
# precompiled_wheel_utils.detect_system_cuda_variant)
CUDA_VARIANTS = {12: "cu129", 13: "cu130"}
NIGHTLY_WHEELS = "https://wheels.vllm.ai"
ISSUES = "vLLM #52544 and #13047"

# Build requirements of the Python-only route: upstream's [build-system] requires without
# torch (installed separately), cmake and ninja (nothing is compiled).
BUILD_REQUIREMENTS = ROOT / "ci" / "requirements" / "build.txt"
TEST_REQUIREMENTS = ROOT / "ci" / "requirements" / "test.txt"


class CIError(ToolError):
    """An expected failure: one message, exit code 1 (2 for bad input)."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message, exit_code)


@dataclass
class BaseId:
    """The upstream base the build tree was made from."""

    kind: str  # pypi | git | path
    spec: str
    version: str | None
    commit: str | None  # the upstream commit (full sha for git bases, short for sdists)
    sdist_sha256: str | None = None
    source: str = "VERSION"  # where this was read from
    notes: list[str] = field(default_factory=list)

    def is_pinned(self, pin: Pin) -> bool:
        return self.kind == "pypi" and self.version == pin.vllm and self.sdist_sha256 == pin.sdist_sha256


def report_path(tree: Path) -> Path:
    return tree.with_name(tree.name + "-report.json")


def read_base(tree: Path, pin: Pin) -> BaseId:
    """The base of ``tree``: from tools/apply.py's JSON report beside it, else the pin in VERSION."""
    rep = report_path(tree)
    if rep.exists():
        try:
            base = json.loads(rep.read_text())["base"]
        except (ValueError, KeyError) as e:
            raise CIError(f"{rep}: not a tools/apply.py report ({e})") from None
        kind = base.get("kind") or ("pypi" if str(base.get("spec", "")).startswith("pypi:") else "git")
        commit = base.get("upstream_commit") if kind == "pypi" else base.get("commit")
        return BaseId(kind=kind, spec=str(base.get("spec")), version=base.get("version"), commit=commit,
                      sdist_sha256=base.get("sha256") if kind == "pypi" else None, source=str(rep))
    return BaseId(kind="pypi", spec=f"pypi:{pin.vllm}", version=pin.vllm, commit=pin.commit,
                  sdist_sha256=pin.sdist_sha256, source="VERSION",
                  notes=[f"no {rep.name} beside {tree}: base taken from VERSION"])


def local_label(pin: Pin) -> str:
    """The overlay's PEP 440 local label: '0.34.0+dspark.1' -> 'dspark.1'."""
    from packaging.version import InvalidVersion, Version

    try:
        v = Version(pin.overlay_version)
    except InvalidVersion:
        raise CIError(f"VERSION: [overlay].version {pin.overlay_version!r} is not a PEP 440 version") from None
    if not v.local:
        raise CIError(f"VERSION: [overlay].version {pin.overlay_version!r} has no local label (+...)")
    if v.public != pin.vllm:
        raise CIError(f"VERSION: [overlay].version {pin.overlay_version} is not on the pinned base {pin.vllm}")
    return v.local


def package_version(pin: Pin, base: BaseId, python_only: bool) -> str | None:
    """The version an install or wheel of the patched tree carries; None: leave it to upstream.

    Pinned base: [overlay].version exactly (``0.34.0+dspark.1``). Another release: that release
    with our label. A git or path base whose version is unknown: None (upstream's setuptools-scm
    version). The Python-only route appends ``.empty``, as upstream appends ``+empty`` for
    VLLM_TARGET_DEVICE=empty, so the two builds of one tree never share a version.
    """
    label = local_label(pin)
    if base.is_pinned(pin):
        version = pin.overlay_version
    elif base.version:
        from packaging.version import Version

        version = f"{Version(base.version).public}+{label}"
        if base.kind == "git" and base.commit:
            version += f".g{base.commit[:9]}"
    else:
        return None
    return version + ".empty" if python_only else version


# --- upstream wheels ----------------------------------------------------------------------------

@dataclass(frozen=True)
class UpstreamWheel:
    filename: str
    url: str | None
    sha256: str | None  # what the file must hash to; None only for unpinned nightly wheels
    why: str  # one line: where it comes from and what it is verified against


def wheel_cache(*parts: str) -> Path:
    return cache_dir().joinpath("wheels", *parts)


def machine_arch() -> str:
    return platform.machine()


def release_wheel(pin: Pin, base: BaseId, arch: str | None = None, find=None) -> UpstreamWheel:
    """The PyPI wheel of a release base: the pinned one (sha256 from VERSION) or the index's."""
    arch = arch or machine_arch()
    find = find or index.find_file
    if base.is_pinned(pin) and pin.wheel.endswith(f"_{arch}.whl"):
        found = find("vllm", pin.wheel)
        if found.sha256 and found.sha256 != pin.wheel_sha256:
            raise CIError(f"{pin.wheel}: the index serves sha256 {found.sha256}, VERSION pins "
                          f"{pin.wheel_sha256}; refusing it")
        return UpstreamWheel(pin.wheel, found.url, pin.wheel_sha256,
                             "PyPI wheel of the pinned base, sha256 from VERSION")
    if base.kind != "pypi" or not base.version:
        raise CIError(f"base {base.spec} is not a PyPI release")
    filename = f"vllm-{base.version}-cp38-abi3-manylinux_2_28_{arch}.whl"
    found = find("vllm", filename)
    if not found.sha256:
        raise CIError(f"{filename}: the index gives no sha256 and VERSION does not pin this file; refusing it")
    return UpstreamWheel(filename, found.url, found.sha256,
                         f"PyPI wheel of {base.spec}, not pinned in VERSION: sha256 from the index")


def nightly_wheel(commit: str, variant: str, arch: str | None = None, fetch_json=None) -> UpstreamWheel:
    """The wheel upstream's CI built for exactly ``commit`` and ``variant``, or a refusal.

    Upstream's own fallbacks (nearest older commit with a wheel, the root variant) are what
    {ISSUES} are about: binaries of another commit or CUDA variant behind a source tree.
    """
    arch = arch or machine_arch()
    if not re.fullmatch(r"[0-9a-f]{40}", commit or ""):
        raise CIError(f"base commit {commit!r} is not a full sha: cannot name its precompiled wheel")
    url = f"{NIGHTLY_WHEELS}/{commit}/{variant}/vllm/metadata.json"
    fetch_json = fetch_json or _fetch_json
    advice = (f"The binaries of another commit or CUDA variant are not used ({ISSUES}). Wait until upstream "
              "publishes wheels for this commit, rebase on a release (--base pypi:X.Y.Z), do a full source "
              "build (unset VLLM_USE_PRECOMPILED), or use the Python-only route (--route python-only) "
              "on a machine without a GPU.")
    try:
        wheels = fetch_json(url)
    except Exception as e:  # noqa: BLE001 - any failure means: not available
        raise CIError(f"no precompiled wheel for upstream commit {commit} variant {variant}: "
                      f"{url}: {e}. {advice}") from None
    for w in wheels:
        if w.get("package_name") != "vllm" or arch not in w.get("platform_tag", ""):
            continue
        m = re.search(r"\+g([0-9a-f]{7,40})", w.get("version", ""))
        if not m or not commit.startswith(m.group(1)):
            raise CIError(f"{url} lists {w.get('filename')} (version {w.get('version')}), which is not "
                          f"built from {commit}. {advice}")
        if w.get("variant") not in (None, variant):
            raise CIError(f"{url} lists {w.get('filename')} of variant {w.get('variant')}, not {variant}. {advice}")
        from urllib.parse import urljoin

        return UpstreamWheel(w["filename"], urljoin(url, w["path"]), None,
                             f"upstream's wheel for commit {commit[:12]} variant {variant} (no published "
                             "sha256: hashed on first download, verified against that afterwards)")
    raise CIError(f"{url} has no vllm wheel for {arch}. {advice}")


def _fetch_json(url: str):
    import urllib.request

    with urllib.request.urlopen(url, timeout=30) as resp:
        return json.loads(resp.read().decode())


def sha256_of(path: Path) -> str:
    return index.sha256_of(path)


def fetch_wheel(wheel: UpstreamWheel, dest_dir: Path | None = None, local: Path | None = None) -> Path:
    """A verified copy of ``wheel`` in the cache; downloaded once. ``local``: a file the user has."""
    dest = (dest_dir or wheel_cache()) / wheel.filename
    tofu = dest.with_name(dest.name + ".sha256")
    want = wheel.sha256 or (tofu.read_text().split()[0] if tofu.exists() else None)
    if local is not None:
        got = sha256_of(local)
        if want and got != want:
            raise CIError(f"{local}: sha256 {got}, expected {want} ({wheel.why}); refusing it")
        print(f"upstream wheel: {local} (sha256 {got[:16]}…, {wheel.why})", file=sys.stderr)
        return local
    if dest.exists():
        got = sha256_of(dest)
        if want and got != want:
            raise CIError(f"{dest}: cached file has sha256 {got}, expected {want}; delete it to download again")
        print(f"upstream wheel: cached {dest} (sha256 verified)", file=sys.stderr)
        return dest
    if not wheel.url:
        raise CIError(f"{wheel.filename}: no download address")
    print(f"upstream wheel: downloading {wheel.filename} once into {dest.parent}", file=sys.stderr)
    index.download(index.IndexFile(wheel.filename, wheel.url, wheel.sha256), dest, wheel.sha256)
    if not wheel.sha256:
        tofu.write_text(f"{sha256_of(dest)}  {wheel.filename}\n")
    return dest


# --- wheels on disk -----------------------------------------------------------------------------

def filename_tags(path: Path) -> list[str]:
    """The tags a wheel's file name declares (what installers match on), expanded."""
    from packaging.utils import parse_wheel_filename

    return [str(t) for t in parse_wheel_filename(path.name)[3]]


def wheel_tags(path: Path) -> list[str]:
    """The Tag lines of a wheel's WHEEL file."""
    with zipfile.ZipFile(path) as z:
        name = next(n for n in z.namelist() if re.fullmatch(r"[^/]+\.dist-info/WHEEL", n))
        return [line.split(":", 1)[1].strip() for line in z.read(name).decode().splitlines()
                if line.startswith("Tag:")]


def wheel_metadata(path: Path) -> str:
    with zipfile.ZipFile(path) as z:
        name = next(n for n in z.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n))
        return z.read(name).decode()


def compiled_members(path: Path) -> dict[str, str]:
    """Binary members of a wheel (shared objects, the vllm-rs executable) -> sha256."""
    out = {}
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            n = info.filename
            if n.endswith((".so", ".pyd", ".dylib")) or ".so." in n or n.endswith("/vllm-rs"):
                out[n] = hashlib.sha256(z.read(n)).hexdigest()
    return out


def main_cuda_version(tree: Path) -> str:
    """VLLM_MAIN_CUDA_VERSION of the tree: the CUDA version its PyPI wheel is built for."""
    text = (tree / "vllm" / "envs.py").read_text()
    m = re.search(r'VLLM_MAIN_CUDA_VERSION: str = "([\d.]+)"', text)
    if not m:
        raise CIError(f"{tree}/vllm/envs.py: VLLM_MAIN_CUDA_VERSION not found")
    return m.group(1)


def cuda_variant(cuda_version: str) -> str:
    major = int(cuda_version.split(".")[0])
    if major not in CUDA_VARIANTS:
        raise CIError(f"CUDA {cuda_version}: upstream publishes no precompiled variant for it "
                      f"(known: {', '.join(f'{k}: {v}' for k, v in CUDA_VARIANTS.items())})")
    return CUDA_VARIANTS[major]


# --- processes -----------------------------------------------------------------------------------

def show(cmd: list[str], env: dict[str, str] | None = None) -> str:
    changed = {k: v for k, v in (env or {}).items() if os.environ.get(k) != v}
    return " ".join([*(f"{k}={shlex.quote(v)}" for k, v in changed.items()), *map(shlex.quote, map(str, cmd))])


def run(cmd: list, env: dict[str, str] | None = None, cwd: Path | None = None, quiet: bool = False) -> None:
    print(f"+ {show(cmd, env)}", file=sys.stderr, flush=True)
    full_env = dict(os.environ, **(env or {}))
    if quiet:
        p = subprocess.run([str(c) for c in cmd], env=full_env, cwd=cwd, capture_output=True, text=True)
        if p.returncode:
            sys.stderr.write(p.stdout[-6000:] + p.stderr[-6000:])
    else:
        p = subprocess.run([str(c) for c in cmd], env=full_env, cwd=cwd)
    if p.returncode:
        raise CIError(f"command failed (exit {p.returncode}): {show(cmd, env)}")


def load_pin() -> Pin:
    return read_pin(ROOT / "VERSION")
