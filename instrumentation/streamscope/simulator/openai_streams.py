"""OpenAI's two streaming formats as timed scripts, for the simulator's OpenAI routes.

Chat Completions sends ``data: {chat.completion.chunk}`` lines with no event name and ends with
``data: [DONE]``; the Responses API sends named events (``event: response.output_text.delta``)
numbered by ``sequence_number`` and ends with its terminal event (no ``[DONE]``). The builders
write the API's JSON shapes in the API's order (tests check every field against the openai SDK's
own types), with the Step types and timing of steps.py: a step's delay is relative to the one
before, and a Step among the text chunks is played as is (a Silence, a Cut, bad bytes).

The server fills per request what a builder leaves None (``personalize``): the completion or
response id, the ``created`` time and the model (echoed from the request, as the API does).
OpenAI sends no keep-alive while the model reasons (not even SSE comments): a reasoning model
is silent on the wire, so scripts use ``Silence`` or ``first_event_delay``, never pings.

What a user writes scripts with is also exported by `streamscope.simulator`, the documented place
to import it from; they live in openai_chat.py (Chat Completions), openai_responses.py (Responses
API) and openai_wire.py (what both share).
"""

from .openai_chat import DONE, FinishReason, chat_error, chat_stream
from .openai_responses import ReasoningSpec, responses_error, responses_stream
from .openai_wire import SERVER_ERROR, SYSTEM_FINGERPRINT, OpenAIHttpError, error_body, personalize

__all__ = [
    "DONE",
    "SERVER_ERROR",
    "SYSTEM_FINGERPRINT",
    "FinishReason",
    "OpenAIHttpError",
    "ReasoningSpec",
    "chat_error",
    "chat_stream",
    "error_body",
    "personalize",
    "responses_error",
    "responses_stream",
]
