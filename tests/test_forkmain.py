"""An isolated child does not import the main script again: the forkserver did, once (``daemon/forkmain.py``).

The main script here is a real file run by a real interpreter; each import of it appends a line to a
log, so the log counts who imported it: before ``forkmain``, every child did (CPython 3.11's
forkserver never preloads ``__main__``), now only the forkserver does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_SCRIPT = """
import os, sys
sys.path.insert(0, {root!r})
with open({log!r}, "a") as log:
    log.write(f"{{os.getpid()}} {{__name__}}\\n")

from monitor.daemon import isolate
from tests import isolate_targets as targets

if __name__ == "__main__":
    values = [isolate.run(targets.answer, 21, timeout_s=60).value for _ in range(3)]
    assert all(v is not None and v["value"] == 42 for v in values), values
    print(" ".join(str(v["pid"]) for v in values if v is not None))
"""


@pytest.mark.process
def test_children_find_the_main_script_already_imported_by_the_forkserver(tmp_path: Path) -> None:
    log = tmp_path / "imports.log"
    script = tmp_path / "main_script.py"
    script.write_text(textwrap.dedent(_SCRIPT.format(root=str(ROOT), log=str(log))))
    env = {k: v for k, v in os.environ.items() if k != "ONNXMON_FORKSERVER_MAIN"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    children = set(done.stdout.split())
    imports = [line.split() for line in log.read_text().splitlines()]
    main_pid = imports[0][0]
    assert imports[0][1] == "__main__"
    others = [pid for pid, name in imports[1:]]
    assert len(others) == 1, f"the main script was imported by {len(others)} other processes: {imports}"
    assert others[0] not in children and others[0] != main_pid, "the forkserver imported it, not a child"
    assert [name for _, name in imports[1:]] == ["__mp_main__"]  # its __main__ block did not run there
