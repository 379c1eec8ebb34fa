"""A Hugging Face Hub on 127.0.0.1 for tests: serves model folders the test built, over the Hub's own
HTTP API, so huggingface_hub (check_model.py --download) runs unchanged against it via HF_ENDPOINT.

The endpoints are the ones huggingface_hub's snapshot_download calls (read from its source):
  GET  /api/models/ORG/NAME/revision/REV         model info: sha (the commit) and siblings
  GET  /api/models/ORG/NAME/tree/REV[/PATH]      the file listing (type, path, size, oid; lfs for weights)
  HEAD /ORG/NAME/resolve/REV/FILE                X-Repo-Commit, ETag (X-Linked-Etag/-Size for LFS files),
  GET  /ORG/NAME/resolve/REV/FILE                Content-Length; then the bytes
Anything else is a 404 with the Hub's X-Error-Code, as the Hub answers an unknown repository.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

LFS_SUFFIXES = (".safetensors", ".bin")


class HubServer:
    def __init__(self, repos: dict[str, Path]):
        self.repos = {name: Path(folder) for name, folder in repos.items()}
        self.requests: list[tuple[str, str]] = []
        self.sha = {name: hashlib.sha1(name.encode()).hexdigest() for name in repos}
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's naming)
                hub.handle(self, body=True)

            def do_HEAD(self):  # noqa: N802
                hub.handle(self, body=False)

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> HubServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    # ------------------------------------------------------------------ the API

    def files(self, name: str) -> list[Path]:
        root = self.repos[name]
        return sorted(p for p in root.rglob("*") if p.is_file())

    def entry(self, name: str, path: Path) -> dict:
        data = path.read_bytes()
        rel = str(path.relative_to(self.repos[name]))
        out = {"type": "file", "path": rel, "size": len(data),
               "oid": hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()}
        if path.suffix in LFS_SUFFIXES:
            out["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
        return out

    def handle(self, req: BaseHTTPRequestHandler, body: bool) -> None:
        path = unquote(urlparse(req.path).path)
        self.requests.append((req.command, path))
        for name in self.repos:
            if m := re.fullmatch(rf"/api/models/{re.escape(name)}/revision/([^/]+)", path):
                info = {"id": name, "modelId": name, "sha": self.sha[name], "private": False, "disabled": False,
                        "gated": False, "downloads": 0, "likes": 0, "tags": [], "library_name": "transformers",
                        "siblings": [{"rfilename": self.entry(name, p)["path"]} for p in self.files(name)]}
                return self.send(req, 200, json.dumps(info).encode(), body, {"Content-Type": "application/json"})
            if m := re.fullmatch(rf"/api/models/{re.escape(name)}/tree/([^/]+)(/.*)?", path):
                listing = [self.entry(name, p) for p in self.files(name)]
                return self.send(req, 200, json.dumps(listing).encode(), body, {"Content-Type": "application/json"})
            if m := re.fullmatch(rf"/{re.escape(name)}/resolve/([^/]+)/(.+)", path):
                target = self.repos[name] / m.group(2)
                if not target.is_file():
                    return self.not_found(req, body, "EntryNotFound")
                entry = self.entry(name, target)
                headers = {"X-Repo-Commit": self.sha[name], "ETag": f'"{entry["oid"]}"',
                           "Content-Type": "application/octet-stream"}
                if "lfs" in entry:
                    headers.update({"X-Linked-Etag": f'"{entry["lfs"]["oid"]}"', "X-Linked-Size": str(entry["size"])})
                return self.send(req, 200, target.read_bytes(), body, headers)
        return self.not_found(req, body, "RepoNotFound")

    def not_found(self, req, body: bool, code: str) -> None:
        raw = json.dumps({"error": "Repository not found" if code == "RepoNotFound" else "Entry not found"}).encode()
        self.send(req, 404, raw, body, {"Content-Type": "application/json", "X-Error-Code": code,
                                        "X-Error-Message": "Repository not found"})

    @staticmethod
    def send(req, code: int, raw: bytes, body: bool, headers: dict) -> None:
        req.send_response(code)
        for key, value in headers.items():
            req.send_header(key, value)
        req.send_header("Content-Length", str(len(raw)))
        req.end_headers()
        if body:
            req.wfile.write(raw)
