"""The circuit breaker, whole: a provider and model in trouble get no more calls for a while.

`circuit.py` is the breaker of one process (its settings, `BreakerTable`, and the state machine,
`Breakers`, fed by each call's end); `shared.py` is how that breaker follows a state the fleet
shares without ever waiting on it; `redis_store.py` is the one such store (`RedisStore`, public
as `streamscope.serve.RedisStore`, the only module here that needs Redis: imported lazily).
"""

from .circuit import Breaker, BreakerFileError, Breakers, BreakerTable, CircuitOpen, Key, StateName, Ticket, verdict

__all__ = ["Breaker", "BreakerFileError", "BreakerTable", "Breakers", "CircuitOpen", "Key", "StateName", "Ticket",
           "verdict"]
