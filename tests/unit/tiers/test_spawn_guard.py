"""The --fast tier's guard (tests/conftest.py) covers fixtures of every scope: a module- or session-scoped fixture
that starts a process or a service for a test without a spawning mark fails that test, naming it and the fixture,
while a marked test's fixture is let through. Run in-process by pytester on the guard itself, under this test's own
guard, so nothing is ever started here."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

FAST = "not integration and not slow and not full"   # the --fast tier's selection (infra/test.sh)


@pytest.fixture
def guarded(pytester):
    """A pytester dir whose conftest is the project's guard, with the project's spawning marks declared."""
    pytester.makeini("[pytest]\nmarkers =\n    integration: x\n    slow: x\n    full: x\n")
    pytester.makeconftest("from tests.conftest import (_unmarked_tests_start_no_process, pytest_fixture_setup,\n"
                          "                           pytest_runtest_protocol)\n")
    return pytester


def test_a_module_or_session_scoped_fixture_that_starts_a_process_fails_the_fast_tier(guarded):
    guarded.makepyfile(
        test_module_fixture="""
            import subprocess
            import pytest

            @pytest.fixture(scope="module")
            def server():
                subprocess.run(["true"])
                yield

            @pytest.mark.integration
            def test_marked(server):
                pass

            def test_unmarked(server):
                pass
        """,
        test_session_fixture="""
            import socket
            import pytest

            @pytest.fixture(scope="session")
            def service():
                with socket.socket() as s:
                    s.bind(("127.0.0.1", 0))
                    s.listen()
                    yield

            def test_unmarked_too(service):
                pass
        """)
    result = guarded.runpytest_inprocess("-p", "no:cacheprovider", "-m", FAST)
    result.assert_outcomes(errors=2, deselected=1)
    # the inner guard's words (this test's own guard would name this test instead)
    result.stdout.fnmatch_lines([
        "*test_module_fixture.py::test_unmarked (through its module-scoped fixture 'server') starts a process but "
        "carries none of the marks*",
        "*test_session_fixture.py::test_unmarked_too (through its session-scoped fixture 'service') listens on a "
        "socket but carries none of the marks*"], consecutive=False)


def test_a_marked_tests_wider_fixture_is_not_refused(guarded, request):
    """The inner guard lets the fixture of a marked test through: starting `true` then meets only this (unmarked)
    test's own guard, whose refusal names this test."""
    guarded.makepyfile(test_marked_fixture="""
        import subprocess
        import pytest

        @pytest.fixture(scope="module")
        def refusal():
            try:
                subprocess.run(["true"])
            except AssertionError as e:
                return str(e)

        @pytest.mark.integration
        def test_marked(refusal):
            assert refusal.startswith(%r), refusal
    """ % request.node.nodeid)
    guarded.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)
