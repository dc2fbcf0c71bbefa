"""Apache Kafka's jars (broker and tools), fetched through Maven into a cache outside the repository.

The versions are pinned in tests/kafka_rig/pom.xml. The first call resolves them with
`mvn dependency:copy-dependencies` (Maven Central, about 55 MB, seconds when ~/.m2 already
holds them); later calls find the cache directory, keyed by the pom's digest so a changed pom
gets a fresh copy. The cache is $TXLOG_CACHE_DIR, else $XDG_CACHE_HOME/txlog, else
~/.cache/txlog: the same place the Spark reader's jar is cached (txlog/spark/jvm_build.py).

Run as a script it fetches and prints the classpath, so .ci/run and shell users can prepare it:

    python3 -m tests.kafka_rig.kafka_dist
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

from txlog.spark.jvm_build import cache_dir

POM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pom.xml")
KAFKA_VERSION = "4.4.0"


class KafkaDistError(RuntimeError):
    """The jars cannot be fetched (no Maven, no JDK, or Maven failed); the message says which."""


def libs_dir() -> str:
    """The cache directory holding every jar of the pinned broker and tools."""
    with open(POM, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    return os.path.join(cache_dir(), f"kafka-{KAFKA_VERSION}-{digest}", "libs")


def java() -> str:
    """`java` of $JAVA_HOME, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    candidate = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not candidate or not os.access(candidate, os.X_OK):
        raise KafkaDistError("no Java runtime: install a JDK 17+ (Kafka 4 brokers need Java 17)")
    return candidate


def classpath() -> str:
    """The broker's and tools' classpath, fetching the jars first if the cache lacks them."""
    libs = libs_dir()
    if not glob.glob(os.path.join(libs, "kafka_2.13-*.jar")):
        _fetch(libs)
    return os.path.join(libs, "*")


def _fetch(libs: str) -> None:
    """Resolve the pom into `libs` atomically: a half-copied directory is never mistaken for a cache."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaDistError("Maven (`mvn`) is not on PATH: it fetches the Kafka broker's jars for these tests")
    parent = os.path.dirname(libs)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix="libs.", dir=parent)
    try:
        result = subprocess.run(
            [mvn, "-q", "-B", "-f", POM, "dependency:copy-dependencies", f"-DoutputDirectory={staging}"],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if result.returncode != 0:
            raise KafkaDistError(f"mvn failed to fetch Kafka {KAFKA_VERSION}:\n{result.stdout}{result.stderr}")
        try:
            os.rename(staging, libs)
        except OSError:
            # another process finished first; its copy is as good as ours
            if not glob.glob(os.path.join(libs, "kafka_2.13-*.jar")):
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def compiled_classes(source: str, main_class: str) -> str:
    """The classes of one Java `source` compiled against Kafka's jars, cached beside them by the
    source's digest (a changed source gets a fresh build); built now if the cache lacks them."""
    with open(source, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    target = os.path.join(cache_dir(), f"{main_class}-{digest}")
    if os.path.exists(os.path.join(target, f"{main_class}.class")):
        return target
    home = os.environ.get("JAVA_HOME")
    javac = os.path.join(home, "bin", "javac") if home else shutil.which("javac")
    if not javac or not os.access(javac, os.X_OK):
        raise KafkaDistError(f"no `javac`: install a JDK 17+ to build {os.path.basename(source)}")
    os.makedirs(cache_dir(), exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f".{main_class}.", dir=cache_dir())
    try:
        result = subprocess.run(
            [javac, "-cp", classpath(), "-d", staging, source], capture_output=True, text=True, timeout=600
        )
        if result.returncode != 0:
            raise KafkaDistError(f"javac failed on {source}:\n{result.stderr}")
        try:
            os.rename(staging, target)
        except OSError:  # another process built it first; its classes are as good as ours
            if not os.path.exists(os.path.join(target, f"{main_class}.class")):
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def run_tool(
    main_class: str, *args: str, timeout: float = 300, check: bool = True, input: str | None = None
) -> subprocess.CompletedProcess:
    """Run one of Kafka's command-line tools (e.g. org.apache.kafka.tools.DumpLogSegments) to completion;
    `input` is its standard input (the console producer reads records from it)."""
    result = subprocess.run(
        [java(), "-Xmx512m", "-cp", classpath(), main_class, *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and result.returncode != 0:
        raise KafkaDistError(f"{main_class} {' '.join(args)} exited {result.returncode}:\n{result.stderr}")
    return result


def main() -> int:
    try:
        print(classpath())
    except KafkaDistError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
