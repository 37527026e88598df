// Drives every `client.conversations.*` method of the openai Node SDK against the triode
// server at TRIODE_BASE_URL, and prints one JSON object of what came back for
// tests/clients/test_openai_node.py to check.
import OpenAI from 'openai';

const MODEL = process.env.TRIODE_MODEL ?? 'triode-tiny';
const client = new OpenAI({
  baseURL: `${process.env.TRIODE_BASE_URL}/v1`,
  apiKey: 'sk-test',
  maxRetries: 0,
  timeout: 60_000,
});
const out = {};

// create, with an item and metadata
const conv = await client.conversations.create({
  items: [{ type: 'message', role: 'user', content: 'Reply with: amber 77 kite' }],
  metadata: { topic: 'ts' },
});
out.create = { id: conv.id, object: conv.object, metadata: conv.metadata };

// retrieve, update
const got = await client.conversations.retrieve(conv.id);
out.retrieve = { id: got.id, metadata: got.metadata };
const updated = await client.conversations.update(conv.id, { metadata: { topic: 'node', n: '2' } });
out.update = { metadata: updated.metadata };

// items.create: an easy message and an assistant message
const added = await client.conversations.items.create(conv.id, {
  items: [
    { role: 'assistant', content: 'amber 77 kite' },
    { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Repeat your first answer.' }] },
  ],
});
out.items_create = {
  object: added.object, count: added.data.length, has_more: added.has_more,
  types: added.data.map((item) => item.type), ids: added.data.map((item) => item.id),
};

// a response in the conversation: its items come first, its turn is appended
const answered = await client.responses.create({ model: MODEL, conversation: conv.id, input: [] });
out.response = { output_text: answered.output_text, conversation: answered.conversation?.id ?? null };

// items.list: ascending, one a page, walked by auto-pagination; and the default (desc) page
const listed = [];
for await (const item of client.conversations.items.list(conv.id, { order: 'asc', limit: 1 })) {
  listed.push({ id: item.id, type: item.type, role: item.role ?? null });
}
const newestFirst = await client.conversations.items.list(conv.id);
out.items_list = {
  asc: listed, desc_first: newestFirst.data[0]?.id ?? null, desc_count: newestFirst.data.length,
};

// items.retrieve, items.delete (returns the conversation)
const first = listed[0];
const item = await client.conversations.items.retrieve(first.id, { conversation_id: conv.id });
out.items_retrieve = { id: item.id, type: item.type, role: item.role, content: item.content };
const afterDelete = await client.conversations.items.delete(first.id, { conversation_id: conv.id });
const remaining = [];
for await (const entry of client.conversations.items.list(conv.id, { order: 'asc' })) remaining.push(entry.id);
out.items_delete = { object: afterDelete.object, id: afterDelete.id, remaining };

// delete, then retrieve is a 404
const deleted = await client.conversations.delete(conv.id);
let status = null;
try {
  await client.conversations.retrieve(conv.id);
} catch (err) {
  status = err instanceof OpenAI.NotFoundError ? 404 : String(err);
}
out.delete = { object: deleted.object, deleted: deleted.deleted, retrieve_after: status };

console.log(JSON.stringify(out));
