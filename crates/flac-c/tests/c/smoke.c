/* The C API end to end: attach with copy-on-write, a flush with metadata, reopen; FlacFS
 * write/read/stat. Prints "ok" and exits 0, or names the failed check and exits 1. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include "flac.h"

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "failed: %s (line %d): %s\n", #c, __LINE__, flac_last_error()); return 1; } } while (0)

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: smoke FLAC_IMAGE FS_IMAGE\n"); return 2; }
    const size_t n = 16 * 4096;
    CHECK(flac_space_base(NULL) == NULL && errno == EINVAL);
    CHECK(flacfs_open(NULL, "/x", O_RDONLY, 0) == -1 && errno == EINVAL);
    flac_t *f = flac_init(argv[1], 64 << 20, 8 << 20, 0);
    CHECK(f != NULL);
    unsigned char *buf = flac_buffer_alloc(f, n);
    CHECK(buf != NULL);
    for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)(i * 7);
    unsigned char *space = flac_space_base(f);
    flac_xfer_t x;
    CHECK(flac_zcopy_to_flac(f, space, buf, n, &x) == 0);
    CHECK(x.mapped_bytes == n && x.copied_bytes == 0);
    buf[100] = 0xFF; /* copy-on-write: the space keeps the attached bytes */
    unsigned char check[64];
    CHECK(flac_zcopy_from_flac(f, check, space + 64, sizeof check, FLAC_ATTACH_COW, &x) == 0);
    CHECK(check[100 - 64] == (unsigned char)(100 * 7));
    flac_pflush_t *h = flac_pflush_handle(f);
    CHECK(flac_pflush_add(f, h, space, n) == 16);
    CHECK(flac_pflush_commit(f, h, "c-key", "c-value", 7) == 0);
    CHECK(flac_buffer_free(f, buf) == 0);
    CHECK(flac_attach(f, space, space + 1, 4096, FLAC_ATTACH_COW) == -1 && errno == EINVAL);
    flac_close(f);
    f = flac_init(argv[1], 0, 8 << 20, 0);
    CHECK(f != NULL);
    char v[16] = {0};
    CHECK(flac_meta_get(f, "c-key", v, sizeof v) == 7 && memcmp(v, "c-value", 7) == 0);
    space = flac_space_base(f);
    CHECK(flac_zcopy_from_flac(f, check, space + 4096 * 3, sizeof check, FLAC_ATTACH_COW, &x) == 0);
    CHECK(check[5] == (unsigned char)((4096 * 3 + 5) * 7));
    flac_close(f);
    CHECK(flac_init("/nonexistent/dir/x", 0, 8 << 20, 0) == NULL && errno == ENOENT);

    flacfs_t *fs = flacfs_mount(argv[2], "flac", 64 << 20, 8 << 20, 1);
    CHECK(fs != NULL);
    CHECK(flacfs_mkdir(fs, "/dir", 0755) == 0);
    int fd = flacfs_open(fs, "/dir/file", O_CREAT | O_RDWR, 0644);
    CHECK(fd >= 0);
    CHECK(flacfs_write(fs, fd, "hello, flac", 11) == 11);
    char r[16] = {0};
    CHECK(flacfs_pread(fs, fd, r, sizeof r, 7) == 4 && memcmp(r, "flac", 4) == 0);
    CHECK(flacfs_close(fs, fd) == 0);
    struct stat st;
    CHECK(flacfs_stat(fs, "/dir/file", &st) == 0 && st.st_size == 11 && S_ISREG(st.st_mode));
    CHECK(flacfs_stat(fs, "/dir/none", &st) == -1 && errno == ENOENT);
    CHECK(flacfs_rmdir(fs, "/dir") == -1 && errno == ENOTEMPTY);
    CHECK(flacfs_flac(fs) != NULL);
    CHECK(flacfs_unmount(fs) == 0);
    CHECK(flacfs_mount(argv[2], "nope", 0, 8 << 20, 1) == NULL && errno == EINVAL);
    puts("ok");
    return 0;
}
