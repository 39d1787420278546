"""A tiny stdlib test runner for hidden tests: runs in the sandbox, prints one JSON line per test id.

Why not pytest: its start-up (plugin discovery, assertion rewriting) costs more than the tests of a small task,
and the gate grades thousands of episodes. Standalone on purpose (copied into the grading dir; imports nothing
from the project). Usage, from the grading dir:

    python runner.py REPO_DIR TESTS_PARENT PER_TEST_SECONDS ID [ID ...]    (a nonce on stdin)

REPO_DIR becomes the working directory and the first entry of sys.path (tests import the repository's modules);
test files are loaded from TESTS_PARENT/<id's file>. Each result line is `@@<nonce> {"id", "outcome", "message"}`
with outcome passed | failed | error; the nonce arrives on stdin so the code under test cannot print a line
that passes for a result. A test id the runner never reports (the process was killed) counts as failed.
"""

import importlib.util
import json
import os
import signal
import sys
import traceback


class _TestTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise _TestTimeout("test timed out")


def _load(path, cache):
    if path not in cache:
        name = "_hidden_" + "".join(c if c.isalnum() else "_" for c in path)
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
            cache[path] = (module, None)
        except BaseException:  # the code under test may raise anything at import, SystemExit included
            cache[path] = (None, traceback.format_exc(limit=5))
    return cache[path]


def _callable(module, parts):
    obj = module
    for p in parts:
        obj = getattr(obj, p)
    if isinstance(obj, type) or not parts:
        raise AttributeError(f"{'::'.join(parts)} is not a test function")
    unittest = sys.modules.get("unittest")   # imported by the test module if it has TestCases (saves ~20 ms)
    owner = getattr(module, parts[0])
    if len(parts) == 2 and unittest and isinstance(owner, type) and issubclass(owner, unittest.TestCase):
        case = owner(parts[1])

        def run_case():
            result = unittest.TestResult()
            case.run(result)
            problems = result.errors + result.failures
            if problems:
                raise AssertionError(problems[0][1])
        return run_case
    if len(parts) == 2:   # a plain test class: a fresh instance per test, as pytest does
        return getattr(owner(), parts[1])
    return obj


def run_one(test_id, tests_parent, seconds, cache):
    file, *parts = test_id.split("::")
    module, error = _load(os.path.join(tests_parent, file), cache)
    if module is None:
        return "error", "import failed:\n" + error
    try:
        fn = _callable(module, parts)
    except AttributeError as e:
        return "error", f"no such test: {e}"
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        fn()
        return "passed", ""
    except AssertionError:
        return "failed", traceback.format_exc(limit=5)
    except _TestTimeout:
        return "failed", f"timed out after {seconds} s"
    except BaseException:
        return "error", traceback.format_exc(limit=5)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def main(argv):
    nonce = sys.stdin.readline().strip()
    repo, tests_parent, seconds, ids = argv[0], os.path.abspath(argv[1]), float(argv[2]), argv[3:]
    os.chdir(repo)
    sys.path.insert(0, os.getcwd())
    out = os.fdopen(os.dup(1), "w")   # results alone on stdout; whatever the tests print goes to stderr
    os.dup2(2, 1)
    signal.signal(signal.SIGALRM, _alarm)
    cache = {}
    for test_id in ids:
        outcome, message = run_one(test_id, tests_parent, seconds, cache)
        out.write(f"@@{nonce} " + json.dumps({"id": test_id, "outcome": outcome, "message": message[-2000:]}) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
