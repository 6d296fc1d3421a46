"""What an OpenAI request is: whether it is a streamed Chat Completions or Responses call, and
its `RequestInfo`.

The names are the conventions' where they have one (`openai.api.type`,
`openai.request.service_tier`, `gen_ai.request.*`, `gen_ai.output.type`); the request id has
none, so it goes under `openai.request.*` as the conventions name OpenAI's other request
attributes. The reasoning effort is `gen_ai.request.reasoning.level`, and also
`openai.request.reasoning_effort`, the name streamscope gave it first (kept for dashboards and
queries that read it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streamscope.adapters.stainless.parsing import (
    float_or_none,
    int_or_none,
    seed_or_none,
    server,
    str_or_none,
    strings_or_none,
)
from streamscope.adapters.stainless.prompt_size import prompt_chars
from streamscope.core import attributes as A
from streamscope.core.calls import CallOpener
from streamscope.core.record import RequestInfo

REQUEST_ID = "openai.request.id"
API_TYPE = "openai.api.type"
SERVICE_TIER = "openai.request.service_tier"
REASONING_EFFORT = "openai.request.reasoning_effort"
REQUEST_ID_HEADER = "x-request-id"
CHAT, RESPONSES = "chat_completions", "responses"
AZURE = "azure.ai.openai"
"""`gen_ai.provider.name` for the SDK's Azure clients (`AzureOpenAI`, `AsyncAzureOpenAI`)."""


def api_of(options: Any, stream: bool) -> str | None:
    """`chat_completions` or `responses` for a streamed POST, whether its caller gets the parsed
    stream or the raw response (`with_raw_response`, `with_streaming_response`); None for anything
    else (`GET /responses/{id}` resumption, other routes). Azure's deployment prefix is added below
    `request()`: here the path is still the API's own."""
    if not stream or getattr(options, "method", "").lower() != "post":
        return None
    path = (getattr(options, "url", "") or "").split("?", 1)[0].rstrip("/")
    return CHAT if path.endswith("/chat/completions") else RESPONSES if path.endswith("/responses") else None


def event_type(path: str) -> Any:
    """The SDK's model of one streamed event, for a request posted to `/chat/completions` or
    `/responses` by another HTTP client; None for any other path."""
    path = path.rstrip("/")
    if path.endswith("/chat/completions"):
        from openai.types.chat import ChatCompletionChunk

        return ChatCompletionChunk
    if path.endswith("/responses"):
        from openai.types.responses import ResponseStreamEvent

        return ResponseStreamEvent
    return None


def _provider(client: Any) -> str:
    from openai.lib.azure import BaseAzureClient

    return AZURE if isinstance(client, BaseAzureClient) else "openai"


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


OUTPUT_TYPES = {"json_object": "json", "json_schema": "json", "text": "text"}
"""The requested output format (chat `response_format.type`, Responses `text.format.type`) as the
conventions' `gen_ai.output.type`; another format (a grammar, ...) is none of theirs: not set."""


def semconv_request(body: Mapping[str, Any], api: str) -> dict[str, Any]:
    """The conventions' request attributes a Chat Completions or Responses request carries (None:
    not in it). Penalties, `seed`, `stop` and `n` are Chat Completions' only; `previous_response_id`
    the Responses API's."""
    if api == CHAT:
        effort = body.get("reasoning_effort")
        fmt = _mapping(body.get("response_format")).get("type")
        count = int_or_none(body.get("n"))
        found: dict[str, Any] = {
            A.REQUEST_STOP_SEQUENCES: strings_or_none(body.get("stop")),
            A.REQUEST_FREQUENCY_PENALTY: float_or_none(body.get("frequency_penalty")),
            A.REQUEST_PRESENCE_PENALTY: float_or_none(body.get("presence_penalty")),
            A.REQUEST_SEED: seed_or_none(body.get("seed")),
            A.REQUEST_CHOICE_COUNT: count if count != 1 else None,  # required only where not 1
        }
    else:
        effort = _mapping(body.get("reasoning")).get("effort")
        fmt = _mapping(_mapping(body.get("text")).get("format")).get("type")
        found = {A.REQUEST_PREVIOUS_RESPONSE_ID: str_or_none(body.get("previous_response_id"))}
    found[A.REQUEST_TEMPERATURE] = float_or_none(body.get("temperature"))
    found[A.REQUEST_TOP_P] = float_or_none(body.get("top_p"))
    found[A.REQUEST_REASONING_LEVEL] = str_or_none(effort)
    found[A.OUTPUT_TYPE] = OUTPUT_TYPES.get(fmt) if isinstance(fmt, str) else None
    return found


def request_info(pipeline: CallOpener, client: Any, options: Any, api: str, now: float) -> RequestInfo:
    body = options.json_data if isinstance(options.json_data, Mapping) else {}
    if api == CHAT:
        limit = body.get("max_completion_tokens")
        limit = limit if limit is not None else body.get("max_tokens")
        effort = body.get("reasoning_effort")
    else:
        limit = body.get("max_output_tokens")
        effort = _mapping(body.get("reasoning")).get("effort")
    address, port = server(client)
    return pipeline.request(
        provider=_provider(client),
        model=str_or_none(body.get("model")),
        max_tokens=int_or_none(limit),
        thinking_budget=None,  # OpenAI sets reasoning by effort, never by a token budget
        server_address=address,
        server_port=port,
        attributes={**semconv_request(body, api), API_TYPE: api,
                    SERVICE_TIER: str_or_none(body.get("service_tier")), REASONING_EFFORT: str_or_none(effort)},
        request_id_key=REQUEST_ID,
        now=now,
        prompt_chars=prompt_chars(body, ("messages", "input", "instructions", "tools")),
    )


def streamed_request(pipeline: CallOpener, client: Any, options: Any, stream: bool, now: float) -> RequestInfo | None:
    """The request of a streamed Chat Completions or Responses call, or None for any other call."""
    api = api_of(options, stream)
    return None if api is None else request_info(pipeline, client, options, api, now)


def request_id(headers: Mapping[str, str]) -> str | None:
    return headers.get(REQUEST_ID_HEADER) or None
