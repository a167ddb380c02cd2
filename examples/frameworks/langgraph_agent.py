"""A LangGraph agent pointed at Reckon's MCP gateway through langchain-mcp-adapters
(docs/agents/frameworks/langgraph.md shows this file; tests/frameworks/test_langgraph.py runs it, in
LangGraph's own environment: the adapter requires mcp<2)."""

from __future__ import annotations

from datetime import timedelta

from langchain_core.language_models import BaseChatModel
from langchain_mcp_adapters.client import MultiServerMCPClient
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition


def reckon_client(url: str, token: str) -> MultiServerMCPClient:
    return MultiServerMCPClient({
        "reckon": {
            "transport": "streamable_http",
            "url": url,
            "headers": {"Authorization": f"Bearer {token}"},
            # Above the gateway's deadline for the slowest tool (10 s by default): the gateway answers
            # "outcome unknown" then, with the job's link, for the model to read.
            "timeout": timedelta(seconds=60),
        },
    })


async def reckon_agent(model: BaseChatModel, client: MultiServerMCPClient):
    """The model and the gateway's tools in a loop. The adapter sends no _meta, so Reckon's key is
    built from the arguments (the actions file's default) and a call again with the same arguments
    is answered from the ledger; an error result reaches the model as a ToolMessage with status
    "error", which nothing retries on its own."""
    tools = await client.get_tools()
    model = model.bind_tools(tools)

    def call_model(state: MessagesState) -> dict:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    return graph.compile()
