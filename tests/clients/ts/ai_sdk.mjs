// Drives the Vercel AI SDK (npm `ai` + `@ai-sdk/openai`, pinned in package.json) with its
// Responses model, `createOpenAI({ baseURL }).responses(MODEL)`, against the triode server at
// TRIODE_BASE_URL: generateText, streamText, a tool round trip and generateObject. Each
// scenario runs on its own; the script prints one JSON object (its result, or the error the SDK
// threw, with every HTTP request it sent) for tests/clients/test_ai_sdk.py to check.
import { createOpenAI } from '@ai-sdk/openai';
import { generateObject, generateText, stepCountIs, streamText, tool } from 'ai';
import { z } from 'zod';

const MODEL = process.env.TRIODE_MODEL ?? 'triode-tiny';

// Every request of the running scenario: method, path, JSON body and the response status.
let requests = [];
async function recordingFetch(url, init) {
  const entry = { method: init?.method ?? 'GET', path: new URL(url).pathname };
  try { entry.body = JSON.parse(init?.body); } catch { entry.body = init?.body ?? null; }
  requests.push(entry);
  const response = await fetch(url, init);
  entry.status = response.status;
  return response;
}

const openai = createOpenAI({
  baseURL: `${process.env.TRIODE_BASE_URL}/v1`,
  apiKey: 'sk-test',
  fetch: recordingFetch,
});
const model = openai.responses(MODEL);

function describeError(error) {
  const out = { name: error?.name, message: String(error?.message ?? error) };
  for (const key of ['statusCode', 'responseBody', 'finishReason', 'text']) {
    if (error?.[key] !== undefined) out[key] = error[key];
  }
  let cause = error?.cause;
  const causes = [];
  while (cause && causes.length < 4) {
    causes.push({ name: cause.name, message: String(cause.message ?? cause),
                  ...(cause.value !== undefined ? { value: cause.value } : {}) });
    cause = cause.cause;
  }
  if (causes.length) out.causes = causes;
  if (error?.lastError) out.lastError = describeError(error.lastError);
  return out;
}

const out = {};
async function scenario(name, run) {
  requests = [];
  try {
    out[name] = { ok: true, result: await run() };
  } catch (error) {
    out[name] = { ok: false, error: describeError(error) };
  }
  out[name].requests = requests;
}

// generateText: one non-streaming POST /v1/responses.
await scenario('generate_text', async () => {
  const result = await generateText({ model, prompt: 'Reply with: silver 411 lake',
                                      maxRetries: 0 });
  return { text: result.text, finishReason: result.finishReason,
           responseId: result.response.id, usage: result.usage,
           warnings: result.warnings };
});

// streamText: the SSE stream, read as text deltas.
await scenario('stream_text', async () => {
  const errors = [];
  const result = streamText({ model, prompt: 'Reply with: green fox', maxRetries: 0,
                              onError: ({ error }) => { errors.push(describeError(error)); } });
  const deltas = [];
  for await (const delta of result.textStream) deltas.push(delta);
  return { deltas, text: await result.text, finishReason: await result.finishReason,
           usage: await result.usage, errors };
});

// A tool round trip: the model calls get_weather, the SDK runs it and sends the result back.
await scenario('tool_round_trip', async () => {
  const calls = [];
  const result = await generateText({
    model, prompt: 'Call get_weather with city=Paris', maxRetries: 0,
    tools: {
      get_weather: tool({
        description: 'The weather in a city.',
        inputSchema: z.object({ city: z.string() }),
        execute: async ({ city }) => { calls.push(city); return 'sunny'; },
      }),
    },
    stopWhen: stepCountIs(3),
  });
  return {
    calls,
    steps: result.steps.map((step) => ({
      finishReason: step.finishReason,
      toolCalls: step.toolCalls.map((c) => ({ toolName: c.toolName, input: c.input })),
      toolResults: step.toolResults.map((r) => ({ toolName: r.toolName, output: r.output })),
      text: step.text,
    })),
    text: result.text,
  };
});

// generateObject: a json_schema text format, the answer validated against the zod schema.
await scenario('generate_object', async () => {
  const result = await generateObject({
    model, schema: z.object({ city: z.string() }), maxRetries: 0,
    prompt: 'Answer in JSON with key city and value Paris',
  });
  return { object: result.object, finishReason: result.finishReason };
});

console.log(JSON.stringify(out));
