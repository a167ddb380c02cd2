"""Run examples/frameworks/langgraph_agent.py with a fake chat model from langchain_core that calls
one tool with each of the given arguments in turn, then answers "done"; print what happened as JSON.
Run by tests/frameworks/test_langgraph.py with LangGraph's own environment (requirements.txt here):

    drive.py URL TOKEN TOOL '[{"title": ...}, ...]'
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the checkout, for examples/
from examples.frameworks.langgraph_agent import reckon_agent, reckon_client  # noqa: E402


class ScriptedChatModel(GenericFakeChatModel):
    """langchain_core's fake chat model, given tools as a real one is (it calls the scripted ones)."""

    def bind_tools(self, tools, **kwargs):
        self.__dict__["bound"] = [tool.name for tool in tools]
        return self


async def main(url: str, token: str, tool: str, calls: list[dict]) -> dict:
    script = [AIMessage(content="", tool_calls=[{"name": tool, "args": arguments, "id": f"call-{n}"}])
              for n, arguments in enumerate(calls)]
    model = ScriptedChatModel(messages=iter([*script, AIMessage(content="done")]))
    agent = await reckon_agent(model, reckon_client(url, token))
    state = await agent.ainvoke({"messages": [("user", "do the work")]})
    return {"output": state["messages"][-1].content, "tools": model.__dict__["bound"],
            "told": [{"status": message.status, "text": text_of(message)}
                     for message in state["messages"] if isinstance(message, ToolMessage)]}


def text_of(message: ToolMessage) -> str:
    if isinstance(message.content, str):
        return message.content
    return " ".join(block.get("text", "") for block in message.content if isinstance(block, dict))


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])))))
