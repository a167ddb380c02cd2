"""Where a side effect was sent: the provider's endpoint or account, as a worker saw it.

An attempt records it when its side effect begins (`Attempt.sent_to`), and a reconciler compares
it with where it asks before it trusts an absence: a worker and a reconciler configured with
different providers (staging against production, a migrated provider, a bench beside the demo)
would otherwise find nothing, call it not found, and send the effect a second time.

The value is a short string: a URL (`https://billing.example/acct_123`, `smtp://mail:25`) or any
account identity the team uses (`acct_123@stripe`). A URL keeps its scheme, host, port and path;
credentials, query and fragment are dropped before it is stored, so the history never holds a
secret that a worker's configuration carried in its URL.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

MAX_LENGTH = 500
DEFAULT_PORTS = {"http": 80, "https": 443, "smtp": 25}


class BadEndpoint(ValueError):
    pass


def recorded(endpoint: str | None) -> str:
    """The value to store for `endpoint` ("" when the worker did not say)."""
    if endpoint is None:
        return ""
    if not isinstance(endpoint, str):
        raise BadEndpoint(f"sent_to must be a string, got {type(endpoint).__name__}")
    endpoint = endpoint.strip()
    if any(ord(c) < 32 or ord(c) == 127 for c in endpoint):
        raise BadEndpoint("sent_to must be one line of printable text")
    parts = urlsplit(endpoint)
    if parts.scheme and parts.netloc:  # a URL: without credentials, query or fragment
        endpoint = urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))
    if len(endpoint) > MAX_LENGTH:
        raise BadEndpoint(f"sent_to is {len(endpoint)} characters; at most {MAX_LENGTH}")
    return endpoint


def same(one: str, other: str) -> bool:
    """Whether two endpoints name the same provider: URLs compare by scheme, host (any case),
    port (the scheme's default if none) and path (without a trailing slash); anything else as
    written, ignoring case."""
    return _canonical(one) == _canonical(other)


def _canonical(endpoint: str) -> tuple:
    parts = urlsplit(endpoint.strip())
    try:
        port = parts.port
    except ValueError:  # not a number: not a URL we can compare by its parts
        parts = None
    if parts is None or not parts.scheme or not parts.netloc:
        return ("", endpoint.strip().lower())
    scheme = parts.scheme.lower()
    return (scheme, (parts.hostname or "").lower(), port or DEFAULT_PORTS.get(scheme), parts.path.rstrip("/"))


def mismatch(*, asked: str, sent_to: str) -> str:
    """Why a look at `asked` proves nothing about an effect sent to `sent_to`, in a sentence;
    "" when either is unknown or they are the same provider."""
    if not asked or not sent_to or same(asked, sent_to):
        return ""
    return f"asked {asked} but the effect was sent to {sent_to}"
