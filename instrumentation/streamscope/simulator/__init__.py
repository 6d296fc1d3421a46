"""A local Anthropic-compatible streaming endpoint that plays scripted, timed scenarios.

    from streamscope.simulator import Simulator

    with Simulator() as sim:  # the whole catalog
        client = anthropic.Anthropic(base_url=sim.url("thinking"), api_key="test")

A public module (docs/simulator.md; docs/reference.md, "The public surface"): its `__all__` is what
users import, the Anthropic scripts' builders and steps and OpenAI's (`openai_streams`) alike.
"""

from .anthropic_streams import BlockSpec, ServerToolSpec, ThinkingSpec, error_event, message_stream
from .catalog import SCENARIOS
from .content import TextSpec, ToolUseSpec
from .openai_streams import OpenAIHttpError, ReasoningSpec, chat_error, chat_stream, responses_error, responses_stream
from .server import RequestLog, Simulator
from .steps import REFERENCE_DIR, Cut, Event, HttpError, Ping, Raw, Scenario, Silence, Step, from_sse_file, pings

__all__ = ["REFERENCE_DIR", "SCENARIOS", "BlockSpec", "Cut", "Event", "HttpError", "OpenAIHttpError", "Ping", "Raw",
           "ReasoningSpec", "RequestLog", "Scenario", "ServerToolSpec", "Silence", "Simulator", "Step", "TextSpec",
           "ThinkingSpec", "ToolUseSpec", "chat_error", "chat_stream", "error_event", "from_sse_file", "message_stream",
           "pings", "responses_error", "responses_stream"]
