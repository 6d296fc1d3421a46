"""One package per SDK: `adapters/<sdk>/`, named after the SDK's top-level package.

The core (`core.recorder`, `core.classifier`) and the exporters speak the GenAI conventions; an
adapter turns its SDK's requests, events and exceptions into those terms and nothing else. A
Stainless-generated SDK (`anthropic`, `openai`) shares its hooks in `stainless/` and only says
what is its own in a `Spec`. The helpers (`collect`, the retry line) find an adapter by the
SDK's package name (`providers.py`), so nothing below the adapters imports one. Adapters
import the core and the budgets, never the exporters or the pipeline: they see the pipeline only
as `core.calls.CallOpener`.
"""
