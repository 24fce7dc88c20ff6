"""Architecture rules from STYLE.md, checked on the source: layering and module size."""
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "rlyard"


def modules() -> list[Path]:
    """The package's own modules; task data (the code family's built-in repositories) is not code of rlyard."""
    return [p for p in PACKAGE.rglob("*.py") if "builtin" not in p.relative_to(PACKAGE).parts]


def imports_of(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_algos_import_only_torch_and_the_standard_library():
    for path in (PACKAGE / "algos").rglob("*.py"):
        for name in imports_of(path):
            top = name.split(".")[0]
            allowed = top in ("torch", "__future__") or top in sys.stdlib_module_names or name.startswith("rlyard.algos")
            assert allowed, f"{path.relative_to(PACKAGE)} imports {name}"


def test_learner_never_imports_orchestration_or_engines():
    for path in (PACKAGE / "train").rglob("*.py"):
        for name in imports_of(path):
            assert not name.startswith(("rlyard.orchestrate", "rlyard.engines", "rlyard.cli")), f"{path.name} imports {name}"


def test_modules_stay_small():
    for path in modules():
        lines = len(path.read_text().splitlines())
        assert lines <= 500, f"{path.relative_to(PACKAGE)} has {lines} lines (budget 500)"


def test_package_depth_at_most_three_folders():
    for path in modules():
        assert len(path.relative_to(PACKAGE).parts) <= 4, path


def test_no_tracked_file_names_a_folder_of_this_machine():
    """Code, docs and result files are read on other machines: none names the checkout's parent
    folder or the home folder (a generated summary once quoted its run folder's absolute path).
    A parent shared by everyone (/tmp, /home, ...) is not checked, the checkout's own path is."""
    import subprocess

    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    home = str(Path.home())
    shared = ("/", "/tmp", "/var/tmp", "/home", "/opt", "/srv", "/mnt")  # a checkout's parent here names nobody's machine
    machine_paths = [str(ROOT) + "/", *([str(ROOT.parent) + "/"] if str(ROOT.parent) not in shared else []),
                     *([home + "/"] if home not in ("/", "") else [])]
    found = []
    for name in tracked:
        path = ROOT / name
        if not path.is_file() or path.stat().st_size > 5_000_000:
            continue
        text = path.read_bytes().decode("utf-8", errors="ignore")
        found += [f"{name}: {prefix}" for prefix in machine_paths if prefix in text]
    assert not found, found
