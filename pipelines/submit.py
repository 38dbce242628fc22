"""``crawlake-submit``: pyspark's ``spark-submit`` with what a crawlake job needs, nothing exported.

    crawlake-submit [spark-submit options] jobs/<stage>.py [crawlake options]

adds, unless given: ``--jars`` with the jars ``make setup`` resolved into ``.jars/`` (Delta, S3A
and the AWS SDK: the driver's classpath is fixed when spark-submit starts, so they must come on
its command line), and ``spark.pyspark.python``/``spark.pyspark.driver.python`` = this
interpreter (the project's virtualenv), so the driver and every executor import crawlake's
packages without ``PYSPARK_PYTHON`` being exported. Everything else is passed through; the exit
code is spark-submit's. On a cluster whose machines have no such interpreter at that path, use
spark-submit itself with ``--py-files`` or an environment archive instead.
"""

from __future__ import annotations

import os
import sys

from pipelines.session import delta_jars


def command(argv: list[str]) -> list[str]:
    """The spark-submit command line for ``argv`` (as given to ``crawlake-submit``)."""
    import pyspark

    submit = os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-submit")
    given = " ".join(argv)
    extra: list[str] = []
    jars = delta_jars(".jars")
    if jars and "--jars" not in argv and "--packages" not in argv:
        extra += ["--jars", ",".join(jars)]
    for key in ("spark.pyspark.python", "spark.pyspark.driver.python"):
        if key not in given:
            extra += ["--conf", f"{key}={sys.executable}"]
    return [submit, *extra, *argv]


def main() -> None:
    cmd = command(sys.argv[1:])
    os.execv(cmd[0], cmd)


if __name__ == "__main__":
    main()
