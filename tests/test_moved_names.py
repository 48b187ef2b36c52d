"""The names `verdictgate.frameworks` exported until 0.1.0 still import, for one release, each
with a DeprecationWarning naming its new place in `verdictgate`."""

from __future__ import annotations

import subprocess
import sys

import pytest

import verdictgate
from verdictgate.frameworks import MOVED


@pytest.mark.parametrize("name", MOVED)
def test_an_old_framework_import_warns_once_and_gives_the_public_name(name):
    code = (
        "import warnings\n"
        "import verdictgate\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        f"    from verdictgate.frameworks import {name} as old\n"
        f"    again = verdictgate.frameworks.{name}\n"
        f"assert old is again is verdictgate.{name}\n"
        "for warning in caught:\n"
        "    print(warning.category.__name__, warning.filename, warning.message)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"DeprecationWarning <string> verdictgate.frameworks.{name} is now verdictgate.{name} "
        f"(`from verdictgate import {name}`); the old name goes in the next release"
    ]


def test_every_moved_name_is_public_and_no_other_name_is_found():
    assert set(MOVED) <= set(verdictgate.__all__)
    with pytest.raises(ImportError):
        exec("from verdictgate.frameworks import from_crew_of_nobody", {})
