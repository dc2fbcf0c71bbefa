"""The golden corpus (tests/golden/) read by the JVM reader's own batch and record classes.

txlog/spark/jvm/test/org/txlog/spark/GoldenBatches.java is compiled here against the reader's
jar and pyspark's jars, as txlog/spark/jvm_build.py compiles the reader, and run in a plain JVM
(no Spark session): it checks every file against tests/golden/manifest.json and prints one line
per mismatch. The Rust core (storage/native/src/golden_tests.rs) and the Python codecs
(tests/native/test_golden_batches.py) read the same files, so a format change fails in all three.
"""

from __future__ import annotations

import json
import os
import re
import subprocess

from txlog.spark import jvm_build
from txlog.spark.schemas import record_schema
from txlog.spark.session import LOG4J2_CONFIG

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(ROOT, "tests", "golden")
CHECK_SOURCE = os.path.join(
    os.path.dirname(jvm_build.SOURCES_DIR), "test", "org", "txlog", "spark", "GoldenBatches.java"
)
CHECK_CLASS = "org.txlog.spark.GoldenBatches"


def _java(javac: str) -> str:
    """The `java` of the JDK whose `javac` built the jar."""
    return os.path.join(os.path.dirname(os.path.realpath(javac)), "java")


def test_the_jvm_reader_reads_the_golden_corpus_as_the_manifest_says(tmp_path):
    javac = jvm_build.find_javac()
    assert javac is not None, "the JVM reader's check needs a JDK with javac"
    jar = jvm_build.jar_path()
    _, spark_jars = jvm_build.pyspark_jars()
    classpath = os.pathsep.join([jar, *spark_jars])
    classes = str(tmp_path / "classes")
    compiled = subprocess.run(
        [
            javac,
            "--release",
            jvm_build.JAVA_RELEASE,
            "-encoding",
            "UTF-8",
            "-d",
            classes,
            "-cp",
            classpath,
            CHECK_SOURCE,
        ],
        check=False,
        capture_output=True,
        text=True,
    )
    assert compiled.returncode == 0, compiled.stderr
    # every column of the record view, from the one definition of it
    ddl = record_schema(include_headers=True, include_transaction_columns=True)
    done = subprocess.run(
        [
            _java(javac),
            f"-Dlog4j2.configurationFile=file:{LOG4J2_CONFIG}",
            "-cp",
            os.pathsep.join([classes, classpath]),
            CHECK_CLASS,
            GOLDEN,
            ddl,
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    summary = re.search(r"^(\d+) passed, (\d+) failed$", done.stdout, re.MULTILINE)
    assert summary is not None, f"no summary from the check:\n{done.stdout}\n{done.stderr}"
    assert done.returncode == 0 and summary.group(2) == "0", f"{done.stdout}\n{done.stderr}"
    with open(os.path.join(GOLDEN, "manifest.json"), encoding="ascii") as f:
        assert int(summary.group(1)) == len(json.load(f)["batches"]), "every file of the manifest was checked"
