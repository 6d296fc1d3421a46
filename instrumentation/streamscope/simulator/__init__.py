"""A local Anthropic-compatible streaming endpoint that plays scripted, timed scenarios.

    from streamscope.simulator import Simulator

    with Simulator() as sim:  # the whole catalog
        client = anthropic.Anthropic(base_url=sim.url("thinking"), api_key="test")
"""

from .anthropic_streams import BlockSpec, ServerToolSpec, ThinkingSpec, error_event, message_stream
from .catalog import SCENARIOS
from .content import TextSpec, ToolUseSpec
from .server import RequestLog, Simulator
from .steps import REFERENCE_DIR, Cut, Event, HttpError, Ping, Raw, Scenario, Silence, Step, from_sse_file, pings

__all__ = [
    "REFERENCE_DIR",
    "SCENARIOS",
    "BlockSpec",
    "Cut",
    "Event",
    "HttpError",
    "Ping",
    "Raw",
    "RequestLog",
    "Scenario",
    "ServerToolSpec",
    "Silence",
    "Simulator",
    "Step",
    "TextSpec",
    "ThinkingSpec",
    "ToolUseSpec",
    "error_event",
    "from_sse_file",
    "message_stream",
    "pings",
]
