#!/usr/bin/env bash
# Installs everything ScaleLab needs on Debian 12 (or Ubuntu); safe to re-run, and fast when
# nothing changed. Python packages go into .venv/, configurable-http-proxy into node_modules/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

say() { printf '\033[1m[install]\033[0m %s\n' "$*"; }
as_root() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi; }

# 1. Debian packages: Java for Spark, BLAS/LAPACK for Spark ML, Chromium for the browser tests,
#    the Fashion-MNIST data set package (one of `scalelab data fetch`'s sources), Node.js for the proxy.
debs=(openjdk-17-jre-headless libblas3 liblapack3 chromium dataset-fashion-mnist)
#    sparkmagic (remote Spark through Livy) and requests-kerberos (WebHDFS on a Kerberos cluster)
#    build their Kerberos parts (gssapi, krb5) from source.
debs+=(libkrb5-dev gcc python3-dev)
#    Kerberos: kinit and klist (a student's ticket; the Kerberos tests), and MIT's GSSAPI library,
#    which hdfs-native loads at run time to authenticate to a Kerberos namenode.
debs+=(krb5-user libgssapi-krb5-2)
#    Debian's own Python for the virtual environments (python3-venv: its ensurepip), see 2.
debs+=(python3-venv)
#    Slurm (GPU servers on a university cluster, spawner/slurm.py): the controller, the node
#    daemon, the client commands (sbatch, squeue, scancel, sacct) and MUNGE, its authentication;
#    slurmdbd and MariaDB's server and client core (no service: the tests start their own) for
#    Slurm's accounting (sacct). tests/support/slurmcluster.py starts a two-node cluster of them.
debs+=(slurm-wlm slurmctld slurmd slurm-client slurmdbd munge)
debs+=(mariadb-server-core mariadb-client-core)
#    sudo: batchspawner's exec_prefix (`sudo -E -u {username}`) submits each student's job as
#    their own cluster account; tests/integration/slurm/test_slurm_sudo.py tries a real rule.
debs+=(sudo)
#    iproute2 (`ip`): each server's sandbox, a network namespace and a veth pair
#    (spawner/netns.py; c.ScaleLabSpawner.sandbox).
debs+=(iproute2)
#    OpenLDAP's server and tools: the sign-in tests start a directory of their own (no service).
debs+=(slapd ldap-utils)
command -v npm >/dev/null || debs+=(nodejs npm)
#    Maven and a JDK build the HDFS test cluster (hadoop/testcluster), see 5.
command -v mvn >/dev/null || debs+=(maven)
command -v javac >/dev/null || debs+=(openjdk-17-jdk-headless)
missing=()
for pkg in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  say "apt-get install ${missing[*]}"
  as_root apt-get update -q
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# 2. Python packages in a virtual environment (Python 3.11 or newer), on Debian's own Python
#    when it is 3.11 or newer: `scalelab up` run by root runs each student's server as a system
#    user of their own, which must be able to run the environment's Python; one under root's
#    home (pyenv's /root/.pyenv, mode 0700) it cannot. An environment on another Python is made
#    again. SCALELAB_PYTHON=... chooses the Python.
new_enough() { "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; }
py=${SCALELAB_PYTHON:-}
if [[ -z $py ]]; then
  py=python3
  if [[ -x /usr/bin/python3 ]] && new_enough /usr/bin/python3; then py=/usr/bin/python3; fi
fi
new_enough "$py" || {
  echo "ScaleLab needs Python 3.11 or newer; $py is $("$py" --version 2>&1)" >&2; exit 1; }
py_home=$(dirname "$(command -v "$py")")
make_venv() {  # make_venv DIR: (re)create the environment DIR on $py
  if [[ -x $1/bin/python ]] && ! grep -qx "home = $py_home" "$1/pyvenv.cfg" 2>/dev/null; then
    say "making $1 again on $py (it was made on another Python)"
    rm -rf "$1"
  fi
  [[ -x $1/bin/python ]] || { say "creating $1 on $py"; "$py" -m venv "$1"; }
}
make_venv .venv
stamp=.venv/.scalelab-install-stamp
want=$(cat setup.cfg pyproject.toml | sha256sum | cut -d' ' -f1)
if [[ ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
  say "pip install -e .[kernels,test,kube,signin] (first time: several minutes)"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".[kernels,test,kube,signin]"
  echo "$want" > "$stamp"
fi

# 2b. sparkmagic's remote Spark kernels (c.LivySettings) in an environment of their own: sparkmagic
#     0.23 needs pandas < 3, ScaleLab's environment has pandas 3 (c.LivySettings.kernel_python).
livy_req="sparkmagic==0.23.0"
make_venv .venv-livy
if [[ ! -f .venv-livy/.scalelab-install-stamp || $(cat .venv-livy/.scalelab-install-stamp) != "$livy_req" ]]; then
  say "pip install $livy_req into .venv-livy (first time: a few minutes)"
  .venv-livy/bin/python -m pip install -q --upgrade pip
  .venv-livy/bin/python -m pip install -q "$livy_req"
  echo "$livy_req" > .venv-livy/.scalelab-install-stamp
fi

# 3. configurable-http-proxy, pinned by package-lock.json; linked beside the venv's Python. (And
#    oidc-provider, the OpenID Connect provider the sign-in tests start.)
if [[ ! -x node_modules/.bin/configurable-http-proxy || package-lock.json -nt node_modules/.package-lock.json ]]; then
  say "npm ci (configurable-http-proxy, oidc-provider)"
  npm ci --no-audit --no-fund --loglevel=error
fi
ln -sf ../../node_modules/.bin/configurable-http-proxy .venv/bin/configurable-http-proxy

# 4. What a wheel install puts in the prefix (an editable install does not): the file that
#    enables ScaleLab's jupyter_server extension, and JupyterLab setting overrides for students.
install -D -m 644 hub_ext/jupyter-config/scalelab.json \
  .venv/etc/jupyter/jupyter_server_config.d/scalelab.json
install -D -m 644 hub_ext/jupyter-config/lab-overrides.json \
  .venv/share/jupyter/lab/settings/overrides.d/scalelab.json
install -D -m 644 hub_ext/jupyter-config/page-config.json .venv/etc/jupyter/labconfig/page_config.d/scalelab.json
# 4b. promtool, which checks and unit-tests the shipped Prometheus alert rules
#     (scalelab/monitoring/), from Debian's prometheus package: only the one program is unpacked
#     into the venv (installing the package would also start a Prometheus server).
if [[ ! -x .venv/bin/promtool ]]; then
  say "promtool from Debian's prometheus package"
  promdir=$(mktemp -d)
  (cd "$promdir" && { apt-get download -q prometheus 2>/dev/null || { as_root apt-get update -q && apt-get download -q prometheus; }; })
  dpkg-deb --fsys-tarfile "$promdir"/prometheus_*.deb | tar -x -C "$promdir" ./usr/bin/promtool
  install -m 755 "$promdir/usr/bin/promtool" .venv/bin/promtool
  rm -rf "$promdir"
fi

# 4c. The Spark driver's class-data archive (kernels/spark_archive.py): every PySpark kernel's
#     driver JVM maps Spark's classes from it instead of loading them from the jars (its session
#     in about half the CPU time). Built again when Spark, Java or the builder changed.
archive=.venv/share/scalelab/spark-driver.jsa
archive_want=$({ .venv/bin/python -c 'import pyspark; print(pyspark.__version__)'; java -version 2>&1;
  cat kernels/spark_archive.py; } | sha256sum | cut -d' ' -f1)
if [[ ! -f $archive || $(cat "$archive.stamp" 2>/dev/null) != "$archive_want" ]]; then
  say "the Spark driver's class-data archive (about 40 s)"
  if .venv/bin/python -m scalelab.kernels.spark_archive >/dev/null; then
    echo "$archive_want" > "$archive.stamp"
  else
    say "no class-data archive (see above): PySpark kernels load Spark from its jars, slower"
  fi
fi

# 5. The HDFS test cluster (hadoop/testcluster: Hadoop's MiniDFSCluster, for the tests marked
#    `hadoop`): Maven builds its jar and copies the jars it runs on into target/lib/, once (the
#    first time downloads about 140 MB from Maven Central); tests never download. Without
#    Maven Central (or where 1. could not install Maven and a JDK), the cluster tests skip,
#    saying so; nothing else needs it.
cluster=hadoop/testcluster
cluster_want=$(cat "$cluster/pom.xml" $(find "$cluster/src" -type f | sort) | sha256sum | cut -d' ' -f1)
cluster_stamp=$cluster/target/.scalelab-build-stamp
if [[ -f $cluster_stamp && $(cat "$cluster_stamp") == "$cluster_want" ]]; then
  :
elif ! command -v mvn >/dev/null || ! command -v javac >/dev/null; then
  say "skipping the HDFS test cluster: no mvn or javac (apt-get install maven openjdk-17-jdk-headless, then run ./install.sh again); its tests will skip"
else
  say "mvn package in $cluster (the HDFS test cluster; first time: under a minute)"
  mvn_log=$(mktemp)
  if mvn -q -B -f "$cluster/pom.xml" package >"$mvn_log" 2>&1; then
    echo "$cluster_want" > "$cluster_stamp"
  else
    tail -n 20 "$mvn_log" >&2
    say "the HDFS test cluster did not build (Maven Central unreachable?): its tests will skip"
  fi
  rm -f "$mvn_log"
fi

say "ready: .venv/bin/scalelab"
