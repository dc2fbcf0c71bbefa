"""Spark's own Kafka source (`spark-sql-kafka-0-10`) for the installed pyspark, fetched through
Maven into a cache outside the repository, as tests/kafka_rig/kafka_dist.py fetches Kafka.

The connector's version is the installed pyspark's. Maven Central publishes pyspark releases'
jars, but pyspark 4.3.0 is on PyPI with no 4.3.0 jars there (checked November 2026); for such a
release the newest connector of the same major version that Central has, FALLBACK, is used: the
DataSource V2 interfaces it implements are public API, and the test that loads it proves it runs.
Only the jars pyspark lacks are kept (the connector, its token provider, kafka-clients,
commons-pool2): the rest (Hadoop, Scala, compression codecs) pyspark ships already.

    python3 -m tests.server.spark_kafka_dist     # fetch, print the jars (for .ci/run)
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

from txlog.spark.jvm_build import cache_dir

ARTIFACT = "spark-sql-kafka-0-10_2.13"
FALLBACK = "4.2.0"

POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>txlog.tests</groupId>
  <artifactId>spark-kafka-source</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.spark</groupId>
      <artifactId>{artifact}</artifactId>
      <version>{version}</version>
    </dependency>
  </dependencies>
</project>
"""


class SparkKafkaDistError(RuntimeError):
    """The connector cannot be fetched (no Maven, or Maven failed for both versions)."""


def pyspark_version() -> str:
    import pyspark

    return pyspark.__version__


def jars() -> list[str]:
    """The connector's jars that pyspark lacks, fetched now if the cache lacks them."""
    errors = []
    for version in dict.fromkeys((pyspark_version(), FALLBACK)):
        libs = os.path.join(cache_dir(), f"{ARTIFACT}-{version}", "libs")
        if not os.path.isdir(libs):
            try:
                _fetch(version, libs)
            except SparkKafkaDistError as exc:
                errors.append(str(exc))
                continue
        return sorted(glob.glob(os.path.join(libs, "*.jar")))
    raise SparkKafkaDistError("\n".join(errors))


def _fetch(version: str, libs: str) -> None:
    """Resolve the connector into `libs` atomically: a half-copied directory is never a cache."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise SparkKafkaDistError("Maven (`mvn`) is not on PATH: it fetches Spark's Kafka source for this test")
    parent = os.path.dirname(libs)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix="libs.", dir=parent)
    try:
        pom = os.path.join(staging, "pom.xml")
        with open(pom, "w") as f:
            f.write(POM.format(artifact=ARTIFACT, version=version))
        out = os.path.join(staging, "jars")
        result = subprocess.run(
            [
                mvn,
                "-q",
                "-B",
                "-f",
                pom,
                "dependency:copy-dependencies",
                "-DexcludeScope=provided",
                f"-DoutputDirectory={out}",
            ],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if result.returncode != 0:
            raise SparkKafkaDistError(f"mvn failed to fetch {ARTIFACT} {version}:\n{result.stdout[-2000:]}")
        _drop_what_pyspark_has(out)
        try:
            os.rename(out, libs)
        except OSError:  # another process finished first; its copy is as good as ours
            if not os.path.isdir(libs):
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _artifact(jar_name: str) -> str:
    """`kafka-clients-3.9.2.jar` -> `kafka-clients`: the name without its version."""
    return re.sub(r"-\d[^-]*(-[A-Za-z0-9.]+)?\.jar$", "", jar_name)


def _drop_what_pyspark_has(directory: str) -> None:
    import pyspark

    shipped = {_artifact(name) for name in os.listdir(os.path.join(os.path.dirname(pyspark.__file__), "jars"))}
    for name in os.listdir(directory):
        if _artifact(name) in shipped:
            os.remove(os.path.join(directory, name))


def main() -> int:
    try:
        print("\n".join(jars()))
    except SparkKafkaDistError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
