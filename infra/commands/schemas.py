"""`rtrl schemas export DIR | validate [FILE]`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from infra.commands import add_command


def add_parser(subparsers) -> None:
    schemas = add_command(subparsers, "schemas", main, "event schema tools")
    actions = schemas.add_subparsers(dest="schemas_command", metavar="ACTION", required=True)
    exp = actions.add_parser("export", help="write one JSON Schema per event type (and index.json) to DIR")
    exp.add_argument("dir")
    val = actions.add_parser("validate", help="validate JSON events (one per line) from FILE or stdin")
    val.add_argument("file", nargs="?", default="-")


def main(args, cfg) -> int:
    if args.schemas_command == "export":
        from schemas.jsonschema import export

        for path in export(Path(args.dir)):
            print(path)
        return 0
    from schemas import SchemaError, parse_wire

    stream = sys.stdin if args.file == "-" else open(args.file, encoding="utf-8")
    bad = 0
    with stream:
        for n, line in enumerate(stream, 1):
            if not line.strip():
                continue
            try:
                parse_wire(line)
            except SchemaError as e:
                bad += 1
                print(json.dumps({"line": n, **e.as_dict()}))
    return 1 if bad else 0
