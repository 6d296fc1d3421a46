"""The relay under test: a Starlette app that relays simulated provider streams as SSE.

`GET /relay/<sdk>/<shape>/<scenario>` relays one call of the real SDK to the simulator's scenario:
`sdk` is `anthropic` or `openai`, `shape` the entry point (`create`, `stream`; `chat`,
`chat_stream`, `responses`, `responses_stream`), `?sync=1` the sync client, `?heartbeat=`,
`?attempts=`, `?send_timeout=` the relay's options, `?max_tokens=`, `?thinking=1` the request's. `GET /thread` does
the app's own work on the loop's default executor. With a `page`, `GET /` serves it and
the browser client at `/streamscope/client.js`, as the package ships it. The clients keep the
SDKs' default `max_retries`: inside the relay they make one try per attempt. A `DeadlineMiddleware`
reads the caller's time left.
"""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import openai
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, PlainTextResponse, Response
from starlette.routing import Route

from streamscope import deadline
from streamscope.serve import DeadlineMiddleware, client_routes, continuation_messages, relay, text_events
from streamscope.simulator import Simulator

USER = [{"role": "user", "content": "How do streams fail?"}]
THINKING = {"type": "enabled", "budget_tokens": 4096}


def opener(sim: Simulator, sdk: str, shape: str, scenario: str, query: Any) -> Any:
    """The `open_stream` for one request: a real SDK call to the simulator."""
    sync = query.get("sync") == "1"
    max_tokens = int(query.get("max_tokens", "1024"))
    if sdk == "anthropic":
        kind = anthropic.Anthropic if sync else anthropic.AsyncAnthropic
        client = kind(base_url=sim.url(scenario), api_key="test-key")
        params: dict[str, Any] = {"model": "claude-sim-1", "max_tokens": max_tokens, "messages": USER}
        if query.get("thinking") == "1":
            params["thinking"] = THINKING
        if shape == "stream":
            return lambda: client.messages.stream(**params)
        return lambda: client.messages.create(**params, stream=True)
    oclient = (openai.OpenAI if sync else openai.AsyncOpenAI)(base_url=sim.openai_url(scenario), api_key="test-key")
    if shape == "chat":
        return lambda: oclient.chat.completions.create(model="gpt-sim", messages=USER, stream=True,
                                                       stream_options={"include_usage": True})
    if shape == "chat_stream":
        return lambda: oclient.chat.completions.stream(model="gpt-sim", messages=USER,
                                                       stream_options={"include_usage": True})
    if shape == "responses":
        return lambda: oclient.responses.create(model="gpt-sim", input="How do streams fail?", stream=True)
    return lambda: oclient.responses.stream(model="gpt-sim", input="How do streams fail?")


def tools_and_thinking(event: Any) -> list[tuple[str, dict[str, Any]]]:
    """A map that also sends tool input and thinking, and tries to send a terminal event of its own."""
    out = [*text_events(event), ("done", {"forged": True})]
    delta = getattr(event, "delta", None) if getattr(event, "type", None) == "content_block_delta" else None
    if getattr(delta, "type", None) == "input_json_delta":
        out.append(("tool_input", {"partial_json": delta.partial_json}))
    if getattr(delta, "type", None) == "thinking_delta":
        out.append(("thinking", {"text": delta.thinking}))
    return out


def continuer(sim: Simulator, scenario: str, query: Any) -> Any:
    """`?continue=1` on the anthropic `create` shape: the `continuation` that carries the answer on."""
    if query.get("continue") != "1":
        return None
    kind = anthropic.Anthropic if query.get("sync") == "1" else anthropic.AsyncAnthropic
    client = kind(base_url=sim.url(scenario), api_key="test-key")
    return lambda partial: client.messages.create(model="claude-sim-1", max_tokens=1024, stream=True,
                                                  messages=continuation_messages(USER, partial))


def make_app(sim: Simulator, page: str | None = None, resume: Any = None) -> Any:
    """`?resume=1`: the relay with `resume` (a buffer) for that request; `?spent=1`: a deadline
    that is over when the relay starts (past the middleware's check); `?continue=1`: a continuation."""
    async def relayed(request: Request) -> Response:
        if request.query_params.get("spent") == "1":
            with deadline(0.001):
                await asyncio.sleep(0.01)
                return await relayed_now(request)
        return await relayed_now(request)

    async def relayed_now(request: Request) -> Response:
        p, q = request.path_params, request.query_params
        return await relay(request, opener(sim, p["sdk"], p["shape"], p["scenario"], q),
                           heartbeat=float(q.get("heartbeat", "15")), attempts=int(q.get("attempts", "3")),
                           send_timeout=float(q.get("send_timeout", "30")),
                           events=tools_and_thinking if q.get("map") == "all" else None,
                           resume=resume if q.get("resume") == "1" else None,
                           continuation=continuer(sim, p["scenario"], q))

    async def thread(request: Request) -> Response:
        """The app's own work on the loop's default executor (`asyncio.to_thread`)."""
        return PlainTextResponse(await asyncio.to_thread(lambda: "ok"))

    routes = [Route("/relay/{sdk}/{shape}/{scenario}", relayed, methods=["GET", "POST"]), Route("/thread", thread)]
    if page is not None:  # the page loads the client's parser, as shipped
        routes += [Route("/", lambda request: FileResponse(page)), *client_routes()]
    return DeadlineMiddleware(Starlette(routes=routes))
