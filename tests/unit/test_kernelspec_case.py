"""The kernelspec allow-list matches names as jupyter_client does: case-insensitively (issue 12).

jupyter_client lists kernelspec folders under their lower-cased name (``_list_kernels_in``) and
looks a name up lower-cased (``KernelSpecManager.get_kernel_spec``), so ``ScaleLab-PySpark`` is
the kernel ``scalelab-pyspark``. The allow-list of :class:`CourseKernelSpecManager` must say the
same of it, whether the name asked for or the name configured is in mixed case.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from jupyter_client.kernelspec import NoSuchKernel
from traitlets import TraitError
from traitlets.config import Config

from scalelab.common.ports import free_port
from scalelab.kernels import KERNEL_NAMES, install_kernelspecs
from scalelab.kernels.specmanager import (
    CourseKernelSpecManager,
    KernelNotOffered,
    normalise_kernel_name,
)


def _manager(tmp_path: Path, allowed: set[str]) -> CourseKernelSpecManager:
    install_kernelspecs(tmp_path)
    return CourseKernelSpecManager(
        kernel_dirs=[str(tmp_path / "kernels")],
        allowed_kernelspecs=allowed,
        ensure_native_kernel=False,
    )


def test_the_normalisation_is_jupyter_clients_lower_case():
    assert normalise_kernel_name("ScaleLab-PySpark") == "scalelab-pyspark"
    assert normalise_kernel_name("scalelab-pyspark") == "scalelab-pyspark"


@pytest.mark.parametrize("asked", ["ScaleLab-PySpark", "SCALELAB-PYSPARK", "scalelab-pyspark"])
def test_a_mixed_case_name_gets_the_allowed_kernel(tmp_path: Path, asked: str):
    ksm = _manager(tmp_path, set(KERNEL_NAMES))
    spec = ksm.get_kernel_spec(asked)
    assert spec.display_name == "PySpark"
    assert spec.resource_dir == str(tmp_path / "kernels" / "scalelab-pyspark")


def test_a_mixed_case_name_of_a_kernel_not_allowed_is_still_refused(tmp_path: Path):
    ksm = _manager(tmp_path, {"scalelab-pytorch"})
    with pytest.raises(KernelNotOffered) as refused:
        ksm.get_kernel_spec("ScaleLab-PySpark")
    assert refused.value.status_code == 404
    assert "ScaleLab-PySpark is not offered here; offered: scalelab-pytorch" in str(refused.value)
    with pytest.raises(NoSuchKernel):
        ksm.get_kernel_spec("ScaleLab-Julia")


@pytest.mark.parametrize(
    "configured", [{"ScaleLab-PySpark"}, {"SCALELAB-PYSPARK"}, {"scalelab-pyspark"}]
)
def test_an_allow_list_configured_in_mixed_case_offers_the_kernel(
    tmp_path: Path, configured: set[str]
):
    ksm = _manager(tmp_path, configured)
    assert ksm.allowed_kernelspecs == {"scalelab-pyspark"}
    assert set(ksm.find_kernel_specs()) == {"scalelab-pyspark"}
    assert set(ksm.get_all_specs()) == {"scalelab-pyspark"}
    for asked in ("scalelab-pyspark", "ScaleLab-PySpark"):
        assert ksm.get_kernel_spec(asked).display_name == "PySpark"
    with pytest.raises(KernelNotOffered):
        ksm.get_kernel_spec("ScaleLab-PyTorch")


def test_an_allow_list_from_config_files_or_added_later_is_normalised(tmp_path: Path):
    install_kernelspecs(tmp_path)
    c = Config()
    c.KernelSpecManager.allowed_kernelspecs = {"ScaleLab-PyTorch"}
    ksm = CourseKernelSpecManager(
        config=c, kernel_dirs=[str(tmp_path / "kernels")], ensure_native_kernel=False
    )
    assert set(ksm.find_kernel_specs()) == {"scalelab-pytorch"}
    ksm.allowed_kernelspecs = {*ksm.allowed_kernelspecs, "ScaleLab-TensorFlow"}  # as livy.py does
    assert set(ksm.find_kernel_specs()) == {"scalelab-pytorch", "scalelab-tensorflow"}


def test_a_kernelspec_folder_in_mixed_case_is_listed_and_offered_lower_cased(tmp_path: Path):
    folder = tmp_path / "kernels" / "ScaleLab-Extra"
    folder.mkdir(parents=True)
    spec = {"argv": ["python", "-c", "pass"], "display_name": "Extra", "language": "python"}
    (folder / "kernel.json").write_text(json.dumps(spec))
    ksm = CourseKernelSpecManager(
        kernel_dirs=[str(tmp_path / "kernels")],
        allowed_kernelspecs={"ScaleLab-Extra"},
        ensure_native_kernel=False,
    )
    assert set(ksm.get_all_specs()) == {"scalelab-extra"}
    assert ksm.get_kernel_spec("SCALELAB-EXTRA").display_name == "Extra"


def test_an_invalid_allow_list_entry_is_refused_naming_it():
    with pytest.raises(TraitError, match=r"allowed_kernelspecs holds 42, a int"):
        CourseKernelSpecManager(allowed_kernelspecs={42})


# --- through jupyter_server's REST API -----------------------------------------------------------


def _marking_kernelspec(folder: Path, marker: Path) -> None:
    """A real ipykernel that first writes its own kernelspec name into ``marker``."""
    folder.mkdir(parents=True)
    code = (
        "import pathlib; "
        f"pathlib.Path({str(marker)!r}).write_text({folder.name!r}); "
        "from ipykernel import kernelapp; kernelapp.launch_new_instance()"
    )
    spec = {
        "argv": [sys.executable, "-c", code, "-f", "{connection_file}"],
        "display_name": folder.name,
        "language": "python",
    }
    (folder / "kernel.json").write_text(json.dumps(spec))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict, Path]]:
    """A bare jupyter_server (no config, no extensions) with the course's kernelspec manager."""
    root = tmp_path_factory.mktemp("server")
    marker = root / "started"
    for name in ("scalelab-pyspark", "scalelab-pytorch"):
        _marking_kernelspec(root / "share" / "kernels" / name, marker)
    port, token = free_port(), "case-test-token"
    env = {
        **os.environ,
        "JUPYTER_NO_CONFIG": "1",
        "JUPYTER_PATH": str(root / "share"),
        "JUPYTER_DATA_DIR": str(root / "data"),
        "JUPYTER_RUNTIME_DIR": str(root / "runtime"),
    }
    args = [
        sys.executable,
        "-m",
        "jupyter_server",
        f"--ServerApp.port={port}",
        "--ServerApp.ip=127.0.0.1",
        "--ServerApp.port_retries=0",
        "--ServerApp.open_browser=False",
        "--allow-root",
        f"--ServerApp.root_dir={root}",
        f"--IdentityProvider.token={token}",
        "--ServerApp.kernel_spec_manager_class="
        "scalelab.kernels.specmanager.CourseKernelSpecManager",
        "--KernelSpecManager.ensure_native_kernel=False",
        # As ops might write it: mixed case.
        "--KernelSpecManager.allowed_kernelspecs=ScaleLab-PySpark",
    ]
    log = (root / "server.log").open("wb")
    proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)
    url, headers = f"http://127.0.0.1:{port}", {"Authorization": f"token {token}"}
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if requests.get(f"{url}/api/status", headers=headers, timeout=2).ok:
                    break
            except requests.ConnectionError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"jupyter_server did not start:\n{(root / 'server.log').read_text()}")
            time.sleep(0.1)
        yield url, headers, marker
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def test_rest_lists_and_starts_the_kernel_whatever_the_case(server: tuple[str, dict, Path]):
    url, headers, marker = server
    specs = requests.get(f"{url}/api/kernelspecs", headers=headers, timeout=10).json()
    assert set(specs["kernelspecs"]) == {"scalelab-pyspark"}

    started = requests.post(
        f"{url}/api/kernels", headers=headers, json={"name": "ScaleLab-PySpark"}, timeout=30
    )
    assert started.status_code == 201, started.text
    kernel_id = started.json()["id"]
    try:
        deadline = time.monotonic() + 20
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.read_text() == "scalelab-pyspark"  # the same kernelspec as the lower case
    finally:
        requests.delete(f"{url}/api/kernels/{kernel_id}", headers=headers, timeout=30)


def test_rest_still_answers_404_with_the_list_for_a_kernel_not_offered(
    server: tuple[str, dict, Path],
):
    url, headers, _ = server
    refused = requests.post(
        f"{url}/api/kernels", headers=headers, json={"name": "ScaleLab-PyTorch"}, timeout=30
    )
    assert refused.status_code == 404
    assert "ScaleLab-PyTorch is not offered here; offered: scalelab-pyspark" in refused.text
