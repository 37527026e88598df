"""The routes' contracts (`@documented`): each declared on its view, every one of them on a
mounted view, and `public` exactly where the app asks for no key."""

from __future__ import annotations

from triode.http.app import OPEN_PATHS, create_app
from triode.http.contract import OPERATIONS, Operation, documented

APP = create_app(None)


def test_documented_declares_the_contract_and_leaves_the_view_as_it_is():
    """The decorator registers the operation under the view and returns the same view."""
    async def view() -> str:
        return "answer"

    operation = Operation("A test route", str)
    try:
        assert documented(operation)(view) is view
        assert OPERATIONS[view] is operation
    finally:
        OPERATIONS.pop(view, None)


def test_every_declared_contract_is_mounted():
    """No contract is left over from a view that is no longer mounted."""
    views = {APP.view_functions[rule.endpoint] for rule in APP.url_map.iter_rules()}
    assert set(OPERATIONS) <= views


def test_public_contracts_are_the_views_mounted_at_the_open_paths():
    """A contract says `public` for exactly the views the app lets in without a key."""
    at = {}
    for rule in APP.url_map.iter_rules():
        at.setdefault(APP.view_functions[rule.endpoint], set()).add(rule.rule)
    public = {view for view, op in OPERATIONS.items() if op.public}
    assert {path for view in public for path in at[view]} == set(OPEN_PATHS)
