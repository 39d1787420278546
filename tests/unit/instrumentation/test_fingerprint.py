"""Line fingerprints and file ids: stable, whitespace-insensitive, valid for the schemas, never the code itself."""

from hashlib import blake2b

import pytest

from instrumentation.fingerprint import file_id, line_fingerprint, line_fingerprints, normalize_line
from schemas.events import CodebaseSnapshot, Hunk
from tests.unit.instrumentation.factories import envelope


def test_normalize_line_strips_and_collapses_whitespace():
    assert normalize_line("  return   x +\t y  \n") == "return x + y"
    assert normalize_line(" \t ") == ""


def test_fingerprint_is_blake2b_64_of_the_normalized_line():
    assert line_fingerprint("  x  =  1 ") == blake2b(b"x = 1", digest_size=8).hexdigest()


def test_fingerprints_ignore_indentation_and_spacing_but_not_edits():
    a = line_fingerprints("def f(x):\n    return x + 1\n")
    assert a == line_fingerprints("def  f(x):\n\treturn x  +  1")
    assert a != line_fingerprints("def f(x):\n    return x + 2\n")


def test_blank_lines_have_no_fingerprint_and_repeats_are_kept_in_order():
    fps = line_fingerprints("a\n\n   \nb\na\r\n")
    assert fps == [line_fingerprint("a"), line_fingerprint("b"), line_fingerprint("a")]
    assert line_fingerprint("   ") is None


def test_fingerprints_are_valid_for_the_event_schemas():
    fps = line_fingerprints("import os\nprint('héllo')\n" + "x = 1\n" * 3)
    assert all(len(f) == 16 for f in fps)
    Hunk(old_start=0, old_count=0, new_fingerprints=fps)
    CodebaseSnapshot(**envelope(), file_id=file_id("src/app.py"), line_fingerprints=fps)


def test_fingerprints_carry_no_code():
    secret_line = "API_KEY = 'do-not-send-me'"
    assert all("do-not-send" not in f for f in line_fingerprints(secret_line))


def test_file_id_is_the_same_for_every_spelling_of_a_path():
    ids = {file_id(p) for p in ("src/app.py", "./src/app.py", "src//app.py", "src\\app.py", "/src/app.py",
                                "src/./app.py", "src/lib/../app.py")}
    assert len(ids) == 1


def test_file_id_differs_between_files_and_is_a_short_hash():
    a, b = file_id("src/app.py"), file_id("src/App.py")
    assert a != b and "app" not in a
    assert a == blake2b(b"src/app.py", digest_size=16).hexdigest()  # BLAKE2b-128 of the path, 32 hex digits


@pytest.mark.parametrize("bad", ["", "   ", ".", "..", "../etc/passwd", "a/../../b"])
def test_file_id_rejects_paths_outside_the_workspace(bad):
    with pytest.raises(ValueError):
        file_id(bad)
