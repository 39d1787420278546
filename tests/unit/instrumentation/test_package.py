import pytest
"""The package's public names, imported lazily so that loading the config (the CLI) stays light."""

import subprocess
import sys
from pathlib import Path

import instrumentation

REPO = Path(__file__).parents[3]


def test_public_api_names_resolve():
    for name in instrumentation.__all__:
        assert callable(getattr(instrumentation, name)), name


@pytest.mark.integration
def test_importing_the_package_and_its_config_imports_no_schemas_or_arrow():
    code = ("import sys, instrumentation, instrumentation.config; "
            "print([m for m in ('schemas', 'pyarrow', 'kafka') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_unknown_name_is_an_attribute_error():
    try:
        instrumentation.NoSuchThing  # noqa: B018
    except AttributeError as e:
        assert "NoSuchThing" in str(e)
    else:
        raise AssertionError("expected AttributeError")
