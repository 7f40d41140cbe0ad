package dstl.tests;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's checksummed local file system for the tests' JVMs, setting a file's permission bits
 * with java.nio instead of a `chmod` process (what Hadoop does without its native library, for
 * every file it creates). Modes beyond the nine rwx bits go to Hadoop's own code.
 */
public class InProcessChmodLocalFileSystem extends LocalFileSystem {
  public InProcessChmodLocalFileSystem() {
    super(new Raw());
  }

  /** The raw local file system under the checksums, with the in-process chmod. */
  public static class Raw extends RawLocalFileSystem {
    // bit i of a mode, lowest first: others x, w, r; group x, w, r; owner x, w, r
    private static final PosixFilePermission[] BITS = {
      PosixFilePermission.OTHERS_EXECUTE, PosixFilePermission.OTHERS_WRITE,
      PosixFilePermission.OTHERS_READ, PosixFilePermission.GROUP_EXECUTE,
      PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_READ,
      PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.OWNER_WRITE,
      PosixFilePermission.OWNER_READ};

    @Override
    public void setPermission(Path path, FsPermission permission) throws IOException {
      int mode = permission.toShort();
      if ((mode & ~0777) != 0) {
        super.setPermission(path, permission);
        return;
      }
      Set<PosixFilePermission> bits = EnumSet.noneOf(PosixFilePermission.class);
      for (int bit = 0; bit < BITS.length; bit++) {
        if ((mode & (1 << bit)) != 0) {
          bits.add(BITS[bit]);
        }
      }
      Files.setPosixFilePermissions(pathToFile(path).toPath(), bits);
    }
  }
}
