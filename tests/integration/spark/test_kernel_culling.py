"""Idle PySpark kernels stopped by a real single-user server (ScaleLab's kernel manager over
Jupyter Server's culling), their Spark driver with them, other kernels left alone, and the
student told why in their next cell. The timeout here is 3 s; a course's is an hour."""

from __future__ import annotations

import time
from pathlib import Path

from jupyter_client import BlockingKernelClient

from scalelab.spawner.environment import server_args
from tests.integration.spark.test_spark_warm import Server, execute, jvms, result

IDLE_S = 3
#: The culling's own arguments (the allow-list's are the Server's already).
CULLING = server_args(spark_kernel_idle_timeout=IDLE_S)[len(server_args()) :]


def _start(server: Server, name: str) -> tuple[str, BlockingKernelClient]:
    client = server.kernel(name=name)
    return Path(client.connection_file).stem.removeprefix("kernel-"), client


def test_an_idle_pyspark_kernel_is_stopped_with_its_driver_and_the_student_is_told(
    tmp_path: Path,
):
    assert CULLING == [
        "--ScaleLabKernelManager.cull_idle_timeout=3",
        "--ScaleLabKernelManager.cull_interval=1",
        "--ScaleLabKernelManager.cull_connected=True",
    ]
    # The warm kernel is taken (its idle time counted from then); no next one in this test.
    server = Server(tmp_path, "--WarmKernelManager.rewarm_delay_s=600", *CULLING)
    clients = []
    try:
        server.warm("ready")
        spark_id, spark = _start(server, "scalelab-pyspark")
        assert server.warm("waiting")["taken"] == 1
        clients.append(spark)
        assert result(spark, "import json\njson.dumps(spark.range(3).count())") == 3
        driver = result(spark, "import json\njson.dumps(spark.sparkContext._gateway.proc.pid)")
        assert driver in jvms(server)
        torch_id, torch = _start(server, "scalelab-pytorch")
        clients.append(torch)
        # Both idle now; the PySpark kernel is stopped, its client connected or not.
        deadline = time.monotonic() + 90
        while spark_id in {k["id"] for k in server.get("/api/kernels")}:
            assert time.monotonic() < deadline, server.log.read_text()[-4000:]
            time.sleep(0.5)
        time.sleep(2 * IDLE_S)  # idle twice as long: the PyTorch kernel stays
        assert {k["id"] for k in server.get("/api/kernels")} == {torch_id}
        deadline = time.monotonic() + 60
        while driver in jvms(server):  # its Spark driver (YARN's containers) went with it
            assert time.monotonic() < deadline, "the culled kernel's driver JVM lives on"
            time.sleep(0.5)
        said = (
            "ScaleLab: Your pyspark kernel was stopped after 1 minute(s) without activity, to "
            "give its Spark executors back to the course's cluster. Its variables are gone: run "
            "the notebook's cells again (Run > Run All Cells)."
        )
        _, printed = execute(torch, "print('next cell')")  # then the kernel's banner, first cell
        assert printed.startswith(f"{said}\n") and printed.endswith("next cell\n"), printed
        assert execute(torch, "print('again')")[1] == "again\n"  # told once
        assert "Culling 'idle' kernel 'scalelab-pyspark'" in server.log.read_text()
    finally:
        for client in clients:
            client.stop_channels()
        server.stop()
