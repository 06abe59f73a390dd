"""A local stand-in for huggingface.co's download API, so huggingface_hub's real `snapshot_download` and
`hf_hub_download` run against it (HF_ENDPOINT=<server.url>): the calls they make, in the hub's URL layout, with
the headers they read (huggingface_hub 2.4's hf_api.py and file_download.py):

    GET  /api/models/<org>/<name>/revision/<rev>    repo info: its commit `sha` (snapshot_download's first call)
    GET  /api/models/<org>/<name>/tree/<rev>        the file list with sizes (recursive; one page, no Link header)
    HEAD /<org>/<name>/resolve/<rev>/<file>         X-Repo-Commit, ETag, Content-Length (get_hf_file_metadata)
    GET  /<org>/<name>/resolve/<rev>/<file>         the bytes

A model is a local directory. A gated model is answered as the hub answers one without access: its listing is
public, its files 401 with `X-Error-Code: GatedRepo`. An unknown model is 404 `RepoNotFound`. Every request is kept
in `requests` (method, path).
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit


class HubServer:
    def __init__(self, models: dict[str, Path], gated: tuple[str, ...] = ()):
        self.models, self.gated = models, set(gated)
        self.requests: list[tuple[str, str]] = []
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> HubServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    @staticmethod
    def commit(repo: str) -> str:
        return hashlib.sha1(repo.encode()).hexdigest()  # 40 hex digits: what the client takes for a commit hash

    def files(self, repo: str) -> dict[str, Path]:
        root = self.models[repo]
        return {p.relative_to(root).as_posix(): p for p in sorted(root.rglob("*")) if p.is_file()}


def _handler(hub: HubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # quiet: the test asserts on hub.requests
            pass

        def do_HEAD(self) -> None:
            self._answer(body=False)

        def do_GET(self) -> None:
            self._answer(body=True)

        def _answer(self, body: bool) -> None:
            path = unquote(urlsplit(self.path).path)
            hub.requests.append((self.command, path))
            parts = path.strip("/").split("/")
            if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] in ("revision", "tree"):
                repo = "/".join(parts[2:4])
                if repo not in hub.models:
                    return self._error(404, "RepoNotFound", body)
                files = hub.files(repo)
                if parts[4] == "revision":
                    info = {"id": repo, "sha": hub.commit(repo), "gated": "manual" if repo in hub.gated else False,
                            "siblings": [{"rfilename": name} for name in files]}
                else:
                    info = [{"type": "file", "path": name, "size": f.stat().st_size,
                             "oid": hashlib.sha1(f.read_bytes()).hexdigest()} for name, f in files.items()]
                return self._send(200, json.dumps(info).encode(), {"Content-Type": "application/json"}, body)
            if len(parts) >= 5 and parts[2] == "resolve":
                repo, name = "/".join(parts[:2]), "/".join(parts[4:])
                if repo not in hub.models:
                    return self._error(404, "RepoNotFound", body)
                if repo in hub.gated:
                    return self._error(401, "GatedRepo", body, f"Access to model {repo} is restricted. You must "
                                                                f"have access to it and be authenticated to access it.")
                file = hub.files(repo).get(name)
                if file is None:
                    return self._error(404, "EntryNotFound", body)
                data = file.read_bytes()
                return self._send(200, data, {"X-Repo-Commit": hub.commit(repo),
                                              "ETag": f'"{hashlib.sha256(data).hexdigest()}"',
                                              "Content-Type": "application/octet-stream"}, body)
            self._error(404, None, body)

        def _error(self, status: int, code: str | None, body: bool, message: str = "") -> None:
            headers = {"X-Error-Code": code} if code else {}
            if message:
                headers["X-Error-Message"] = message
            self._send(status, json.dumps({"error": message or code or "not found"}).encode(), headers, body)

        def _send(self, status: int, data: bytes, headers: dict[str, str], body: bool) -> None:
            self.send_response(status)
            for key, value in {**headers, "Content-Length": str(len(data))}.items():
                self.send_header(key, value)
            self.end_headers()
            if body:
                self.wfile.write(data)

    return Handler
