"""Find and download a file from the package indexes pip is configured with.

pip itself cannot download vLLM's sdist without building its metadata (torch and a CUDA
toolchain), so the Simple API (PEP 691 JSON, PEP 503 HTML) is spoken by pypi-simple. What that
library does not know is pip's configuration, where users keep their indexes and certificates:
``pip_settings`` reads it (``pip config list``: files and PIP_* variables) and the requests
session carries pip's ``cert``. pip also takes ``file://`` indexes (this project's machines have
two); pypi-simple speaks HTTP only, so those pages are read from disk and parsed by the same
library, and their files copied with the same digest check.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from . import progress
from .errors import ToolError

DEFAULT_INDEX = "https://pypi.org/simple"
_SCOPE_ORDER = (":env:", "site", "user", "global")
TIMEOUT_S = 60


@dataclass(frozen=True)
class IndexFile:
    filename: str
    url: str
    sha256: str | None


def pip_settings() -> dict[str, str]:
    """index-url, extra-index-url and cert as pip would see them (env wins, then site, user, global)."""
    proc = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    found: dict[str, dict[str, str]] = {}
    for line in proc.stdout.splitlines():
        m = re.match(r"^([^.]+|:env:)\.([\w-]+)='(.*)'$", line.strip())
        if m:
            found.setdefault(m.group(2), {})[m.group(1)] = m.group(3)
    settings = {}
    for key in ("index-url", "extra-index-url", "cert"):
        for scope in _SCOPE_ORDER:
            if scope in found.get(key, {}):
                settings[key] = found[key][scope]
                break
    return settings


def index_urls(settings: dict[str, str]) -> list[str]:
    urls = [settings.get("index-url") or DEFAULT_INDEX]
    urls += settings.get("extra-index-url", "").split()
    return urls


def _session(settings: dict[str, str]):
    import requests

    session = requests.Session()
    cert = settings.get("cert")
    if cert and os.path.exists(cert):
        session.verify = cert
    return session


def _local_path(url: str) -> Path:
    return Path(urllib.parse.unquote(urllib.parse.urlparse(url).path))


def project_packages(project: str, settings: dict[str, str] | None = None):
    """Every file each configured index offers for ``project``: (packages, tried) where tried
    lists the indexes that failed or lack the project, for the error message."""
    import requests
    from pypi_simple import NoSuchProjectError, ProjectPage, PyPISimple

    settings = pip_settings() if settings is None else settings
    packages, tried = [], []
    for base in index_urls(settings):
        endpoint = base.rstrip("/") + "/"
        page_url = endpoint + f"{project}/"
        try:
            if endpoint.startswith("file://"):
                page_dir = _local_path(page_url)
                html = (page_dir / "index.html") if page_dir.is_dir() else page_dir
                page = ProjectPage.from_html(project, html.read_bytes(), base_url=page_url)
            else:
                with PyPISimple(endpoint=endpoint, session=_session(settings)) as client:
                    page = client.get_project_page(project, timeout=TIMEOUT_S)
        except NoSuchProjectError:
            tried.append(f"{page_url} (no such project)")
            continue
        except (OSError, requests.RequestException) as e:
            tried.append(f"{page_url} ({type(e).__name__}: {e})")
            continue
        packages += page.packages
    return packages, tried


def find_file(project: str, filename: str, settings: dict[str, str] | None = None) -> IndexFile:
    """Look ``filename`` up in each configured index; the index's own sha256 comes with it."""
    packages, tried = project_packages(project, settings)
    for pkg in packages:
        if pkg.filename == filename:
            return IndexFile(pkg.filename, pkg.url, pkg.digests.get("sha256"))
    raise ToolError(f"{filename}: not found on the configured package indexes: "
                    + "; ".join(tried or ["each index lists the project without this file"]))


def download(file: IndexFile, dest: Path, expected_sha256: str | None, settings: dict[str, str] | None = None) -> Path:
    """Download to ``dest`` atomically; verify sha256 (the pin, else the index's). Nothing is left on mismatch."""
    import requests
    from pypi_simple import DistributionPackage, PyPISimple

    settings = pip_settings() if settings is None else settings
    want = expected_sha256 or file.sha256
    if expected_sha256 and file.sha256 and expected_sha256 != file.sha256:
        raise ToolError(f"{file.filename}: the pinned sha256 {expected_sha256} differs from the index's "
                        f"{file.sha256}; nothing downloaded")
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".part-")
    os.close(fd)
    try:
        if file.url.startswith("file://"):
            shutil.copyfile(_local_path(file.url), tmp)
        else:
            pkg = DistributionPackage(filename=file.filename, url=file.url, project=None, version=None,
                                      package_type=None, digests={}, requires_python=None, has_sig=None)
            # verify=False: one sha256 check below serves both transports and names the pin
            with PyPISimple(session=_session(settings)) as client:
                client.download_package(pkg, tmp, verify=False, timeout=TIMEOUT_S,
                                        progress=progress.factory(f"downloading {file.filename}"))
        got = sha256_of(Path(tmp))
        if want and got != want:
            raise ToolError(f"{file.filename}: sha256 mismatch: expected {want}, got {got} (from {file.url}); "
                            "nothing written")
        os.replace(tmp, dest)
    except (OSError, requests.RequestException) as e:
        raise ToolError(f"{file.filename}: download from {file.url} failed: {e}; nothing written") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return dest


def sha256_of(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()
