"""Spark-on-Kubernetes entry file of the sink (SparkApplication ``mainApplicationFile``).

spark-submit runs a *file*; running ``sink/__main__.py`` directly would put the package folder on
``sys.path`` first and let ``sink/types.py`` shadow the standard library. This file lives outside
the package (``/opt/cdcnorm/spark/sink_main.py`` in the ``spark`` image) and only delegates to
``python -m sink``'s ``main``.
"""

from __future__ import annotations

import sys

from sink.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
