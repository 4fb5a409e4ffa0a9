"""A small HTTP proxy in front of a test registry, to make the registry misbehave at an exact moment
of a real push, verify or pull: go down (connections refused), hold one request unanswered, or cut
off or garble the answer to chosen requests. Everything else passes through untouched.

Each client connection carries one request: the proxy asks the registry for `Connection: close` and
tells the client the same, so that every answer is the registry's whole answer to exactly one
request (Docker's and cosign's clients open a new connection for the next one). Request bodies (the
engine's layer uploads) are relayed as they come, never buffered."""

from __future__ import annotations

import dataclasses
import select
import socket
import threading
from collections.abc import Callable

from tests.local_registry import free_port

HEAD_END = b"\r\n\r\n"


@dataclasses.dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict  # lower-case names

    @property
    def user_agent(self) -> str:
        return self.headers.get("user-agent", "")

    @property
    def from_cosign(self) -> bool:
        return "cosign" in self.user_agent.lower()


# What a rule returns for a request: None (pass it through) or one of these.
DOWN = "down"  # the registry goes away: this connection and every later one refused until up()
HOLD = "hold"  # never answered; the connection stays open until the client gives up
TRUNCATE = "truncate"  # the registry's status and headers, then half the body, then the connection closes
CORRUPT = "corrupt"  # the whole answer, with its body altered by Proxy.corrupt (same length)
GARBLE_HEAD = "garble-head"  # an answer whose status line is not HTTP


class Proxy:
    def __init__(self, upstream: str) -> None:
        host, port = upstream.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.rule: Callable[[Request], str | None] = lambda request: None
        self.on_answer: Callable[[Request, bytes], None] = lambda request, status: None
        # body -> altered body of the same length (default: one byte in the middle changed)
        self.corrupt: Callable[[Request, bytes], bytes] = flip_middle
        self.seen: list[tuple[Request, str | None]] = []
        self.held = threading.Event()  # set when a request is held
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self.up()

    # -- the registry's state ------------------------------------------------------------------
    def up(self) -> None:
        with self._lock:
            if self._listener is not None:
                return
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", self.port))
            s.listen(64)
            self._listener = s
        threading.Thread(target=self._accept, args=(s,), daemon=True).start()

    def down(self) -> None:
        """Stop listening and drop every open connection: clients see the registry gone."""
        with self._lock:
            listener, self._listener = self._listener, None
            conns, self._conns = list(self._conns), set()
        if listener is not None:
            _close(listener)
        for c in conns:
            _close(c)

    @property
    def is_up(self) -> bool:
        return self._listener is not None

    def close(self) -> None:
        self.down()

    # -- one connection, one request --------------------------------------------------------------
    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # down(): the listening socket was closed
                return
            with self._lock:
                if self._listener is not listener:
                    _close(client)
                    return
                self._conns.add(client)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream = None
        try:
            head, rest = _read_head(client)
            if head is None:
                return
            request = _parse(head)
            action = self.rule(request)
            self.seen.append((request, action))
            if action == DOWN:
                self.down()
                return
            if action == HOLD:
                self.held.set()
                _wait_closed(client)
                return
            upstream = socket.create_connection(self.upstream)
            with self._lock:
                self._conns.add(upstream)
            upstream.sendall(_connection_close(head) + rest)
            threading.Thread(target=_pipe, args=(client, upstream), daemon=True).start()
            answer_head, body_start = _read_head(upstream)
            if answer_head is None:
                return
            self.on_answer(request, answer_head.split(b"\r\n", 1)[0])
            if action == GARBLE_HEAD:
                client.sendall(b"HTTP/1.1 2\x00\xff garbled\r\nContent-Length: 0\r\n\r\n")
                return
            if action in (TRUNCATE, CORRUPT):
                body = body_start + _read_all(upstream)
                body = body[: len(body) // 2] if action == TRUNCATE else self.corrupt(request, body)
                client.sendall(_connection_close(answer_head) + body)
                return
            client.sendall(_connection_close(answer_head) + body_start)
            _pipe(upstream, client)
        except OSError:
            pass
        finally:
            for s in (client, upstream):
                if s is not None:
                    _close(s)
                    with self._lock:
                        self._conns.discard(s)


def flip_middle(request: Request, body: bytes) -> bytes:
    if not body:
        return body
    i = len(body) // 2
    return body[:i] + bytes([body[i] ^ 0x01]) + body[i + 1 :]


def _read_head(sock: socket.socket) -> tuple[bytes | None, bytes]:
    buf = b""
    while HEAD_END not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            return None, b""
        buf += chunk
    head, _, rest = buf.partition(HEAD_END)
    return head + HEAD_END, rest


def _parse(head: bytes) -> Request:
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = (lines[0].split(" ", 2) + ["", ""])[:3]
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return Request(method, path.split("?", 1)[0], headers)


def _connection_close(head: bytes) -> bytes:
    lines = [
        ln
        for ln in head[: -len(HEAD_END)].split(b"\r\n")
        if not ln.lower().startswith((b"connection:", b"keep-alive:"))
    ]
    return b"\r\n".join(lines + [b"Connection: close"]) + HEAD_END


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            chunk = src.recv(1 << 20)
            if not chunk:
                break
            dst.sendall(chunk)
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def _wait_closed(sock: socket.socket) -> None:
    """Until the client closes its end (or the proxy goes down): what a hung registry looks like."""
    while True:
        try:
            readable, _, _ = select.select([sock], [], [])
            if readable and not sock.recv(65536):
                return
        except (OSError, ValueError):
            return


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass
