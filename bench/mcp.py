"""Tool calls through the MCP gateway beside the same calls made directly to the upstream, and
beside the gateways a team would pick instead (bench/mcp_peers.py: a passthrough written with the
SDK, no journal; FastMCP's proxy as its default and with the upstream session reused), and the
journal alone in-process (what the gateway adds to a call that is not HTTP: open and close it).

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

import json
import multiprocessing
import statistics
import subprocess
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


PEERS = ("passthrough", "fastmcp", "fastmcp-reused")
JOURNAL = """
import json, sys
import django
django.setup()
from bench.mcp import journal_calls
print(json.dumps(journal_calls(float(sys.argv[1]), sys.argv[2])))
"""


def journal_calls(seconds: float, token_name: str) -> dict:
    """In a process with the gateway's actions file: open and close `create_note` calls as the
    gateway does (a new key: enqueued, claimed and begun in one statement and one durable commit;
    then the result recorded), with no HTTP and no upstream: the journal's own cost per call, and
    the WAL it writes."""
    from django.db import connection

    from api.models import WorkerToken
    from api.tokens import agent_name
    from gateway import calls
    from gateway.config import policy_for_action

    token = WorkerToken.objects.get(name=token_name)
    policy = policy_for_action("mcp:notes.create_note")
    agent = agent_name(token, "bench/1")

    def wal() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint")
            return cursor.fetchone()[0]

    def one() -> None:
        title = uuid.uuid4().hex
        go = calls.open_call(token=token, policy=policy, arguments={"title": title, "body": "b"}, meta={},
                             agent=agent)
        if not isinstance(go, calls.Go):
            raise RuntimeError(f"the journal did not open a new call: {go}")
        note = {"id": 1, "title": title, "body": "b"}
        calls.close_call(go, {"content": [{"type": "text", "text": json.dumps(note)}],
                              "structuredContent": {"result": note}, "isError": False})

    one()  # warm: the statements prepared, the token's scope read
    latencies, wal_before, started = [], wal(), time.monotonic()
    while time.monotonic() - started < seconds:
        begun = time.perf_counter()
        one()
        latencies.append(time.perf_counter() - begun)
    written = wal() - wal_before
    latencies.sort()
    return {"calls": len(latencies), "p50_ms": round(statistics.median(latencies) * 1000, 2),
            "p95_ms": round(latencies[int(len(latencies) * 0.95) - 1] * 1000, 2),
            "wal_bytes_per_call": round(written / len(latencies))}


def _peer(world: World, kind: str, upstream_url: str) -> tuple[Worker, str]:
    port = free_port()
    peer = Worker(world, f"mcp-{kind}", {}, [sys.executable, "-m", "bench.mcp_peers", kind, upstream_url, str(port)])
    world.workers.append(peer)
    wait_until(lambda: _listening(port), timeout=60, what=f"the {kind} MCP gateway to listen")
    return peer, f"http://127.0.0.1:{port}/mcp"


def _wal(world: World) -> int:
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint")
        return cursor.fetchone()[0]


def mcp_calls(world: World, *, seconds: float, clients=(1, 4)) -> dict:
    """`rows`: direct against the gateway per client count (the targets read these); `systems`:
    every gateway's figures beside direct, in one run, alternating; `journal`: the journal alone."""
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
    secret = uuid.uuid4().hex * 2
    # No rate limit: the bench makes as many calls as one token can.
    gateway_env = {"RECKON_ACTIONS_FILE": str(actions), "RECKON_DEBUG": "false",
                   "RECKON_MCP_GATEWAY_CALLS_PER_MINUTE": "0", "RECKON_SECRET_KEY": secret}
    gateway = Worker(world, "mcp-gateway", gateway_env,
                     [sys.executable, str(ROOT / "manage.py"), "mcp_gateway", "--port", str(gateway_port)])
    world.workers.append(gateway)
    wait_until(lambda: answers(f"http://127.0.0.1:{gateway_port}/healthz"), timeout=60,
               what="the MCP gateway to answer")
    peers = {kind: _peer(world, kind, upstream_url) for kind in PEERS}
    # The agent's token names the one tool it calls; this process does not load the gateway's actions
    # file, so it cannot tell that tool reversible, and a person stands behind the token.
    issuer, _ = User.objects.get_or_create(username="bench-agent-owner")
    token = worker_token_create(name="bench-agent", tenants=["bench"], actions=["mcp:notes.create_note"],
                                created_by=issuer).token
    gateway_url = f"http://127.0.0.1:{gateway_port}/mcp"
    rows, systems = [], []
    for count in clients:
        cpu = _cpu(world, gateway, upstream)
        direct = _run(upstream_url, token, "create_note", count, seconds)
        cpu_direct = _cpu_ms_per_call(direct, cpu, cpu := _cpu(world, gateway, upstream))
        wal = _wal(world)
        through = _run(gateway_url, token, "notes_create_note", count, seconds)
        wal = _wal(world) - wal
        cpu_through = _cpu_ms_per_call(through, cpu, _cpu(world, gateway, upstream))
        rows.append({"clients": count, "direct_calls_per_s": direct["calls_per_s"],
                     "gateway_calls_per_s": through["calls_per_s"],
                     "ratio": round(through["calls_per_s"] / max(direct["calls_per_s"], 0.001), 2),
                     "direct_p50_ms": direct["p50_ms"], "gateway_p50_ms": through["p50_ms"],
                     "added_p50_ms": round(through["p50_ms"] - direct["p50_ms"], 2),
                     "added_p95_ms": round(through["p95_ms"] - direct["p95_ms"], 2),
                     "cpu_ms_per_call_direct": cpu_direct, "cpu_ms_per_call_gateway": cpu_through})
        systems.append(_system("direct", count, direct, direct, cpu_direct))
        systems.append({**_system("reckon gateway", count, through, direct, cpu_through),
                        "wal_bytes_per_call": round(wal / max(through["calls"], 1))})
        for kind, (peer, url) in peers.items():
            before = {"gateway": tree_cpu(peer.process.pid), "upstream": tree_cpu(upstream.process.pid),
                      "postgres": 0.0}
            run = _run(url, token, "create_note", count, seconds)
            after = {"gateway": tree_cpu(peer.process.pid), "upstream": tree_cpu(upstream.process.pid),
                     "postgres": 0.0}
            systems.append(_system(kind, count, run, direct, _cpu_ms_per_call(run, before, after)))
    env = {**world.env(), **gateway_env, "DJANGO_SETTINGS_MODULE": "config.settings"}
    done = subprocess.run([sys.executable, "-c", JOURNAL, str(seconds), "bench-agent"], cwd=ROOT, env=env,  # nosec B603  # our own interpreter and code
                          capture_output=True, text=True, timeout=seconds + 120, check=False)
    if done.returncode:
        raise RuntimeError(f"the journal's measurement failed:\n{done.stderr[-3000:]}")
    journal = json.loads(done.stdout.strip().splitlines()[-1])
    return {"rows": rows, "systems": systems, "journal": journal}


def _system(name: str, clients: int, run: dict, direct: dict, cpu: str) -> dict:
    return {"system": name, "clients": clients, "calls_per_s": run["calls_per_s"], "p50_ms": run["p50_ms"],
            "p95_ms": run["p95_ms"], "added_p50_ms": round(run["p50_ms"] - direct["p50_ms"], 2),
            "vs_direct": round(run["calls_per_s"] / max(direct["calls_per_s"], 0.001), 2),
            "cpu_ms_per_call": cpu, "wal_bytes_per_call": None}
