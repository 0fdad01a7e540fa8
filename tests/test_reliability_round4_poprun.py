"""``poprun`` and ``xlgraph-run`` refuse what they cannot run as asked (issue 43: R6, R13).

Before the fix ``--num-instances 4294967297`` was accepted (``mpiexec`` wraps the count, one
instance ran while popdist reported 4294967297, rc 0), an unbalanced quote in
``--mpi-global-args`` ended in a bare ``ValueError: No closing quotation`` traceback, and a bad
``XLGRAPH_DIST_TIMEOUT`` was blamed on ``--timeout``, an option the user never gave.
"""

from __future__ import annotations

import pytest

from xlgraph.dist.poprun import poprun_command
from xlgraph.dist.run import mpiexec_command

RANGE = "must be a whole number from 1 to 2147483647"


def _refusal(launch, argv: list[str], capsys) -> str:
    """What the launcher says when it refuses ``argv`` (argparse's usage error, status 2)."""
    with pytest.raises(SystemExit) as info:
        launch(argv)
    assert info.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--num-instances", "--num-replicas", "--ipus-per-replica"])
@pytest.mark.parametrize("count", ["4294967297", str(10**30), "2147483648"])
def test_poprun_refuses_counts_mpiexec_would_wrap(flag, count, capsys):
    """R6: a count beyond mpiexec's int is an error naming the option and the range."""
    args = {"--num-instances": "1", "--num-replicas": "1", flag: count}
    said = _refusal(poprun_command, [*(x for kv in args.items() for x in kv), "python", "p.py"],
                    capsys)
    assert f"poprun: error: argument {flag}: {RANGE}, got '{count}'" in said


@pytest.mark.parametrize("flag", ["--num-instances", "--num-replicas", "--timeout"])
def test_xlgraph_run_refuses_counts_mpiexec_would_wrap(flag, capsys):
    args = {"--num-instances": "1", "--num-replicas": "1", "--timeout": "10", flag: "4294967297"}
    said = _refusal(mpiexec_command, [*(x for kv in args.items() for x in kv), "--mpiexec", "m",
                                      "prog"], capsys)
    assert f"xlgraph-run: error: argument {flag}: {RANGE}, got '4294967297'" in said


def test_the_largest_count_still_builds_its_command():
    command, _ = poprun_command(["--num-instances", "2147483647", "--num-replicas",
                                 "2147483647", "python", "p.py"])
    assert command[1:3] == ["-n", "2147483647"]


@pytest.mark.parametrize("flag", ["--mpi-global-args", "--mpi-local-args"])
def test_an_unbalanced_quote_names_its_option(flag, capsys):
    """R13: one line naming the option and its value, not a shlex traceback."""
    said = _refusal(poprun_command, ["--num-replicas", "1", flag, "-x A='b", "python3", "-c",
                                     "pass"], capsys)
    assert f"poprun: error: argument {flag}: No closing quotation in \"-x A='b\"" in said


def test_a_bad_timeout_variable_is_named_as_the_variable(capsys, monkeypatch):
    """R13: the timeout comes from XLGRAPH_DIST_TIMEOUT; the error names it, not --timeout."""
    monkeypatch.setenv("XLGRAPH_DIST_TIMEOUT", "abc")
    said = _refusal(poprun_command, ["--num-replicas", "1", "python", "x.py"], capsys)
    assert f"poprun: error: environment variable XLGRAPH_DIST_TIMEOUT: {RANGE}, got 'abc'" \
        in said
    assert "--timeout" not in said
    monkeypatch.setenv("XLGRAPH_DIST_TIMEOUT", "7")
    command, _ = poprun_command(["--num-replicas", "1", "python", "x.py"])
    assert command[command.index("XLGRAPH_DIST_TIMEOUT") + 1] == "7"
