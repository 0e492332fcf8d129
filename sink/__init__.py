"""cdcnorm sink: normalized topics into Apache Iceberg tables with PySpark."""
