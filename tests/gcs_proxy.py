"""A loopback HTTP proxy in front of the GCS emulator: injects 503s, and enforces the
generation preconditions the emulator ignores.

gcp-storage-emulator accepts `ifGenerationMatch` and does nothing with it, so against it alone
a create-if-absent write always succeeds and a test of "two runs cannot both publish" could
never fail. The proxy adds what real GCS does: a request carrying `ifGenerationMatch=G`
(uploads, copies, rewrites, deletes, patches) is answered 412 unless the target object's
current generation is G (0 = absent). Conditional requests are checked and forwarded under
one lock, so two of them on one object are decided in a strict order, as GCS does.

Faults: `fail_next(k)` answers 503 to the next k requests, `fail_all()` to every request
until `heal()`. `hold(pattern, nth)` stops the nth request whose "METHOD path" contains
`pattern` until `release()` (the test kills or races the client meanwhile: a deterministic
point inside a run). Clients point at the proxy through STORAGE_EMULATOR_HOST (`proxy.url`).
"""

from __future__ import annotations

import http.client
import json
import re
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer",
        "upgrade", "content-length"}
_COPY = re.compile(r"^/storage/v1/b/[^/]+/o/.+/(?:copyTo|rewriteTo)/b/([^/]+)/o/(.+)$")
_OBJECT = re.compile(r"^/storage/v1/b/([^/]+)/o/(.+)$")
_UPLOAD = re.compile(r"^/upload/storage/v1/b/([^/]+)/o$")


class GcsProxy:
    """`with GcsProxy("http://127.0.0.1:9023") as proxy: ...`; `proxy.url` for clients."""

    def __init__(self, upstream: str):
        parts = urllib.parse.urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self._state = threading.Lock()
        self._conditional = threading.Lock()
        self._fail_next = 0
        self._fail_all = False
        self.requests = 0  # every request received
        self.failed = 0  # answered 503 by us
        self.refused = 0  # answered 412 by us (precondition not met)
        self.log: list[str] = []  # "METHOD path" of every request, in order
        self._hold: tuple[str, int] | None = None
        self.held = threading.Event()  # set when the held request arrived
        self._released = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> GcsProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    # ---------------------------------------------------------------------------- faults

    def fail_next(self, k: int) -> None:
        with self._state:
            self._fail_next = k

    def fail_all(self) -> None:
        with self._state:
            self._fail_all = True

    def heal(self) -> None:
        with self._state:
            self._fail_all = False
            self._fail_next = 0

    def hold(self, pattern: str, nth: int = 1) -> None:
        """Stop the `nth` request whose unquoted "METHOD path" contains `pattern`."""
        with self._state:
            self._hold = (pattern, nth)
            self.held.clear()
            self._released.clear()

    def release(self) -> None:
        self._released.set()

    def _maybe_hold(self, line: str) -> None:
        with self._state:
            if self._hold is None or self._hold[0] not in urllib.parse.unquote(line):
                return
            pattern, left = self._hold
            self._hold = (pattern, left - 1) if left > 1 else None
            if left > 1:
                return
        self.held.set()
        self._released.wait(120)

    def _take_fault(self, line: str) -> bool:
        with self._state:
            self.requests += 1
            self.log.append(line)
            if self._fail_all or self._fail_next > 0:
                self._fail_next = max(self._fail_next - 1, 0)
                self.failed += 1
                return True
            return False

    # ------------------------------------------------------------------------- forwarding

    def _forward(self, method: str, path: str, headers: dict[str, str],
                 body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            conn.request(method, path, body=body if body or method in ("POST", "PUT", "PATCH")
                         else None, headers={**headers, "Content-Length": str(len(body))})
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, [(k, v) for k, v in resp.getheaders()
                                 if k.lower() not in _HOP], data
        finally:
            conn.close()

    def _generation(self, bucket: str, name: str) -> int:
        """The object's current generation at the emulator, 0 when absent."""
        status, _, data = self._forward(
            "GET", f"/storage/v1/b/{bucket}/o/{urllib.parse.quote(name, safe='')}", {}, b"")
        if status == 404:
            return 0
        if status != 200:
            raise RuntimeError(f"proxy: cannot read the generation of {bucket}/{name}: {status}")
        return int(json.loads(data)["generation"])

    def handle(self, method: str, raw_path: str, headers: dict[str, str],
               body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        if self._take_fault(f"{method} {raw_path}"):
            return _error(503, "Service Unavailable (injected by the test proxy)")
        self._maybe_hold(f"{method} {raw_path}")
        parts = urllib.parse.urlsplit(raw_path)
        query = urllib.parse.parse_qs(parts.query)
        expected = query.get("ifGenerationMatch")
        target = None if expected is None else _target(method, parts.path, query, body)
        if target is None:
            return self._forward(method, raw_path, headers, body)
        with self._conditional:
            current = self._generation(*target)
            if current != int(expected[0]):
                with self._state:
                    self.refused += 1
                return _error(412, f"At least one of the pre-conditions you specified did not "
                                   f"hold (ifGenerationMatch={expected[0]}, current {current})")
            return self._forward(method, raw_path, headers, body)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                status, out_headers, data = proxy.handle(self.command, self.path, headers, body)
                self.send_response(status)
                for k, v in out_headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _any

            def log_message(self, *args: Any) -> None:
                pass

        return Handler


def _target(method: str, path: str, query: dict[str, list[str]],
            body: bytes) -> tuple[str, str] | None:
    """(bucket, object) a conditional request is about."""
    path = urllib.parse.unquote(path)
    m = _COPY.match(path)
    if m:
        return m.group(1), m.group(2)
    m = _UPLOAD.match(path)
    if m:
        if "upload_id" in query:
            return None  # a later chunk of a resumable upload: checked when it began
        name = query.get("name", [None])[0] or _metadata_name(body)
        return (m.group(1), name) if name else None
    m = _OBJECT.match(path)
    if m and method in ("DELETE", "PATCH", "PUT", "GET"):
        return m.group(1), m.group(2)
    return None


def _metadata_name(body: bytes) -> str | None:
    """The object name in an upload's JSON metadata (the whole body, or a multipart's first
    part)."""
    start = body.find(b"{")
    if start < 0:
        return None
    try:
        doc, _ = json.JSONDecoder().raw_decode(body[start:].decode("utf-8", "replace"))
    except ValueError:
        return None
    return doc.get("name") if isinstance(doc, dict) else None


def _error(status: int, message: str) -> tuple[int, list[tuple[str, str]], bytes]:
    body = json.dumps({"error": {"code": status, "message": message,
                                 "errors": [{"message": message, "reason": "backendError"
                                             if status == 503 else "conditionNotMet"}]}})
    return status, [("Content-Type", "application/json")], body.encode()
