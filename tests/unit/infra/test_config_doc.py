"""infra/rtrl.toml documents every key of `RtrlConfig` once, from the fields themselves: every field has a
description, the checked-in file is exactly what `python -m infra.config_doc --write` makes now (so a new or changed
field without regeneration fails here, naming the command), every key is in it (unset ones commented out), and it
loads to exactly the classes' defaults."""

from __future__ import annotations

import difflib
import re
import tomllib

import pytest
from pydantic import Field

from infra import cli
from infra.config import DEFAULT_CONFIG, RtrlConfig, load_config
from infra.config_doc import REGENERATE, field_keys, main, render, undocumented


def _commented_keys(text: str) -> set[str]:
    """Dotted keys written `# key = <type>` (unset by default), by the table they sit in."""
    keys, table = set(), ""
    for line in text.splitlines():
        if m := re.match(r"^\[([^\]]+)\]$", line):
            table = m.group(1) + "."
        elif m := re.match(r"^# ([A-Za-z0-9_-]+) = <.+>$", line):
            keys.add(table + m.group(1))
    return keys


def _present(data: dict, key: str) -> bool:
    node = data
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def test_every_field_has_a_description():
    missing = undocumented()
    assert missing == [], ("these keys have no description: give each one on its Field (a section may use its "
                           f"class's docstring), then run `{REGENERATE}`: {', '.join(missing)}")


def test_the_checked_in_file_is_what_the_generator_makes_now():
    have, want = DEFAULT_CONFIG.read_text(), render()
    if have != want:
        diff = difflib.unified_diff(have.splitlines(), want.splitlines(), "infra/rtrl.toml (checked in)",
                                    "infra/rtrl.toml (generated now)", lineterm="", n=1)
        pytest.fail(f"infra/rtrl.toml is out of date with the config classes: run `{REGENERATE}` and commit it.\n"
                    + "\n".join(list(diff)[:60]))


def test_every_key_of_the_config_is_in_the_file():
    text = DEFAULT_CONFIG.read_text()
    data, commented = tomllib.loads(text), _commented_keys(text)
    missing = [key for key, _ in field_keys() if not _present(data, key) and key not in commented]
    assert missing == [], f"keys missing from infra/rtrl.toml (run `{REGENERATE}`): {', '.join(missing)}"


def test_the_file_loads_to_exactly_the_defaults():
    assert load_config(DEFAULT_CONFIG) == RtrlConfig()
    assert RtrlConfig.model_validate(tomllib.loads(render())) == RtrlConfig()   # the generator's own output


def test_a_new_field_appears_with_its_description_and_one_without_is_reported():
    class Grown(RtrlConfig):
        later: int = Field(default=3, ge=1, description="A key added later.")
        unset: bool | None = Field(default=None, description="Auto unless set.")
        bare: str = "x"

    text = render(Grown)
    assert "# A key added later. [>= 1]\nlater = 3\n" in text
    assert "# Auto unless set.\n# unset = <true | false>\n" in text      # None: commented out, with its type
    assert "\nbare = \"x\"\n" in text and undocumented(Grown) == ["bare"]
    assert Grown.model_validate(tomllib.loads(text)) == Grown()


def test_sections_come_in_declaration_order_with_sub_tables_after_their_keys():
    tables = re.findall(r"^\[([^\]]+)\]$", render(), flags=re.M)
    top = [t for t in tables if "." not in t]
    assert top == [name for name, _ in field_keys() if "." not in name and name in tables]
    assert tables.index("gate.users") > tables.index("gate") and tables.index("gate.users.guardrails") == \
        tables.index("gate.users") + 1
    assert {"beam", "mlflow.server", "ab.monitors"} <= set(tables)


def test_the_commands_write_the_same_document(tmp_path, capsys):
    assert main(["--write", str(tmp_path / "a.toml")]) == 0
    assert cli.main(["--set", "kafka.port=29092", "config", "--write-defaults", str(tmp_path / "b.toml")]) == 0
    assert (tmp_path / "a.toml").read_text() == (tmp_path / "b.toml").read_text() == render()   # defaults, not --set
    assert main([]) == 0 and capsys.readouterr().out.endswith(render())
