/* C API of FLAC and FlacFS (ssdlab's flac case study). Link with -lssdlab_flac_c (target/release/libssdlab_flac_c.so).
 *
 * FLAC: one virtual space over DRAM and emulated persistent memory. Data moves between
 * application buffers and the space by remapping pages (zero-copy) with copy-on-write
 * protection; flushes commit pages and metadata atomically through a metadata log.
 * FlacFS: a library file system on FLAC.
 *
 * Every call returning int returns 0 (or a count) on success and -1 on failure with errno
 * set; flac_last_error() describes the last failure of the calling thread. A NULL handle fails
 * with EINVAL; an internal error of ssdlab fails with EIO (it never unwinds into the caller). */
#ifndef SSDLAB_FLAC_H
#define SSDLAB_FLAC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/stat.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct flac flac_t;
typedef struct flac_pflush flac_pflush_t;
typedef struct flacfs flacfs_t;

/* What a transfer did. */
typedef struct {
    uint64_t mapped_bytes; /* moved by mapping frames */
    uint64_t copied_bytes; /* moved by copying */
    uint64_t pm_pages;     /* pages served from PM (misses) */
} flac_xfer_t;

#define FLAC_ATTACH_COW 0       /* both sides writable, a write copies the page */
#define FLAC_ATTACH_READONLY 1  /* the destination is read-only */

const char *flac_last_error(void);

/* Create (when create_pm_bytes > 0 and the file does not exist) or recover the FLAC space in
 * the PM image pm_path; dram_bytes of DRAM frames (a multiple of 2 MiB); pm_cost: model PM's
 * latency and bandwidth (1) or not (0). */
flac_t *flac_init(const char *pm_path, uint64_t create_pm_bytes, uint64_t dram_bytes, int pm_cost);
void flac_close(flac_t *f);

void *flac_space_base(flac_t *f);
uint64_t flac_space_bytes(flac_t *f);

/* Memory whose pages can be attached to and from the space without copying. */
void *flac_buffer_alloc(flac_t *f, size_t len);
int flac_buffer_free(flac_t *f, void *buf);

int flac_attach(flac_t *f, void *to, const void *from, size_t len, int mode);
int flac_zcopy_to_flac(flac_t *f, void *to, const void *from, size_t len, flac_xfer_t *out);
int flac_zcopy_from_flac(flac_t *f, void *to, const void *from, size_t len, int mode, flac_xfer_t *out);

flac_pflush_t *flac_pflush_handle(flac_t *f);
/* Returns the number of dirty pages added. */
int flac_pflush_add(flac_t *f, flac_pflush_t *h, void *addr, size_t len);
/* Commits the handle's pages and, if key is not NULL, the metadata pair key=val, atomically.
 * Consumes the handle. */
int flac_pflush_commit(flac_t *f, flac_pflush_t *h, const char *key, const void *val, size_t val_len);
int flac_pfree(flac_t *f, void *addr, size_t len);
/* Copies the metadata value of key into buf (up to cap bytes); returns its length. */
ssize_t flac_meta_get(flac_t *f, const char *key, void *buf, size_t cap);

/* FlacFS (engine "flac") or a baseline ("pagecache", "dax") on the image pm_path. */
flacfs_t *flacfs_mount(const char *pm_path, const char *engine, uint64_t create_pm_bytes, uint64_t dram_bytes, int pm_cost);
int flacfs_unmount(flacfs_t *fs);
/* The FLAC space under FlacFS (for flac_buffer_alloc); NULL for the baselines. */
flac_t *flacfs_flac(flacfs_t *fs);

int flacfs_open(flacfs_t *fs, const char *path, int flags, mode_t mode);
int flacfs_close(flacfs_t *fs, int fd);
ssize_t flacfs_read(flacfs_t *fs, int fd, void *buf, size_t n);
ssize_t flacfs_write(flacfs_t *fs, int fd, const void *buf, size_t n);
ssize_t flacfs_pread(flacfs_t *fs, int fd, void *buf, size_t n, off_t off);
ssize_t flacfs_pwrite(flacfs_t *fs, int fd, const void *buf, size_t n, off_t off);
off_t flacfs_lseek(flacfs_t *fs, int fd, off_t off, int whence);
int flacfs_fsync(flacfs_t *fs, int fd);
int flacfs_ftruncate(flacfs_t *fs, int fd, off_t len);
int flacfs_stat(flacfs_t *fs, const char *path, struct stat *st);
int flacfs_mkdir(flacfs_t *fs, const char *path, mode_t mode);
int flacfs_unlink(flacfs_t *fs, const char *path);
int flacfs_rmdir(flacfs_t *fs, const char *path);
int flacfs_rename(flacfs_t *fs, const char *from, const char *to);
int flacfs_sync(flacfs_t *fs);

#ifdef __cplusplus
}
#endif
#endif
