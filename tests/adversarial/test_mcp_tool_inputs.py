"""Hostile tool arguments: a model asks the science MCP server for a file outside the run's data
(by path, ``..`` or a symlink planted in the data folder) or hands it a "model form" that is
code. Each is refused with the reason; nothing is read, written or evaluated."""
from __future__ import annotations

import pytest

from engine.mcp_servers import science


@pytest.mark.parametrize("model", ["__import__('os').system('id')", "x.real", "a*x if x else 0", "[a for a in x]",
                                   "open('f')", "9" * 400 + "*x*a", "exp"])
def test_hostile_model_forms_are_refused_not_evaluated(confined, model):
    with pytest.raises(science.ToolInputError):
        science.fit_curve(model, x=[1, 2, 3, 4], y=[1, 2, 3, 4])


def test_paths_stay_inside_the_runs_data_even_through_a_symlink(confined):
    assert science.profile_data("data/train.csv")["rows"] == 40
    for path in ("heldout.csv", "../task/heldout.csv", "data/escape.csv", "/etc/passwd", "data/../heldout.csv"):
        with pytest.raises(science.ToolInputError, match="outside the data this run may read"):
            science.profile_data(path)


def test_a_plot_name_cannot_leave_the_output_folder_or_write_through_a_symlink(confined):
    out = confined / "out"
    out.mkdir()
    (out / "trap.html").symlink_to(confined / "task" / "heldout.csv")
    written = science.plot([1], [1], name="trap")["path"]
    assert written.endswith("trap-2.html") and (confined / "task" / "heldout.csv").read_text() == "x,y\n1,2\n"
    for name in ("../../evil", "a/b", ".hidden", "x" * 65):
        with pytest.raises(science.ToolInputError, match="file name"):
            science.plot([1], [1], name=name)
