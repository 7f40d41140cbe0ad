#!/usr/bin/env bash
# docs/deploying.md, step by step: pack an environment for the executors, start a Spark
# standalone cluster on 127.0.0.1 from the pyspark package, submit examples/deploy/cluster_job.py
# with the packed environment, stop the cluster. Run from a checkout after
# `bash scripts/bootstrap.sh`:
#
#     bash examples/deploy/run_standalone.sh [work-dir]
#
# Ports (loopback): MASTER_PORT (7177), MASTER_UI_PORT (8180), WORKER_UI_PORT (8181).
set -euo pipefail
MASTER_PORT=${MASTER_PORT:-7177}
MASTER_UI_PORT=${MASTER_UI_PORT:-8180}
WORKER_UI_PORT=${WORKER_UI_PORT:-8181}
cd "$(dirname "$0")/../.."
CHECKOUT=$PWD
WORK=${1:-$(mktemp -d)}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
DRIVER_PYTHON=$CHECKOUT/.venv/bin/python
SPARK_HOME=$("$DRIVER_PYTHON" -c "from pyspark.find_spark_home import _find_spark_home; print(_find_spark_home())")
export SPARK_HOME SPARK_LOCAL_IP=127.0.0.1 SPARK_LOG_DIR=$WORK/logs SPARK_PID_DIR=$WORK/pids
echo "== work directory $WORK"

# 1. The executors' environment: this package and what its tasks import (the "executor"
#    extra: pandas, pyarrow), without pyspark (executors take Spark's own), packed with
#    venv-pack into one archive that spark-submit ships and unpacks next to each executor.
echo "== 1. packing the executors' environment"
python3 -m venv "$WORK/executor-env"
"$WORK/executor-env/bin/pip" install --quiet "$CHECKOUT[executor]" venv-pack
"$WORK/executor-env/bin/venv-pack" --quiet -p "$WORK/executor-env" -o "$WORK/dstl-env.tar.gz"
ls -lh "$WORK/dstl-env.tar.gz"

# 2. A standalone cluster on loopback: one master, one worker with two cores. The pyspark
#    package has no start-master.sh; its spark-daemon.sh starts the same classes.
echo "== 2. starting a standalone cluster on 127.0.0.1"
DAEMON=$SPARK_HOME/sbin/spark-daemon.sh
"$DAEMON" start org.apache.spark.deploy.master.Master 1 \
    --host 127.0.0.1 --port "$MASTER_PORT" --webui-port "$MASTER_UI_PORT"
"$DAEMON" start org.apache.spark.deploy.worker.Worker 1 "spark://127.0.0.1:$MASTER_PORT" \
    --host 127.0.0.1 --cores 2 --memory 2g --webui-port "$WORKER_UI_PORT" --work-dir "$WORK/worker"
trap '"$DAEMON" stop org.apache.spark.deploy.worker.Worker 1; "$DAEMON" stop org.apache.spark.deploy.master.Master 1' EXIT
for _ in $(seq 120); do  # until the master lists the worker as alive
    if curl -s "http://127.0.0.1:$MASTER_UI_PORT/json/" | grep -q '"state" *: *"ALIVE"'; then break; fi
    sleep 1
done

# 3. Input: four CSV files of (user, page).
mkdir -p "$WORK/in"
for i in 0 1 2 3; do
    for u in 0 1 2 3 4 5 6 7 8 9; do echo "user$u,/page/$((u + i))"; done > "$WORK/in/part-$i.csv"
done

# 4. Submit: the driver runs with the checkout's environment (PYSPARK_DRIVER_PYTHON); Python
#    workers run ./environment/bin/python (PYSPARK_PYTHON): on executors, the unpacked archive
#    in their working directory; on the driver, where the JVM starts Python workers to plan
#    the project's Python data sources, the same archive unpacked in the directory spark-submit
#    runs from. State goes to the checkpoint, each executor's local copies under
#    spark.dstl.stateStore.localDir.
echo "== 3. submitting examples/deploy/cluster_job.py"
mkdir -p "$WORK/environment"
tar -xzf "$WORK/dstl-env.tar.gz" -C "$WORK/environment"
cd "$WORK"
PYSPARK_DRIVER_PYTHON=$DRIVER_PYTHON PYSPARK_PYTHON=./environment/bin/python \
    "$SPARK_HOME/bin/spark-submit" \
    --master "spark://127.0.0.1:$MASTER_PORT" \
    --archives "$WORK/dstl-env.tar.gz#environment" \
    --conf spark.executor.memory=1g \
    --conf spark.dstl.query.logProgress=false \
    --conf spark.dstl.stateStore.localDir="$WORK/local" \
    "$CHECKOUT/examples/deploy/cluster_job.py" "$WORK/in" "$WORK/checkpoint"
