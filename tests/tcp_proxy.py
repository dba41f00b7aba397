"""A TCP proxy on 127.0.0.1 that closes the first `drop` connections it accepts at once and
forwards the rest to a server: a database connection dropped by the network, made
deterministic (no timing, no iptables)."""

from __future__ import annotations

import socket
import threading
from typing import Any


class DroppingProxy:
    """`with DroppingProxy(port, drop=2) as proxy:` then connect to `proxy.port`;
    `proxy.accepted` counts the connections it took."""

    def __init__(self, target_port: int, drop: int):
        self.target_port = target_port
        self.drop = drop
        self.accepted = 0
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.closing = False

    def __enter__(self) -> DroppingProxy:
        threading.Thread(target=self._serve, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.closing = True
        self.listener.close()

    def _serve(self) -> None:
        while not self.closing:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            if self.accepted <= self.drop:
                client.close()
                continue
            server = socket.create_connection(("127.0.0.1", self.target_port))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(1 << 16):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
