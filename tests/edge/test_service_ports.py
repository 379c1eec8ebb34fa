"""A service is healthy only when it holds its port itself: the real Agent Lightning gateway, started on a
port that another process's server took between the pick and the bind (what two test workers, or two runs
on one node, can do to each other), must not take that server's /healthz for its own answer."""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import threading

from agentic_rl.edge import agl, procs
from agentic_rl.edge.json_http import JsonHandler


class Squatter(JsonHandler):
    """Another server on the port, healthy as our own hub is."""

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        self.send_json(200, {"status": "ok"})


def test_listens_on_names_only_the_holder_of_the_listening_socket():
    with socket.socket() as listener, socket.socket() as bound_only:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        bound_only.bind(("127.0.0.1", 0))
        port, other = listener.getsockname()[1], bound_only.getsockname()[1]
        assert procs.listens_on(os.getpid(), port)
        assert not procs.listens_on(os.getpid(), other)  # bound, not listening
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            assert not procs.listens_on(child.pid, port)  # someone else's socket
        finally:
            child.kill()
            child.wait()
        assert not procs.listens_on(child.pid, port)  # gone


def test_the_gateway_skips_a_port_whose_answer_comes_from_another_server(tmp_path, monkeypatch):
    squatter = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Squatter)
    threading.Thread(target=squatter.serve_forever, daemon=True).start()
    taken = squatter.server_address[1]
    picks = iter([taken])
    real_free_port = agl.free_port
    monkeypatch.setattr(agl, "free_port", lambda host=agl.HOST: next(picks, None) or real_free_port(host))
    env = agl.service_env(f"test-port-{os.getpid()}", "k-" + os.urandom(4).hex())
    try:
        svc = agl.start_gateway(tmp_path / "logs", "m", env, timeout=60)
        try:
            assert svc.port != taken and svc.proc.poll() is None
            assert procs.listens_on(svc.proc.pid, svc.port)
            log = (tmp_path / "logs" / "gateway.log").read_text()
            assert "address already in use" in log.lower(), log[-2000:]  # the first try lost the port and said so
        finally:
            agl.stop_service(svc, agl.GATEWAY_STOP_S)
    finally:
        squatter.shutdown()
        squatter.server_close()
