"""No known tool-call format: everything after the reasoning is message text."""

from __future__ import annotations

from triode.model.parsers.base import ToolParser


class PlainTextParser(ToolParser):
    markers = ()
