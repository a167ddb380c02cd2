"""An upstream outage heals: after the upstream dies (a call in flight with it, or a call made while
it is down, or no call at all) and comes back on the same port, the gateway's shared connection to
it is made again, and a call costs one request to the upstream again, as before the outage.

A counting proxy stands between the gateway and the real upstream process: it passes every byte on
unchanged and notes the JSON-RPC method of each HTTP request the gateway sends."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import statistics
import threading
import time
import uuid

import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types import Implementation

from tests.conftest import token_issuer
from tests.gateway.conftest import NOTES, Gateway, text
from tests.processes import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

# Calls timed in each phase; RECKON_OUTAGE_CALLS=300 for the figures in the README's gateway section.
CALLS = int(os.environ.get("RECKON_OUTAGE_CALLS", "10"))

ACTIONS = NOTES


class CountingProxy:
    """A TCP relay to the upstream that notes each HTTP request's JSON-RPC method (or its HTTP method
    when its body is no JSON-RPC request). While the upstream is down it accepts and closes at once."""

    def __init__(self, upstream_port: int):
        self.upstream_port = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.requests: list[str] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def seen(self) -> int:
        with self.lock:
            return len(self.requests)

    def since(self, mark: int) -> list[str]:
        with self.lock:
            return self.requests[mark:]

    def close(self) -> None:
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=5)
            except OSError:
                client.close()  # the upstream is down
                continue
            upstream.settimeout(None)
            threading.Thread(target=self._requests, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._relay, args=(upstream, client), daemon=True).start()

    def _relay(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _requests(self, client: socket.socket, upstream: socket.socket) -> None:
        """Relay client -> upstream, noting each request (every one the gateway sends has a Content-Length)."""
        buffered = b""
        try:
            while chunk := client.recv(65536):
                upstream.sendall(chunk)
                buffered += chunk
                while (end := buffered.find(b"\r\n\r\n")) >= 0:
                    head = buffered[:end].decode("latin-1").split("\r\n")
                    length = next((int(line.split(":", 1)[1]) for line in head[1:]
                                   if line.lower().startswith("content-length:")), 0)
                    if len(buffered) < end + 4 + length:
                        break
                    body, buffered = buffered[end + 4:end + 4 + length], buffered[end + 4 + length:]
                    try:
                        method = json.loads(body)["method"]
                    except (ValueError, KeyError, TypeError):
                        method = head[0].split(" ", 1)[0]
                    with self.lock:
                        self.requests.append(method)
        except OSError:
            pass
        finally:
            for end in (client, upstream):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


@pytest.fixture
def proxy(upstream):
    port = int(upstream.url.rsplit(":", 1)[1].split("/", 1)[0])
    counting = CountingProxy(port)
    yield counting
    counting.close()


@pytest.fixture
def proxied_gateway(proxy, tmp_path, django_db_blocker):
    actions = tmp_path / "actions.toml"
    actions.write_text(ACTIONS.format(url=proxy.url))
    with Gateway(actions, log_name="mcp-gateway-proxied", env={"RECKON_MCP_GATEWAY_CALLS_PER_MINUTE": "0"}) as running:
        yield running


class Agent:
    """An agent with one MCP session to the gateway for all its calls, as an agent keeps one (it
    lists the tools once, at its first call, to check results against their output schemas), on an
    event loop of its own in a thread."""

    def __init__(self, url: str, token: str):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.done = asyncio.Event()
        connected = threading.Event()
        self.session = asyncio.run_coroutine_threadsafe(self._hold(url, token, connected), self.loop)
        connected.wait(timeout=30)

    async def _hold(self, url: str, token: str, connected: threading.Event) -> None:
        async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http:
            async with Client(streamable_http_client(url, http_client=http),
                              client_info=Implementation(name="outage-agent", version="1.0")) as self.client:
                connected.set()
                await self.done.wait()

    def call(self, tool: str, arguments: dict):
        return asyncio.run_coroutine_threadsafe(self.client.call_tool(tool, arguments), self.loop).result(timeout=60)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.done.set)
        self.session.result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=30)


@pytest.fixture
def agent(proxied_gateway):
    from api.tokens import worker_token_create

    token = worker_token_create(name="outage-agent", tenants=["acme"], actions=["*"], created_by=token_issuer()).token
    running = Agent(proxied_gateway.url, token)
    yield running
    running.close()


def one_call(proxy: CountingProxy, agent: Agent, **arguments) -> tuple[list[str], float, object]:
    """A new note through the gateway: the requests it cost the upstream, its time, its result."""
    mark, began = proxy.seen(), time.perf_counter()
    result = agent.call("notes_create_note", {"title": f"outage-{uuid.uuid4().hex[:10]}", "body": "b", **arguments})
    return proxy.since(mark), time.perf_counter() - began, result


def healed(proxy, agent, *, within: float, after: str) -> float:
    """Call until a call costs the upstream one request (bounded); the seconds that took."""
    began = time.monotonic()
    costs = []
    while time.monotonic() - began < within:
        requests, _, result = one_call(proxy, agent)
        if not result.is_error and requests == ["tools/call"]:
            return round(time.monotonic() - began, 2)
        costs.append(requests)
    raise AssertionError(f"after {after}, calls still cost the upstream {costs[-3:]} ({len(costs)} calls in {within} s)")


def timed_calls(proxy, agent) -> tuple[list[list[str]], float]:
    """CALLS calls: the requests each cost the upstream, and their p50 in ms."""
    costs, times = [], []
    for _ in range(CALLS):
        requests, seconds, result = one_call(proxy, agent)
        assert not result.is_error, text(result)
        costs.append(requests)
        times.append(seconds)
    return costs, round(statistics.median(times) * 1000, 1)


def test_an_outage_heals_each_call_costs_one_upstream_request_before_and_after(proxied_gateway, proxy, agent,
                                                                                upstream):
    healed(proxy, agent, within=30, after="the gateway's start")
    before, p50_before = timed_calls(proxy, agent)
    assert before == [["tools/call"]] * CALLS

    figures = {"before": p50_before}
    # 1. A call while the upstream is down (nothing answers on its port), then it comes back.
    upstream.kill()
    _, _, down = one_call(proxy, agent)
    assert down.is_error and "outcome unknown" in text(down)
    upstream.start_again()
    heal_s = {"after a call while down": healed(proxy, agent, within=15, after="a call while the upstream was down")}
    after_down, figures["after a call while down"] = timed_calls(proxy, agent)

    # 2. The upstream dies with a call in flight, and comes back at once.
    title = f"outage-held-{uuid.uuid4().hex[:8]}"
    outcome = {}
    held = threading.Thread(target=lambda: outcome.setdefault("result", agent.call(
        "notes_create_note", {"title": title, "body": "b", "hold": title})))
    held.start()
    wait_for(lambda: upstream.started(title), timeout=30, message="the upstream to receive the held call")
    upstream.restart()
    held.join(timeout=30)
    assert "outcome unknown" in text(outcome["result"])
    heal_s["after a call failed on it"] = healed(proxy, agent, within=15, after="a call failed on the connection")
    after_failed, figures["after a call failed on it"] = timed_calls(proxy, agent)

    # 3. The upstream dies and comes back between two calls.
    upstream.restart()
    idle_restart, figures["after a restart between calls"] = timed_calls(proxy, agent)

    print(f"\nupstream outage, {CALLS} calls a phase: p50 ms {figures}; seconds until one request a call {heal_s}")
    assert after_down == after_failed == idle_restart == [["tools/call"]] * CALLS
    log = proxied_gateway.output()
    assert "MCP upstream notes: lost" in log and "MCP upstream notes: connected again" in log
