"""One module per `rtrl` subcommand: `add_parser(subparsers)` adds its command(s) and their arguments (cheap: no
heavy import at module level), handlers `(args, cfg) -> exit code` run them (heavy imports inside)."""


def add_command(subparsers, name: str, handler, help: str, **kw):
    """Add `rtrl NAME` (its description is its help line) run by `handler`; the new subparser, for its arguments."""
    parser = subparsers.add_parser(name, help=help, description=help, **kw)
    parser.set_defaults(handler=handler)
    return parser


def option_errors(error) -> str:
    """A pydantic ValidationError of settings a command took from its options, as `--key: message; ...`."""
    return "; ".join(f"--{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in error.errors())
