"""The package-index client (pypi-simple underneath) against real local indexes: PEP 691 JSON and
PEP 503 HTML served over HTTP on loopback, a file:// index, an unreachable one, a tampered file."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
from pathlib import Path

import pytest
from patchstack import index
from patchstack.errors import ToolError

PAYLOAD = b"an sdist, as far as the index knows\n" * 4096  # 144 KiB: several progress steps


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves the project page as PEP 691 JSON when the client accepts it and the server is in
    json mode, else the PEP 503 HTML page; files from the same directory."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        srv = self.server
        if self.path == "/simple/vllm/":
            if srv.mode == "json" and "application/vnd.pypi.simple.v1+json" in self.headers.get("Accept", ""):
                body = json.dumps({"meta": {"api-version": "1.0"}, "name": "vllm", "files": [
                    {"filename": "vllm-1.2.3.tar.gz", "url": "/files/vllm-1.2.3.tar.gz",
                     "hashes": {"sha256": srv.sha}}]}).encode()
                ctype = "application/vnd.pypi.simple.v1+json"
            else:
                body = (f'<html><body><a href="/files/vllm-1.2.3.tar.gz#sha256={srv.sha}">'
                        "vllm-1.2.3.tar.gz</a></body></html>").encode()
                ctype = "text/html"
            # recorded before the reply: the client may return as soon as it has the body
            srv.seen.append(ctype)
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif self.path == "/files/vllm-1.2.3.tar.gz":
            self.send_response(200)
            self.send_header("Content-Length", str(len(srv.payload)))
            self.end_headers()
            self.wfile.write(srv.payload)
        else:
            self.send_error(404)


@pytest.fixture(params=["json", "html"])
def http_index(request):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.mode, srv.payload, srv.seen = request.param, PAYLOAD, []
    srv.sha = hashlib.sha256(PAYLOAD).hexdigest()
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv, f"http://127.0.0.1:{srv.server_port}/simple"
    srv.shutdown()
    srv.server_close()


def unused_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_find_and_download_over_http(http_index, tmp_path, monkeypatch, capsys):
    srv, url = http_index
    monkeypatch.setenv("VLLM_OVERLAY_PROGRESS", "lines")
    found = index.find_file("vllm", "vllm-1.2.3.tar.gz", {"index-url": url})
    assert found.sha256 == srv.sha and found.url.endswith("/files/vllm-1.2.3.tar.gz")
    assert srv.seen == (["application/vnd.pypi.simple.v1+json"] if srv.mode == "json" else ["text/html"])
    dest = index.download(found, tmp_path / "cache" / "vllm-1.2.3.tar.gz", None, {"index-url": url})
    assert dest.read_bytes() == PAYLOAD
    assert list(dest.parent.iterdir()) == [dest]  # no partial file left beside it
    # progress: plain lines (not a terminal), ending at 100 %
    err = capsys.readouterr().err
    assert "downloading vllm-1.2.3.tar.gz:" in err and "(100%)" in err and "\r" not in err


def test_tampered_file_over_http_leaves_nothing(http_index, tmp_path):
    srv, url = http_index
    srv.payload = PAYLOAD + b"tampered"
    found = index.find_file("vllm", "vllm-1.2.3.tar.gz", {"index-url": url})
    with pytest.raises(ToolError, match="sha256 mismatch"):
        index.download(found, tmp_path / "c" / "vllm-1.2.3.tar.gz", None, {"index-url": url})
    assert not any((tmp_path / "c").iterdir())


def test_pinned_sha_that_differs_from_the_index_downloads_nothing(http_index, tmp_path):
    srv, url = http_index
    found = index.find_file("vllm", "vllm-1.2.3.tar.gz", {"index-url": url})
    with pytest.raises(ToolError, match="differs from the index"):
        index.download(found, tmp_path / "c" / "vllm-1.2.3.tar.gz", "0" * 64, {"index-url": url})
    assert not (tmp_path / "c").exists() or not any((tmp_path / "c").iterdir())


def test_unreachable_index_is_named_and_the_next_one_is_used(http_index):
    srv, url = http_index
    dead = f"http://127.0.0.1:{unused_port()}/simple"
    found = index.find_file("vllm", "vllm-1.2.3.tar.gz", {"index-url": dead, "extra-index-url": url})
    assert found.sha256 == srv.sha
    with pytest.raises(ToolError) as e:
        index.find_file("vllm", "vllm-1.2.3.tar.gz", {"index-url": dead})
    assert dead in str(e.value) and "ConnectionError" in str(e.value)


def test_file_index_as_pip_allows(tmp_path):
    """pip takes file:// indexes (this project's machines configure two): a PEP 503 tree on disk."""
    root = tmp_path / "simple"
    (root / "vllm").mkdir(parents=True)
    (root / "vllm" / "vllm-1.2.3.tar.gz").write_bytes(PAYLOAD)
    sha = hashlib.sha256(PAYLOAD).hexdigest()
    (root / "vllm" / "index.html").write_text(
        f'<a href="vllm-1.2.3.tar.gz#sha256={sha}">vllm-1.2.3.tar.gz</a>')
    settings = {"index-url": f"file://{tmp_path}/nowhere", "extra-index-url": root.as_uri()}
    found = index.find_file("vllm", "vllm-1.2.3.tar.gz", settings)
    assert found.sha256 == sha
    dest = index.download(found, tmp_path / "c" / "x.tar.gz", None, settings)
    assert dest.read_bytes() == PAYLOAD


def test_project_without_the_file(http_index):
    srv, url = http_index
    with pytest.raises(ToolError, match="vllm-9.9.9.tar.gz: not found"):
        index.find_file("vllm", "vllm-9.9.9.tar.gz", {"index-url": url})


def test_pip_settings_follow_pip_config(tmp_path, monkeypatch):
    conf = Path(tmp_path / "pip.conf")
    conf.write_text("[global]\nindex-url = https://mirror.example/simple\ncert = /etc/some.pem\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "https://extra.example/simple")
    for var in ("PIP_INDEX_URL", "PIP_CERT"):
        monkeypatch.delenv(var, raising=False)
    s = index.pip_settings()
    assert s["index-url"] == "https://mirror.example/simple" and s["cert"] == "/etc/some.pem"
    assert index.index_urls(s) == ["https://mirror.example/simple", "https://extra.example/simple"]
