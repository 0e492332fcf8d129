// One Iceberg commit of the files a micro-batch's write tasks wrote for a table, in one call from
// Python (sink/commits.py). The same steps through py4j cost the driver about 30 round trips per
// table; this class is compiled at the sink's start by Janino, the compiler Spark ships for its
// generated code, so it needs no build step and no JDK. It is written for Janino: no generics,
// no lambdas, no static interface methods. sink/commits.py falls back to the py4j steps when it
// cannot be compiled, and the tests run both.

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.util.Collections;
import java.util.Iterator;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.DataFiles;
import org.apache.iceberg.DeleteFile;
import org.apache.iceberg.FileFormat;
import org.apache.iceberg.FileMetadata;
import org.apache.iceberg.Metrics;
import org.apache.iceberg.MetricsConfig;
import org.apache.iceberg.RowDelta;
import org.apache.iceberg.SnapshotUpdate;
import org.apache.iceberg.Table;
import org.apache.iceberg.expressions.Expressions;
import org.apache.iceberg.parquet.ParquetUtil;
import org.apache.iceberg.relocated.com.google.common.util.concurrent.MoreExecutors;
import org.apache.iceberg.shaded.org.apache.parquet.format.converter.ParquetMetadataConverter;
import org.apache.iceberg.util.JsonUtil;

public class CdcnormCommits {
  private final ParquetMetadataConverter converter = new ParquetMetadataConverter();
  // A commit scans the table's manifests (to filter them, to merge them) on Iceberg's worker pool
  // by default, and waits for the pool in steps of 10 ms (Tasks.waitFor): 50-60 ms of a small
  // table's commit go to those steps. The scans here are few and small; in the committing thread
  // they are done when the wait first looks.
  private final ExecutorService inThisThread = MoreExecutors.newDirectExecutorService();

  /** Iceberg's own metrics of a Parquet file, from its footer (the Thrift FileMetaData bytes). */
  private Metrics metrics(byte[] footer, MetricsConfig config) throws IOException {
    return ParquetUtil.footerMetrics(
        converter.readParquetMetadata(new ByteArrayInputStream(footer), ParquetMetadataConverter.NO_FILTER),
        Collections.emptyList().stream(),
        config);
  }

  private DataFile dataFile(Table table, String path, long size, byte[] footer, MetricsConfig config)
      throws IOException {
    return DataFiles.builder(table.spec()).withPath(path).withFormat(FileFormat.PARQUET)
        .withFileSizeInBytes(size).withMetrics(metrics(footer, config)).build();
  }

  /**
   * Commit a data file (``dataPath`` null: none) and an equality-delete file on the fields
   * ``equalityIds`` (comma-separated; ``deletesPath`` null: none) in one snapshot whose summary
   * carries ``properties`` (a JSON object of strings). Returns the new snapshot's id.
   *
   * <p>The commit fails with a ValidationException when another writer added data or delete files
   * to the table after the snapshot ``validateFrom`` (-1: since the table was created), which is
   * the snapshot the caller's offsets and sequences were read from: the caller reads them again
   * and decides anew (sink/iceberg.py). Iceberg retries a commit that lost the catalog's race
   * (CommitFailedException) on the new metadata, and this validation runs again there; a
   * compaction (a "replace" snapshot) does not conflict.
   */
  public long commit(Table table, String dataPath, long dataSize, byte[] dataFooter,
                     String deletesPath, long deletesSize, byte[] deletesFooter, String equalityIds,
                     String properties, long validateFrom) throws IOException {
    MetricsConfig config = MetricsConfig.forTable(table);
    RowDelta delta = table.newRowDelta();
    if (deletesPath != null) {
      String[] parts = equalityIds.split(",");
      int[] ids = new int[parts.length];
      for (int i = 0; i < parts.length; i++) {
        ids[i] = Integer.parseInt(parts[i].trim());
      }
      DeleteFile deletes = FileMetadata.deleteFileBuilder(table.spec()).ofEqualityDeletes(ids)
          .withPath(deletesPath).withFormat(FileFormat.PARQUET).withFileSizeInBytes(deletesSize)
          .withMetrics(metrics(deletesFooter, config)).build();
      delta = delta.addDeletes(deletes);
    }
    if (dataPath != null) {
      delta = delta.addRows(dataFile(table, dataPath, dataSize, dataFooter, config));
    }
    if (validateFrom >= 0) {
      delta = delta.validateFromSnapshot(validateFrom);
    }
    delta = delta.conflictDetectionFilter(Expressions.alwaysTrue())
        .validateNoConflictingDataFiles().validateNoConflictingDeleteFiles();
    SnapshotUpdate update = delta;
    update = (SnapshotUpdate) update.scanManifestsWith(inThisThread);
    Map props = (Map) JsonUtil.mapper().readValue(properties, Map.class);
    for (Iterator it = props.entrySet().iterator(); it.hasNext();) {
      Map.Entry entry = (Map.Entry) it.next();
      update = (SnapshotUpdate) update.set((String) entry.getKey(), (String) entry.getValue());
    }
    update.commit();
    return table.currentSnapshot().snapshotId();
  }

  /** The table's current value of a property, its metadata read again first (``null``: unset). */
  public String refreshedProperty(Table table, String key) {
    table.refresh();
    return (String) table.properties().get(key);
  }
}
