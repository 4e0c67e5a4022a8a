"""Build the wheel bundle that scripts/gpu-check.sh installs on a GPU machine without network (``make gpu-bundle``).

The lent GPU machine reaches no package index. Its python3 holds torch and much else (scripts/device-image-packages.txt)
but not the server's stack. So this walks the requirements of ``fleetpilot[server,agent]`` through the installed
distributions' own metadata, with markers evaluated for the target (CPython ``--python-version`` on Linux x86-64). It
leaves out what the image holds, pins what remains to the version installed here (the versions the tests passed with),
and downloads the target's wheels with ``pip download --no-deps --only-binary=:all:``. The bundle must stay within
``--limit-mib`` (64 MiB), the device tool's limit for everything one call carries.

Usage: python scripts/gpu_bundle.py [--dest .whl] [--python-version 3.12] [--limit-mib 64]
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
IMAGE_LIST = ROOT / "scripts" / "device-image-packages.txt"
ROOTS = ("fleetpilot[server,agent]",)
# carried even though the image has them, whose versions are not known here: the checked-in *_pb2.py and
# *_pb2_grpc.py check their runtime's version at import (grpcio-tools 1.85's code refuses grpcio < 1.85), and
# pydantic-core needs a recent typing-extensions (44 kB)
ALWAYS_CARRY = frozenset({"grpcio", "protobuf", "typing-extensions"})
# the manylinux tags pip must be told one by one (it matches glibc versions exactly); the device README's list and the
# newer ones current wheels use
PLATFORMS = (*(f"manylinux_2_{n}_x86_64" for n in (17, 24, 27, 28, 31, 34, 35)), "manylinux2014_x86_64")
MANIFEST = "MANIFEST.txt"

Requires = Callable[[str], list[str]]  # a distribution's Requires-Dist lines, by name


@dataclass(frozen=True)
class Pin:
    name: str  # canonical
    version: str
    why: str  # the requirement that brought it in: "fleetpilot[server] → fastapi"

    def spec(self) -> str:
        return f"{self.name}=={self.version}"


def target_environment(python_version: str) -> dict[str, str]:
    """Marker variables for CPython ``python_version`` on Linux x86-64, whatever machine builds the bundle."""
    env = {name: str(value) for name, value in default_environment().items()}
    env.update(
        python_version=python_version,
        python_full_version=f"{python_version}.0",
        implementation_name="cpython",
        platform_python_implementation="CPython",
        sys_platform="linux",
        platform_system="Linux",
        platform_machine="x86_64",
        os_name="posix",
    )
    return env


def applies(requirement: Requirement, env: dict[str, str], extras: Iterable[str]) -> bool:
    """Whether ``requirement`` holds on the target when its distribution was asked for with ``extras``."""
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({**env, "extra": extra}) for extra in ("", *extras))


def closure(roots: Iterable[str], requires: Requires, env: dict[str, str]) -> dict[str, str]:
    """Every distribution ``roots`` need on the target, each with the chain that first needed it."""
    needed: dict[str, str] = {}
    extras_seen: dict[str, set[str]] = {}
    queue = [(Requirement(text), text) for text in roots]
    while queue:
        requirement, why = queue.pop(0)
        name = canonicalize_name(requirement.name)
        asked = set(requirement.extras)
        if name in needed and asked <= extras_seen[name]:
            continue
        needed.setdefault(name, why)
        extras_seen.setdefault(name, set()).update(asked)
        for line in requires(name):
            child = Requirement(line)
            if applies(child, env, extras_seen[name]):
                queue.append((child, f"{why} → {child.name}"))
    return needed


def plan(needed: dict[str, str], image: frozenset[str], version: Callable[[str], str], project: str) -> list[Pin]:
    """What the bundle carries: what is needed and the image lacks (or ALWAYS_CARRY), at the installed versions."""
    carried = (n for n in needed if n != project and (n not in image or n in ALWAYS_CARRY))
    return [Pin(name, version(name), needed[name]) for name in sorted(carried)]


def read_image(path: Path = IMAGE_LIST) -> frozenset[str]:
    words = (w for line in path.read_text().splitlines() if not line.startswith("#") for w in line.split())
    return frozenset(canonicalize_name(w) for w in words)


def installed_requires(name: str) -> list[str]:
    return md.requires(name) or []


def download(pins: list[Pin], dest: Path, python_version: str) -> None:
    platforms = [part for p in PLATFORMS for part in ("--platform", p)]
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d", str(dest)]
    command += ["--python-version", python_version, "--implementation", "cp", *platforms, *(p.spec() for p in pins)]
    subprocess.run(command, check=True)


def write_manifest(pins: list[Pin], dest: Path, python_version: str) -> None:
    lines = [f"# fleetpilot's GPU bundle for CPython {python_version} on Linux x86-64 (scripts/gpu_bundle.py)"]
    lines += [f"{p.spec()}  # {p.why}" for p in pins]
    (dest / MANIFEST).write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=ROOT / ".whl")
    parser.add_argument("--python-version", default="3.12", help="the GPU machine's python3 (default 3.12)")
    parser.add_argument("--limit-mib", type=float, default=64.0)
    args = parser.parse_args()
    env = target_environment(args.python_version)
    try:
        needed = closure(ROOTS, installed_requires, env)
        pins = plan(needed, read_image(), md.version, project="fleetpilot")
    except md.PackageNotFoundError as missing:
        print(f"{missing} is needed on CPython {args.python_version} but not installed here", file=sys.stderr)
        return 1
    args.dest.mkdir(parents=True, exist_ok=True)
    for old in args.dest.glob("*.whl"):  # two versions of one package stop the whole install on the device
        old.unlink()
    download(pins, args.dest, args.python_version)
    write_manifest(pins, args.dest, args.python_version)
    wheels = sorted(args.dest.glob("*.whl"))
    size_mib = sum(w.stat().st_size for w in wheels) / 2**20
    print(f"{len(wheels)} wheels for CPython {args.python_version} in {args.dest}: {size_mib:.1f} MiB")
    if size_mib > args.limit_mib:
        print(f"the bundle is over its {args.limit_mib:g} MiB limit", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
