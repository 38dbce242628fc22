package io.crawlake.delta;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.util.Iterator;

import io.delta.storage.HadoopFileSystemLogStore;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FSDataOutputStreamBuilder;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * Delta log store for S3 that makes concurrent commits from any number of drivers safe with S3's
 * conditional writes: a commit file {@code _delta_log/NNN.json} is created with
 * {@code PUT ... If-None-Match: *} (Hadoop S3A's {@code fs.option.create.conditional.overwrite},
 * HADOOP-19256, Hadoop 3.4.2+), so of two writers racing for one version exactly one succeeds and
 * the other gets {@link FileAlreadyExistsException}, which Delta's optimistic transaction turns
 * into a retry at the next version or a conflict error. Nothing but S3 is needed (no DynamoDB,
 * unlike Delta's S3DynamoDBLogStore); the store must support conditional writes (AWS S3 since
 * August 2024, MinIO, moto; S3A's {@code fs.s3a.create.conditional.enabled} must stay true).
 *
 * <p>Reads and listings are Hadoop's (S3 is strongly consistent for both); a PUT is atomic, so a
 * partial commit file is never visible. Modelled on Delta's {@code GCSLogStore}, which does the
 * same with GCS preconditions.
 */
public class S3ConditionalPutLogStore extends HadoopFileSystemLogStore {

    /** Hadoop's createFile option for If-None-Match: * (Options.CreateFileOptionKeys). */
    static final String CONDITIONAL_OVERWRITE = "fs.option.create.conditional.overwrite";

    public S3ConditionalPutLogStore(Configuration hadoopConf) {
        super(hadoopConf);
    }

    @Override
    public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
            throws IOException {
        FileSystem fs = path.getFileSystem(hadoopConf);
        FSDataOutputStreamBuilder<?, ?> builder = fs.createFile(path).overwrite(overwrite);
        if (!overwrite) {
            builder = builder.must(CONDITIONAL_OVERWRITE, "true");
        }
        try {
            try (FSDataOutputStream out = builder.build()) {
                while (actions.hasNext()) {
                    out.write((actions.next() + "\n").getBytes(StandardCharsets.UTF_8));
                }
            }
        } catch (IOException e) {
            if (!overwrite && isAlreadyCommitted(e)) {
                FileAlreadyExistsException taken = new FileAlreadyExistsException(path.toString());
                taken.initCause(e);
                throw taken;
            }
            throw e;
        }
    }

    /** Whether {@code e} says the object exists: S3A's existence check before the upload, or
     * S3's 412 Precondition Failed (S3A: RemoteFileChangedException) / 409 ConditionalRequestConflict
     * (another conditional PUT of the same key in flight) when the upload completes. */
    static boolean isAlreadyCommitted(Throwable e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            String name = t.getClass().getName();
            String message = String.valueOf(t.getMessage());
            if (t instanceof FileAlreadyExistsException
                    || name.equals("org.apache.hadoop.fs.FileAlreadyExistsException")
                    || name.equals("org.apache.hadoop.fs.s3a.RemoteFileChangedException")
                    || message.contains("412") || message.contains("PreconditionFailed")
                    || message.contains("ConditionalRequestConflict")) {
                return true;
            }
        }
        return false;
    }

    @Override
    public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
        return false;
    }
}
