"""``crawlake-submit``: pyspark's ``spark-submit`` with what a crawlake job needs, nothing exported.

    crawlake-submit [spark-submit options] jobs/<stage>.py [crawlake options]

adds, unless given: the jars ``make setup`` resolved into ``.jars/`` (Delta, S3A with the AWS SDK,
crawlake's S3 log store) on the driver's class path (fixed when spark-submit starts it) and the
executors' (``spark.executor.extraClassPath``), and ``spark.pyspark.python``/
``spark.pyspark.driver.python`` = this interpreter (the project's virtualenv), so the driver and
every executor import crawlake's packages without ``PYSPARK_PYTHON`` being exported, how Spark
talks to their Python workers (:data:`pipelines.session.WORKER_SETTINGS`), and the driver's
logging at WARN from its first line (``conf/log4j2.properties``). Both name paths on this machine,
which the workers must have too (a cluster started from this checkout, or nodes built from one
image); elsewhere use spark-submit itself with ``--packages``/``--jars`` and ``--archives`` with a
packed environment. Everything else is passed through; the exit code is spark-submit's.
"""

from __future__ import annotations

import os
import sys

from pipelines.session import WORKER_SETTINGS, delta_jars


def command(argv: list[str]) -> list[str]:
    """The spark-submit command line for ``argv`` (as given to ``crawlake-submit``)."""
    import pyspark

    submit = os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-submit")
    given = " ".join(argv)
    extra: list[str] = []
    jars = delta_jars(".jars")
    if jars and "--driver-class-path" not in argv and "spark.driver.extraClassPath" not in given:
        extra += ["--driver-class-path", os.pathsep.join(jars)]
    if jars and "spark.executor.extraClassPath" not in given:
        extra += ["--conf", f"spark.executor.extraClassPath={os.pathsep.join(jars)}"]
    if "--driver-java-options" not in argv and "spark.driver.extraJavaOptions" not in given:
        log4j = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf", "log4j2.properties")
        extra += ["--driver-java-options", f"-Dlog4j2.configurationFile=file:{log4j}"]
    for key in ("spark.pyspark.python", "spark.pyspark.driver.python"):
        if key not in given:
            extra += ["--conf", f"{key}={sys.executable}"]
    for key, value in WORKER_SETTINGS.items():   # this interpreter imports crawlake's daemon module
        if key not in given:
            extra += ["--conf", f"{key}={value}"]
    return [submit, *extra, *argv]


def main() -> None:
    cmd = command(sys.argv[1:])
    os.execv(cmd[0], cmd)


if __name__ == "__main__":
    main()
