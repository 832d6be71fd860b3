"""Model specs: `PREFIX:MODEL` -> a configured codec. Keys and hosts come from arguments, then
from the environment; a missing key is a `KeyMissing` (a `ConfigError`) naming the variable,
raised before any request. The `scripted:` test model is not built here: the core owns it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import httpx

from tether.errors import KeyMissing, UsageError
from tether.providers import anthropic, ollama, openai_chat, openai_responses
from tether.providers.base import Model

OPENROUTER_BASE_URL = "https://openrouter.ai/api/v1"
VLLM_BASE_URL = "http://localhost:8000/v1"
# The hosted providers' own endpoints: a server may call them for any spec (with its keys).
HOSTED_BASE_URLS = (
    anthropic.DEFAULT_BASE_URL,
    openai_chat.DEFAULT_BASE_URL,
    openai_responses.DEFAULT_BASE_URL,
    OPENROUTER_BASE_URL,
)


@dataclass(frozen=True, slots=True)
class _Spec:
    model: str
    api_key: str | None
    base_url: str | None
    http_client: httpx.AsyncClient | None
    stream: bool
    env: Mapping[str, str]

    def key(self, variable: str, prefix: str) -> str:
        key = self.api_key or self.env.get(variable)
        if not key:
            raise KeyMissing(
                f"{prefix}:{self.model} needs an API key: set {variable} or pass api_key="
            )
        return key

    def url(self, variable: str, default: str) -> str:
        return self.base_url or self.env.get(variable) or default


def _anthropic(s: _Spec) -> Model:
    return anthropic.AnthropicModel(
        s.model,
        api_key=s.key("ANTHROPIC_API_KEY", "anthropic"),
        base_url=s.url("ANTHROPIC_BASE_URL", anthropic.DEFAULT_BASE_URL),
        http_client=s.http_client,
        stream=s.stream,
    )


def _openai(s: _Spec) -> Model:
    return openai_chat.OpenAIChatModel(
        s.model,
        api_key=s.key("OPENAI_API_KEY", "openai"),
        base_url=s.url("OPENAI_BASE_URL", openai_chat.DEFAULT_BASE_URL),
        http_client=s.http_client,
        stream=s.stream,
    )


def _openai_responses(s: _Spec) -> Model:
    return openai_responses.OpenAIResponsesModel(
        s.model,
        api_key=s.key("OPENAI_API_KEY", "openai-responses"),
        base_url=s.url("OPENAI_BASE_URL", openai_responses.DEFAULT_BASE_URL),
        http_client=s.http_client,
        stream=s.stream,
    )


def _openrouter(s: _Spec) -> Model:
    return openai_chat.OpenAIChatModel(
        s.model,
        api_key=s.key("OPENROUTER_API_KEY", "openrouter"),
        base_url=s.url("OPENROUTER_BASE_URL", OPENROUTER_BASE_URL),
        http_client=s.http_client,
        stream=s.stream,
        provider="openrouter",
        max_tokens_field="max_tokens",
        reasoning_style="openrouter",
    )


def _vllm(s: _Spec) -> Model:
    return openai_chat.OpenAIChatModel(
        s.model,
        api_key=s.api_key or s.env.get("VLLM_API_KEY"),
        base_url=s.url("VLLM_BASE_URL", VLLM_BASE_URL),
        http_client=s.http_client,
        stream=s.stream,
        provider="vllm",
        max_tokens_field="max_tokens",
    )


def _ollama(s: _Spec) -> Model:
    host = s.url("OLLAMA_HOST", ollama.DEFAULT_HOST)
    if "://" not in host:  # OLLAMA_HOST is often written as host:port
        host = "http://" + host
    return ollama.OllamaModel(
        s.model, host=host, http_client=s.http_client, stream=s.stream, api_key=s.api_key
    )


def _openai_compatible(s: _Spec) -> Model:
    """`openai-compatible:MODEL@BASE_URL`, or `openai-compatible:MODEL` with `base_url=`.
    The split is at the last `@` followed by `http://` or `https://`."""
    model, base_url = s.model, s.base_url
    for scheme in ("@https://", "@http://"):
        at = model.rfind(scheme)
        if at > 0:
            model, base_url = model[:at], model[at + 1 :]
            break
    if not base_url:
        raise UsageError(
            f"openai-compatible:{s.model} needs a base URL: write "
            "openai-compatible:MODEL@http://host:port/v1 or pass base_url="
        )
    return openai_chat.OpenAIChatModel(
        model,
        api_key=s.api_key,
        base_url=base_url,
        http_client=s.http_client,
        stream=s.stream,
        provider="openai-compatible",
        max_tokens_field="max_tokens",
    )


BUILDERS: dict[str, Callable[[_Spec], Model]] = {
    "anthropic": _anthropic,
    "openai": _openai,
    "openai-responses": _openai_responses,
    "openrouter": _openrouter,
    "ollama": _ollama,
    "vllm": _vllm,
    "openai-compatible": _openai_compatible,
}


def model_from_string(
    spec: str,
    *,
    api_key: str | None = None,
    base_url: str | None = None,
    http_client: httpx.AsyncClient | None = None,
    stream: bool = False,
    env: Mapping[str, str] | None = None,
) -> Model:
    """Build a codec from `PREFIX:MODEL`. Prefixes: anthropic, openai, openai-responses,
    openrouter, ollama, vllm, openai-compatible (`MODEL@BASE_URL`). `env` replaces
    `os.environ` for the key and host look-ups."""
    prefix, sep, model = spec.partition(":")
    known = ", ".join(BUILDERS)
    if not sep or not model.strip():
        raise UsageError(
            f"model spec {spec!r} must look like PREFIX:MODEL, e.g. anthropic:claude-sonnet-4-5;"
            f" known prefixes: {known}"
        )
    builder = BUILDERS.get(prefix)
    if builder is None:
        raise UsageError(f"unknown model prefix {prefix!r} in {spec!r}; known prefixes: {known}")
    return builder(
        _Spec(
            model.strip(),
            api_key,
            base_url,
            http_client,
            stream,
            os.environ if env is None else env,
        )
    )
