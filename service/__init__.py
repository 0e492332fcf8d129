"""cdcnorm service: the Faust normalization worker, its config, state stores and CLI."""
