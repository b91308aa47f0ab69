"""Where each framework ran, and what differs between the frameworks' environments (issue 38): a comparison across
frameworks that ran on different numpy majors or CUDA versions says so, since each framework now has an
environment of its own (docs/environments.md)."""

from __future__ import annotations

from collections.abc import Mapping

from report.load import StoredExperiment

#: the versions whose difference between frameworks a comparison names (package in versions_json, words)
COMPARED = (("numpy", "numpy major", lambda v: v.split(".")[0]), ("cuda", "CUDA", lambda v: v))


def version_differences(versions: Mapping[str, Mapping[str, str]]) -> list[str]:
    notes = []
    for package, words, key in COMPARED:
        seen = {fw: pkgs[package] for fw, pkgs in versions.items() if pkgs.get(package)}
        if len({key(v.split(",")[0].strip()) for v in seen.values()}) > 1:
            each = "; ".join(f"{fw} {package} {v}" for fw, v in sorted(seen.items()))
            notes.append(f"the frameworks ran on different {words} versions ({each}): each framework runs in an "
                         "environment of its own (docs/environments.md); a difference between them includes this "
                         "one")
    return notes


def environment_notes(exp: StoredExperiment) -> list[str]:
    """What differs between the frameworks' environments in ``exp``, as sentences (none where nothing does)."""
    return version_differences(exp.versions())


def environments_dict(exp: StoredExperiment) -> dict[str, dict[str, object]]:
    """Per framework: its environment, interpreter and versions (``recommend --json``)."""
    versions, where = exp.versions(), exp.environments()
    return {fw: {**where.get(fw, {}), "versions": dict(versions.get(fw, {}))}
            for fw in sorted(set(versions) | set(where))}
