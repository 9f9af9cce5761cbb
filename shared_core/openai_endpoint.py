"""Where an ``openai`` client connects: URL, key, timeout, checked once for every client.

The embedder and the chat model both reach "any OpenAI-compatible server", so the
rules live here once: ``base_url`` else ``$OPENAI_BASE_URL`` else OpenAI's API; a
key from ``api_key`` else ``$OPENAI_API_KEY``, required only where the host needs
one (OpenAI, Azure), a placeholder elsewhere since local servers check none.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

# what is sent as the key to a server that needs none (vLLM's documented value)
OPENAI_PLACEHOLDER_KEY = "EMPTY"


def needs_key(host: str) -> bool:
    """OpenAI's own API and Azure OpenAI reject unkeyed calls; anything else may not."""
    return host == "api.openai.com" or host.endswith(".azure.com")


def check_timeout(timeout: object) -> None:
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not 0 < timeout < float("inf")):
        raise ValueError(f"timeout must be a finite number of seconds > 0, got {timeout!r}")


def openai_options(api_key: str | None, base_url: str | None, timeout: float | None,
                   max_retries: int | None, *, who: str) -> dict[str, Any]:
    """Keyword arguments for ``openai.OpenAI``/``AsyncOpenAI``, every one checked.

    A typo fails when the client is made, not halfway through a corpus. ``who``
    names the caller in the missing-key message.
    """
    from_env = base_url is None
    url = (os.environ.get("OPENAI_BASE_URL") or None) if from_env else base_url
    host = "api.openai.com"
    if url is not None:
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                f"base_url must be an http(s) URL such as http://127.0.0.1:8000/v1, got {url!r}"
                + (" (from OPENAI_BASE_URL)" if from_env else ""))
        host = parts.hostname.lower()
    check_timeout(timeout)
    if max_retries is not None and (isinstance(max_retries, bool)
                                    or not isinstance(max_retries, int) or max_retries < 0):
        raise ValueError(f"max_retries must be an int >= 0, got {max_retries!r}")
    key = api_key or os.environ.get("OPENAI_API_KEY")
    if not key:
        if needs_key(host):
            raise ValueError(
                f"{who} needs an API key for {host}: pass api_key= or set "
                "OPENAI_API_KEY (a server of your own, given by base_url= or OPENAI_BASE_URL, "
                "needs none)")
        key = OPENAI_PLACEHOLDER_KEY
    options: dict[str, Any] = {"api_key": key, "base_url": url}
    if timeout is not None:
        options["timeout"] = float(timeout)
    if max_retries is not None:
        options["max_retries"] = max_retries
    return options
