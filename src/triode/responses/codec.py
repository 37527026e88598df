"""The one base64url-JSON codec: what triode's opaque-looking blobs (`encrypted_content` of
reasoning and compaction items) are made of. Not encryption: the blobs are client data."""

from __future__ import annotations

import base64
import json
from typing import Any


def encode(value: Any) -> str:
    """Compact JSON, UTF-8, base64url without padding."""
    blob = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(blob).decode().rstrip("=")


def decode(text: str) -> Any:
    """The value `encode` made; ValueError for anything that is not base64url JSON."""
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    return json.loads(raw)
