"""A small HTTP server on 127.0.0.1 for the remote tests, run in a thread:
objects served with ``Range`` as S3 does (one range per request, suffix
ranges, 416 past the end, the whole object without a ``Range``), an ``ETag``
per object, and a Hub-shaped tree (``/{repo}/resolve/{revision}/{path}`` and
the ``/api/models/{repo}/tree/{revision}[/{dir}]`` listing) for ``hf://``
with ``HF_ENDPOINT`` pointing at it. It counts the requests and the body
bytes it sent, so tests can say what a read cost."""

from __future__ import annotations

import hashlib
import http.server
import json
import re
import threading
from typing import Dict, List, Optional, Tuple

_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


class Served:
    """The objects, the Hub repositories and the counts, shared with the
    handler threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.objects: Dict[str, bytes] = {}
        # repo id -> (revision, {path: bytes})
        self.repos: Dict[str, Tuple[str, Dict[str, bytes]]] = {}
        self.requests: List[Tuple[str, str, Optional[str]]] = []
        self.body_bytes = 0

    def lookup(self, path: str) -> Optional[bytes]:
        if path in self.objects:
            return self.objects[path]
        for repo, (revision, files) in self.repos.items():
            prefix = f"/{repo}/resolve/{revision}/"
            if path.startswith(prefix):
                return files.get(path[len(prefix):])
        return None

    def tree(self, path: str) -> Optional[list]:
        for repo, (revision, files) in self.repos.items():
            prefix = f"/api/models/{repo}/tree/{revision}"
            if path == prefix or path.startswith(prefix + "/"):
                sub = path[len(prefix):].strip("/")
                dir_ = f"{sub}/" if sub else ""
                entries = []
                for name, data in sorted(files.items()):
                    if not name.startswith(dir_) or "/" in name[len(dir_):]:
                        continue
                    entry = {"type": "file", "path": name, "size": len(data)}
                    if name.endswith(".safetensors"):
                        entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data)}
                    entries.append(entry)
                return entries
        return None


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    served: Served

    def log_message(self, *args) -> None:  # quiet
        pass

    def _send(self, status: int, headers: Dict[str, str], body: bytes) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            # Counted before it is sent: a client may have it before a
            # count made afterwards.
            with self.served.lock:
                self.served.body_bytes += len(body)
            self.wfile.write(body)

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        served = self.served
        with served.lock:
            served.requests.append((self.command, path, self.headers.get("Range")))
            tree = served.tree(path)
            data = served.lookup(path)
        if tree is not None:
            self._send(200, {"Content-Type": "application/json"}, json.dumps(tree).encode())
            return
        if data is None:
            self._send(404, {}, b"")
            return
        headers = {
            "ETag": '"' + hashlib.md5(data).hexdigest() + '"',
            "Accept-Ranges": "bytes",
        }
        asked = self.headers.get("Range")
        if asked is None:
            self._send(200, headers, data)
            return
        m = _RANGE.match(asked.strip())
        if m is None:
            # Several ranges: the whole object, as S3 answers.
            self._send(200, headers, data)
            return
        first, last = m.groups()
        n = len(data)
        if first == "":
            start, end = max(n - int(last or 0), 0), n
            if not last or int(last) == 0:
                start = n
        else:
            start = int(first)
            end = min(int(last) + 1, n) if last else n
        if start >= n or start >= end:
            headers["Content-Range"] = f"bytes */{n}"
            self._send(416, headers, b"")
            return
        headers["Content-Range"] = f"bytes {start}-{end - 1}/{n}"
        self._send(206, headers, data[start:end])


class Server:
    """The server, started on a free port; ``stop()`` ends it."""

    def __init__(self, tls: Optional[Tuple[str, str]] = None) -> None:
        """``tls``: the certificate and key files to serve HTTPS with."""
        self.served = Served()
        handler = type("Handler", (_Handler,), {"served": self.served})
        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._scheme = "http"
        if tls:
            import ssl

            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self._httpd.socket = context.wrap_socket(self._httpd.socket, server_side=True)
            self._scheme = "https"
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"{self._scheme}://127.0.0.1:{self._httpd.server_address[1]}"

    def put(self, path: str, data: bytes) -> None:
        with self.served.lock:
            self.served.objects[path] = data

    def hub_repo(self, repo: str, files: Dict[str, bytes], revision: str = "main") -> None:
        with self.served.lock:
            self.served.repos[repo] = (revision, dict(files))

    def reset_counts(self) -> None:
        with self.served.lock:
            self.served.requests.clear()
            self.served.body_bytes = 0

    def counts(self) -> Tuple[int, int]:
        with self.served.lock:
            return len(self.served.requests), self.served.body_bytes

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()
