"""Add lockfile entries for the other platforms' optional binaries the registry here lacks.

``npm install`` leaves optional packages it cannot fetch out of package-lock.json, and
``npm ci`` then refuses the lockfile ("Missing: opencode-darwin-arm64@ from lock file").
Each missing optional dependency gets an entry that names its platform (os, cpu, libc
read from its name), so ``npm ci`` skips it as it skips any foreign binary. Run it after
``npm install`` changes the lockfile: ``python3 tests/agents/fill_lock.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

LOCK = Path(__file__).with_name("package-lock.json")
OS = {"darwin": "darwin", "linux": "linux", "win32": "win32", "windows": "win32"}
CPU = ("arm64", "x64")


def platform(name: str) -> dict[str, list[str]]:
    parts = name.rsplit("/", 1)[-1].split("-")
    found = {"os": [OS[p] for p in parts if p in OS], "cpu": [p for p in parts if p in CPU]}
    if "musl" in parts:
        found["libc"] = ["musl"]
    elif "gnu" in parts:
        found["libc"] = ["glibc"]
    return {k: v for k, v in found.items() if v}


def main() -> int:
    lock = json.loads(LOCK.read_text())
    packages = lock["packages"]
    added = []
    for entry in list(packages.values()):
        for name, version in (entry.get("optionalDependencies") or {}).items():
            where = f"node_modules/{name}"
            if where in packages or not platform(name).get("os"):
                continue
            packages[where] = {"version": version, "optional": True, **platform(name)}
            added.append(name)
    lock["packages"] = dict(sorted(packages.items(), key=lambda kv: (kv[0] != "", kv[0])))
    LOCK.write_text(json.dumps(lock, indent=2) + "\n")
    print(f"added {len(added)} foreign optional package(s): {', '.join(added) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
