"""A managed environment built from its lock: once, atomically, by one process at a time.

Built into a temporary folder beside its final place and renamed there only after the framework imported in it, so
a half-built environment (a failed install, a full disk, Ctrl-C, a kill) is never taken for a built one: an
environment exists exactly when its folder does, with its facts file in it. Two sweeps that need the same
environment at once build it once: the second waits on a file lock (``flock``), then finds it built. A built
environment is moved aside (damaged, or ``--rebuild``) only once no other command uses it (:mod:`.inuse`: each
command holds it shared; the move takes it exclusive, waiting a bounded time, and else leaves it in place).

The installer is pip, run from the parent's interpreter into the new environment (``pip --python``), with the
machine's pip configuration (this machine serves its CPU torch wheel that way) and, for a lock, ``--no-deps``: a
lock lists every distribution, so nothing is resolved, and a missing one fails the import check instead of being
fetched unpinned. A lock is installed with ``--require-hashes``: every file must match a hash the lock lists for it.
A plugin's ``requirements`` are specifiers, not a lock: pip resolves their dependencies. uv can do the same install
(``BATCHSCOPE_INSTALLER=uv``, given pip's configuration as its own flags: it reads none of pip's);
docs/environments.md says which is the default and why (measured).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import venv
from collections.abc import Callable, Iterator
from pathlib import Path

from harness.envs import inuse
from harness.envs.spec import EnvSpec, normal_name, requirement_name
from harness.errors import BatchscopeError

#: the facts file: written last, inside the temporary folder, before the rename
FACTS_FILE = "batchscope-env.json"
#: the installer's lines kept in an error (the end of its output says what failed)
TAIL_LINES = 15
#: an install longer than this is stopped (a TensorFlow CUDA set is ~3 GB of wheels on a slow link)
INSTALL_TIMEOUT_S = 3600
#: the installers a build can use, and batchscope's (docs/environments.md: measured against each other)
INSTALLERS = ("pip", "uv")
INSTALLER = "pip"
#: names the installer for every build (``pip`` or ``uv``)
INSTALLER_VAR = "BATCHSCOPE_INSTALLER"


class EnvironmentBuildError(BatchscopeError):
    """A managed environment could not be built; the message carries the installer's last lines."""


class EnvironmentInUseError(EnvironmentBuildError):
    """A managed environment that needed moving aside is in use by another batchscope command, still after the wait
    (:mod:`.inuse`): it was left in place. Exit 1, as a failed build."""


def python_in(env_dir: Path) -> Path:
    """The environment's interpreter."""
    return env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def is_built(env_dir: Path) -> bool:
    """Built and usable: the facts file (written last) and the interpreter are there."""
    return (env_dir / FACTS_FILE).is_file() and python_in(env_dir).exists()


def _installed(site: Path) -> dict[str, tuple[str, Path]]:
    """Each distribution in ``site`` (normalised name) -> (its version, its ``.dist-info`` folder)."""
    out: dict[str, tuple[str, Path]] = {}
    for info in site.glob("*.dist-info"):
        name, _, version = info.name[:-len(".dist-info")].partition("-")
        out[normal_name(name)] = (version, info)
    return out


def _package_files(info: Path) -> list[str]:
    """One file of each top-level folder or module the distribution's ``RECORD`` lists (scripts and metadata
    skipped): a package deleted by hand leaves its metadata behind, and these files go with it."""
    firsts: dict[str, str] = {}
    try:
        with open(info / "RECORD", encoding="utf-8", errors="replace") as record:
            for line in record:
                path = line.split(",", 1)[0]
                if path and not path.startswith("..") and ".dist-info/" not in path and "__pycache__" not in path:
                    firsts.setdefault(path.split("/", 1)[0], path)
    except OSError:
        return []
    return list(firsts.values())


def damage(env_dir: Path, spec: EnvSpec) -> str | None:
    """What is wrong with a built environment, or None: checked without starting it (a few ms, once per command).

    Its interpreter must be there, its facts file must be this environment's (the same requirements), and every
    requirement must be installed (a lock's at its pinned version), with one file of each top-level package or
    module its ``RECORD`` lists (what ``pip check`` and a hand-made deletion have in common: a distribution
    removed, or its files removed from under its metadata). Measured: 4-30 ms for each CPU environment (the
    2-core development machine, loaded; most of it reading torch's and TensorFlow's RECORD files).
    """
    python = python_in(env_dir)
    if not python.exists():
        return f"its interpreter {python} is missing"
    facts = read_facts(env_dir)
    recorded = facts.get("requirements")
    if not isinstance(recorded, list) or recorded != list(spec.requirements):
        return f"its facts file ({FACTS_FILE}) is not this environment's (other requirements, or unreadable)"
    sites = sorted(env_dir.glob("lib/python*/site-packages")) or sorted(env_dir.glob("Lib/site-packages"))
    if not sites:
        return "it has no site-packages folder"
    installed = _installed(sites[0])
    missing, broken = [], []
    for requirement in spec.requirements:
        named = requirement_name(requirement)
        if named is None:
            continue
        name, wanted = named
        found = installed.get(name)
        if found is None or (wanted and found[0] != wanted and not found[0].startswith(f"{wanted}+")):
            missing.append(f"{name} {wanted}".strip() + (f" (found {found[0]})" if found else ""))
            continue
        gone = [path for path in _package_files(found[1]) if not (sites[0] / path).exists()]
        if gone:
            broken.append(f"{name} ({gone[0]} is gone)")
    if missing or broken:
        return "; ".join(filter(None, [f"not installed: {', '.join(missing)}" if missing else "",
                                       f"files missing: {', '.join(broken)}" if broken else ""]))
    return None


def rebuild_command(spec: EnvSpec) -> str:
    """The command that builds ``spec``'s environment anew."""
    return f"batchscope env build --rebuild {spec.framework}" + (" --kind cuda" if spec.kind == "cuda" else "")


def read_facts(env_dir: Path) -> dict[str, object]:
    """What the build recorded: the lock, its hash, the versions imported (``{}`` where unreadable)."""
    try:
        data = json.loads((env_dir / FACTS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (created), released on exit, whoever else waits."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def _under_build_lock(spec: EnvSpec, root: Path) -> Iterator[None]:
    """``spec``'s build lock for the body, waited for with this process's use of the environment let go and taken
    back once it is had (:mod:`.inuse`: the lock order that keeps two commands from waiting on each other)."""
    inuse.let_go(spec, root)
    try:
        with _locked(root / f".{spec.name}.lock"):
            _take_back(spec, root)
            yield
    finally:  # where the body failed before it was taken back (Ctrl-C while waiting): briefly, never raising
        with contextlib.suppress(EnvironmentInUseError):
            _take_back(spec, root, 5.0)


def _take_back(spec: EnvSpec, root: Path, wait: float | None = None) -> None:
    try:
        inuse.take_back(spec, root, wait)
    except inuse.InUse as e:
        raise EnvironmentInUseError(f"{spec.label} in {spec.path(root)} is being moved aside by another batchscope "
                                    f"command ({e.who}), still after {e.waited_s:.0f} s") from None


def waiting_line(spec: EnvSpec, root: Path, doing: str) -> Callable[[str], str]:
    """The line said once when ``doing`` to ``spec``'s environment waits for the commands using it."""
    return lambda who: (f"the {spec.framework} environment in {spec.path(root)} is in use by another batchscope "
                        f"command ({who}): waiting up to {inuse.wait_s():.0f} s for it to end before {doing} "
                        f"({inuse.WAIT_VAR} sets how long)")


def use(spec: EnvSpec, root: Path, say: Callable[[str], None] = lambda line: None) -> None:
    """This process uses ``spec``'s environment from now until the command ends (:func:`harness.envs.inuse.
    release_all`): no other command moves it aside meanwhile (a rebuild waits for it, a bounded time).

    Raises:
        EnvironmentInUseError: another command was moving it aside all the wait long.
    """
    try:
        inuse.hold(spec, root, lambda who: say(f"the {spec.framework} environment in {spec.path(root)} is being "
                                               f"moved aside by another batchscope command ({who}): waiting"))
    except inuse.InUse as e:
        raise EnvironmentInUseError(f"{spec.label} in {spec.path(root)} is being moved aside by another batchscope "
                                    f"command ({e.who}), still after {e.waited_s:.0f} s") from None


@contextlib.contextmanager
def in_use(spec: EnvSpec, root: Path, say: Callable[[str], None] = lambda line: None) -> Iterator[None]:
    """:func:`use` for the body only (the executor, around each unit it runs)."""
    use(spec, root, say)
    try:
        yield
    finally:
        inuse.release(spec, root)


def _tail(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("WARNING: Location")]
    return "\n".join(lines[-TAIL_LINES:])


def _run(cmd: list[str], what: str, spec: EnvSpec, env: dict[str, str], timeout_s: float) -> str:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL,
                              env={**os.environ, **env}, cwd=tempfile.gettempdir())
    except subprocess.TimeoutExpired as e:
        raise EnvironmentBuildError(f"{spec.label}: {what} took over {timeout_s:.0f} s and was stopped") from e
    except OSError as e:
        raise EnvironmentBuildError(f"{spec.label}: {what} could not start: {e}") from e
    if done.returncode != 0:
        raise EnvironmentBuildError(f"{spec.label}: {what} failed (exit {done.returncode}); the installer's last "
                                    f"lines:\n{_tail(done.stdout + done.stderr)}")
    return done.stdout


def _clear_leftovers(root: Path, spec: EnvSpec) -> None:
    """Temporary folders of builds that died (Ctrl-C, a kill, a full disk): under the lock none is in progress."""
    for old in root.glob(f".{spec.name}.building-*"):
        shutil.rmtree(old, ignore_errors=True)


def _set_aside(final: Path, root: Path, spec: EnvSpec, on_wait: Callable[[str], None], why: str) -> None:
    """Move ``final`` out of the way (a rename: nothing half-deleted is ever at its place), then delete it; under its
    build lock. The rename waits for every other command using it (:func:`harness.envs.inuse.exclusive`; ``on_wait``
    told once whom it waits for); the deletion does not.

    Raises:
        EnvironmentInUseError: another command still used it after the wait; it was left in place (``why``: what
            the message says of it).
    """
    if not final.exists() and not final.is_symlink():
        return
    aside = root / f".{spec.name}.building-{os.getpid()}-old"
    try:
        with inuse.exclusive(spec, root, on_wait):
            try:
                os.replace(final, aside)
            except OSError:
                shutil.rmtree(final, ignore_errors=True)
                return
    except inuse.InUse as e:
        raise EnvironmentInUseError(
            f"{spec.label} in {final} {why}, but another batchscope command is using it ({e.who}), still after "
            f"{e.waited_s:.0f} s: it was left in place, not moved from under that command's workers. Once that "
            f"command has ended: {rebuild_command(spec)} (or wait longer: {inuse.WAIT_VAR}=SECONDS)") from None
    shutil.rmtree(aside, ignore_errors=True)


def remove(spec: EnvSpec, root: Path, say: Callable[[str], None] = lambda line: None) -> bool:
    """Remove ``spec``'s environment under ``root`` (under its build lock: never from under a build; and once no other
    command uses it, waiting a bounded time: ``say`` gets one line); whether there was one.

    Raises:
        EnvironmentInUseError: another command still used it after the wait; it was left in place.
    """
    final = spec.path(root)
    if not final.exists():
        return False
    with _under_build_lock(spec, root):
        _set_aside(final, root, spec, say_waiting(say, spec, root, "removing it"), "was to be removed")
    return True


def say_waiting(say: Callable[[str], None], spec: EnvSpec, root: Path, doing: str) -> Callable[[str], None]:
    """``say`` given :func:`waiting_line` for the others' holders."""
    line = waiting_line(spec, root, doing)
    return lambda who: say(line(who))


def build(spec: EnvSpec, root: Path, pythonpath: tuple[str, ...], say: Callable[[str], None] = lambda line: None,
          timeout_s: float = INSTALL_TIMEOUT_S, installer: str = "",
          on_wait: Callable[[str], None] | None = None) -> Path:
    """The environment of ``spec`` under ``root``, built first where it is not yet (``say`` gets one line).
    ``pythonpath``: where batchscope's code is for the import check (:mod:`harness.envs.facts`, run there);
    ``installer``: ``pip`` or ``uv`` (default: :func:`chosen_installer`); ``on_wait``: where the one line goes
    that says a rebuild waits for other commands using the environment (default: ``say``).

    A built one is checked first (:func:`damage`: no process started, a few ms), under this process's use of it
    (:func:`in_use`); a damaged one (a package removed by hand) is said so and built anew from
    its lock, once no other command uses it (a bounded wait).

    Raises:
        EnvironmentBuildError: the install or the import check failed; nothing usable is left behind.
        EnvironmentInUseError: it is damaged, and another command still used it after the wait: left in place.
    """
    final = spec.path(root)
    with in_use(spec, root, say):
        if is_built(final) and damage(final, spec) is None:
            return final
        with _under_build_lock(spec, root):
            return _build_checked(spec, root, final, pythonpath, say, timeout_s, installer,
                                  say_waiting(on_wait or say, spec, root, "moving it aside to build it anew"))


def _build_checked(spec: EnvSpec, root: Path, final: Path, pythonpath: tuple[str, ...], say: Callable[[str], None],
                   timeout_s: float, installer: str, on_wait: Callable[[str], None]) -> Path:
    """:func:`build` under the build lock: checked again (another process may have built it meanwhile), the old
    folder moved aside, built."""
    harm = damage(final, spec) if is_built(final) else None
    if is_built(final) and harm is None:  # another process built it while this one waited
        return final
    _clear_leftovers(root, spec)
    if harm is not None:
        say(f"the {spec.framework} environment in {final} is damaged ({harm}): building it anew from its "
            f"{'lock' if spec.complete else 'requirements'}")
    # damaged, or a folder without its facts file (an old, broken one)
    _set_aside(final, root, spec, on_wait, f"is damaged ({harm})" if harm else "is not whole")
    try:
        return _build_locked(spec, root, final, pythonpath, say, timeout_s, chosen_installer(installer))
    except EnvironmentBuildError as e:
        if harm is None:
            raise
        raise EnvironmentBuildError(f"{spec.label} in {final} was damaged ({harm}) and could not be built "
                                    f"anew; once the cause below is fixed: {rebuild_command(spec)}\n{e}") from e


def _build_locked(spec: EnvSpec, root: Path, final: Path, pythonpath: tuple[str, ...], say: Callable[[str], None],
                  timeout_s: float, installer: str) -> Path:
    """:func:`build`'s work, under its lock, with nothing at ``final``."""
    t0 = time.monotonic()
    say(f"building the {spec.framework} environment ({spec.kind}, {len(spec.requirements)} packages from "
        f"{Path(spec.source).name if os.sep in spec.source else spec.source}) in {final}: once, reused while "
        f"its {'lock is' if spec.complete else 'requirements are'} unchanged")
    tmp = root / f".{spec.name}.building-{os.getpid()}"
    try:
        facts = _build_into(tmp, spec, pythonpath, timeout_s, installer)
        facts["build_s"] = round(time.monotonic() - t0, 1)
        (tmp / FACTS_FILE).write_text(json.dumps(facts, indent=2))
        os.replace(tmp, final)
    except OSError as e:  # the venv, the requirements or the facts file could not be written (a full disk)
        shutil.rmtree(tmp, ignore_errors=True)
        why = "the disk is full" if e.errno == errno.ENOSPC else (e.strerror or str(e))
        raise EnvironmentBuildError(f"{spec.label}: the environment could not be written in {root}: {why}; "
                                    "nothing was left that looks built. Free space (or set BATCHSCOPE_ENVS to a "
                                    "folder with room) and run again") from e
    except BaseException:  # Ctrl-C, SIGTERM, a failed install: the temporary folder goes, nothing is renamed
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    say(f"built the {spec.framework} environment in {time.monotonic() - t0:.0f} s")
    return final


def pip_config() -> list[tuple[str, str]]:
    """This machine's pip configuration as (key, value) pairs (``global.find-links``, ``:env:.constraint``...):
    files and ``PIP_*`` variables, as ``pip config list`` shows them."""
    done = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=120)
    out = []
    for line in done.stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out.append((key.strip(), value.strip().strip("'\"")))
    return out


def uv_flags(config: list[tuple[str, str]], constraints: bool = True) -> list[str]:
    """pip's configuration as uv's flags, for what decides which files are installed: the index, the extra indexes,
    find-links, constraints, ``no-index``. uv reads none of pip's files or variables; and where pip takes the best
    version across all its indexes, uv by default stops at the first index that has a package
    (``--index-strategy unsafe-best-match`` makes it do as pip). ``constraints=False`` leaves pip's constraint files
    out: uv refuses any that is not an exact pin in ``--require-hashes`` mode (this machine's caps torch at
    ``<=2.14.1``), and a lock pins every distribution exactly anyway."""
    flags: list[str] = ["--index-strategy", "unsafe-best-match"]
    seen: set[tuple[str, str]] = set()
    options = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links"}
    if constraints:
        options["constraint"] = "--constraint"
    for key, value in config:
        option = key.rpartition(".")[2]
        if option == "no-index" and value.lower() in ("1", "true", "yes", "on"):
            flags.append("--no-index")
        elif option in options:
            for item in value.split():
                if (option, item) not in seen:
                    seen.add((option, item))
                    flags += [options[option], item]
    return flags


def uv_binary() -> str:
    """uv beside this interpreter (installed with batchscope's dev tools), else on ``PATH``.

    Raises:
        EnvironmentBuildError: no uv.
    """
    beside = Path(sys.executable).with_name("uv")
    found = str(beside) if beside.exists() else shutil.which("uv")
    if not found:
        raise EnvironmentBuildError(f"no uv beside {sys.executable} or on PATH (pip install uv)")
    return found


def chosen_installer(asked: str = "") -> str:
    """The installer a build uses: ``asked``, else ``$BATCHSCOPE_INSTALLER``, else :data:`INSTALLER`.

    Raises:
        EnvironmentBuildError: it names no installer.
    """
    installer = (asked or os.environ.get(INSTALLER_VAR, "") or INSTALLER).strip().lower()
    if installer not in INSTALLERS:
        raise EnvironmentBuildError(f"{INSTALLER_VAR}={installer!r}: expected one of {', '.join(INSTALLERS)}")
    return installer


def install_command(installer: str, python: Path, requirements: Path, locked: bool, no_deps: bool = True
                    ) -> list[str]:
    """The command that installs ``requirements`` into the environment of ``python``: ``--no-deps`` where they are
    the whole set (a lock; a plugin's specifiers have their dependencies resolved), ``--require-hashes`` for a lock
    (every file checked against the lock's hashes)."""
    hashes = ["--require-hashes"] if locked else []
    deps = ["--no-deps"] if no_deps else []
    if installer == "pip":
        return [sys.executable, "-m", "pip", "--python", str(python), "install", *deps, *hashes,
                "--no-input", "--disable-pip-version-check", "-r", str(requirements)]
    if installer == "uv":  # bytecode compiled at install, as pip does (uv leaves it to the first import otherwise)
        return [uv_binary(), "pip", "install", "--python", str(python), *deps, *hashes, "--compile-bytecode",
                *uv_flags(pip_config(), constraints=not locked), "-r", str(requirements)]
    raise ValueError(f"installer {installer!r}: expected one of {', '.join(INSTALLERS)}")


def _build_into(tmp: Path, spec: EnvSpec, pythonpath: tuple[str, ...], timeout_s: float,
                installer: str = INSTALLER) -> dict[str, object]:
    """Create the venv in ``tmp``, install the lock, check the framework imports; returns the facts to record."""
    try:
        venv.EnvBuilder(with_pip=False, symlinks=os.name != "nt").create(tmp)
    except OSError as e:
        raise EnvironmentBuildError(f"{spec.label}: the virtual environment could not be created in {tmp}: {e}") from e
    requirements = tmp / "batchscope-requirements.txt"
    requirements.write_text("\n".join(spec.requirements) + "\n")
    python = python_in(tmp)
    _run(install_command(installer, python, requirements, spec.locked, no_deps=spec.complete),
         f"{installer} install", spec, {}, timeout_s)
    env = {"PYTHONPATH": os.pathsep.join(pythonpath)}
    out = _run([str(python), "-m", "harness.envs.facts", spec.target, "--import"],
               f"the import check (import {spec.import_name})", spec, env, 600)
    try:
        imported = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError) as e:
        raise EnvironmentBuildError(f"{spec.label}: the import check printed no facts: {out[-500:]!r}") from e
    if imported.get("problem"):
        raise EnvironmentBuildError(f"{spec.label}: the import check failed: {imported['problem']}")
    return {"framework": spec.framework, "kind": spec.kind, "digest": spec.digest, "lock": spec.source,
            "installer": installer, "requirements": list(spec.requirements),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
            **{k: imported.get(k) for k in ("python", "numpy", "framework_version", "distribution")}}
