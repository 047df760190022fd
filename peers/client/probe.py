"""Connecting to an OpenAI-compatible server: which model it serves (/v1/models, which must then list exactly one
unless the id was given), what it says it is (the model card's `owned_by`, the `Server` header, /version), and one
line for a server that refuses the key."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from ...errors import UserError
from .config import EndpointConfig, EndpointURL

PROBE_TIMEOUT_S = 30.0


def one_line(exc: BaseException) -> str:
    """An httpx error in one line: a status error as its status (httpx's own text adds a second line with a link), any
    other as its type and message, whitespace collapsed."""
    if isinstance(exc, httpx.HTTPStatusError):
        return f"HTTP {exc.response.status_code} {exc.response.reason_phrase}".rstrip()
    return " ".join(f"{type(exc).__name__}: {exc}".split())


def probe_server(
    url: EndpointURL, config: EndpointConfig, headers: dict[str, str], scrub: Callable[[str], str]
) -> tuple[str, dict[str, Any]]:
    """(served model id, what the server says of itself). Raises UserError when the server cannot be listed and no id
    was given, lists other than one model, does not serve the given id, or refuses the key."""
    with httpx.Client(
        headers=headers, timeout=PROBE_TIMEOUT_S, verify=config.verify_tls, follow_redirects=True
    ) as client:
        server: dict[str, Any] = {"base_url": url.public, "server_header": None, "version": None}
        served = config.served_model
        try:
            response = client.get(url.root + "/v1/models")
            if response.status_code in (401, 403):
                raise UserError(_refused(url, config, response))
            response.raise_for_status()
            cards = [m for m in response.json().get("data", []) if isinstance(m, dict) and "id" in m]
            models = [m["id"] for m in cards]
            owners = {m["id"]: m.get("owned_by") for m in cards}
            server["server_header"] = response.headers.get("server")
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            reason = scrub(one_line(exc))
            if served is None:
                message = f"cannot list the models of {url.public} ({reason}); pass the served model id"
                raise UserError(message) from None
            server["models_error"] = reason
            models = []
        if served is None:
            if len(models) != 1:
                listing = ", ".join(models) or "none"
                raise UserError(f"{url.public} serves {len(models)} models ({listing}); pass the one to use")
            served = models[0]
        elif models and served not in models:
            raise UserError(f"{url.public} does not serve {served!r} (it serves: {', '.join(models)})")
        server["version"] = _version(client, url)
        if models:
            server["owned_by"] = owners.get(served)  # which server this is, as far as its model card says
        return served, server


def _refused(url: EndpointURL, config: EndpointConfig, response: httpx.Response) -> str:
    """The one line for a server that refuses our key: an API key is what it wants, whatever else was given."""
    status = f"HTTP {response.status_code} {response.reason_phrase}".rstrip()
    if config.resolved_api_key() is None:
        return (
            f"{url.public} wants an API key ({status}): pass it with --api-key KEY (sent as "
            f"'Authorization: Bearer KEY') or set OPENAI_API_KEY"
        )
    return (
        f"{url.public} refused the API key ({status}): pass the server's key with --api-key KEY "
        f"(sent as 'Authorization: Bearer KEY'; --api-key wins over OPENAI_API_KEY)"
    )


def _version(client: httpx.Client, url: EndpointURL) -> str | None:
    try:
        response = client.get(url.root + "/version")
        if response.status_code == 200:
            value = response.json().get("version")
            return str(value) if value is not None else None
    except (httpx.HTTPError, ValueError, AttributeError):
        pass
    return None
