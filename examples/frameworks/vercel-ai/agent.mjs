// A Vercel AI SDK agent pointed at Reckon's MCP gateway (docs/agents/frameworks/vercel-ai.md shows
// this file; tests/frameworks/test_vercel_ai.py runs it). `npm ci` here installs what it imports.
import { createMCPClient } from '@ai-sdk/mcp';
import { generateText, stepCountIs } from 'ai';

export async function reckonClient(url, token) {
  return createMCPClient({
    transport: { type: 'http', url, headers: { Authorization: `Bearer ${token}` } },
    // The default: a retry of a lost call is the gateway's to answer ("outcome unknown, not
    // repeated"), never the client's to make.
    maxRetries: 0,
  });
}

// The SDK hands an MCP error result to the model as plain content, its isError flag dropped: give
// it to the model as an error ("outcome unknown, not repeated", "awaiting approval"), as it is.
export async function reckonTools(client) {
  const tools = await client.tools();
  for (const tool of Object.values(tools)) {
    const asContent = tool.toModelOutput;
    tool.toModelOutput = (options) => options.output?.isError
      ? { type: 'error-text', value: options.output.content.map((block) => block.text ?? '').join(' ') }
      : asContent(options);
  }
  return tools;
}

// The client sends no _meta, so Reckon's key is built from the arguments (the actions file's
// default) and a call again with the same arguments is answered from the ledger.
export async function runAgent(model, client, prompt) {
  return generateText({ model, tools: await reckonTools(client), prompt, stopWhen: stepCountIs(5) });
}
