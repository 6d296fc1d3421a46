"""One module per `streamscope` subcommand: `add_arguments(parser)` and `run(args) -> int`."""
