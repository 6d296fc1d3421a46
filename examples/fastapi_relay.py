"""A FastAPI endpoint that streams Claude's answer to a browser, keeping streamscope's whole contract.

Against the simulator (`streamscope simulate`) by default, or Claude with ANTHROPIC_API_KEY set:
    uvicorn examples.fastapi_relay:app --port 8000
    curl -N 'http://127.0.0.1:8000/chat?q=How+do+streams+fail%3F'
"""

import os

import anthropic
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError

from streamscope import AnthropicInstrumentor
from streamscope.serve import DeadlineMiddleware, bad_request, relay

AnthropicInstrumentor().instrument()
simulated = {"base_url": os.environ.get("SIMULATOR_URL", "http://127.0.0.1:8765"), "api_key": "simulated"}
client = anthropic.AsyncAnthropic(**({} if os.environ.get("ANTHROPIC_API_KEY") else simulated))
app = FastAPI(exception_handlers={RequestValidationError: bad_request})
app.add_middleware(DeadlineMiddleware)


@app.get("/chat")
async def chat(request: Request, q: str, model: str = "claude-sonnet-4-5"):
    return await relay(request, lambda: client.messages.stream(
        model=model, max_tokens=1024, messages=[{"role": "user", "content": q}]))
