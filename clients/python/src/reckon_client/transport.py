"""HTTP/1.1 with keep-alive, standard library only: one persistent connection per client and thread.

A client's calls from one thread reuse one connection; the background renewal of a lease, which
runs in a thread of its own, gets its own, so a long step never waits behind a renewal (or the
other way round). What can be retried is decided by whether the request can have reached Reckon.
"""

from __future__ import annotations

import http.client
import json
import select
import threading
from dataclasses import dataclass
from urllib.parse import urlsplit

from reckon_client.errors import JsonObject, UnexpectedAnswer


class ReckonUnavailable(ConnectionError):
    """Reckon could not be reached, or the connection failed before an answer came back.

    `sent` is False when the request certainly did not reach the server (the connection was
    refused): it is then safe to send it again. Otherwise it may have been acted on.
    """

    def __init__(self, message: str, *, sent: bool):
        super().__init__(message)
        self.sent = sent


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


class Transport:
    def __init__(self, base_url: str, *, timeout: float):
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
        self._https = parts.scheme == "https"
        self._host, self._port = parts.hostname, parts.port
        self._netloc = parts.netloc.rpartition("@")[2]
        self.prefix = parts.path.rstrip("/")
        self.timeout = timeout
        self._local = threading.local()

    def url(self, path: str) -> str:
        return f"{'https' if self._https else 'http'}://{self._netloc}{self.prefix}{path}"

    def send(self, method: str, path: str, body: bytes | None, headers: dict[str, str], *,
             timeout: float | None = None) -> Answer:
        """One request on this thread's connection. A connection the server closed while it sat idle
        is replaced before use; a reused one that fails before any answer is retried once afresh."""
        for fresh in (False, True):
            connection, reused = self._connection(fresh=fresh)
            connection.timeout = timeout or self.timeout
            if connection.sock is not None:
                connection.sock.settimeout(connection.timeout)
            try:
                connection.request(method, self.prefix + path, body=body, headers=headers)
                response = connection.getresponse()
                data = response.read()
            except ConnectionRefusedError as exc:
                self.close()
                raise ReckonUnavailable(f"{method} {path}: connection refused ({exc})", sent=False) from exc
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
                self.close()
                if reused and not fresh:
                    continue  # the server let the idle connection go as we used it: once more, afresh
                raise ReckonUnavailable(f"{method} {path}: {type(exc).__name__}: {exc}", sent=True) from exc
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                raise ReckonUnavailable(f"{method} {path}: {type(exc).__name__}: {exc}", sent=True) from exc
            if response.will_close:
                self.close()
            return Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, data)
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Close this thread's connection (the next request opens another)."""
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()
            self._local.connection = None

    def _connection(self, *, fresh: bool) -> tuple[http.client.HTTPConnection, bool]:
        connection = getattr(self._local, "connection", None)
        if connection is not None and (fresh or _dropped(connection)):
            connection.close()
            connection = None
        if connection is not None:
            return connection, connection.sock is not None
        kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        connection = kind(self._host, self._port, timeout=self.timeout)
        self._local.connection = connection
        return connection, False


def _dropped(connection: http.client.HTTPConnection) -> bool:
    """An idle keep-alive connection the server has closed reads as ready (EOF) at once."""
    sock = connection.sock
    if sock is None:
        return False
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def json_body(value: JsonObject | None) -> bytes | None:
    return None if value is None else json.dumps(value, separators=(",", ":")).encode()


def documented(method: str, url: str, answer: Answer, expect: tuple[int, ...]) -> JsonObject:
    """The JSON object of an answer the API documents (one of `expect`, or Reckon's own JSON error,
    raised as ReckonError by the caller); anything else raises UnexpectedAnswer naming the URL and
    status: a redirect, an HTML page, a body that is not a JSON object."""
    if answer.status == 204 and 204 in expect:
        return {}
    if answer.status not in expect and answer.status < 400:
        raise UnexpectedAnswer(method, url, answer.status, answer.headers, answer.body,
                               f"not an answer of Reckon's API here (expected {', '.join(map(str, expect))})")
    if not answer.headers.get("content-type", "").startswith("application/json"):
        what = answer.headers.get("content-type") or "no Content-Type"
        raise UnexpectedAnswer(method, url, answer.status, answer.headers, answer.body,
                               f"{what}, not Reckon's JSON (is the URL Reckon's?)")
    try:
        value = json.loads(answer.body)
    except ValueError:
        value = None
    if not isinstance(value, dict) or (answer.status >= 400 and not isinstance(value.get("error"), dict)):
        raise UnexpectedAnswer(method, url, answer.status, answer.headers, answer.body,
                               "the body is not the JSON object Reckon's API documents")
    return value
