"""The core: what one streamed call is, whatever the provider.

recorder (clocks, gaps, phases: the hot path) → record (immutable) → classifier (a pure
function). Beside them: the span attribute names, the caller's context (`deadline()`, `route()`),
the one exception raised into user code, content capture, and the guard that keeps
streamscope's own failures out of the host. The core imports no other layer of streamscope.
"""
