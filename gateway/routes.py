"""The route table of the conformance notes; every other method or path is a bare 404/405."""

from __future__ import annotations

from aiohttp import web

from gateway.handlers import a2a, cards
from gateway.handlers.oauth import consent, device, introspection, metadata, revocation, tokens

# Path segments never contain ':' so that `tasks/{id}:cancel` cannot be read as `tasks/{id}`.
_BRAND = "{brand:[^/:]+}"
_TASK = "{task_id:[^/:]+}"
_CONFIG = "{config_id:[^/:]+}"


def add_routes(router: web.UrlDispatcher) -> None:
    """Each route is named after its A2A 1.0 method: the ``operation`` of metrics and access logs."""
    base = f"/a2a/{_BRAND}"
    router.add_get("/.well-known/agent-card.json", cards.domain_card, name="GetAgentCardByDomain")
    router.add_get(f"{base}/.well-known/agent-card.json", cards.brand_card, name="GetAgentCard")
    router.add_post(f"{base}/message:send", a2a.send_message, name="SendMessage")
    router.add_post(f"{base}/message:stream", a2a.streaming_unsupported, name="SendStreamingMessage")
    router.add_get(f"{base}/tasks", a2a.list_tasks, allow_head=False, name="ListTasks")
    router.add_get(f"{base}/tasks/{_TASK}", a2a.get_task, allow_head=False, name="GetTask")
    router.add_post(f"{base}/tasks/{_TASK}:cancel", a2a.get_task, name="CancelTask")
    router.add_post(f"{base}/tasks/{_TASK}:subscribe", a2a.streaming_unsupported, name="SubscribeToTask")
    router.add_get(
        f"{base}/extendedAgentCard",
        a2a.extended_card_unsupported,
        allow_head=False,
        name="GetExtendedAgentCard",
    )
    push = f"{base}/tasks/{_TASK}/pushNotificationConfigs"
    # One resource per method, so each carries its own name; the router still answers 405 with
    # the union of the methods of every resource on the path.
    router.add_get(push, a2a.push_unsupported, allow_head=False, name="ListTaskPushNotificationConfigs")
    router.add_post(push, a2a.push_unsupported, name="CreateTaskPushNotificationConfig")
    router.add_get(
        f"{push}/{_CONFIG}", a2a.push_unsupported, allow_head=False, name="GetTaskPushNotificationConfig"
    )
    router.add_delete(f"{push}/{_CONFIG}", a2a.push_unsupported, name="DeleteTaskPushNotificationConfig")
    # §5 the OAuth 2.0 endpoints of a delegating Brand, under its issuer `{interface}/oauth`.
    oauth = f"{base}/oauth"
    router.add_post(
        f"{oauth}/device_authorization", device.device_authorization, name="OAuthDeviceAuthorization"
    )
    router.add_post(f"{oauth}/token", tokens.token, name="OAuthToken")
    router.add_post(f"{oauth}/revoke", revocation.revoke, name="OAuthRevoke")
    router.add_post(f"{oauth}/introspect", introspection.introspect, name="OAuthIntrospect")
    router.add_get(f"{oauth}/.well-known/oauth-authorization-server", metadata.metadata, name="OAuthMetadata")
    # RFC 8414 §3.1: the well-known suffix inserted between the host and the issuer's path.
    router.add_get(
        f"/.well-known/oauth-authorization-server{oauth}", metadata.metadata, name="OAuthMetadataByIssuer"
    )
    router.add_get(f"{oauth}/jwks.json", metadata.jwks, name="OAuthJwks")
    # §5.3 the User's browser: the Brand login's hand-off, the consent decision, the landing page.
    router.add_post(f"{oauth}/consent", consent.consent, name="OAuthConsent")
    router.add_get(f"{oauth}/consent", consent.consent_opened, allow_head=False, name="OAuthConsentOpened")
    router.add_post(f"{oauth}/consent/decision", consent.decision, name="OAuthConsentDecision")
    router.add_get(f"{oauth}/done", consent.landing, allow_head=False, name="OAuthLanding")
