"""In-sandbox test runner of the codefix verifier (runs as uid 65534, inside bubblewrap).

Loaded BEFORE any agent code. It only reports observations, never verdicts: each hidden case's
return value is serialised by :func:`encode` (exact built-in types only, so an always-equal object
or an ``int`` subclass cannot pass for a value) and written as a JSON line to a pipe the verifier
opened (``argv[1]`` is its fd). Expected values never enter the sandbox: the verifier compares
outside, in its own process. Pytest runs with the verifier's ini, no cache, no conftest, no
terminal reporter (so any "PASSED" text in the output was printed by someone else).
"""

import json
import os
import sys

_FD = int(sys.argv[1]) if __name__ == "__main__" else -1


def encode(v, depth=0):
    """Canonical, type-exact JSON form of a return value; anything else becomes a type marker."""
    t = type(v)
    if depth > 20:
        return {"!": "too_deep"}
    if t is bool:  # tagged: JSON true == 1 after decoding
        return {"b": v}
    if v is None or t in (int, str):
        return v
    if t is float:
        return {"f": repr(v)}
    if t is list:
        return [encode(x, depth + 1) for x in v]
    if t is tuple:
        return {"t": [encode(x, depth + 1) for x in v]}
    if t is dict and all(type(k) is str for k in v):
        return {"d": {k: encode(x, depth + 1) for k, x in sorted(v.items())}}
    return {"!": f"{t.__module__}.{t.__qualname__}"}


def _send(rec):
    os.write(_FD, (json.dumps(rec) + "\n").encode())


class _Plugin:
    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.outcome != "passed":
            _send({"kind": "report", "nodeid": report.nodeid, "when": report.when, "outcome": report.outcome})

    def pytest_collectreport(self, report):
        if report.outcome != "passed":
            _send({"kind": "collect_error", "nodeid": report.nodeid, "text": str(report.longrepr)[-1500:]})


def emit(cid, thunk):
    """The generated hidden test module's channel (it reads ``__main__.emit``: this script)."""
    try:
        _send({"kind": "case", "id": cid, "value": encode(thunk())})
    except BaseException as e:  # noqa: B036 -- SystemExit and pytest.skip are observations too
        _send({"kind": "case", "id": cid, "exc": type(e).__name__})


def main():
    _send({"kind": "ready", "pid": os.getpid()})
    sys.path.insert(0, "/work")
    import pytest

    args = [
        "-c",
        "/verifier/pytest.ini",
        "--rootdir=/verifier",
        "-p",
        "no:cacheprovider",
        "--noconftest",
        "-p",
        "no:terminal",
        "-o",
        "addopts=",
        "-s",
        "/verifier/test_hidden.py",
    ]
    rc = pytest.main(args, plugins=[_Plugin()])
    _send({"kind": "end", "rc": int(rc)})


if __name__ == "__main__":
    main()
