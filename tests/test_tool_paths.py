"""File tools refuse paths outside the workspace: through `..`, an absolute path, or a link out."""
import pytest

from rlyard.agent.tools import ToolBox
from rlyard.sandbox import Sandbox


@pytest.fixture
def tools(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    return ToolBox(Sandbox(tmp_path), timeout_s=20), tmp_path


@pytest.mark.parametrize("path", ["../../../tmp/evil.py", "/tmp/evil.py", "/etc/passwd", "pkg/../../x.py", "out/x.py"])
def test_file_tools_refuse_paths_outside_the_workspace(tools, path):
    box, root = tools
    box.sandbox.run("ln -s /tmp out")  # a link inside the workspace that points out of it
    for name, args in [("write_file", {"content": "1"}), ("read_file", {}), ("edit_file", {"old_text": "a", "new_text": "b"}),
                       ("grep", {"pattern": "root"})]:
        out = box.call(name, {"path": path, **args})
        assert out.error and "outside the workspace" in out.content, (name, path, out.content)
    assert "wrote" not in box.call("write_file", {"path": path, "content": "1"}).content
    assert not box.sandbox.run("ls /tmp/evil.py").exit_code == 0


def test_glob_stays_inside_and_relative_paths_still_work(tools):
    box, root = tools
    assert box.call("glob", {"pattern": "../*"}).error and box.call("glob", {"pattern": "/etc/*"}).error
    assert box.call("write_file", {"path": "pkg/b.py", "content": "y = 2\n"}).content.startswith("wrote 6 characters")
    assert (root / "pkg" / "b.py").read_text() == "y = 2\n"
    assert "1\tx = 1" in box.call("read_file", {"path": "./pkg/a.py"}).content
    assert "pkg/a.py:1:x = 1" in box.call("grep", {"pattern": "x =", "path": "pkg"}).content
    assert "pkg/a.py" in box.call("glob", {"pattern": "**/*.py"}).content
