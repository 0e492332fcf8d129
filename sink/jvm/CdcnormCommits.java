// One Iceberg commit of the files a micro-batch's write tasks wrote for a table, in one call from
// Python (sink/commits.py). The same steps through py4j cost the driver about 30 round trips per
// table; this class is compiled at the sink's start by Janino, the compiler Spark ships for its
// generated code, so it needs no build step and no JDK. It is written for Janino: no generics,
// no lambdas, no static interface methods. sink/commits.py falls back to the py4j steps when it
// cannot be compiled, and the tests run both.

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.math.BigDecimal;
import java.nio.ByteBuffer;
import java.util.Base64;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.ExecutorService;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.DataFiles;
import org.apache.iceberg.DeleteFile;
import org.apache.iceberg.FileFormat;
import org.apache.iceberg.FileMetadata;
import org.apache.iceberg.Metrics;
import org.apache.iceberg.MetricsConfig;
import org.apache.iceberg.PartitionData;
import org.apache.iceberg.PartitionSpec;
import org.apache.iceberg.RowDelta;
import org.apache.iceberg.SnapshotUpdate;
import org.apache.iceberg.Table;
import org.apache.iceberg.expressions.Expressions;
import org.apache.iceberg.types.Type;
import org.apache.iceberg.types.Types;
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

  /**
   * A partition tuple of the table's current spec from the JSON array the write tasks made
   * (sink/partitioning.py): dates as days, times and timestamps as microseconds, decimals as
   * text, binary as base64.
   */
  private PartitionData partition(PartitionSpec spec, String json) throws IOException {
    List values = (List) JsonUtil.mapper().readValue(json, List.class);
    PartitionData data = new PartitionData(spec.partitionType());
    List fields = spec.partitionType().fields();
    if (values.size() != fields.size()) {
      throw new IllegalArgumentException("partition " + json + " does not fit spec " + spec);
    }
    for (int i = 0; i < fields.size(); i++) {
      data.set(i, internal(((Types.NestedField) fields.get(i)).type(), values.get(i)));
    }
    return data;
  }

  private static Object internal(Type type, Object value) {
    if (value == null) {
      return null;
    }
    Type.TypeID id = type.typeId();
    if (id == Type.TypeID.INTEGER || id == Type.TypeID.DATE) {
      return Integer.valueOf(((Number) value).intValue());
    }
    if (id == Type.TypeID.LONG || id == Type.TypeID.TIME || id == Type.TypeID.TIMESTAMP) {
      return Long.valueOf(((Number) value).longValue());
    }
    if (id == Type.TypeID.FLOAT) {
      return Float.valueOf(((Number) value).floatValue());
    }
    if (id == Type.TypeID.DOUBLE) {
      return Double.valueOf(((Number) value).doubleValue());
    }
    if (id == Type.TypeID.DECIMAL) {
      return new BigDecimal((String) value);
    }
    if (id == Type.TypeID.BINARY || id == Type.TypeID.FIXED) {
      return ByteBuffer.wrap(Base64.getDecoder().decode((String) value));
    }
    if (id == Type.TypeID.UUID) {
      return UUID.fromString((String) value);
    }
    return value;  // STRING, BOOLEAN
  }

  /** The spec equality deletes are written with: the table's unpartitioned one (global deletes). */
  private static PartitionSpec globalSpec(Table table) {
    if (table.spec().isUnpartitioned()) {
      return table.spec();
    }
    for (Iterator it = table.specs().values().iterator(); it.hasNext();) {
      PartitionSpec spec = (PartitionSpec) it.next();
      if (spec.isUnpartitioned()) {
        return spec;
      }
    }
    throw new IllegalStateException("table " + table.name() + " has no unpartitioned spec for global equality deletes");
  }

  /**
   * Commit the data files (parallel lists: path, size, footer, partition JSON or null for an
   * unpartitioned table; empty: none) and an equality-delete file on the fields ``equalityIds``
   * (comma-separated; ``deletesPath`` null: none) in one snapshot whose summary carries
   * ``properties`` (a JSON object of strings). Returns the new snapshot's id.
   *
   * <p>The data files belong to the table's current spec. The equality deletes are written with
   * the table's unpartitioned spec, so they apply to the data files of every partition (a
   * "global" delete in Iceberg's terms): an update that moves a row to another partition, or a
   * delete of it, removes the row wherever an earlier snapshot put it. The sink creates every
   * table unpartitioned first and then evolves its spec, so the unpartitioned spec is there.
   *
   * <p>The commit fails with a ValidationException when another writer added data or delete files
   * to the table after the snapshot ``validateFrom`` (-1: since the table was created), which is
   * the snapshot the caller's offsets and sequences were read from: the caller reads them again
   * and decides anew (sink/iceberg.py). Iceberg retries a commit that lost the catalog's race
   * (CommitFailedException) on the new metadata, and this validation runs again there; a
   * compaction (a "replace" snapshot) does not conflict.
   */
  public long commit(Table table, List dataPaths, List dataSizes, List dataFooters, List dataPartitions,
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
      DeleteFile deletes = FileMetadata.deleteFileBuilder(globalSpec(table)).ofEqualityDeletes(ids)
          .withPath(deletesPath).withFormat(FileFormat.PARQUET).withFileSizeInBytes(deletesSize)
          .withMetrics(metrics(deletesFooter, config)).build();
      delta = delta.addDeletes(deletes);
    }
    PartitionSpec spec = table.spec();
    for (int i = 0; i < dataPaths.size(); i++) {
      DataFiles.Builder file = DataFiles.builder(spec).withPath((String) dataPaths.get(i))
          .withFormat(FileFormat.PARQUET).withFileSizeInBytes(((Number) dataSizes.get(i)).longValue())
          .withMetrics(metrics((byte[]) dataFooters.get(i), config));
      String partition = (String) dataPartitions.get(i);
      if (partition != null) {
        file = file.withPartition(partition(spec, partition));
      }
      delta = delta.addRows(file.build());
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
