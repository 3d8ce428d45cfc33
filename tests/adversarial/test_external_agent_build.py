"""Issue 37, item 5: building an external agent installed its requirements.txt with the host's pip,
which builds a source distribution, a local folder or a URL by running its setup.py: on the host,
as root, with the Docker socket in reach. Wheels alone are installed now; every other line is
refused by name and nothing of it runs."""
from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest

from engine.errors import TrellisError
from engine.external.build import _install, checked_requirements
from engine.external.spec import load_agent

ROOT = Path(__file__).resolve().parents[2]
SETUP = """from setuptools import setup
open({marker!r}, "w").write("setup.py ran on the host")
setup(name="evil", version="1.0")
"""


@pytest.fixture
def agent_folder(tmp_path):
    folder = tmp_path / "agent"
    shutil.copytree(ROOT / "external_agents" / "data-profiler", folder)
    evil = tmp_path / "evil"
    evil.mkdir()
    marker = tmp_path / "pwned"
    (evil / "setup.py").write_text(SETUP.format(marker=str(marker)))
    return folder, evil, marker


@pytest.mark.parametrize("line", ["{evil}", "evil @ file://{evil}", "-e {evil}", "--index-url http://127.0.0.1:9/simple",
                                  "-r /etc/passwd", "./evil"])
def test_a_requirement_that_would_run_setup_py_is_refused_and_nothing_runs(agent_folder, tmp_path, line):
    folder, evil, marker = agent_folder
    (folder / "requirements.txt").write_text("tabulate==0.9.0\n" + line.format(evil=evil) + "\n")
    with pytest.raises(TrellisError, match="requirements.txt: line 2"):
        _install(load_agent(folder), tmp_path / "site", io.StringIO())
    assert not marker.exists()


def test_plain_requirements_by_name_are_taken(agent_folder):
    folder, _, _ = agent_folder
    (folder / "requirements.txt").write_text("# comment\ntabulate==0.9.0  # tables\nnumpy>=1.20; python_version>'3'\n")
    assert checked_requirements(load_agent(folder)) == ["tabulate==0.9.0", 'numpy>=1.20; python_version > "3"']
