"""Which requirement of the carried wheels neither the GPU machine's image nor the wheels themselves provide.

    python bench/gpu/requires.py [.whl]     # exit 1 and one line each where something is missing

The image's packages are the device tool's list (bench/gpu/image-packages.txt, copied from its KINDS.md, read on
2026-11-17); a requirement's environment marker is evaluated for the machine's Python 3.12 on x86-64 Linux.
"""

from __future__ import annotations

import re
import sys
import zipfile
from pathlib import Path

from packaging.requirements import Requirement

HERE = Path(__file__).resolve().parent
TARGET = {"python_version": "3.12", "python_full_version": "3.12.3", "platform_python_implementation": "CPython",
          "implementation_name": "cpython", "sys_platform": "linux", "platform_system": "Linux",
          "platform_machine": "x86_64", "os_name": "posix", "extra": ""}


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def metadata(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return z.read(name).decode()


def missing(wheels: list[Path], image: set[str]) -> dict[str, list[str]]:
    carried, needs = set(), {}
    for wheel in wheels:
        text = metadata(wheel)
        name = norm(re.search(r"^Name: (.+)$", text, re.M).group(1).strip())
        carried.add(name)
        for line in re.findall(r"^Requires-Dist: (.+)$", text, re.M):
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate(TARGET):
                needs.setdefault(norm(req.name), []).append(name)
    return {dep: by for dep, by in sorted(needs.items()) if dep not in carried and dep not in image}


def image_packages() -> set[str]:
    lines = (HERE / "image-packages.txt").read_text().splitlines()
    return {norm(n) for line in lines for n in line.split("#", 1)[0].split()}


def main() -> int:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else ".whl")
    image = image_packages()
    gaps = missing(sorted(folder.glob("*.whl")), image)
    for dep, by in gaps.items():
        print(f"{dep}: required by {', '.join(sorted(set(by)))}; neither the image nor {folder} has it")
    return 1 if gaps else 0


if __name__ == "__main__":
    sys.exit(main())
