"""One module per `rtrl` subcommand; each exposes handlers `(args, cfg) -> exit code`."""


def option_errors(error) -> str:
    """A pydantic ValidationError of settings a command took from its options, as `--key: message; ...`."""
    return "; ".join(f"--{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in error.errors())
