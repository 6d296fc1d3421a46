"""The fleet's shared state on Redis (extra `streamscope[redis]`): what every worker of a service
shares, the resume buffer's generations and the breakers' state, and how an outage of the store
is survived (`link`): each part falls back to what one worker can do alone, says so once, counts
each failed operation, and comes back by itself.
"""
