"""The JSON-over-HTTP handler the run's own small services share (the MCP hub, the LLM judge service):
HTTP/1.1 keep-alive, Nagle off, a bearer token compared in constant time, no access log.

Standard library only. A subclass sets `token` (empty: no auth) and writes do_GET/do_POST with
`send_json`, `authorized` and `json_body`.

    >>> class Ping(JsonHandler):
    ...     token = "t"
    >>> Ping.protocol_version, Ping.disable_nagle_algorithm
    ('HTTP/1.1', True)
"""

from __future__ import annotations

import hmac
import json
from http.server import BaseHTTPRequestHandler
from typing import Any


class JsonHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as two writes: no 40 ms delayed-ACK stall
    token = ""

    def send_json(self, code: int, obj: Any) -> None:
        raw = json.dumps(obj, ensure_ascii=False).encode()
        self.send_response(code)
        if code != 200:  # a refused request's body may be unread: no reuse, and the client is told
            self.send_header("Connection", "close")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def authorized(self) -> bool:
        """True for the bearer of the token (or with no token set); else answers 401 and returns False."""
        header = self.headers.get("Authorization", "")
        given = header[len("Bearer "):] if header.startswith("Bearer ") else ""
        if not self.token or hmac.compare_digest(given.encode(), self.token.encode()):
            return True
        self.send_json(401, {"error": "unauthorized"})
        return False

    def json_body(self) -> Any:
        """The request's JSON body (an empty one reads as {}); raises ValueError on anything else."""
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")

    def log_message(self, *_args: Any) -> None:  # a line per call would bury what went wrong
        pass
