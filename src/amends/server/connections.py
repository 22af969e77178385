"""Bounds on the connections ``amends serve`` holds open (issue 21.14): a deadline to receive each
request, a cap on open connections, and a cap per client address.

uvicorn bounds none of these: a client that opens a connection and sends nothing, or sends its
headers a byte at a time, keeps it open for as long as it likes, and 1,500 such connections stayed
open. Here every request (headers and body) must arrive within ``request_timeout`` seconds of its
first byte (a new connection: of being accepted), or the connection gets ``408`` and is closed;
a connection past either cap gets ``503`` with ``Retry-After`` and is closed before a byte of it
is read. Idle keep-alive connections are closed by uvicorn's own keep-alive timeout.

The protocol is uvicorn's h11 protocol with these checks added; h11 ships with uvicorn, so it is
always there. Only :mod:`amends.cli.serve` imports this module: an app mounted in another server
gets that server's limits.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from .auth import FailedAuthLimiter, Network
from .security import is_trusted

__all__ = ["ConnectionLimits", "guarded_protocol", "uvicorn_config"]

_log = logging.getLogger("amends.server")


@dataclass
class ConnectionLimits:
    """How many connections ``amends serve`` keeps open, and how long a request may take to
    arrive."""

    request_timeout: float = 10.0
    """Seconds a client has to send a request's headers and body, from its first byte."""
    max_connections: int = 1000
    """Connections open at once; more are answered 503 and closed."""
    max_per_address: int = 100
    """Connections open at once from one client address (an IPv6 client: its /64; trusted
    proxies are exempt: they carry everyone's requests); more are answered 503 and closed."""
    trusted: tuple[Network, ...] = ()
    """The operator's trusted proxies (``--trusted-proxy``)."""
    open_by_address: Counter[str] = field(default_factory=Counter)
    """Open connections per client address (this process)."""


def _raw_answer(status: bytes, error: str, detail: str, extra: bytes = b"") -> bytes:
    body = json.dumps({"error": error, "detail": detail}).encode()
    head = b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\nconnection: close\r\n"
    return head + extra + b"content-length: %d\r\n\r\n" % len(body) + body


class _GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a request deadline and connection caps (see the module)."""

    limits: ConnectionLimits = ConnectionLimits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._address: str | None = None
        """The client address this connection is counted against, once admitted."""
        self._refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        peer = self.client[0] if self.client else ""
        lim = self.limits
        exempt = is_trusted(peer, lim.trusted)
        peer = FailedAuthLimiter.key(peer)  # an IPv6 client is its /64, as for failed sign-ins
        if len(self.connections) > lim.max_connections:
            self._refuse(f"this server holds {lim.max_connections} connections already")
        elif not exempt and lim.open_by_address[peer] >= lim.max_per_address:
            self._refuse(
                f"this address has {lim.max_per_address} connections open already; reuse them"
            )
        else:
            if not exempt:
                lim.open_by_address[peer] += 1
                self._address = peer
            self._arm()

    def _refuse(self, why: str) -> None:
        self._refused = True
        _log.warning("amends: refused a connection from %s: %s", self.client, why)
        self.transport.write(
            _raw_answer(
                b"503 Service Unavailable",
                "too_many_connections",
                f"{why}; retry in a few seconds",
                b"retry-after: 5\r\n",
            )
        )
        self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._address is not None:
            counts = self.limits.open_by_address
            counts[self._address] -= 1
            if counts[self._address] <= 0:
                del counts[self._address]
            self._address = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        super().data_received(data)
        self._watch()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._disarm()  # between requests uvicorn's keep-alive timeout applies
        self._watch()  # unless a pipelined request has begun already

    def _watch(self) -> None:
        """Arm the deadline while the client owes (part of) a request; disarm once it is in."""
        state = self.conn.their_state
        begun = state is h11.SEND_BODY or (state is h11.IDLE and self.conn.trailing_data[0])
        if begun:
            if self._deadline is None:
                self._arm()
        elif state is not h11.IDLE:
            self._disarm()

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.limits.request_timeout, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self.transport.is_closing() or self.conn.their_state not in (h11.IDLE, h11.SEND_BODY):
            return
        if self.flow is not None and self.flow.read_paused:
            self._arm()  # the server, not the client, stopped reading: not the client's delay
            return
        timeout = self.limits.request_timeout
        _log.info(
            "amends: closed a connection from %s: its request did not arrive within %g s",
            self.client,
            timeout,
        )
        if self.cycle is None or not self.cycle.response_started:
            self.transport.write(
                _raw_answer(
                    b"408 Request Timeout",
                    "request_timeout",
                    f"the request's headers and body must arrive within {timeout:g} s",
                )
            )
        self.transport.close()


def guarded_protocol(limits: ConnectionLimits) -> type[H11Protocol]:
    """The protocol class to pass as ``uvicorn.Config(http=...)``, bound to ``limits``."""
    return type("GuardedH11Protocol", (_GuardedH11Protocol,), {"limits": limits})


def uvicorn_config(app: Any, limits: ConnectionLimits, **options: Any) -> uvicorn.Config:
    """How every server amends starts runs ``app`` (``amends serve``, ``amends demo --serve``):
    with ``limits`` (issue 21.14), and without uvicorn's own ``X-Forwarded-For`` handling, which
    believes any loopback peer — amends reads the header itself, from trusted proxies only
    (issue 21.8)."""
    return uvicorn.Config(app, proxy_headers=False, http=guarded_protocol(limits), **options)
