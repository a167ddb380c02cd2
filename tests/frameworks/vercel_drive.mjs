// Run examples/frameworks/vercel-ai/agent.mjs with the AI SDK's MockLanguageModelV3 (from ai/test)
// calling one tool with each of the given arguments in turn, then answering "done"; print what
// happened as JSON. Run by tests/frameworks/test_vercel_ai.py:
//     node vercel_drive.mjs URL TOKEN TOOL '[{"title": ...}, ...]'
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

const example = new URL('../../examples/frameworks/vercel-ai/', import.meta.url);
const { reckonClient, runAgent } = await import(new URL('agent.mjs', example));
const there = createRequire(new URL('package.json', example));
const { MockLanguageModelV3 } = await import(pathToFileURL(there.resolve('ai/test')).href);

const [url, token, tool, calls] = [process.argv[2], process.argv[3], process.argv[4], JSON.parse(process.argv[5])];
const usage = { inputTokens: { total: 1 }, outputTokens: { total: 1 } };
const steps = calls.map((args, n) => ({
  content: [{ type: 'tool-call', toolCallId: `call-${n}`, toolName: tool, input: JSON.stringify(args) }],
  finishReason: { unified: 'tool-calls', raw: 'tool_calls' }, usage, warnings: [],
}));
steps.push({ content: [{ type: 'text', text: 'done' }], finishReason: { unified: 'stop', raw: 'stop' }, usage, warnings: [] });
const model = new MockLanguageModelV3({ doGenerate: steps });

const client = await reckonClient(url, token);
try {
  const result = await runAgent(model, client, 'do the work');
  const told = result.steps.flatMap((step) => step.content.filter((part) => part.type === 'tool-result' || part.type === 'tool-error'));
  console.log(JSON.stringify({
    output: result.text,
    tools: model.doGenerateCalls[0].tools.map((given) => given.name),
    // What the model read of each call: the tool messages of the prompts after the first.
    read: model.doGenerateCalls.slice(1).map((call) => call.prompt.filter((message) => message.role === 'tool')
      .at(-1).content.at(-1).output),
    told: told.map((part) => ({ type: part.type, isError: part.output?.isError ?? null,
                                 text: (part.output?.content ?? []).map((block) => block.text ?? '').join(' ') })),
  }));
} finally {
  await client.close();
}
