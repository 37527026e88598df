"""The Conversations routes: parse the request, call the conversation service, render its
answer. Mounted with and without the `/v1` prefix (`routes.route`)."""

from __future__ import annotations

from quart import Response, request

from ..responses.conversations import ConversationUpdate, NewConversation, NewItems
from ..responses.convert import structure
from ..service.conversations import Conversations
from .body import json_body, json_response
from .routes import handles, route


def service() -> Conversations:
    return handles().conversations_api


def include() -> list[str]:
    """`include` from the query string, as `include=a&include=b` or the SDK's `include[]=a`."""
    return [*request.args.getlist("include"), *request.args.getlist("include[]")]


@route("/conversations", methods=["POST"])
async def create_conversation() -> Response:
    body = await json_body()
    return json_response(await service().create(structure(body, NewConversation)))


@route("/conversations/<conversation_id>", methods=["GET"])
async def retrieve_conversation(conversation_id: str) -> Response:
    return json_response(await service().retrieve(conversation_id))


@route("/conversations/<conversation_id>", methods=["POST"])
async def update_conversation(conversation_id: str) -> Response:
    req = structure(await json_body(), ConversationUpdate)
    return json_response(await service().update(conversation_id, req))


@route("/conversations/<conversation_id>", methods=["DELETE"])
async def delete_conversation(conversation_id: str) -> Response:
    return json_response(await service().delete(conversation_id))


@route("/conversations/<conversation_id>/items", methods=["GET"])
async def list_conversation_items(conversation_id: str) -> Response:
    args = request.args
    return json_response(await service().list_items(
        conversation_id, after=args.get("after"), limit=args.get("limit"),
        order=args.get("order"), include=include()))


@route("/conversations/<conversation_id>/items", methods=["POST"])
async def create_conversation_items(conversation_id: str) -> Response:
    req = structure(await json_body(), NewItems)
    return json_response(await service().add_items(conversation_id, req, include()))


@route("/conversations/<conversation_id>/items/<item_id>", methods=["GET"])
async def retrieve_conversation_item(conversation_id: str, item_id: str) -> Response:
    return json_response(await service().item(conversation_id, item_id, include()))


@route("/conversations/<conversation_id>/items/<item_id>", methods=["DELETE"])
async def delete_conversation_item(conversation_id: str, item_id: str) -> Response:
    return json_response(await service().delete_item(conversation_id, item_id))
