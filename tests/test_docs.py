"""docs/ stays true to the code."""

from pathlib import Path

from triode.settings import markdown_table

ROOT = Path(__file__).resolve().parents[1]


def test_configuration_doc_lists_every_flag():
    """docs/configuration.md holds exactly the generated flag table."""
    assert markdown_table() in (ROOT / "docs" / "configuration.md").read_text()
