"""`relay()`'s options, checked at the call: a wrong value raises there, in one line (as any call
with a wrong argument does); `attempts` and `backoff` are the retry line's to check."""

from __future__ import annotations

import math

from streamscope.core.keywords import real_number, whole_number


def check_options(heartbeat: object, request_id: object, events: object, send_timeout: object,
                   resume: object, continuation: object, continuations: object) -> None:
    """A wrong value raises at the call, in one line (`attempts` and `backoff`: the retry line's)."""
    if not 0 < real_number("relay(heartbeat=...)", heartbeat, "seconds > 0") < math.inf:
        raise ValueError(f"relay(heartbeat=...) takes seconds > 0, not {heartbeat!r}")
    if request_id is not None and not isinstance(request_id, str):
        raise TypeError(f"relay(request_id=...) takes a str (or None: a random id), not {type(request_id).__name__}")
    if events is not None and not callable(events):
        raise TypeError(f"relay(events=...) takes a function from a provider event to (name, data) pairs "
                        f"(or None: text_events), not {type(events).__name__}")
    if send_timeout is not None and not real_number("relay(send_timeout=...)", send_timeout,
                                                    "seconds > 0 (or None: no limit)") > 0:
        raise ValueError(f"relay(send_timeout=...) takes seconds > 0 (or None: no limit), not {send_timeout!r}")
    if continuation is not None and not callable(continuation):
        raise TypeError(f"relay(continuation=...) takes a function from the partial text to a new stream "
                        f"(or None: no continuation), not {type(continuation).__name__}")
    if whole_number("relay(continuations=...)", continuations, "a whole number") < 0:
        raise ValueError(f"relay(continuations=...) takes a whole number >= 0, not {continuations!r}")
    if resume is not None and not all(callable(getattr(resume, name, None)) for name in ("start", "find")):
        raise TypeError(f"relay(resume=...) takes a MemoryBuffer() or RedisBuffer(url) (or None: no resume), "
                        f"not {type(resume).__name__}")
