// Hadoop's local file system, setting permissions through java.nio instead of a forked `chmod`.
//
// Without Hadoop's native library (the PyPI pyspark ships none), RawLocalFileSystem.setPermission
// runs `chmod` in a child process, and it is called for every file and directory the file system
// creates: about ten processes per Iceberg commit on a local warehouse, each costing several
// milliseconds of the driver's time (measured on the 2-core machines here: most of a row delta's
// commit). This subclass sets the same permission bits with Files.setPosixFilePermissions.
// sink/iceberg.py compiles it with Janino at start and installs it (installAsLocal) as the cached
// file system of `file:` URIs in the driver's JVM: an instance, so no configuration names this
// class (a configuration travels to executors, where Janino's class loader is not). On a file
// system without POSIX permissions it falls back to Hadoop's own.
// Written for Janino: no generics, no lambdas.

import java.io.IOException;
import java.lang.reflect.Method;
import java.net.URI;
import java.util.HashSet;
import java.util.Set;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsAction;
import org.apache.hadoop.fs.permission.FsPermission;

public class CdcnormLocalFileSystem extends RawLocalFileSystem {

  /** The scheme, as Hadoop's LocalFileSystem answers (RawLocalFileSystem does not). */
  public String getScheme() {
    return "file";
  }

  private static void add(Set set, FsAction action, PosixFilePermission read, PosixFilePermission write,
      PosixFilePermission execute) {
    if (action.implies(FsAction.READ)) set.add(read);
    if (action.implies(FsAction.WRITE)) set.add(write);
    if (action.implies(FsAction.EXECUTE)) set.add(execute);
  }

  /**
   * Initialize this instance for file:/// and put it in Hadoop's FileSystem cache in place of the
   * one there (FileSystem.addFileSystemForTesting, package-private: reached by reflection), so
   * every FileSystem.get of a file: URI in this JVM returns it. Returns what the cache now gives.
   */
  public FileSystem installAsLocal(Configuration conf) throws Exception {
    URI uri = URI.create("file:///");
    initialize(uri, conf);
    Method add = FileSystem.class.getDeclaredMethod("addFileSystemForTesting",
        new Class[] {URI.class, Configuration.class, FileSystem.class});
    add.setAccessible(true);
    add.invoke(null, new Object[] {uri, conf, this});
    return FileSystem.get(uri, conf);
  }

  public void setPermission(Path p, FsPermission permission) throws IOException {
    if (permission.getStickyBit()) {
      super.setPermission(p, permission); // a bit java.nio cannot set
      return;
    }
    Set perms = new HashSet();
    add(perms, permission.getUserAction(), PosixFilePermission.OWNER_READ, PosixFilePermission.OWNER_WRITE,
        PosixFilePermission.OWNER_EXECUTE);
    add(perms, permission.getGroupAction(), PosixFilePermission.GROUP_READ, PosixFilePermission.GROUP_WRITE,
        PosixFilePermission.GROUP_EXECUTE);
    add(perms, permission.getOtherAction(), PosixFilePermission.OTHERS_READ, PosixFilePermission.OTHERS_WRITE,
        PosixFilePermission.OTHERS_EXECUTE);
    try {
      Files.setPosixFilePermissions(pathToFile(p).toPath(), perms);
    } catch (UnsupportedOperationException e) {
      super.setPermission(p, permission);
    }
  }
}
