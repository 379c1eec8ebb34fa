"""edge/json_http.JsonHandler on a real local server: the bearer token (and only with "Bearer "), the JSON
body, keep-alive after a 200 and a closed connection after a refusal (its body may be unread)."""

from __future__ import annotations

import http.client
import json
import threading
from http.server import ThreadingHTTPServer

import pytest
from agentic_rl.edge.json_http import JsonHandler


class Echo(JsonHandler):
    token = "s3cret"

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        if not self.authorized():
            return
        try:
            body = self.json_body()
        except ValueError as exc:
            self.send_json(400, {"error": f"bad request: {exc}"})
            return
        self.send_json(200, {"echo": body})


@pytest.fixture
def url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield server.server_address
    server.shutdown()
    server.server_close()


def post(conn: http.client.HTTPConnection, body: bytes, auth: str | None) -> tuple[int, dict, str | None]:
    conn.request("POST", "/", body=body, headers={"Authorization": auth} if auth is not None else {})
    resp = conn.getresponse()
    return resp.status, json.loads(resp.read()), resp.getheader("Connection")


def test_the_token_the_body_and_the_connection(url):
    conn = http.client.HTTPConnection(*url, timeout=10)
    assert post(conn, '{"a": "é"}'.encode(), "Bearer s3cret") == (200, {"echo": {"a": "é"}}, None)
    assert post(conn, b"", "Bearer s3cret") == (200, {"echo": {}}, None)  # the same connection, kept alive
    for auth in (None, "s3cret", "Bearer s3cre", "Bearer s3cret2", "bearer s3cret"):
        conn = http.client.HTTPConnection(*url, timeout=10)
        assert post(conn, b"{}", auth) == (401, {"error": "unauthorized"}, "close"), auth
    conn = http.client.HTTPConnection(*url, timeout=10)
    status, body, connection = post(conn, b"{not json", "Bearer s3cret")
    assert status == 400 and body["error"].startswith("bad request:") and connection == "close"
