"""The route table of the conformance notes; every other method or path is a bare 404/405."""

from __future__ import annotations

from aiohttp import web

from gateway.http import a2a, cards

# Path segments never contain ':' so that `tasks/{id}:cancel` cannot be read as `tasks/{id}`.
_BRAND = "{brand:[^/:]+}"
_TASK = "{task_id:[^/:]+}"
_CONFIG = "{config_id:[^/:]+}"


def add_routes(router: web.UrlDispatcher) -> None:
    base = f"/a2a/{_BRAND}"
    router.add_get("/.well-known/agent-card.json", cards.domain_card)
    router.add_get(f"{base}/.well-known/agent-card.json", cards.brand_card)
    router.add_post(f"{base}/message:send", a2a.send_message)
    router.add_post(f"{base}/message:stream", a2a.streaming_unsupported)
    router.add_get(f"{base}/tasks", a2a.list_tasks, allow_head=False)
    router.add_get(f"{base}/tasks/{_TASK}", a2a.get_task, allow_head=False)
    router.add_post(f"{base}/tasks/{_TASK}:cancel", a2a.get_task)
    router.add_post(f"{base}/tasks/{_TASK}:subscribe", a2a.streaming_unsupported)
    router.add_get(f"{base}/extendedAgentCard", a2a.extended_card_unsupported, allow_head=False)
    push = f"{base}/tasks/{_TASK}/pushNotificationConfigs"
    router.add_get(push, a2a.push_unsupported, allow_head=False)
    router.add_post(push, a2a.push_unsupported)
    router.add_get(f"{push}/{_CONFIG}", a2a.push_unsupported, allow_head=False)
    router.add_delete(f"{push}/{_CONFIG}", a2a.push_unsupported)
