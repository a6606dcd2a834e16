"""The artifact store at a TCP address the ranks can reach: a relay in the agent's process that
listens on the loopback of the launch's network namespace and passes each connection, byte for
byte, to the store service's Unix socket (``harness.store_service``).

Why: under the sandbox the ranks have a network namespace of their own (no route out, only their
own loopback), so a server the parent runs cannot listen where they can connect; the service's
socket is mounted in instead. A script written for an object store talks HTTP to a host and port,
so the agent, which starts the ranks inside that namespace, listens for them and exports the
address as ``AWS_ENDPOINT_URL_S3`` (the variable the AWS SDKs read) before it starts them.

The relay decides nothing: the service outside reads each upload at its link's rate, publishes it
and logs it with its own clock, so a rank that stops the relay, or connects to the socket itself,
only loses its uploads or reaches the same service. Off a launch with a store nothing starts.
"""

from __future__ import annotations

import os
import socket
import threading

from harness.store_client import STORE_ENV
from harness.store_s3 import ENDPOINT_ENV

CHUNK = 1 << 16
BACKLOG = 64


def start(socket_path: str, host: str = "127.0.0.1") -> tuple[socket.socket, str]:
    """Listen on ``host`` at a free port; each connection is piped to the Unix socket. Returns the
    listening socket (closing it stops new connections) and the endpoint URL."""
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind((host, 0))
    lsock.listen(BACKLOG)
    threading.Thread(target=_accept, args=(lsock, socket_path), name="store-relay", daemon=True).start()
    return lsock, f"http://{host}:{lsock.getsockname()[1]}"


def export() -> str | None:
    """In the agent, before it starts the ranks: when this launch runs a store, start the relay and
    put its address in the environment the ranks inherit. Returns the address (None: no store)."""
    path = os.environ.get(STORE_ENV)
    if not path:
        return None
    _, url = start(path)
    os.environ[ENDPOINT_ENV] = url
    return url


def _accept(lsock: socket.socket, socket_path: str) -> None:
    while True:
        try:
            client, _ = lsock.accept()
        except OSError:  # closed: no more connections
            return
        threading.Thread(target=_relay, args=(client, socket_path), name="store-relay-conn", daemon=True).start()


def _relay(client: socket.socket, socket_path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(socket_path)
    except OSError:
        try:
            client.sendall(b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
        except OSError:
            pass
        upstream.close()
        client.close()
        return
    back = threading.Thread(target=_pipe, args=(upstream, client), name="store-relay-back", daemon=True)
    back.start()
    _pipe(client, upstream)
    back.join()
    client.close()
    upstream.close()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    """Copy until ``src`` ends, then end ``dst``'s sending side (an HTTP/1.0 answer ends with the
    server's close; a refusal the server sends mid-upload reaches the client the same way)."""
    try:
        while chunk := src.recv(CHUNK):
            dst.sendall(chunk)
    except OSError:
        pass
    for s, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
        try:
            s.shutdown(how)
        except OSError:
            pass
