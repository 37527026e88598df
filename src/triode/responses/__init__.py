"""The Responses API as pure code: wire types and their converter, input items, tools,
history, translation to chat messages, compaction's plan, the response builder and output
assembly, the lifecycle table, ids and usage. No trio, no Quart: it imports only `model/`
types and `errors`, so every piece is testable with plain values."""
