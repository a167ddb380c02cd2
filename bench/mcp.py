"""Tool calls through the MCP gateway beside the same calls made directly to the upstream.

The upstream is examples/mcp_notes_server.py (Streamable HTTP, stateless) on the world's folder;
the gateway is `manage.py mcp_gateway` on the world's database. Each client is a process of its
own holding one SDK client session and calling `create_note` (a side-effecting, journaled tool)
in a loop; the direct and the gateway runs alternate, so load from elsewhere falls on both alike.
Beside rates and latencies, the CPU milliseconds each call cost the clients, the gateway, the
upstream and PostgreSQL (clients/gateway/upstream/postgres), which other load does not move much.
A client's CPU is counted over its calls only: its start (importing the SDK, about a second and a
half of CPU) spread over the calls made it look as if a call through the gateway cost the client
twice what a direct one does, only because fewer calls shared it.
"""

from __future__ import annotations

import multiprocessing
import statistics
import sys
import time
import uuid

from django.db import connections

from bench.drain import tree_cpu
from chaos.world import ROOT, Worker, World, answers, wait_until
from sandbox.testing import free_port

SERVER = ROOT / "examples" / "mcp_notes_server.py"
ACTIONS = """
[[mcp.upstreams]]
name = "notes"
tenant = "bench"
url = "{url}"

[mcp.upstreams.tools.create_note]
effect = "reversible"
reconcile = {{ tool = "find_note", arguments = {{ title = "title" }}, found = "result", match = {{ title = "title" }} }}

[mcp.upstreams.tools.find_note]
effect = "none"
"""


def _client_loop(url: str, token: str, tool: str, seconds: float, queue) -> None:
    import anyio
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async def loop() -> tuple[list[float], float]:
        latencies = []
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:
                await client.call_tool(tool, {"title": f"warm-{uuid.uuid4().hex}", "body": "b"})
                started, cpu = time.monotonic(), time.process_time()
                while time.monotonic() - started < seconds:
                    begun = time.perf_counter()
                    result = await client.call_tool(tool, {"title": uuid.uuid4().hex, "body": "b"})
                    latencies.append(time.perf_counter() - begun)
                    if result.is_error:
                        raise RuntimeError(f"{tool} failed: {result.content}")
                return latencies, time.process_time() - cpu

    try:
        queue.put(anyio.run(loop))
    except BaseException as exc:
        queue.put(exc)


def _cpu(world: World, gateway: Worker, upstream: Worker) -> dict[str, float]:
    """CPU seconds so far of the gateway, the upstream and PostgreSQL: the 4-client rate is bound
    by the CPU a call costs on these two cores (the clients count their own, over their calls)."""
    return {"gateway": tree_cpu(gateway.process.pid), "upstream": tree_cpu(upstream.process.pid),
            "postgres": tree_cpu(world.cluster.postmaster_pid())}


def _cpu_ms_per_call(run: dict, before: dict, after: dict) -> str:
    """clients/gateway/upstream/postgres CPU milliseconds per call."""
    calls = max(run["calls"], 1)
    return "/".join(f"{spent * 1000 / calls:.2f}" for spent in
                    [run["clients_cpu_s"], *(after[name] - before[name] for name in before)])


def _run(url: str, token: str, tool: str, clients: int, seconds: float) -> dict:
    connections.close_all()
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    procs = [context.Process(target=_client_loop, args=(url, token, tool, seconds, queue)) for _ in range(clients)]
    for proc in procs:
        proc.start()
    results = [queue.get(timeout=seconds + 120) for _ in procs]
    for proc in procs:
        proc.join()
    failed = [r for r in results if isinstance(r, BaseException)]
    if failed:
        raise failed[0]
    latencies = sorted(x for r in results for x in r[0])
    return {"calls": len(latencies), "calls_per_s": round(len(latencies) / seconds, 1),
            "clients_cpu_s": sum(r[1] for r in results),
            "p50_ms": round(statistics.median(latencies) * 1000, 2),
            "p95_ms": round(latencies[int(len(latencies) * 0.95) - 1] * 1000, 2)}


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def mcp_calls(world: World, *, seconds: float, clients=(1, 4)) -> list[dict]:
    from django.contrib.auth.models import User

    from api.tokens import worker_token_create

    port = free_port()
    upstream_url = f"http://127.0.0.1:{port}/mcp"
    upstream = Worker(world, "mcp-upstream", {}, [sys.executable, str(SERVER), "--db",
                                                  str(world.workdir / "notes.sqlite3"), "--port", str(port)])
    world.workers.append(upstream)
    wait_until(lambda: _listening(port), timeout=60, what="the upstream MCP server to listen")
    actions = world.workdir / "mcp-actions.toml"
    actions.write_text(ACTIONS.format(url=upstream_url))
    gateway_port = free_port()
    # No rate limit: the bench makes as many calls as one token can.
    gateway = Worker(world, "mcp-gateway", {"RECKON_ACTIONS_FILE": str(actions), "RECKON_DEBUG": "false",
                                            "RECKON_MCP_GATEWAY_CALLS_PER_MINUTE": "0",
                                            "RECKON_SECRET_KEY": uuid.uuid4().hex * 2},
                     [sys.executable, str(ROOT / "manage.py"), "mcp_gateway", "--port", str(gateway_port)])
    world.workers.append(gateway)
    wait_until(lambda: answers(f"http://127.0.0.1:{gateway_port}/healthz"), timeout=60,
               what="the MCP gateway to answer")
    # The agent's token names the one tool it calls; this process does not load the gateway's actions
    # file, so it cannot tell that tool reversible, and a person stands behind the token.
    issuer, _ = User.objects.get_or_create(username="bench-agent-owner")
    token = worker_token_create(name="bench-agent", tenants=["bench"], actions=["mcp:notes.create_note"],
                                created_by=issuer).token
    gateway_url = f"http://127.0.0.1:{gateway_port}/mcp"
    rows = []
    for count in clients:
        cpu = _cpu(world, gateway, upstream)
        direct = _run(upstream_url, token, "create_note", count, seconds)
        cpu_direct = _cpu_ms_per_call(direct, cpu, cpu := _cpu(world, gateway, upstream))
        through = _run(gateway_url, token, "notes.create_note", count, seconds)
        cpu_through = _cpu_ms_per_call(through, cpu, _cpu(world, gateway, upstream))
        rows.append({"clients": count, "direct_calls_per_s": direct["calls_per_s"],
                     "gateway_calls_per_s": through["calls_per_s"],
                     "ratio": round(through["calls_per_s"] / max(direct["calls_per_s"], 0.001), 2),
                     "direct_p50_ms": direct["p50_ms"], "gateway_p50_ms": through["p50_ms"],
                     "added_p50_ms": round(through["p50_ms"] - direct["p50_ms"], 2),
                     "added_p95_ms": round(through["p95_ms"] - direct["p95_ms"], 2),
                     "cpu_ms_per_call_direct": cpu_direct, "cpu_ms_per_call_gateway": cpu_through})
    return rows
