"""Response and item ids: the prefix names the kind, the rest is random."""

from __future__ import annotations

import re

from triode.responses.ids import new_id


def test_an_id_is_its_prefix_and_48_hex_digits():
    """`<prefix>_` then 24 random bytes as hex, the shape OpenAI's ids have."""
    assert re.fullmatch(r"resp_[0-9a-f]{48}", new_id("resp"))
    assert re.fullmatch(r"msg_[0-9a-f]{48}", new_id("msg"))


def test_ids_do_not_repeat():
    """Every call makes a new id (they name stored things across processes)."""
    assert len({new_id("fc") for _ in range(1000)}) == 1000
