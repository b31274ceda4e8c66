"""A stand-in for the Hugging Face hub on a loopback port: the endpoints huggingface_hub calls to list a
repository and fetch its files, served from folders a test writes (root/{org}/{name}/...).

    GET  /api/models/{repo}/revision/{rev}[?blobs=True]  {"id", "sha", "siblings": [{"rfilename", "size"}]}
    HEAD /{repo}/resolve/{rev}/{file}                    X-Repo-Commit, ETag, Content-Length
    GET  /{repo}/resolve/{rev}/{file}                    the bytes (half of them, then the connection closes,
                                                         for a file named in `cut`)

A missing repository answers 404 with X-Error-Code RepoNotFound (EntryNotFound for a file, RevisionNotFound
for a revision other than main or the commit), as the hub does. `requests` counts (method, path).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

API = re.compile(r"^/api/models/(.+?)/revision/([^/]+)$")
RESOLVE = re.compile(r"^/(.+?)/resolve/([^/]+)/(.+)$")


def commit_of(repo_id: str) -> str:
    return hashlib.sha1(repo_id.encode()).hexdigest()  # 40 hex digits, like a git commit


class StandInHub:
    def __init__(self, root: Path):
        self.root, self.cut, self.requests = Path(root), set(), Counter()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):  # quiet
                pass

            def do_HEAD(self):
                hub._serve(self, body=False)

            def do_GET(self):
                hub._serve(self, body=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> StandInHub:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- answers -------------------------------------------------------------------------------------------
    def _repo(self, repo_id: str) -> Path | None:
        folder = (self.root / repo_id).resolve()
        return folder if folder.is_dir() and self.root.resolve() in folder.parents else None

    def _serve(self, h: BaseHTTPRequestHandler, body: bool) -> None:
        path = unquote(urlparse(h.path).path)
        self.requests[(h.command, path)] += 1
        if m := API.match(path):
            repo_id, rev = m.groups()
            folder = self._repo(repo_id)
            if folder is None:
                return self._error(h, 404, "RepoNotFound")
            if rev not in ("main", commit_of(repo_id)):
                return self._error(h, 404, "RevisionNotFound")
            files = sorted(p for p in folder.rglob("*") if p.is_file())
            info = {"id": repo_id, "modelId": repo_id, "sha": commit_of(repo_id), "private": False,
                    "siblings": [{"rfilename": p.relative_to(folder).as_posix(), "size": p.stat().st_size,
                                  "blobId": hashlib.sha1(f"{p.name}{p.stat().st_size}".encode()).hexdigest()} for p in files]}
            return self._send(h, 200, json.dumps(info).encode(), {"Content-Type": "application/json"}, body)
        if m := RESOLVE.match(path):
            repo_id, rev, name = m.groups()
            folder = self._repo(repo_id)
            if folder is None:
                return self._error(h, 404, "RepoNotFound")
            if rev not in ("main", commit_of(repo_id)):
                return self._error(h, 404, "RevisionNotFound")
            f = folder / name
            if not f.is_file():
                return self._error(h, 404, "EntryNotFound")
            data = f.read_bytes()
            headers = {"X-Repo-Commit": commit_of(repo_id), "ETag": f'"{hashlib.sha256(data).hexdigest()}"',
                       "Content-Type": "application/octet-stream"}
            if body and name in self.cut:  # promise every byte, send half, hang up
                h.send_response(200)
                for k, v in (headers | {"Content-Length": str(len(data))}).items():
                    h.send_header(k, v)
                h.end_headers()
                h.wfile.write(data[: len(data) // 2])
                h.wfile.flush()
                h.close_connection = True
                return None
            return self._send(h, 200, data, headers, body)
        return self._error(h, 404, None)

    @staticmethod
    def _send(h, code: int, data: bytes, headers: dict, body: bool) -> None:
        h.send_response(code)
        for k, v in (headers | {"Content-Length": str(len(data))}).items():
            h.send_header(k, v)
        h.end_headers()
        if body:
            h.wfile.write(data)

    def _error(self, h, code: int, error_code: str | None) -> None:
        data = json.dumps({"error": error_code or "not found"}).encode()
        headers = {"Content-Type": "application/json"} | ({"X-Error-Code": error_code} if error_code else {})
        self._send(h, code, data, headers, h.command == "GET")
