"""Spark's authentication on the sessions ScaleLab starts, tried with Spark's own network classes.

A driver built from the kernel's settings (:func:`scalelab.kernels.spark_session.session_conf`,
local mode) caches a block; a client made with Spark's ``TransportContext`` but without the
application's secret asks its block manager for that block (``OpenBlocks``, what another
student's code would send). With ScaleLab's settings the block manager refuses; with
authentication turned off by ops (the control: the same request on the same build) it answers.
"""

from __future__ import annotations

import json
import subprocess
import sys

from scalelab.common.ports import free_port

#: Runs in a fresh interpreter: a driver, a cached block, and an unauthenticated OpenBlocks.
PROBE = """
import json, sys
from scalelab.kernels.spark_session import prepare_driver_environment, session_conf
from pyspark.sql import SparkSession

environ = {"SCALELAB_SPARK_MASTER": "local[1]", "SCALELAB_SPARK_CONF": sys.argv[1]}
conf = session_conf(environ, None)
prepare_driver_environment(conf)
builder = SparkSession.builder
for key, value in conf.items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
sc = spark.sparkContext
cached = sc.parallelize(range(100), 1).cache()
cached.count()  # block rdd_<id>_0 in the driver's block manager
jvm = sc._jvm
port = int(conf["spark.blockManager.port"])  # set by the test
provider = jvm.org.apache.spark.network.util.MapConfigProvider(jvm.java.util.HashMap())
transport = jvm.org.apache.spark.network.util.TransportConf("shuffle", provider)
context = jvm.org.apache.spark.network.TransportContext(
    transport, jvm.org.apache.spark.network.server.NoOpRpcHandler()
)
ids = sc._gateway.new_array(jvm.java.lang.String, 1)
ids[0] = f"rdd_{cached.id()}_0"
request = jvm.org.apache.spark.network.shuffle.protocol.OpenBlocks(sc.applicationId, "driver", ids)
try:
    client = context.createClientFactory().createClient("127.0.0.1", port)
    client.sendRpcSync(request.toByteBuffer(), 15000)
    outcome = "answered"
except Exception as exc:  # py4j's error around Spark's IOException or RuntimeException
    outcome = "refused"
print(json.dumps({"outcome": outcome, "authenticate": sc.getConf().get("spark.authenticate")}))
spark.stop()
"""


def _probe(ops_conf: dict[str, str]) -> dict:
    ops_conf = {**ops_conf, "spark.blockManager.port": str(free_port())}  # where to knock
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(ops_conf)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_client_without_the_applications_secret_gets_no_block():
    assert _probe({}) == {"outcome": "refused", "authenticate": "true"}
    off = {"spark.authenticate": "false", "spark.network.crypto.enabled": "false"}
    assert _probe(off) == {"outcome": "answered", "authenticate": "false"}  # the control
