"""An HTTP hop in front of the gateway that writes down every JSON-RPC message an MCP client sends
(one JSON line each, in the file given), then passes the request on unchanged: what a client
declares (its protocol era, clientInfo, capabilities), measured on the wire.

    python recording_proxy.py --target http://127.0.0.1:PORT/mcp --port N --log messages.jsonl
"""

from __future__ import annotations

import argparse
import json

import httpx2
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

parser = argparse.ArgumentParser()
parser.add_argument("--target", required=True)
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--log", required=True)
options = parser.parse_args()
PASSED_BACK = {"content-type", "mcp-session-id", "allow", "www-authenticate"}


async def mcp(request: Request) -> Response:
    body = await request.body()
    if request.method == "POST" and body:
        with open(options.log, "a") as log:
            log.write(json.dumps(json.loads(body)) + "\n")
    headers = {name: value for name, value in request.headers.items() if name not in {"host", "content-length"}}
    async with httpx2.AsyncClient(timeout=120) as client:
        answer = await client.request(request.method, options.target, content=body, headers=headers)
    return Response(answer.content, status_code=answer.status_code,
                    headers={name: value for name, value in answer.headers.items() if name in PASSED_BACK})


async def healthz(request: Request) -> Response:
    return Response("ok")


app = Starlette(routes=[Route("/mcp", mcp, methods=["GET", "POST", "DELETE"]), Route("/healthz", healthz)])
uvicorn.run(app, host="127.0.0.1", port=options.port, log_level="warning")
