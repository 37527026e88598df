"""Response and item ids, and the usage object."""

from __future__ import annotations

import secrets
from typing import TypedDict


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(24)}"


class InputTokensDetails(TypedDict):
    cached_tokens: int


class OutputTokensDetails(TypedDict):
    reasoning_tokens: int


class Usage(TypedDict):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


def usage(input_tokens: int = 0, output_tokens: int = 0, cached_tokens: int = 0,
          reasoning_tokens: int = 0) -> Usage:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached_tokens},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": input_tokens + output_tokens,
    }
