"""An LLM judge's endpoint over HTTP: one request under one deadline, its reply under a size cap.

`timeout_s` is the whole request's: connecting, sending, the status line, the headers and the body
together. A socket's timeout is per read only (an endpoint that trickles its reply a byte a second would
keep a call alive for as long as it trickles), so a timer shuts the connection down when the deadline
passes, and the call raises TimeoutError. A reply larger than its cap (a Content-Length above it, or
more bytes than it) is not read on: TooLarge. abort() ends every call in flight at once and refuses new
ones (Aborted): what a SIGTERM to validate_data does.

    >>> Endpoint("http://127.0.0.1:8000/v1", None, 30.0, 8, 1 << 20).path
    '/v1/chat/completions'
"""

from __future__ import annotations

import http.client
import queue
import socket
import threading
import time
from typing import Any
from urllib.parse import urlsplit

READ_CHUNK = 1 << 16


class TooLarge(Exception):
    """The reply is larger than its cap: it was not read whole."""


class Aborted(Exception):
    """The endpoint was closed (abort()) while the call was out, or before it."""


def connection(base_url: str, timeout: float) -> http.client.HTTPConnection:
    parts = urlsplit(base_url)
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    return cls(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)


class _Deadline:
    """Shuts conn's socket down when `seconds` have passed (or at cut()): a read blocked on it returns."""

    def __init__(self, conn: http.client.HTTPConnection, seconds: float):
        self.conn, self.expired, self.aborted = conn, False, False
        self._timer = threading.Timer(max(0.0, seconds), self._expire)
        self._timer.daemon = True
        self._timer.start()

    def _expire(self) -> None:
        self.expired = True
        self.cut()

    def cut(self) -> None:
        sock = self.conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cancel(self) -> None:
        self._timer.cancel()


def read_body(resp: http.client.HTTPResponse, limit: int) -> bytes:
    """The body, at most limit bytes; TooLarge past that (the rest is left unread: close the connection)."""
    length = resp.getheader("Content-Length") or ""
    if length.strip().isdigit() and int(length) > limit:
        raise TooLarge(f"{int(length)} bytes announced")
    out = bytearray()
    while chunk := resp.read(READ_CHUNK):
        out += chunk
        if len(out) > limit:
            raise TooLarge(f"more than {limit} bytes")
    if resp.length:  # read(amt) returns what came before the connection ended, without a word
        raise http.client.IncompleteRead(bytes(out), resp.length)
    return bytes(out)


def exchange(conn: http.client.HTTPConnection, deadline: _Deadline, method: str, path: str, body: bytes | None,
             headers: dict, limit: int) -> tuple[int, Any, bytes]:
    """One request on conn (connected here when it is not), read under deadline and limit."""
    if conn.sock is None:
        conn.connect()
    if deadline.expired or deadline.aborted:  # the timer fired while there was no socket to shut down yet
        deadline.cut()
        raise TimeoutError("timed out")
    conn.request(method, path, body=body, headers=headers)
    resp = conn.getresponse()
    data = read_body(resp, limit)
    if deadline.expired or deadline.aborted:  # cut while it read: what came is not the whole reply
        raise TimeoutError("timed out")
    return resp.status, resp, data


class Endpoint:
    """chat/completions at base_url through `size` keep-alive connections: taking one is the concurrency cap."""

    def __init__(self, base_url: str, key: str | None, timeout: float, size: int, limit: int):
        self.base_url = base_url
        self.path = (urlsplit(base_url).path.rstrip("/") or "") + "/chat/completions"
        self.timeout, self.limit = timeout, limit
        self._headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
        self._pool: queue.LifoQueue = queue.LifoQueue()
        for _ in range(size):
            self._pool.put(None)  # a free slot; its connection is made at first use
        self.in_flight = self.max_in_flight = 0
        self.closed = False
        self._active: set[_Deadline] = set()
        self._lock = threading.Lock()

    def post(self, body: bytes) -> tuple[int, Any, bytes]:
        """(status, headers, body) of one request within `timeout` seconds in all; raises TimeoutError, TooLarge,
        Aborted, or OSError / HTTPException when there is no answer."""
        started = time.monotonic()
        conn = self._pool.get()  # waits while max_concurrency requests are out
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            for fresh in (False, True):
                if self.closed:
                    raise Aborted("the judge's endpoint was closed")
                reused = conn is not None and not fresh
                left = self.timeout - (time.monotonic() - started)
                if left <= 0:
                    raise TimeoutError("timed out")
                if conn is None or fresh:
                    conn = connection(self.base_url, left)
                elif conn.sock is not None:
                    conn.sock.settimeout(left)
                deadline = _Deadline(conn, left)
                with self._lock:
                    self._active.add(deadline)
                    deadline.aborted = self.closed
                try:
                    status, resp, data = exchange(conn, deadline, "POST", self.path, body, self._headers, self.limit)
                except BaseException as exc:
                    conn.close()
                    conn = None
                    if deadline.aborted:
                        raise Aborted("the judge's endpoint was closed") from None
                    if deadline.expired:
                        raise TimeoutError("timed out") from None
                    if reused and isinstance(exc, (http.client.RemoteDisconnected, BrokenPipeError,
                                                   ConnectionResetError)):
                        continue  # the server closed an idle keep-alive connection: once more on a new one
                    raise
                finally:
                    deadline.cancel()
                    with self._lock:
                        self._active.discard(deadline)
                if resp.will_close:
                    conn.close()
                    conn = None
                return status, resp.headers, data
            raise OSError("no connection")  # not reached: the second pass returns or raises
        finally:
            with self._lock:
                self.in_flight -= 1
            self._pool.put(conn)

    def abort(self) -> None:
        """End every call in flight now (each raises Aborted) and refuse new ones."""
        with self._lock:
            self.closed = True
            active = list(self._active)
        for deadline in active:
            deadline.aborted = True
            deadline.cut()


def get(base_url: str, path: str, headers: dict, timeout: float, limit: int) -> tuple[int, bytes]:
    """One GET on a new connection within timeout seconds in all (TimeoutError past it)."""
    conn = connection(base_url, timeout)
    deadline = _Deadline(conn, timeout)
    try:
        status, _, data = exchange(conn, deadline, "GET", path, None, headers, limit)
        return status, data
    except BaseException:
        if deadline.expired:
            raise TimeoutError("timed out") from None
        raise
    finally:
        deadline.cancel()
        conn.close()
