"""The JVM reader's jar: compiled from the Java sources inside this package on first use, then cached.

The sources (txlog/spark/jvm/src/) are compiled with the JDK's `javac` against the jars of the
installed pyspark (pyspark/jars/*.jar): no Maven or Gradle, nothing downloaded. The files under
txlog/spark/jvm/resources/ go into the jar as they are: the META-INF/services entry that
registers the provider under its format name, JVM_FORMAT. The jar is
built on first use rather than at install time because it belongs to a pair (these sources,
that pyspark): pip may upgrade pyspark after txlog is installed, and an editable install
changes the sources under it. Both go into the cache key, so a changed pair gets a fresh jar
and an unchanged one costs a hash of a few files.

The cache is $TXLOG_CACHE_DIR, else $XDG_CACHE_HOME/txlog, else ~/.cache/txlog; a build goes
to a temporary directory beside its target and is renamed into place, so concurrent first
uses (two test processes, two notebooks) never see half a jar.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import zipfile

from txlog.errors import IllegalStateError

#: The DataSource V2 provider in the jar (txlog/spark/jvm/src/org/txlog/spark/TxlogJvmSource.java).
PROVIDER_CLASS = "org.txlog.spark.TxlogJvmSource"
#: The format name the provider registers (its shortName(), through the jar's META-INF/services):
#: `spark.read.format(JVM_FORMAT)` is the JVM reader, `format("txlog")` the Python source.
JVM_FORMAT = "txlog_jvm"
SOURCES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jvm", "src")
RESOURCES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jvm", "resources")
JAR_NAME = "txlog-spark-jvm.jar"
#: The Java release the classes target: Spark 4 runs on 17 and 21.
JAVA_RELEASE = "17"


class JarBuildError(IllegalStateError):
    """The JVM reader's jar could not be built (no JDK, or javac failed): the Python source is used instead."""


def find_javac() -> str | None:
    """`javac` of $JAVA_HOME, else the one on PATH; None when only a JRE (or no Java) is installed."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = os.path.join(home, "bin", "javac")
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("javac")


def pyspark_jars() -> tuple[str, list[str]]:
    """(pyspark's version, the jars it ships): the classpath the sources compile against."""
    import pyspark

    jars_dir = os.path.join(os.path.dirname(os.path.abspath(pyspark.__file__)), "jars")
    jars = (
        sorted(os.path.join(jars_dir, n) for n in os.listdir(jars_dir) if n.endswith(".jar"))
        if os.path.isdir(jars_dir)
        else []
    )
    if not jars:
        raise JarBuildError(f"pyspark {pyspark.__version__} has no jars in {jars_dir}")
    return pyspark.__version__, jars


def source_files() -> list[str]:
    out: list[str] = []
    for directory, _, names in os.walk(SOURCES_DIR):
        out.extend(os.path.join(directory, n) for n in names if n.endswith(".java"))
    return sorted(out)


def resource_files() -> list[str]:
    """The files copied into the jar as they are, each at its path under RESOURCES_DIR."""
    out: list[str] = []
    for directory, _, names in os.walk(RESOURCES_DIR):
        out.extend(os.path.join(directory, n) for n in names)
    return sorted(out)


def cache_key(pyspark_version: str, javac: str) -> str:
    """SHA-256 over the sources and resources (path and bytes), pyspark's version and which javac compiles them."""
    digest = hashlib.sha256()
    digest.update(f"pyspark {pyspark_version}\0javac {os.path.realpath(javac)}\0release {JAVA_RELEASE}\0".encode())
    for root, paths in ((SOURCES_DIR, source_files()), (RESOURCES_DIR, resource_files())):
        for path in paths:
            digest.update(os.path.relpath(path, root).encode() + b"\0")
            with open(path, "rb") as f:
                digest.update(f.read())
            digest.update(b"\0")
    return digest.hexdigest()[:24]


def cache_dir() -> str:
    root = os.environ.get("TXLOG_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "txlog"
    )
    return os.path.join(root, "jvm")


def jar_path() -> str:
    """The jar for these sources and the installed pyspark, built now if the cache lacks it.

    Raises JarBuildError when there is no `javac` or the build fails.
    """
    javac = find_javac()
    if javac is None:
        raise JarBuildError(
            "no JDK: `javac` is not on PATH nor in $JAVA_HOME/bin (a JRE alone cannot build "
            "the JVM reader; install e.g. openjdk-17-jdk-headless)"
        )
    version, jars = pyspark_jars()
    target = os.path.join(cache_dir(), cache_key(version, javac), JAR_NAME)
    if not os.path.isfile(target):
        build_jar(target, javac=javac, classpath=jars)
    return target


def build_jar(target: str, *, javac: str, classpath: list[str]) -> None:
    """Compile the sources against `classpath` and write the jar at `target` (atomically)."""
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with tempfile.TemporaryDirectory(dir=os.path.dirname(target), prefix=".build-") as work:
        classes = os.path.join(work, "classes")
        command = [
            javac,
            "--release",
            JAVA_RELEASE,
            "-nowarn",
            "-encoding",
            "UTF-8",
            "-d",
            classes,
            "-cp",
            os.pathsep.join(classpath),
            *source_files(),
        ]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            detail = (done.stderr or done.stdout).strip().splitlines()
            raise JarBuildError(
                f"javac failed building the JVM reader ({len(detail)} lines of output); first: "
                f"{detail[0] if detail else '(none)'}"
            )
        partial = os.path.join(work, JAR_NAME)
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as jar:
            jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\nCreated-By: txlog\r\n\r\n")
            for directory, _, names in os.walk(classes):
                for name in sorted(names):
                    path = os.path.join(directory, name)
                    jar.write(path, os.path.relpath(path, classes))
            for path in resource_files():
                jar.write(path, os.path.relpath(path, RESOURCES_DIR).replace(os.sep, "/"))
        os.replace(partial, target)
