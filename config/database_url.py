"""DATABASE_URL as Django's database settings, libpq's multi-host form included."""

from __future__ import annotations

from urllib.parse import parse_qsl, unquote, urlsplit


def database_from_url(url: str) -> dict:
    """Django's database settings from a libpq URL. Several hosts (`host1:5432,host2:5432`, libpq's
    multi-host form) become comma-separated HOST and PORT, which libpq tries in turn; the query's
    parameters (`target_session_attrs=read-write`, `sslmode`, `connect_timeout`...) become OPTIONS,
    checked against libpq's own list so that a misspelt one stops start-up."""
    scheme, separator, rest = url.partition("://")
    if not separator or scheme not in ("postgres", "postgresql"):
        raise ValueError(
            f"DATABASE_URL must be a postgresql:// URL (Reckon needs PostgreSQL), got {urlsplit(url).scheme!r}"
        )
    # Not urlsplit's netloc: it cannot hold several host:port pairs (its .port refuses them).
    netloc, _, tail = rest.partition("/")
    path, _, query = tail.partition("?")
    userinfo, at, hostlist = netloc.rpartition("@")
    user, _, password = userinfo.partition(":") if at else ("", "", "")
    hosts, ports = [], []
    for item in hostlist.split(",") if hostlist else []:
        host, port = _host_and_port(item)
        hosts.append(host)
        ports.append(port)
    if len(set(ports)) == 1:
        ports = ports[:1]  # one port for every host, as libpq allows
    elif "" in ports:
        ports = [port or "5432" for port in ports]
    database = {
        "NAME": unquote(path) or "reckon",
        "USER": unquote(user),
        "PASSWORD": unquote(password),
        "HOST": ",".join(hosts),
        "PORT": ",".join(ports),
    }
    if options := dict(parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))):
        from psycopg.conninfo import make_conninfo

        try:
            make_conninfo(**options)
        except Exception as exc:  # psycopg.ProgrammingError: libpq does not know a parameter
            raise ValueError(f"DATABASE_URL has a parameter libpq does not take: {exc}") from None
        database["OPTIONS"] = options
    return database


def _host_and_port(item: str) -> tuple[str, str]:
    item = unquote(item.strip())
    if item.startswith("["):  # [::1]:5432
        host, _, port = item[1:].partition("]")
        port = port.removeprefix(":")
    else:
        host, _, port = item.partition(":")
    if not host or (port and not port.isdigit()):
        raise ValueError(f"DATABASE_URL names a host it cannot read: {item!r} (expected host or host:port)")
    return host, port
