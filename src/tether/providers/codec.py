"""What every wire codec's `Model` shares: one endpoint, a name, and the path from a neutral
request to a neutral response, whole or streamed. A codec module supplies only its dialect:
`encode`, `decode` and a stream assembler.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Protocol

from tether.errors import ConnectionFailed
from tether.messages import JSONObject, canonical_json
from tether.providers.base import DeltaObserver, ModelRequest, ModelResponse, ToolSpec
from tether.providers.common import load_json, request_seed, with_rate_limits
from tether.providers.http import Endpoint
from tether.settings import ModelSettings


class Assembler(Protocol):
    def feed(self, chunk: bytes) -> None: ...

    def finish(self, raw: bytes) -> ModelResponse: ...


class CodecModel:
    """A `Model` over one HTTP endpoint. `seeded` codecs tie the ids they synthesize for
    calls that come without one to the exact request (see `common.synthesize_call_id`)."""

    seeded = False
    # Says "answer in JSON of this schema" in the API's own words (`ModelRequest.output`);
    # an agent with an output type and no `output_mode` asks such a model natively.
    native_output = True

    def __init__(self, model: str, endpoint: Endpoint, *, stream: bool, provider: str) -> None:
        self.model = model
        self.streaming = stream
        self.provider = provider
        self._endpoint = endpoint

    @property
    def name(self) -> str:
        return f"{self.provider}:{self.model}"

    @property
    def endpoint_url(self) -> str:
        """The URL every request of this model goes to."""
        return self._endpoint.url

    @property
    def identity(self) -> str:
        """What this model is for sharing a gateway, a budget or a cache: its provider,
        model, URL and a digest of the headers that carry its credentials. Two models that
        differ in any of these never share one (their names alone may be equal)."""
        headers = canonical_json(dict(sorted(self._endpoint.headers.items())))
        digest = hashlib.sha256(headers.encode()).hexdigest()[:16]
        return f"{self.name}@{self._endpoint.url}#{digest}"

    async def aclose(self) -> None:
        await self._endpoint.aclose()

    def streams(self, request: ModelRequest) -> bool:
        """Whether this request's answer is streamed: the model was built to stream, or the
        request feeds a live stream (`ModelRequest.live`)."""
        return self.streaming or (request.live and request.on_delta is not None)

    def encode(self, request: ModelRequest) -> JSONObject:
        raise NotImplementedError

    def decode(self, body: bytes, seed: str) -> ModelResponse:
        raise NotImplementedError

    def assembler(self, on_delta: DeltaObserver | None, seed: str) -> Assembler:
        raise NotImplementedError

    def request_headers(self, request: ModelRequest) -> Mapping[str, str] | None:
        """Headers of this request alone, over the endpoint's (a setting some API takes as a
        header); None: the endpoint's."""
        return None

    def check_settings(self, settings: ModelSettings | None, tools: Sequence[ToolSpec]) -> None:
        """Raise the `UsageError` a request with these settings and tools would raise when
        built, before any request is: an `Agent` asks when it is made and when a run
        brings settings of its own."""
        if settings is not None:
            self.encode(ModelRequest(self.model, None, (), tuple(tools), settings=settings))

    async def complete(self, request: ModelRequest) -> ModelResponse:
        timeout = request.settings.timeout if request.settings is not None else None
        if timeout is None:
            return await self._complete(request)
        # Bounds one attempt whole, a stream included; whoever retries gives each its own.
        deadline = asyncio.timeout(timeout)
        try:
            async with deadline:
                return await self._complete(request)
        except TimeoutError as exc:
            if not deadline.expired():
                raise
            raise ConnectionFailed(
                f"no answer from the model host within the {timeout:g} s timeout "
                "(ModelSettings.timeout)"
            ) from exc

    async def _complete(self, request: ModelRequest) -> ModelResponse:
        body = self.encode(request)
        seed = request_seed(body) if self.seeded else ""
        if self.streams(request):
            assembler = self.assembler(request.on_delta, seed)
            raw = await self._endpoint.stream(body, assembler.feed, self.request_headers(request))
            if not raw.streamed and load_json(raw.body) is None:
                # Typed as JSON but not one JSON document: a stream after all, read at its end.
                assembler.feed(raw.body)
                raw = replace(raw, streamed=True)
            if raw.streamed:
                return with_rate_limits(assembler.finish(raw.body), raw.headers)
        else:
            raw = await self._endpoint.post(body, self.request_headers(request))
        # A whole JSON answer, to a stream request too: an error body there raises the very
        # error it raises unstreamed, with the provider's own message, type and code.
        return with_rate_limits(self.decode(raw.body, seed), raw.headers)
