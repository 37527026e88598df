"""Settings: every command-line flag, its default and the environment variables it reads.

The command line wins over the environment; among environment variables the `TRIODE_*` name
wins over the seed's `LLAMA_ARG_*` / `MLXCEL_*` names. FLAGS is the one table: the argument
parser, the environment reader and docs/configuration.md all come from it.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, Callable, Mapping, Sequence

import attrs

BUNDLED_MODEL = "bundled"


def _bool(text: str) -> bool:
    v = text.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"not a boolean: {text!r}")


@attrs.frozen
class Flag:
    name: str                      # --name
    type: Callable[[str], Any]
    default: Any
    help: str
    env: tuple[str, ...] = ()      # extra environment names (the seed's), after TRIODE_*
    choices: tuple[str, ...] | None = None

    @property
    def field(self) -> str:
        return self.name.replace("-", "_")

    @property
    def env_names(self) -> tuple[str, ...]:
        return ("TRIODE_" + self.field.upper(), *self.env)


FLAGS: tuple[Flag, ...] = (
    Flag("host", str, "127.0.0.1", "address to listen on"),
    Flag("port", int, 8080, "port to listen on (0 picks a free one)"),
    Flag("model", str, BUNDLED_MODEL,
         "local path or Hugging Face repo id of an mlx-lm model; default: the bundled tiny model"),
    Flag("model-alias", str, None, "the name clients use in `model` (default: the model path)"),
    Flag("parallel", int, 8, "generation slots: sequences decoded together in one batch"),
    Flag("max-queue", int, 64, "requests that may wait for a slot; one more is a 503"),
    Flag("context-length", int, None, "context window in tokens (default: the model's own)"),
    Flag("api-key", str, None, "require `Authorization: Bearer KEY` on every route but /health"),
    Flag("hosted-tools", str, "error",
         "hosted tool types (web_search, mcp, ...): `error` answers 400, `ignore` drops them",
         choices=("error", "ignore")),
    Flag("blas", str, "auto", "BLAS under MLX on Linux: auto (MKL when installed), mkl, none",
         choices=("auto", "mkl", "none")),
    Flag("prompt-cache-bytes", int, 2147483648,
         "byte budget of the KV caches kept for reuse by prompts that start the same way "
         "(LRU); 0 turns the prompt cache and the reasoning echo off"),
    Flag("blas-threads", int, 0, "MKL threads on Linux: 0 = auto (1 for models with hidden "
         "size under 512, MKL's default otherwise), N = at most N"),
    Flag("log-level", str, "info", "logging level",
         choices=("debug", "info", "warning", "error")),
    Flag("responses-store-max-entries", int, 1024, "stored responses kept; 0 disables storage",
         env=("LLAMA_ARG_RESPONSES_STORE_MAX_ENTRIES",)),
    Flag("responses-store-max-bytes", int, 268435456,
         "approximate byte budget of retained response JSON; 0 evicts at once",
         env=("MLXCEL_RESPONSES_STORE_MAX_BYTES",)),
    Flag("responses-store-ttl-secs", int, 3600, "seconds a stored response lives; 0 = no TTL",
         env=("LLAMA_ARG_RESPONSES_STORE_TTL_SECS",)),
    Flag("responses-background-max-jobs", int, 64,
         "active background responses at once; 0 disables background mode",
         env=("MLXCEL_RESPONSES_BACKGROUND_MAX_JOBS",)),
    Flag("responses-background-ephemeral-ttl-secs", int, 600,
         "seconds a finished background+store:false response stays pollable (minimum 1)",
         env=("MLXCEL_RESPONSES_BACKGROUND_EPHEMERAL_TTL_SECS",)),
    Flag("conversation-store-max-entries", int, 256, "conversations kept; 0 disables them",
         env=("LLAMA_ARG_CONVERSATION_STORE_MAX_ENTRIES",)),
    Flag("conversation-store-max-bytes", int, 67108864,
         "approximate byte budget of retained transcripts; 0 evicts at once",
         env=("MLXCEL_CONVERSATION_STORE_MAX_BYTES",)),
    Flag("conversation-store-ttl-secs", int, 3600, "seconds a conversation lives; 0 = no TTL",
         env=("LLAMA_ARG_CONVERSATION_STORE_TTL_SECS",)),
    Flag("reasoning-echo-max-bytes", int, 16 * 1024 * 1024,
         "byte budget of remembered reasoning items; 0 disables the echo",
         env=("MLXCEL_REASONING_ECHO_MAX_BYTES",)),
)


@attrs.frozen
class Settings:
    host: str = "127.0.0.1"
    port: int = 8080
    model: str = BUNDLED_MODEL
    model_alias: str | None = None
    parallel: int = 8
    max_queue: int = 64
    context_length: int | None = None
    api_key: str | None = None
    hosted_tools: str = "error"
    blas: str = "auto"
    prompt_cache_bytes: int = 2147483648
    blas_threads: int = 0
    log_level: str = "info"
    responses_store_max_entries: int = 1024
    responses_store_max_bytes: int = 268435456
    responses_store_ttl_secs: int = 3600
    responses_background_max_jobs: int = 64
    responses_background_ephemeral_ttl_secs: int = 600
    conversation_store_max_entries: int = 256
    conversation_store_max_bytes: int = 67108864
    conversation_store_ttl_secs: int = 3600
    reasoning_echo_max_bytes: int = 16 * 1024 * 1024

    def __attrs_post_init__(self) -> None:
        problems = []
        if self.parallel < 1:
            problems.append("--parallel must be at least 1")
        if self.max_queue < 0:
            problems.append("--max-queue must be 0 or more")
        if self.context_length is not None and self.context_length < 16:
            problems.append("--context-length must be at least 16")
        if self.responses_background_ephemeral_ttl_secs < 1:
            problems.append(
                "--responses-background-ephemeral-ttl-secs must be at least 1 "
                f"(got {self.responses_background_ephemeral_ttl_secs})")
        for f in FLAGS:
            v = getattr(self, f.field)
            if f.type is int and v is not None and v < 0:
                problems.append(f"--{f.name} must not be negative (got {v})")
            if f.choices and v not in f.choices:
                problems.append(f"--{f.name} must be one of {', '.join(f.choices)} (got {v!r})")
        if problems:
            raise SettingsError("; ".join(problems))


class SettingsError(ValueError):
    """A setting that cannot start a server; the message names the flag."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for f in FLAGS:
        env = ", ".join(f.env_names)
        parser.add_argument(f"--{f.name}", type=f.type, default=None, choices=f.choices,
                            help=f"{f.help} (default: {f.default}; env: {env})")


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
                        value = f.type(raw)
                    except ValueError as exc:
                        raise SettingsError(f"environment variable {name}: {exc}") from None
                    break
        values[f.field] = f.default if value is None else value
    values.update(overrides)
    return Settings(**values)


def parse(argv: Sequence[str] | None = None) -> Settings:
    parser = argparse.ArgumentParser(prog="triode serve")
    add_arguments(parser)
    return resolve(vars(parser.parse_args(argv)))


def markdown_table() -> str:
    """The flag table of docs/configuration.md (a test keeps the two identical)."""
    rows = ["| flag | default | environment | meaning |", "|---|---|---|---|"]
    for f in FLAGS:
        default = "the bundled model" if f.name == "model" else (
            "—" if f.default is None else f"`{f.default}`")
        env = ", ".join(f"`{n}`" for n in f.env_names)
        rows.append(f"| `--{f.name}` | {default} | {env} | {f.help} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
