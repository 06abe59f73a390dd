"""bench/gpu/requires.py: the check that the wheels carried to the GPU machine need nothing its image lacks."""

from __future__ import annotations

import importlib.util
import zipfile
from pathlib import Path

REQUIRES = Path(__file__).resolve().parents[2] / "bench" / "gpu" / "requires.py"
spec = importlib.util.spec_from_file_location("gpu_requires", REQUIRES)
requires = importlib.util.module_from_spec(spec)
spec.loader.exec_module(requires)


def wheel(folder: Path, name: str, *needs: str) -> Path:
    path = folder / f"{name.replace('-', '_')}-1.0-py3-none-any.whl"
    text = f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n" + "".join(f"Requires-Dist: {n}\n" for n in needs)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name.replace('-', '_')}-1.0.dist-info/METADATA", text)
    return path


def test_a_requirement_neither_carried_nor_in_the_image_is_named(tmp_path):
    wheels = [wheel(tmp_path, "mlflow-skinny", "SQLAlchemy>=2", "cffi; platform_python_implementation != 'PyPy'",
                    "tomli; python_version < '3.11'", "pywin32; sys_platform == 'win32'", "numpy",
                    "rich; extra == 'ui'"),
              wheel(tmp_path, "sqlalchemy", "typing_extensions")]
    gaps = requires.missing(wheels, image={"numpy", "typing-extensions"})
    # cffi is needed on CPython; tomli (Python < 3.11), pywin32 (Windows) and an extra's need are not
    assert gaps == {"cffi": ["mlflow-skinny"]}


def test_the_shipped_image_list_is_read_and_the_names_normalised():
    names = requires.image_packages()
    assert "python" not in names  # the comment's words are not packages
    assert {"torch", "transformers", "typing-extensions", "py-cpuinfo"} <= names
    assert "deepspeed" not in names and "mlflow" not in names  # what the wheels are for
    assert requires.norm("Typing_Extensions") == "typing-extensions"
