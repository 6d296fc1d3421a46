"""What an Anthropic request is: whether it is a streamed Messages call, and its `RequestInfo`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streamscope.adapters.stainless.parsing import float_or_none, int_or_none, server, str_or_none, strings_or_none
from streamscope.adapters.stainless.prompt_size import prompt_chars
from streamscope.core import attributes as A
from streamscope.core.calls import CallOpener
from streamscope.core.record import RequestInfo

REQUEST_ID = "anthropic.request.id"
THINKING_TYPE = "anthropic.thinking.type"
SERVICE_TIER = "anthropic.request.service_tier"
REQUEST_ID_HEADERS = ("request-id", "x-amzn-requestid", "apim-request-id")
"""Where the request id is: Anthropic's own header, else Bedrock's (AWS) or Foundry's gateway's."""


def is_message_stream(options: Any, stream: bool) -> bool:
    """A streamed POST to Messages, whether its caller gets the parsed stream or the raw response
    (`with_raw_response`, `with_streaming_response`). The cloud clients' paths end otherwise
    (`:streamRawPredict`, `invoke-with-response-stream`), but the SDK rewrites them below
    `request()`: here every client's URL is still `/v1/messages`."""
    if not stream or getattr(options, "method", "").lower() != "post":
        return False
    url = getattr(options, "url", "") or ""
    return url.split("?", 1)[0].endswith("/v1/messages")


def event_type(path: str) -> Any:
    """The SDK's model of one streamed Messages event, for a request posted to `/v1/messages` by
    another HTTP client (LiteLLM's); None for any other path."""
    if not path.rstrip("/").endswith("/v1/messages"):
        return None
    from anthropic.types import RawMessageStreamEvent

    return RawMessageStreamEvent


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def output_type(body: Mapping[str, Any]) -> str | None:
    """`json` where the request asks for structured output (`output_config.format`, or the beta's
    `output_format`: a JSON schema, the only format there is); None where it asks for none."""
    found = _mapping(_mapping(body.get("output_config")).get("format")) or _mapping(body.get("output_format"))
    kind = found.get("type")
    return "json" if isinstance(kind, str) and kind.startswith("json") else None


def semconv_request(body: Mapping[str, Any]) -> dict[str, Any]:
    """The conventions' request attributes an Messages request carries (None: not in it)."""
    return {
        A.REQUEST_TEMPERATURE: float_or_none(body.get("temperature")),
        A.REQUEST_TOP_P: float_or_none(body.get("top_p")),
        A.REQUEST_TOP_K: int_or_none(body.get("top_k")),
        A.REQUEST_STOP_SEQUENCES: strings_or_none(body.get("stop_sequences")),
        A.REQUEST_REASONING_LEVEL: str_or_none(_mapping(body.get("output_config")).get("effort")),
        A.OUTPUT_TYPE: output_type(body),
    }


BY_PACKAGE = {"anthropic.lib.bedrock": "aws.bedrock", "anthropic.lib.vertex": "gcp.vertex_ai"}
"""The cloud clients' provider names by where the SDK defines them, for the lines (before 2.10)
whose clients do not name themselves (`_gen_ai_provider_name`)."""


def provider_of(client: Any) -> str:
    """`gen_ai.provider.name`: as the client names itself, else by the SDK package its class (or
    the SDK class it subclasses) comes from, else `anthropic`."""
    named = str_or_none(getattr(client, "_gen_ai_provider_name", None))
    if named is not None:
        return named
    for cls in type(client).__mro__:
        package = cls.__module__.rpartition(".")[0]
        for prefix, name in BY_PACKAGE.items():
            if package == prefix or package.startswith(prefix + "."):
                return name
    return "anthropic"


def request_info(pipeline: CallOpener, client: Any, options: Any, now: float) -> RequestInfo:
    body = options.json_data if isinstance(options.json_data, Mapping) else {}
    thinking = _mapping(body.get("thinking"))
    address, port = server(client)
    return pipeline.request(
        provider=provider_of(client),
        model=str_or_none(body.get("model")),
        max_tokens=int_or_none(body.get("max_tokens")),
        thinking_budget=int_or_none(thinking.get("budget_tokens")),
        server_address=address,
        server_port=port,
        prompt_chars=prompt_chars(body, ("system", "messages", "tools")),
        attributes={**semconv_request(body), THINKING_TYPE: str_or_none(thinking.get("type")),
                    SERVICE_TIER: str_or_none(body.get("service_tier"))},
        request_id_key=REQUEST_ID,
        now=now,
    )


def streamed_request(pipeline: CallOpener, client: Any, options: Any, stream: bool, now: float) -> RequestInfo | None:
    """The request of a streamed Messages call, or None for any other call."""
    if not is_message_stream(options, stream):
        return None
    return request_info(pipeline, client, options, now)


def request_id(headers: Mapping[str, str]) -> str | None:
    for name in REQUEST_ID_HEADERS:
        found = headers.get(name)
        if found:
            return found
    return None
