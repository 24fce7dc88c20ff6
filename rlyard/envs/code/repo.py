"""Repositories and patches on the host, before the policy touches anything.

Everything here runs on trusted data only (the task set, a user's mirror or working dir), never
on a workspace the policy has written to: git reads `.git/config`, hooks and attributes, so
running it on policy-controlled files would run policy-controlled commands. Grading therefore
never uses the workspace's git (see `verify.py`).
"""
from __future__ import annotations

import difflib
import io
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

GIT_ENV = {
    "GIT_AUTHOR_NAME": "rlyard", "GIT_AUTHOR_EMAIL": "rlyard@localhost", "GIT_COMMITTER_NAME": "rlyard",
    "GIT_COMMITTER_EMAIL": "rlyard@localhost", "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z", "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0",
}


class PatchError(ValueError):
    """A patch that does not apply to the files it should apply to (a broken task, not a policy error)."""


class RepoError(ValueError):
    """A repository that cannot serve as a task's base (missing, wrong commit, history past the base)."""


def git(*args: str, cwd: Path, stdin: bytes | None = None) -> bytes:
    env = {**os.environ, **GIT_ENV, "HOME": str(cwd)}
    proc = subprocess.run(["git", "-c", "core.hooksPath=/dev/null", "-c", "commit.gpgsign=false", *args],
                          cwd=cwd, input=stdin, capture_output=True, env=env)
    if proc.returncode != 0:
        raise RepoError(f"git {' '.join(args)} failed in {cwd}: {proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout


def write_files(root: Path, files: dict[str, str]) -> None:
    for relative, content in files.items():
        path = root / safe_relative(relative)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)


def safe_relative(path: str) -> str:
    """A repository-relative path, refused when it is absolute or climbs out with `..`."""
    parts = Path(path).parts
    if not path or Path(path).is_absolute() or ".." in parts:
        raise PatchError(f"path {path!r} leaves the repository")
    return path


def init_single_commit(root: Path) -> str:
    """Make `root` a git repository whose whole history is one commit: the base."""
    git("init", "-q", "-b", "main", cwd=root)
    git("add", "-A", cwd=root)
    git("commit", "-q", "--allow-empty", "-m", "base", cwd=root)
    return git("rev-parse", "HEAD", cwd=root).decode().strip()


def export_commit(mirror: Path, commit: str, dest: Path) -> None:
    """The tree of `commit` in a local mirror, written to `dest` without any history."""
    if not (mirror / ".git").exists() and not (mirror / "HEAD").exists():
        raise RepoError(f"mirror {mirror} is not a git repository")
    archive = git("archive", "--format=tar", commit, cwd=mirror)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4 / 3.12
            tar.extractall(dest, filter="data")
        else:  # Debian 12's 3.11.2: the same refusals by hand
            tar.extractall(dest, members=[_data_member(member, dest) for member in tar.getmembers()])


def _data_member(member: tarfile.TarInfo, dest: Path) -> tarfile.TarInfo:
    """`member` when tarfile's "data" filter would keep it: inside `dest`, no device, no link out."""
    root = dest.resolve()
    target = (root / member.name).resolve()
    if member.name.startswith("/") or not target.is_relative_to(root):
        raise RepoError(f"archive member {member.name!r} leaves the repository")
    if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
        raise RepoError(f"archive member {member.name!r} is a device or a fifo")
    if member.issym() and not (target.parent / member.linkname).resolve().is_relative_to(root):
        raise RepoError(f"archive member {member.name!r} links outside the repository")
    if member.islnk() and not (root / member.linkname).resolve().is_relative_to(root):
        raise RepoError(f"archive member {member.name!r} links outside the repository")
    member.mode &= 0o755  # no setuid / setgid / sticky bits, as the "data" filter
    return member


def commits_past(root: Path, base: str) -> list[str]:
    """Commits reachable from any ref or reflog that the base does not contain."""
    out = git("rev-list", "--all", "--reflog", "--not", base, cwd=root).decode().split()
    return out


def copy_workdir(source: Path, dest: Path, base: str | None) -> str:
    """A user's working dir (with or without .git) copied to `dest`; refused when its history
    reaches past the base, because the fix would then be readable from `git log`."""
    if not source.is_dir():
        raise RepoError(f"working dir {source} does not exist")
    shutil.copytree(source, dest, symlinks=True, dirs_exist_ok=True)
    if not (dest / ".git").exists():
        return init_single_commit(dest)
    head = git("rev-parse", "HEAD", cwd=dest).decode().strip()
    base = base or head
    later = commits_past(dest, base)
    if later:
        raise RepoError(f"{source}: history reaches past the base commit {base[:12]} ({len(later)} later commit(s), "
                        f"e.g. {later[0][:12]}); export the base tree without history, or remove those refs")
    return base


# ---------------------------------------------------------------- patches


_DIFF_GIT = re.compile(r"^diff --git a/(\S+) b/(\S+)$")


def touched_paths(patch: str) -> list[str]:
    """Every path a unified (git-style) patch creates, changes or deletes, in order."""
    paths: list[str] = []
    for line in patch.splitlines():
        match = _DIFF_GIT.match(line)
        names = list(match.groups()) if match else []
        if line.startswith(("--- a/", "+++ b/")):
            names = [line[6:].split("\t")[0].strip()]
        for name in names:
            if name not in paths:
                paths.append(safe_relative(name))
    return paths


def apply_patch(files: dict[str, str | None], patch: str) -> dict[str, str | None]:
    """The contents of the patch's paths after applying it to `files` (None: absent)."""
    paths = touched_paths(patch)
    if not paths:
        raise PatchError("the patch touches no file (is it a unified diff with a/ and b/ prefixes?)")
    with tempfile.TemporaryDirectory(prefix="rlyard-patch-") as tmp:
        root = Path(tmp)
        write_files(root, {p: c for p, c in files.items() if c is not None and p in paths})
        proc = subprocess.run(["git", "apply", "--whitespace=nowarn", "-"], cwd=root, input=patch.encode(),
                              capture_output=True, env={**os.environ, **GIT_ENV, "HOME": tmp})
        if proc.returncode != 0:
            raise PatchError(f"patch does not apply: {proc.stderr.decode(errors='replace').strip()}")
        return {p: (root / p).read_text() if (root / p).is_file() else None for p in paths}


def make_patch(old: dict[str, str | None], new: dict[str, str | None]) -> str:
    """A git-style unified diff from `old` to `new` (path -> text, None = absent)."""
    chunks = []
    for path in sorted(set(old) | set(new)):
        before, after = old.get(path), new.get(path)
        if before == after:
            continue
        header = [f"diff --git a/{path} b/{path}\n"]
        if before is None:
            header.append("new file mode 100644\n")
        elif after is None:
            header.append("deleted file mode 100644\n")
        lines = difflib.unified_diff((before or "").splitlines(keepends=True), (after or "").splitlines(keepends=True),
                                     "/dev/null" if before is None else f"a/{path}", "/dev/null" if after is None else f"b/{path}")
        chunks.append("".join(header) + "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                                                for line in lines))
    return "".join(chunks)
