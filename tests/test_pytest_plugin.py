"""The pytest plugin, run as a user runs it: pytest in a subprocess on the example tests (the
stable router passes, the flipping one fails with its headline), the JUnit XML carrying each
gated test's status, the same under pytest-xdist, and inconclusive runs as configured."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def pytest_run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def statuses(junit: Path) -> dict[str, str]:
    """Test name -> its verdictgate.status property."""
    found = {}
    for case in ElementTree.parse(junit).iter("testcase"):
        for prop in case.iter("property"):
            if prop.get("name") == "verdictgate.status":
                found[case.get("name")] = prop.get("value")
    return found


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist-2"])
def test_the_example_tests_pass_for_the_stable_router_and_fail_for_the_flipping_one(
    tmp_path, workers
):
    junit = tmp_path / "junit.xml"
    done = pytest_run(
        "test_stable_router.py",
        "test_flipping_router.py",
        *workers,
        f"--junitxml={junit}",
        cwd=EXAMPLES,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 failed, 1 passed" in done.stdout
    assert "verdictgate: Rejected: the pooled change rate is above 5%" in done.stdout
    assert (
        "reason pooled_stochastic" in done.stdout
        and "next: Make route card_security" in done.stdout
    )
    summary = done.stdout.split("= verdictgate =", 1)[1]
    assert (
        "qualified    examples/test_stable_router.py::test_the_stable_router_is_admitted" in summary
    )
    assert "rejected     examples/test_flipping_router.py::" in summary
    assert statuses(junit) == {
        "test_the_stable_router_is_admitted": "qualified",
        "test_the_flipping_router_is_admitted": "rejected",
    }


INCONCLUSIVE_TEST = textwrap.dedent(
    """
    import pytest

    import verdictgate

    ROUTES = ["approve", "deny"]
    TRIALS = [verdictgate.Trial(f"c{c}", i, ROUTES[c], "r", ROUTES[c])
              for c in range(2) for i in range(2)]  # two pairs: too few to decide


    def test_default(verdict_gate):
        verdict_gate.assess(TRIALS)


    @pytest.mark.verdictgate(inconclusive="pass")
    def test_marked_to_pass(verdict_gate):
        assert verdict_gate.assess(TRIALS).status.value == "inconclusive"
    """
)


@pytest.mark.parametrize(
    ("args", "outcome"),
    [
        ([], "1 failed, 1 passed"),
        (["--verdictgate-inconclusive=pass"], "2 passed"),
        (["-o", "verdictgate_inconclusive=pass"], "2 passed"),
    ],
    ids=["fails-by-default", "option", "ini"],
)
def test_an_inconclusive_run_fails_its_test_unless_told_otherwise(tmp_path, args, outcome):
    (tmp_path / "test_small.py").write_text(INCONCLUSIVE_TEST)
    done = pytest_run("test_small.py", *args, cwd=tmp_path)
    assert outcome in done.stdout, done.stdout + done.stderr
    if "failed" in outcome:
        assert "test_default" in done.stdout and "verdictgate: Inconclusive" in done.stdout


def test_a_wrong_inconclusive_setting_is_a_usage_error(tmp_path):
    (tmp_path / "test_small.py").write_text(INCONCLUSIVE_TEST)
    done = pytest_run("test_small.py", "-o", "verdictgate_inconclusive=maybe", cwd=tmp_path)
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    assert "inconclusive must be one of fail, pass" in done.stdout + done.stderr


ODD_LABELS_TEST = textwrap.dedent(
    """
    import itertools

    import pytest

    import verdictgate
    from verdictgate import Case, Suite

    ODD = ["ro\\ud800ute", "nul\\x00", "x" * 4097, "emoji \\U0001F600", "\\udfff"]


    @pytest.mark.parametrize("label", ODD)
    def test_run(verdict_gate, label):
        suite = Suite(name="s" + label, cases=(Case("c" + label, "hello", "e" + label),))
        answers = itertools.cycle([label, "b" + label, label])
        verdict_gate.run(lambda text: next(answers), suite, repeats=6, run_id="r" + label)


    @pytest.mark.parametrize("label", ODD)
    def test_assess(verdict_gate, label):
        trials = [verdictgate.Trial("c" + label, i, [label, "b" + label][i % 2], "r", label)
                  for i in range(6)]
        verdict_gate.assess(trials, run_id="r" + label)
    """
)


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist-2"])
def test_labels_of_any_kind_never_crash_a_worker(tmp_path, workers):
    """Lone surrogates, NUL, a label past 4,096 characters, emoji: in a suite's names, a run
    id, an agent's answers or trials given whole, each gated test fails on its own, reported
    as any other, and no worker crashes (execnet sends UTF-8 only)."""
    (tmp_path / "test_odd.py").write_text(ODD_LABELS_TEST)
    done = pytest_run("test_odd.py", *workers, cwd=tmp_path)
    output = done.stdout + done.stderr
    assert "INTERNALERROR" not in output and "crashed" not in output, output[-3000:]
    assert "10 failed" in done.stdout, output[-3000:]
    assert (
        done.stdout.count("verdictgate: Rejected") + done.stdout.count("verdictgate: Inconclusive")
        >= 10
    )
