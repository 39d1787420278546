"""Placeholder while this benchmark is being written (issue 40); replaced before the work lands."""


def add_arguments(parser) -> None:
    pass


def run(args, cfg, log):
    raise SystemExit("not built yet")
