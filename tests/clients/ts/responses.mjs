// Drives every `client.responses.*` method of the openai Node SDK (package.json pins the
// version) against the triode server at TRIODE_BASE_URL, and prints one JSON object of what
// came back for tests/clients/test_openai_node.py to check.
import OpenAI from 'openai';

const MODEL = process.env.TRIODE_MODEL ?? 'triode-tiny';
const client = new OpenAI({
  baseURL: `${process.env.TRIODE_BASE_URL}/v1`,
  apiKey: 'sk-test',
  maxRetries: 0,
  timeout: 60_000,
});

// A background job that holds its slot for seconds: the schema demands a 2,000-character
// string, which constrained decoding cannot end early (tests/e2e/test_spine.py's HOLD).
const HOLD = {
  format: {
    type: 'json_schema', name: 'hold', strict: true,
    schema: {
      type: 'object', properties: { a: { type: 'string', minLength: 2000 } },
      required: ['a'], additionalProperties: false,
    },
  },
};

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const out = {};

// create
const created = await client.responses.create({ model: MODEL, input: 'Reply with: silver 411 lake' });
out.create = { id: created.id, status: created.status, output_text: created.output_text };

// create with stream: true (the raw event stream)
const raw = await client.responses.create({ model: MODEL, input: 'Reply with: green fox', stream: true });
const rawTypes = [];
let rawText = '';
for await (const event of raw) {
  rawTypes.push(event.type);
  if (event.type === 'response.output_text.delta') rawText += event.delta;
}
out.create_stream = { first: rawTypes[0], last: rawTypes.at(-1), text: rawText };

// stream (the helper), then finalResponse()
const stream = client.responses.stream({ model: MODEL, input: 'Reply with: amber 77 kite' });
const deltas = [];
stream.on('response.output_text.delta', (event) => deltas.push(event.delta));
const streamed = await stream.finalResponse();
out.stream = { deltas: deltas.join(''), output_text: streamed.output_text, status: streamed.status };

// retrieve, and its stream replay (all events, then from a sequence number on)
const retrieved = await client.responses.retrieve(created.id);
out.retrieve = { id: retrieved.id, output_text: retrieved.output_text };
const replay = [];
for await (const event of await client.responses.retrieve(created.id, { stream: true })) {
  replay.push([event.sequence_number, event.type]);
}
const after = [];
for await (const event of await client.responses.retrieve(created.id, { stream: true, starting_after: 2 })) {
  after.push(event.sequence_number);
}
out.retrieve_stream = { events: replay, after_2: after };

// inputItems.list, one item a page, walked by the SDK's auto-pagination
const chained = await client.responses.create({
  model: MODEL, previous_response_id: created.id, input: 'Repeat your first answer.',
});
const pageItems = [];
for await (const item of client.responses.inputItems.list(chained.id, { limit: 1, order: 'asc' })) {
  pageItems.push({ type: item.type, role: item.role ?? null });
}
out.input_items = { items: pageItems, chained_text: chained.output_text };

// inputTokens.count
const counted = await client.responses.inputTokens.count({ model: MODEL, input: 'Reply with: silver 411 lake' });
out.input_tokens = { object: counted.object, input_tokens: counted.input_tokens };

// parse: a json_schema format, parsed by the SDK
const parsed = await client.responses.parse({
  model: MODEL, input: 'Answer in JSON with key city and value Paris',
  text: { format: { type: 'json_schema', name: 'city', strict: true, schema: {
    type: 'object', properties: { city: { type: 'string' } }, required: ['city'],
    additionalProperties: false,
  } } },
});
out.parse = { output_parsed: parsed.output_parsed, output_text: parsed.output_text };

// cancel a running background job
const job = await client.responses.create({
  model: MODEL, input: 'Reply with: a', background: true, max_output_tokens: 4000, text: HOLD,
});
let polled = job;
while (polled.status === 'queued') {
  await sleep(20);
  polled = await client.responses.retrieve(job.id);
}
const cancelled = await client.responses.cancel(job.id);
out.cancel = {
  created: job.status, before: polled.status, cancelled: cancelled.status,
  after: (await client.responses.retrieve(job.id)).status,
};

// stream({response_id}): follows a background job's events live
const bg = await client.responses.create({ model: MODEL, input: 'Reply with: plum 9 reed', background: true });
const followed = await client.responses.stream({ response_id: bg.id }).finalResponse();
out.stream_background = { status: followed.status, output_text: followed.output_text };

// compact: a history long enough that older turns can go, then the result sent back as input
const words = 'amber kite plum reed fox fern oak moss lark dune vale cove'.split(' ');
const history = words.flatMap((w, i) => [
  { role: 'user', content: `Reply with: ${w} ${i} ${w}` },
  { role: 'assistant', content: `${w} ${i} ${w}` },
]);
history.push({ role: 'user', content: 'Reply with: last one' });
const compacted = await client.responses.compact({ model: MODEL, input: history });
const resumed = await client.responses.create({
  model: MODEL, input: [...compacted.output, { role: 'user', content: 'Reply with: blue 5 fern' }],
});
out.compact = {
  object: compacted.object, types: compacted.output.map((item) => item.type),
  input_tokens: compacted.usage?.input_tokens ?? null, next: resumed.output_text,
};

// delete, then retrieve is a 404
await client.responses.delete(created.id);
let status = null;
try {
  await client.responses.retrieve(created.id);
} catch (err) {
  status = err instanceof OpenAI.NotFoundError ? 404 : String(err);
}
out.delete = { retrieve_after: status };

console.log(JSON.stringify(out));
