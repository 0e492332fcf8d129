"""``python -m sink --config pipeline.yaml [--once]``: same as ``cdcnorm sink``."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from sink.main import run_sink
from transforms.errors import ConfigError, MissingExtraError


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m sink", description="cdcnorm Iceberg sink")
    parser.add_argument("--config", required=True)
    parser.add_argument("--once", action="store_true")
    parser.add_argument("--max-batches", type=int, default=None)
    parser.add_argument("--log-level", default=os.environ.get("CDCNORM_LOG_LEVEL", "INFO"),
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"], type=str.upper,
                        help="default: $CDCNORM_LOG_LEVEL or INFO")
    args = parser.parse_args()
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        return run_sink(args.config, once=args.once, max_batches=args.max_batches)
    except (ConfigError, MissingExtraError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
