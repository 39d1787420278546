"""The steps' preload (infra/orchestrator/preload.py): the foreground modules are imported before the background
thread starts (the caller imports them next: two threads initialising a circular package fail), without DeepSpeed."""

from __future__ import annotations

import sys
import threading

from infra.orchestrator.preload import preload_in_background


def _module(tmp_path, name: str, body: str = "") -> str:
    (tmp_path / f"{name}.py").write_text(body)
    return name


def test_foreground_modules_are_imported_before_the_call_returns_and_the_rest_in_a_thread(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    release = threading.Event()
    monkeypatch.setitem(sys.modules, "rtrl_test_gate", type(sys)("rtrl_test_gate"))
    sys.modules["rtrl_test_gate"].release = release
    fg = _module(tmp_path, "rtrl_test_fg")
    bg = _module(tmp_path, "rtrl_test_bg", "import rtrl_test_gate\nrtrl_test_gate.release.wait(30)\n")
    for name in (fg, bg):
        monkeypatch.delitem(sys.modules, name, raising=False)
    lines: list[str] = []
    thread = preload_in_background(lines.append, modules=(bg,), foreground=(fg,))
    assert fg in sys.modules and thread.is_alive()      # the background import is still waiting
    assert lines == ["[steps] 1 libraries imported in " + lines[0].rsplit(" ", 1)[1]]   # no DeepSpeed in front
    release.set()
    thread.join(30)
    assert bg in sys.modules and not thread.is_alive()
