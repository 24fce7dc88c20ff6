"""The test child of the code grader and its audit hook, as source text that runs in the sandbox.

`grade_runner.runner_source()` inlines this file into `.rlyard/grade.py` (the runner must be one
file there); on the host it is imported like any module. CHILD runs pytest with no secret: its
report goes to the parent, which judges it against the twins that only the parent knows. GUARD,
inlined into CHILD, is the audit hook installed before any repository code runs.
"""

CHILD = r'''
def _child():
    global _child
    del _child  # the child's globals then hold nothing of the runner
    import json, os, sys
    config = json.loads(sys.stdin.read())
    null = os.open(os.devnull, os.O_RDONLY); os.dup2(null, 0); os.close(null)
    fd, root = config["fd"], os.path.realpath(os.getcwd())
    write, text_of = os.write, repr  # bound before any repository code runs; repr of dicts and strings is C code
    def send(obj):  # one Python literal a line: no json module function that repository code could replace
        data = memoryview((text_of(obj) + "\n").encode("utf-8", "surrogateescape"))
        while data:
            data = data[write(fd, data):]
    system = [os.path.realpath(p) for p in sys.path if p and os.path.isdir(p)]
    system = [p for p in system if p != root and not p.startswith(root + os.sep)]
    trusted = {os.path.realpath(os.path.join(root, p)) for p in config["trusted"]} | {os.path.realpath(config["self"])}
    refused = []
    def refuse(kind, detail):
        if len(refused) < 20:
            refused.append({"kind": kind, "detail": detail})
            send({"refused": refused[-1]})
    if not config.get("collect"):
        GUARD
    import importlib.machinery, importlib.metadata
    find = importlib.machinery.PathFinder.find_distributions
    def find_distributions(*args, **kwargs):  # a *.dist-info / *.egg-info in the workspace is invisible
        for dist in find(*args, **kwargs):
            where = os.path.realpath(str(getattr(dist, "_path", "") or ""))
            if not where or not (where == root or where.startswith(root + os.sep)):
                yield dist
    importlib.machinery.PathFinder.find_distributions = staticmethod(find_distributions)
    import pytest, _pytest.config
    plugins = sorted({ep.name for ep in importlib.metadata.entry_points(group="pytest11")})
    outcomes, collected, errors = {}, [], {}

    class Recorder:
        def pytest_runtest_logreport(self, report):
            if report.when == "call" or report.outcome != "passed":
                key = report.nodeid
                if report.when == "call" and hasattr(report, "wasxfail"):
                    outcomes[key] = "xfailed" if report.skipped else "xpassed"
                elif outcomes.get(key) in (None, "passed"):
                    outcomes[key] = report.outcome if report.when == "call" else report.when + "_" + report.outcome

        def pytest_collectreport(self, report):
            if report.outcome != "passed":
                key = report.nodeid or "<collection>"
                outcomes[key] = "collect_" + report.outcome
                if report.failed:
                    errors[key] = str(getattr(report, "longreprtext", report.longrepr))[-3000:]

        @pytest.hookimpl(trylast=True)
        def pytest_configure(self, config):
            check_internals("while pytest was configured", settle=True)

        def pytest_collection_finish(self, session):
            collected.extend(item.nodeid for item in session.items)
            check_internals("after collection")

    front = [os.path.join(root, p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    src = os.path.join(root, "src")
    if os.path.isdir(src) and any(n.endswith(".py") or os.path.isfile(os.path.join(src, n, "__init__.py")) for n in os.listdir(src)):
        front.append(src)
    folders = [*front, root]

    def workspace_module(name):
        """The file of module `name` where the workspace would supply it, else None."""
        for folder in folders:
            base = os.path.join(folder, *name.split("."))
            for path in (base + ".py", os.path.join(base, "__init__.py")):
                if os.path.isfile(path):
                    return os.path.realpath(path)
            if os.path.isdir(os.path.join(folder, name.split(".")[0])) or os.path.isfile(os.path.join(folder, name.split(".")[0] + ".py")):
                return os.path.join(folder, name)  # the package is the workspace's, the module is not a trusted file
        return None

    ours_plugins = {"no:cacheprovider", *plugins}
    preparse = _pytest.config.PytestPluginManager.consider_preparse
    def consider_preparse(self, args, *rest, **kwargs):  # -p from addopts: only trusted modules load
        kept, i = [], 0
        while i < len(args):
            opt, step = args[i], 1
            if isinstance(opt, str) and opt == "-p" and i + 1 < len(args):
                name, step = args[i + 1], 2
            elif isinstance(opt, str) and opt.startswith("-p") and len(opt) > 2:
                name = opt[2:]
            else:
                kept.append(opt); i += 1; continue
            where = None if name.startswith("no:") or name in ours_plugins or name in _pytest.config.builtin_plugins else workspace_module(name)
            if where is not None and where not in trusted:
                refuse("plugin", f"-p {name}: a plugin from the workspace named by the repository's pytest configuration")
            else:
                kept += args[i:i + step]
            i += step
        return preparse(self, kept, *rest, **kwargs)
    _pytest.config.PytestPluginManager.consider_preparse = consider_preparse

    for name in _pytest.config.default_plugins:  # import them now, so their state is in the snapshot
        try:
            __import__("_pytest." + name)
        except Exception:
            pass
    watched = [(n, m) for n, m in list(sys.modules.items()) if m is not None and (n in ("pytest", "pluggy", "_pytest") or n.startswith(("_pytest.", "pluggy.")))]
    snapshot = []
    for name, module in watched:
        snapshot.append((name, module, dict(vars(module)), dict(vars(module))))
        for value in list(vars(module).values()):
            if isinstance(value, type) and getattr(value, "__module__", None) == name:
                snapshot.append((name + "." + value.__qualname__, value, dict(vars(value)), dict(vars(value))))
    def origin(value):
        for attr in ("fget", "__func__", "func"):
            value = getattr(value, attr, None) or value
        code = getattr(value, "__code__", None)
        return getattr(code, "co_filename", None)
    def check_internals(when, settle=False):
        """pytest and pluggy as they were before any repository code ran; `settle`: at the end of
        pytest's configuration, where pytest's own plugins (legacypath) may have added Python functions."""
        changed = []
        for name, owner, first, before in snapshot:
            now = vars(owner)
            for key in set(before) | set(now):
                old, new = before.get(key), now.get(key)
                if old is not new and new is not first.get(key) and (callable(old) or callable(new) or isinstance(new, (staticmethod, classmethod, property))):
                    if settle and new is not None and origin(new) and any(origin(new).startswith(p + "/") for p in system):
                        before[key] = new
                    else:
                        changed.append(f"{name}.{key}")
        if changed:
            refuse("patched", f"pytest internals changed {when}: {', '.join(sorted(changed)[:5])}")

    # pytest's own dependencies were imported from the sandbox's Python before the workspace joined
    # sys.path; where the workspace has its own copy (a repository that is pluggy), the tests get it.
    sys.path[:0] = folders
    ours = set()
    for folder in folders:
        for name in (os.listdir(folder) if os.path.isdir(folder) else []):
            if name.endswith(".py") or os.path.isfile(os.path.join(folder, name, "__init__.py")):
                ours.add(name[:-3] if name.endswith(".py") else name)
    ours -= {*sys.stdlib_module_names, "pytest", "_pytest", "py"}
    for name in [m for m in sys.modules if m.split(".")[0] in ours]:
        del sys.modules[name]
    args = ["-q", "-p", "no:cacheprovider", *[a for p in plugins for a in ("-p", p)], "--rootdir", root,
            *(["--collect-only"] if config.get("collect") else []), *config["args"]]
    code = pytest.main(args, plugins=[Recorder()])
    check_internals("by the end of the run")
    send({"report": {"exit": int(code), "outcomes": outcomes, "collected": collected, "errors": errors, "refused": refused}})
    os.close(fd)
_child()
'''

# The audit hook (inlined into CHILD at GUARD): it judges a frame by its file, trusted when it is the
# sandbox's Python (the sys.path of a `-I` interpreter, before the workspace joins) or a file the grader
# wrote (hidden tests, reset conftests); everything else (the workspace, /tmp, exec'd text) is not.
GUARD = r'''
import _thread
get_ident, getframe, lstat, readlink, getcwd = _thread.get_ident, sys._getframe, os.lstat, os.readlink, os.getcwd
_str, _bytes, _int, _any, _isinstance, _len, _reversed, _RuntimeError, _PermissionError, _OSError = (
    str, bytes, int, any, isinstance, len, reversed, RuntimeError, PermissionError, OSError)
main_thread, busy, seen = get_ident(), set(), {}
PROVIDERS = ("/inspect.py", "/traceback.py", "/pdb.py", "/bdb.py")
STRICT = {"gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames", "sys.settrace", "sys.setprofile",
          "sys._settraceallthreads", "sys._setprofileallthreads", "sys.monitoring.register_callback", "sys.addaudithook"}
FRAMES = {"tb_frame", "gi_frame", "cr_frame", "ag_frame"}
MODULES = {"ctypes", "_ctypes", "_testcapi", "_testinternalcapi", "_xxsubinterpreters"}
WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
PATHS = ("os.rename", "os.remove", "os.rmdir", "os.truncate", "os.link", "os.symlink", "shutil.rmtree", "os.utime")
def resolve(path):
    # realpath by hand: repository code may replace os.path's functions, not the C ones bound above
    if not path.startswith("/"):
        path = getcwd() + "/" + path
    todo, out, hops = [p for p in _reversed(path.split("/"))], [], 0
    while todo:
        part = todo.pop()
        if part in ("", "."):
            continue
        if part == "..":
            out = out[:-1]
            continue
        here = "/" + "/".join(out + [part])
        try:
            link = lstat(here).st_mode & 0o170000 == 0o120000
        except _OSError:
            link = False
        if link and hops < 40:
            hops += 1
            target = readlink(here)
            out = [] if target.startswith("/") else out
            todo += [p for p in _reversed(target.split("/"))]
        else:
            out.append(part)
    return "/" + "/".join(out)
trusted = {resolve(p) for p in trusted}
system = [resolve(p) for p in system]
ancestors = set()
for p in trusted:
    while p.startswith(root + "/"):
        p = p.rsplit("/", 1)[0]
        ancestors.add(p)
def is_trusted(filename):
    known = seen.get(filename)
    if known is None:
        if filename.startswith("<frozen "):
            known = True
        elif filename.startswith("<"):
            known = False
        else:
            path = resolve(filename)
            known = path in trusted or _any(path.startswith(p + "/") for p in system)
        seen[filename] = known
    return known
def guarded(path):
    if _isinstance(path, _bytes):
        path = path.decode("utf-8", "surrogateescape")
    if not _isinstance(path, _str):
        return False  # an fd, or a path object whose own code would run here
    path = resolve(path)
    inside = path == root or path.startswith(root + "/")
    return path in trusted or path in ancestors or (inside and "__pycache__" in path.split("/"))
def hook(event, args):
    if event == "open":
        if not ((_isinstance(args[1], _str) and _any(c in args[1] for c in "wax+")) or (_isinstance(args[2], _int) and args[2] & WRITES)):
            return
    elif event not in WATCH:
        return
    if event == "object.__getattr__" and args[1] not in FRAMES or event == "import" and args[0] not in MODULES:
        return
    me = get_ident()
    if me in busy:
        return
    busy.add(me)
    try:
        caller = getframe(1)
        where = f"{caller.f_code.co_filename}:{caller.f_lineno}"
        if event == "open" or event in PATHS:
            paths = args[:2] if event in ("os.rename", "os.link") else args[1:2] if event == "os.symlink" else args[:1]
            if _any(guarded(p) for p in paths):
                refuse("write", f"{event} {paths[-1]} at {where}")
                raise _PermissionError(f"rlyard grader: {event} of a graded file or of bytecode is refused")
            return
        if event in ("compile", "code.__new__"):
            name = args[1]
            looks_trusted = _isinstance(name, _str) and (name.startswith("<frozen ") or not name.startswith("<") and is_trusted(name))
            if not looks_trusted or caller.f_code.co_filename.startswith("<frozen "):
                return
            if is_trusted(caller.f_code.co_filename) and me == main_thread:
                return
            refuse("introspection", f"{event} of code named {name} at {where}")
            raise _RuntimeError("rlyard grader: code under a trusted file name is refused")
        strict = event in STRICT or event == "import" or event.startswith("ctypes.")
        frame = caller
        while frame is not None and is_trusted(frame.f_code.co_filename) and (  # a workspace inspect.py is no provider
                frame.f_code.co_filename.endswith(PROVIDERS) or frame.f_code.co_filename.startswith("<frozen importlib")
                or (event.startswith("ctypes.") and "/ctypes/" in frame.f_code.co_filename)):
            frame = frame.f_back
        bad = frame is not None and not is_trusted(frame.f_code.co_filename)
        if strict and not bad and (event in STRICT or me != main_thread):
            bad = me != main_thread
            walk = caller
            while walk is not None and not bad and event in STRICT:
                bad = not is_trusted(walk.f_code.co_filename)
                walk = walk.f_back
        if bad:
            what = f"{event} {args[1]}" if event == "object.__getattr__" else f"import {args[0]}" if event == "import" else event
            refuse("introspection", f"{what} from {where}")
            raise _RuntimeError(f"rlyard grader: {what} is refused to repository code")
    finally:
        busy.discard(me)
WATCH = STRICT | {"sys._getframe", "sys._getframemodulename", "object.__getattr__", "import", "compile", "code.__new__", *PATHS,
                  "ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.cdata", "ctypes.cdata/buffer", "ctypes.addressof",
                  "ctypes.string_at", "ctypes.wstring_at", "ctypes.call_function", "ctypes.PyObj_FromPtr", "ctypes.get_errno", "ctypes.set_errno"}
sys.addaudithook(hook)
'''
