"""One module per `rtrl` subcommand; each exposes handlers `(args, cfg) -> exit code`."""
