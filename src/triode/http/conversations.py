"""The Conversations routes: parse the request, call the conversation service, render its
answer. Mounted with and without the `/v1` prefix (`routes.route`)."""

from __future__ import annotations

from quart import Response, request

from ..responses.conversations import (ConversationDeleted, ConversationObject,
                                       ConversationUpdate, ItemPage, NewConversation, NewItems)
from ..responses.convert import structure
from ..responses.objects import Item
from ..responses.translate import INCLUDES
from ..service.conversations import Conversations
from .body import json_body, json_response
from .contract import Operation, Param, documented
from .caller import caller
from .routes import PAGING, STORE_ERRORS, handles, route

INCLUDE_VALUES = {"items": {"type": "string", "enum": list(INCLUDES)}}
INCLUDE = (Param("include", list[str], "accepted (items are returned whole); an unknown value "
                 "is a 400", INCLUDE_VALUES),
           Param("include[]", list[str], "the same, as openai-python spells it",
                 INCLUDE_VALUES))


def service() -> Conversations:
    return handles().conversations


def include() -> list[str]:
    """`include` from the query string, as `include=a&include=b` or the SDK's `include[]=a`."""
    return [*request.args.getlist("include"), *request.args.getlist("include[]")]


@route("/conversations", methods=["POST"])
@documented(Operation("Create a conversation", ConversationObject, body=NewConversation,
                      errors=STORE_ERRORS))
async def create_conversation() -> Response:
    body = await json_body()
    return json_response(await service().create(caller(), structure(body, NewConversation)))


@route("/conversations/<conversation_id>", methods=["GET"])
@documented(Operation("Retrieve a conversation", ConversationObject,
                      errors=(*STORE_ERRORS, 404)))
async def retrieve_conversation(conversation_id: str) -> Response:
    return json_response(await service().retrieve(caller(), conversation_id))


@route("/conversations/<conversation_id>", methods=["POST"])
@documented(Operation("Replace a conversation's metadata", ConversationObject,
                      body=ConversationUpdate, errors=(*STORE_ERRORS, 404)))
async def update_conversation(conversation_id: str) -> Response:
    req = structure(await json_body(), ConversationUpdate)
    return json_response(await service().update(caller(), conversation_id, req))


@route("/conversations/<conversation_id>", methods=["DELETE"])
@documented(Operation("Delete a conversation", ConversationDeleted,
                      errors=(*STORE_ERRORS, 404)))
async def delete_conversation(conversation_id: str) -> Response:
    return json_response(await service().delete(caller(), conversation_id))


@route("/conversations/<conversation_id>/items", methods=["GET"])
@documented(Operation("List a conversation's items", ItemPage, query=(*PAGING, *INCLUDE),
                      errors=(*STORE_ERRORS, 404)))
async def list_conversation_items(conversation_id: str) -> Response:
    args = request.args
    return json_response(await service().list_items(
        caller(), conversation_id, after=args.get("after"), limit=args.get("limit"),
        order=args.get("order"), include=include()))


@route("/conversations/<conversation_id>/items", methods=["POST"])
@documented(Operation("Add items to a conversation", ItemPage, body=NewItems,
                      query=INCLUDE, errors=(*STORE_ERRORS, 404)))
async def create_conversation_items(conversation_id: str) -> Response:
    req = structure(await json_body(), NewItems)
    return json_response(await service().add_items(caller(), conversation_id, req, include()))


@route("/conversations/<conversation_id>/items/<item_id>", methods=["GET"])
@documented(Operation("Retrieve a conversation item", Item, query=INCLUDE,
                      errors=(*STORE_ERRORS, 404)))
async def retrieve_conversation_item(conversation_id: str, item_id: str) -> Response:
    return json_response(await service().item(caller(), conversation_id, item_id, include()))


@route("/conversations/<conversation_id>/items/<item_id>", methods=["DELETE"])
@documented(Operation("Delete a conversation item (answers with the conversation)",
                      ConversationObject, errors=(*STORE_ERRORS, 404)))
async def delete_conversation_item(conversation_id: str, item_id: str) -> Response:
    return json_response(await service().delete_item(caller(), conversation_id, item_id))
