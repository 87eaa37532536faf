"""Find and download a file from the package index pip is configured with.

pip itself cannot download an sdist without building its metadata (for vLLM that means torch
and a CUDA toolchain), so this reads pip's configuration (``pip config list``: files and
PIP_* variables) and speaks the Simple API directly: PEP 691 JSON, else PEP 503 HTML.
"""

from __future__ import annotations

import hashlib
import html.parser
import json
import os
import re
import ssl
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from .errors import ToolError

DEFAULT_INDEX = "https://pypi.org/simple"
_SCOPE_ORDER = (":env:", "site", "user", "global")


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


def _ssl_context(settings: dict[str, str]) -> ssl.SSLContext:
    cert = settings.get("cert")
    return ssl.create_default_context(cafile=cert) if cert and os.path.exists(cert) else ssl.create_default_context()


class _Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self._href: str | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._href = dict(attrs).get("href")

    def handle_data(self, data):
        if self._href is not None:
            self.links.append((data.strip(), self._href))
            self._href = None


def _read(url: str, ctx: ssl.SSLContext, accept: str | None = None) -> tuple[bytes, str]:
    if url.startswith("file://"):
        path = Path(urllib.parse.unquote(urllib.parse.urlparse(url).path))
        if path.is_dir():
            path = path / "index.html"
        return path.read_bytes(), "text/html"
    req = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(req, context=ctx, timeout=60) as resp:
        return resp.read(), resp.headers.get("Content-Type", "")


def find_file(project: str, filename: str, settings: dict[str, str] | None = None) -> IndexFile:
    """Look ``filename`` up in each configured index; the index's own sha256 comes with it."""
    settings = pip_settings() if settings is None else settings
    ctx = _ssl_context(settings)
    tried = []
    for base in index_urls(settings):
        page = base.rstrip("/") + f"/{project}/"
        try:
            body, ctype = _read(page, ctx, "application/vnd.pypi.simple.v1+json, text/html;q=0.1")
        except (OSError, urllib.error.URLError) as e:
            tried.append(f"{page} ({getattr(e, 'reason', e)})")
            continue
        if "json" in ctype:
            files = [(f["filename"], urllib.parse.urljoin(page, f["url"]), f.get("hashes", {}).get("sha256"))
                     for f in json.loads(body)["files"]]
        else:
            parser = _Links()
            parser.feed(body.decode("utf-8", "replace"))
            files = []
            for text, href in parser.links:
                url, _, frag = urllib.parse.urljoin(page, href).partition("#")
                sha = frag.split("=", 1)[1] if frag.startswith("sha256=") else None
                files.append((text or url.rsplit("/", 1)[-1], url, sha))
        for name, url, sha in files:
            if name == filename:
                return IndexFile(name, url, sha)
        tried.append(f"{page} (no {filename})")
    raise ToolError(f"{filename}: not found on the configured package indexes: " + "; ".join(tried))


def download(file: IndexFile, dest: Path, expected_sha256: str | None, settings: dict[str, str] | None = None) -> Path:
    """Download to ``dest`` atomically; verify sha256 (the pin, else the index's). Nothing is left on mismatch."""
    settings = pip_settings() if settings is None else settings
    want = expected_sha256 or file.sha256
    if expected_sha256 and file.sha256 and expected_sha256 != file.sha256:
        raise ToolError(f"{file.filename}: the pinned sha256 {expected_sha256} differs from the index's "
                        f"{file.sha256}; nothing downloaded")
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".part-")
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as fh:
            if file.url.startswith("file://"):
                data = Path(urllib.parse.unquote(urllib.parse.urlparse(file.url).path)).read_bytes()
                fh.write(data)
                digest.update(data)
            else:
                with urllib.request.urlopen(file.url, context=_ssl_context(settings), timeout=120) as resp:
                    total = int(resp.headers.get("Content-Length") or 0)
                    done, shown = 0, -1
                    while chunk := resp.read(1 << 20):
                        fh.write(chunk)
                        digest.update(chunk)
                        done += len(chunk)
                        step = done * 10 // total if total else done >> 23  # tenths, or every 8 MiB
                        if step != shown:
                            shown = step
                            print(f"  downloading {file.filename}: {done >> 20} MiB"
                                  + (f" of {total >> 20} MiB" if total else ""), file=sys.stderr)
        got = digest.hexdigest()
        if want and got != want:
            raise ToolError(f"{file.filename}: sha256 mismatch: expected {want}, got {got} (from {file.url}); "
                            "nothing written")
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return dest


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()
