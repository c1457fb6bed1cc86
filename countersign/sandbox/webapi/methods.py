"""The Web API method table: Slack method name -> the handler that answers it."""

from __future__ import annotations

from collections.abc import Callable

from countersign.sandbox.webapi import chat, conversations, users, views
from countersign.sandbox.webapi.answers import ApiResponse
from countersign.sandbox.webapi.arguments import Params
from countersign.sandbox.workspace import Workspace

Method = Callable[[Workspace, Params], ApiResponse]
"""A handler: answers one call with the workspace's lock held; raises ``ApiError`` or ``ViewError``."""

METHODS: dict[str, Method] = {
    "auth.test": users.auth_test,
    "bots.info": users.bots_info,
    "chat.postMessage": chat.post_message,
    "chat.update": chat.update,
    "chat.postEphemeral": chat.post_ephemeral,
    "conversations.history": conversations.history,
    "conversations.open": conversations.open_conversation,
    "users.info": users.users_info,
    "usergroups.users.list": users.usergroups_users_list,
    "views.open": views.open_view,
    "views.publish": views.publish_view,
    "views.push": views.push_view,
    "views.update": views.update_view,
}
