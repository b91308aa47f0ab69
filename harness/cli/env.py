"""``batchscope env``: each framework's environment: ``list`` where it is and what it holds, ``build`` it ahead,
``path`` its interpreter (docs/environments.md)."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def _frameworks(names: list[str]) -> list[str]:
    from harness.errors import ConfigError
    from harness.registry import known_adapter_names

    known = sorted(known_adapter_names())
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(f"no adapter named {', '.join(map(repr, unknown))}; registered: {', '.join(known)}")
    return names or known


def _kind(args: argparse.Namespace, frameworks: list[str]) -> str:
    """``--kind`` where given (deliberate: a CUDA environment is built even where NVML sees no GPU), else the kind
    this machine gets, refused (exit 2) where that is ``cuda`` without a GPU and a build would download it."""
    from harness.envs.guard import managed_kind
    from harness.envs.spec import chosen_kind
    from harness.monitor import environment

    if args.kind:
        return str(args.kind)
    gpu_present = bool(environment.capture().get("gpus"))
    return managed_kind(frameworks, gpu_present) if args.action in ("build", "path") else chosen_kind(gpu_present)


def cmd_env(args: argparse.Namespace) -> int:
    from harness.envs.resolve import existing_managed, managed_interpreter
    from harness.errors import ConfigError

    if args.rebuild and args.action != "build":
        raise ConfigError("--rebuild goes with build, e.g. batchscope env build --rebuild pytorch")
    frameworks = _frameworks(list(dict.fromkeys([*args.frameworks, *args.rebuild])))
    kind = _kind(args, frameworks)
    if args.rebuild:
        _set_aside(_frameworks(list(args.rebuild)), kind)
    if args.action == "list":
        from harness.cli.doctor import print_environments

        print_environments(frameworks, kind)
        return 0
    if args.action == "path":
        if len(args.frameworks) != 1:
            raise ConfigError("batchscope env path takes one framework, e.g. batchscope env path pytorch")
        interp = managed_interpreter(frameworks[0], kind, say=lambda line: print(line, file=sys.stderr, flush=True))
        if interp.problem:
            print(interp.problem, file=sys.stderr)
            return 1
        print(interp.python)
        return 0
    from harness.envs.resolve import choose

    before = {fw: existing_managed(fw, kind) for fw in frameworks}
    chosen = choose(frameworks, {}, kind, say=lambda line: print(line, flush=True))  # side by side
    failed = 0
    for framework, interp in chosen.items():
        spec, built = before[framework]
        if spec is None:
            print(f"{framework}: no environment of its own (runs in the parent's interpreter)")
        elif interp.problem:
            failed += 1
            print(f"{framework}: FAILED: {interp.problem}", flush=True)
        else:
            print(("already built: " if built else "") + interp.line(), flush=True)
    return 1 if failed else 0


def _set_aside(frameworks: list[str], kind: str) -> None:
    """``--rebuild``: each framework's environment of ``kind`` removed (under its build lock, once no other command
    uses it: a bounded wait, said once; EnvironmentInUseError, exit 1, where one still does), so that the build
    below makes it anew from its lock."""
    from harness.envs.build import remove
    from harness.envs.resolve import managed_spec
    from harness.envs.spec import envs_root

    for framework in frameworks:
        spec = managed_spec(framework, kind)
        if spec is not None and remove(spec, envs_root(), say=lambda line: print(line, flush=True)):
            print(f"{framework}: removed {spec.path(envs_root())}, to build it anew", flush=True)


def register(sub: Any) -> None:
    """Add the ``env`` subcommand."""
    p = sub.add_parser("env", help="each framework's environment: list, build ahead, or print its interpreter",
                       description="Each framework's workers run in an environment of its own, built from its lock "
                                   "(adapters/<framework>/locks/) into the cache on first use; `build` builds them "
                                   "ahead. BATCHSCOPE_ENV_KIND=cpu|cuda or --kind picks the lock (default: cuda where "
                                   "a GPU is present).")
    p.add_argument("action", choices=("list", "build", "path"))
    p.add_argument("frameworks", nargs="*", metavar="FRAMEWORK", help="default: every registered adapter")
    p.add_argument("--kind", choices=("cpu", "cuda"), default=None,
                   help="the lock to use, deliberately: `--kind cuda` builds CUDA environments even where NVML sees "
                        "no GPU (BATCHSCOPE_ENV_KIND=cuda alone is refused there before any download)")
    p.add_argument("--rebuild", nargs="+", default=[], metavar="FRAMEWORK",
                   help="with build: remove these frameworks' environments and build them anew from their locks "
                        "(a damaged one is rebuilt on its own when a command finds it)")
    p.set_defaults(func=cmd_env)
