"""How each framework streams, written as its users write it: one function per (framework, path).

A driver opens one streamed call through the framework against `url` (the simulator's base URL for
the case), hands every piece of answer text to `caller.take(delta)` (or `caller.now(text so far)`
for frameworks that give the whole text each time) and breaks out of the framework's iterator as
soon as `caller` says it has had enough (the abandoned-iterator case). It returns when the
framework's iterator ends; what the framework raises goes to the caller (`run_framework.py`).
Nothing here holds on to a framework object after it returns: the caller drops them all.

`thinking` is True for the thinking scenario: the driver asks for thinking (or reasoning) the
framework's way, where it has one, as a user of a thinking model would.

Imports of a framework happen inside its drivers: each runs in the framework's own environment.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

ANTHROPIC_MODEL = "claude-sonnet-4-5"
OPENAI_MODEL = "gpt-5-mini"
KEY = "test-key"
PROMPT = "How do streams fail?"
USER = [{"role": "user", "content": PROMPT}]
THINKING = {"type": "enabled", "budget_tokens": 1024}
MAX_TOKENS = 2048
"""Above the thinking budget, as the API requires."""


class Caller(Protocol):
    def take(self, delta: str) -> bool: ...

    def now(self, text: str) -> bool: ...


Driver = Callable[[str, Caller, bool], "Awaitable[None] | None"]
DRIVERS: dict[tuple[str, str], Driver] = {}
"""(framework, path) → driver; `async def` drivers run in a fresh event loop per case."""


WARM: dict[str, tuple[str, ...]] = {
    "langchain-anthropic": ("langchain_anthropic",),
    "langchain-openai": ("langchain_openai",),
    "pydantic-ai": ("pydantic_ai", "pydantic_ai.models.anthropic", "pydantic_ai.providers.anthropic",
                    "pydantic_ai.models.openai", "pydantic_ai.providers.openai"),
    "litellm": ("litellm",),
    "openai-agents": ("agents", "openai.types.shared"),
    "instructor": ("instructor", "anthropic"),
    "llama-index-llms-anthropic": ("llama_index.llms.anthropic", "llama_index.core.llms"),
    "anthropic-tool-runner": ("anthropic",),
}
"""What each framework imports, imported before the first case: its import time is not a case's."""


def driver(framework: str, path: str) -> Callable[[Driver], Driver]:
    def register(fn: Driver) -> Driver:
        DRIVERS[(framework, path)] = fn
        return fn
    return register


# -- langchain-anthropic: ChatAnthropic.stream / astream ----------------------------------------------


def _chat_anthropic(url: str, thinking: bool) -> Any:
    from langchain_anthropic import ChatAnthropic

    extra: dict[str, Any] = {"thinking": THINKING} if thinking else {}
    return ChatAnthropic(model=ANTHROPIC_MODEL, base_url=url, api_key=KEY, max_tokens=MAX_TOKENS, **extra)


@driver("langchain-anthropic", "sync")
def langchain_anthropic_sync(url: str, caller: Caller, thinking: bool) -> None:
    for chunk in _chat_anthropic(url, thinking).stream(PROMPT):
        if not caller.take(chunk.text):
            break


@driver("langchain-anthropic", "async")
async def langchain_anthropic_async(url: str, caller: Caller, thinking: bool) -> None:
    async for chunk in _chat_anthropic(url, thinking).astream(PROMPT):
        if not caller.take(chunk.text):
            break


# -- langchain-openai: ChatOpenAI.stream / astream (Chat Completions) -------------------------------------


def _chat_openai(url: str, thinking: bool, **more: Any) -> Any:
    from langchain_openai import ChatOpenAI

    extra: dict[str, Any] = {"reasoning_effort": "low"} if thinking else {}
    return ChatOpenAI(model=OPENAI_MODEL, base_url=url, api_key=KEY, **extra, **more)


@driver("langchain-openai", "sync")
def langchain_openai_sync(url: str, caller: Caller, thinking: bool) -> None:
    for chunk in _chat_openai(url, thinking).stream(PROMPT):
        if not caller.take(chunk.text):
            break


@driver("langchain-openai", "sync-headers")
def langchain_openai_sync_headers(url: str, caller: Caller, thinking: bool) -> None:
    """`include_response_headers=True`: it streams through `with_raw_response` then."""
    for chunk in _chat_openai(url, thinking, include_response_headers=True).stream(PROMPT):
        if not caller.take(chunk.text):
            break


@driver("langchain-openai", "async")
async def langchain_openai_async(url: str, caller: Caller, thinking: bool) -> None:
    async for chunk in _chat_openai(url, thinking).astream(PROMPT):
        if not caller.take(chunk.text):
            break


# -- pydantic-ai: Agent.run_stream / run_stream_sync ----------------------------------------------------


def _agent(url: str, thinking: bool, provider: str = "anthropic") -> Any:
    from pydantic_ai import Agent

    if provider == "anthropic":
        from pydantic_ai.models.anthropic import AnthropicModel
        from pydantic_ai.providers.anthropic import AnthropicProvider

        settings: dict[str, Any] = {"anthropic_thinking": THINKING, "max_tokens": MAX_TOKENS} if thinking else {}
        return Agent(AnthropicModel(ANTHROPIC_MODEL, provider=AnthropicProvider(base_url=url, api_key=KEY)),
                     model_settings=settings or None)
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    settings = {"openai_reasoning_effort": "low"} if thinking else {}
    return Agent(OpenAIChatModel(OPENAI_MODEL, provider=OpenAIProvider(base_url=url, api_key=KEY)),
                 model_settings=settings or None)


@driver("pydantic-ai", "async")
async def pydantic_ai_async(url: str, caller: Caller, thinking: bool) -> None:
    async with _agent(url, thinking).run_stream(PROMPT) as result:
        async for text in result.stream_text(delta=True):
            if not caller.take(text):
                break


@driver("pydantic-ai", "sync")
def pydantic_ai_sync(url: str, caller: Caller, thinking: bool) -> None:
    result = _agent(url, thinking).run_stream_sync(PROMPT)
    for text in result.stream_text(delta=True):
        if not caller.take(text):
            break


@driver("pydantic-ai", "async-openai")
async def pydantic_ai_async_openai(url: str, caller: Caller, thinking: bool) -> None:
    async with _agent(url, thinking, "openai").run_stream(PROMPT) as result:
        async for text in result.stream_text(delta=True):
            if not caller.take(text):
                break


# -- litellm: completion / acompletion(stream=True) ----------------------------------------------------

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
"""litellm fetches its model price map from GitHub when imported, unless told to use its own copy."""


def _litellm_args(url: str, thinking: bool, provider: str) -> dict[str, Any]:
    if provider == "anthropic":
        extra: dict[str, Any] = {"thinking": THINKING} if thinking else {}
        return {"model": f"anthropic/{ANTHROPIC_MODEL}", "api_base": url, "api_key": KEY, "messages": USER,
                "max_tokens": MAX_TOKENS, "stream": True, **extra}
    extra = {"reasoning_effort": "low"} if thinking else {}
    return {"model": f"openai/{OPENAI_MODEL}", "api_base": url, "api_key": KEY, "messages": USER, "stream": True,
            **extra}


def _delta(chunk: Any) -> str:
    return (chunk.choices[0].delta.content or "") if chunk.choices else ""


@driver("litellm", "sync")
def litellm_sync(url: str, caller: Caller, thinking: bool) -> None:
    import litellm

    for chunk in litellm.completion(**_litellm_args(url, thinking, "anthropic")):
        if not caller.take(_delta(chunk)):
            break


@driver("litellm", "async")
async def litellm_async(url: str, caller: Caller, thinking: bool) -> None:
    import litellm

    async for chunk in await litellm.acompletion(**_litellm_args(url, thinking, "anthropic")):
        if not caller.take(_delta(chunk)):
            break


@driver("litellm", "sync-openai")
def litellm_sync_openai(url: str, caller: Caller, thinking: bool) -> None:
    import litellm

    for chunk in litellm.completion(**_litellm_args(url, thinking, "openai")):
        if not caller.take(_delta(chunk)):
            break


@driver("litellm", "async-openai")
async def litellm_async_openai(url: str, caller: Caller, thinking: bool) -> None:
    import litellm

    async for chunk in await litellm.acompletion(**_litellm_args(url, thinking, "openai")):
        if not caller.take(_delta(chunk)):
            break


def _router(url: str, thinking: bool) -> tuple[Any, dict[str, Any]]:
    """LiteLLM's Router over one Anthropic deployment (it calls `completion` for it), and the call's arguments."""
    import litellm

    args = _litellm_args(url, thinking, "anthropic")
    deployment = {k: args.pop(k) for k in ("model", "api_base", "api_key")}
    router = litellm.Router(model_list=[{"model_name": "claude", "litellm_params": deployment}], num_retries=0)
    return router, {"model": "claude", **args}


@driver("litellm", "router-sync")
def litellm_router_sync(url: str, caller: Caller, thinking: bool) -> None:
    router, args = _router(url, thinking)
    for chunk in router.completion(**args):
        if not caller.take(_delta(chunk)):
            break


@driver("litellm", "router-async")
async def litellm_router_async(url: str, caller: Caller, thinking: bool) -> None:
    router, args = _router(url, thinking)
    async for chunk in await router.acompletion(**args):
        if not caller.take(_delta(chunk)):
            break


# -- openai-agents: Runner.run_streamed (Responses) -----------------------------------------------------


@driver("openai-agents", "async")
async def openai_agents_async(url: str, caller: Caller, thinking: bool) -> None:
    from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, set_tracing_disabled
    from openai import AsyncOpenAI
    from openai.types.shared import Reasoning

    set_tracing_disabled(True)  # its own traces would go to OpenAI's platform
    settings = ModelSettings(reasoning=Reasoning(effort="low", summary="auto")) if thinking else ModelSettings()
    agent = Agent(name="assistant", instructions="Answer in one sentence.", model_settings=settings,
                  model=OpenAIResponsesModel(OPENAI_MODEL, AsyncOpenAI(base_url=url, api_key=KEY)))
    result = Runner.run_streamed(agent, PROMPT)
    async for event in result.stream_events():
        if event.type == "raw_response_event" and event.data.type == "response.output_text.delta":
            if not caller.take(event.data.delta):
                break


# -- instructor: create_partial over the anthropic SDK (tool mode) --------------------------------------


def _answer_model() -> Any:
    from pydantic import BaseModel

    class Answer(BaseModel):
        answer: str

    return Answer


@driver("instructor", "sync")
def instructor_sync(url: str, caller: Caller, thinking: bool) -> None:
    import anthropic
    import instructor

    client = instructor.from_anthropic(anthropic.Anthropic(base_url=url, api_key=KEY))
    for partial in client.chat.completions.create_partial(model=ANTHROPIC_MODEL, max_tokens=MAX_TOKENS,
                                                          messages=USER, response_model=_answer_model()):
        if not caller.now(partial.answer or ""):
            break


@driver("instructor", "async")
async def instructor_async(url: str, caller: Caller, thinking: bool) -> None:
    import anthropic
    import instructor

    client = instructor.from_anthropic(anthropic.AsyncAnthropic(base_url=url, api_key=KEY))
    async for partial in client.chat.completions.create_partial(model=ANTHROPIC_MODEL, max_tokens=MAX_TOKENS,
                                                                messages=USER, response_model=_answer_model()):
        if not caller.now(partial.answer or ""):
            break


# -- llama-index-llms-anthropic: stream_chat / astream_chat -----------------------------------------------


def _llama(url: str, thinking: bool) -> Any:
    from llama_index.llms.anthropic import Anthropic

    extra: dict[str, Any] = {"thinking_dict": THINKING} if thinking else {}
    return Anthropic(model=ANTHROPIC_MODEL, base_url=url, api_key=KEY, max_tokens=MAX_TOKENS, **extra)


def _llama_messages() -> list[Any]:
    from llama_index.core.llms import ChatMessage

    return [ChatMessage(role="user", content=PROMPT)]


@driver("llama-index-llms-anthropic", "sync")
def llama_index_sync(url: str, caller: Caller, thinking: bool) -> None:
    for response in _llama(url, thinking).stream_chat(_llama_messages()):
        if not caller.take(response.delta or ""):
            break


@driver("llama-index-llms-anthropic", "async")
async def llama_index_async(url: str, caller: Caller, thinking: bool) -> None:
    async for response in await _llama(url, thinking).astream_chat(_llama_messages()):
        if not caller.take(response.delta or ""):
            break


# -- the anthropic SDK's tool runner: client.beta.messages.tool_runner(..., stream=True) ------------------


def _lookup_tool(is_async: bool) -> Any:
    from anthropic import beta_async_tool, beta_tool

    def lookup(topic: str) -> str:
        """Look a topic up in the notes."""
        return f"Notes on {topic}: they stall, they get cut."

    async def alookup(topic: str) -> str:
        """Look a topic up in the notes."""
        return f"Notes on {topic}: they stall, they get cut."

    alookup.__name__ = "lookup"
    return beta_async_tool(alookup) if is_async else beta_tool(lookup)


def _runner_args(thinking: bool, is_async: bool) -> dict[str, Any]:
    extra: dict[str, Any] = {"thinking": THINKING} if thinking else {}
    return {"model": ANTHROPIC_MODEL, "max_tokens": MAX_TOKENS, "messages": USER, "tools": [_lookup_tool(is_async)],
            "stream": True, **extra}


def _text_of(event: Any) -> str | None:
    if event.type == "content_block_delta" and event.delta.type == "text_delta":
        return str(event.delta.text)
    return None


@driver("anthropic-tool-runner", "sync")
def tool_runner_sync(url: str, caller: Caller, thinking: bool) -> None:
    import anthropic

    client = anthropic.Anthropic(base_url=url, api_key=KEY)
    for stream in client.beta.messages.tool_runner(**_runner_args(thinking, False)):
        for event in stream:
            text = _text_of(event)
            if text is not None and not caller.take(text):
                return


@driver("anthropic-tool-runner", "async")
async def tool_runner_async(url: str, caller: Caller, thinking: bool) -> None:
    import anthropic

    client = anthropic.AsyncAnthropic(base_url=url, api_key=KEY)
    async for stream in client.beta.messages.tool_runner(**_runner_args(thinking, True)):
        async for event in stream:
            text = _text_of(event)
            if text is not None and not caller.take(text):
                return
