/* A small disk by fault injection, for tests that cannot mount a tmpfs (no CAP_SYS_ADMIN):
 * LD_PRELOAD'ed into a child process, it makes the directory tree STRATA_TEST_SMALL_DISK behave
 * as a filesystem of STRATA_TEST_SMALL_DISK_BYTES bytes. Usage is the apparent size of the
 * regular files under it (walked on each call); a write(2)/pwrite(2) into a file there that would
 * grow the total past the limit fails with ENOSPC, writing nothing; a posix_fallocate(3) that
 * would fails with ENOSPC after growing the file up to the limit, as ext4 leaves the blocks a
 * failed fallocate got; and statvfs(3) of a path there reports the limit and what is left of it.
 * Everything else is the real call. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <unistd.h>

static uint64_t g_usage;

static int Add(const char* path, const struct stat* st, int flag, struct FTW* ftw) {
  (void)path;
  (void)ftw;
  if (flag == FTW_F && S_ISREG(st->st_mode)) g_usage += (uint64_t)st->st_size;
  return 0;
}

/* The limit, and whether `path` is under the small disk's directory. */
static int Under(const char* path, uint64_t* limit) {
  const char* dir = getenv("STRATA_TEST_SMALL_DISK");
  const char* bytes = getenv("STRATA_TEST_SMALL_DISK_BYTES");
  if (dir == NULL || bytes == NULL || path == NULL) return 0;
  const size_t n = strlen(dir);
  if (strncmp(path, dir, n) != 0 || (path[n] != '\0' && path[n] != '/')) return 0;
  *limit = strtoull(bytes, NULL, 10);
  return 1;
}

static uint64_t Usage(void) {
  g_usage = 0;
  nftw(getenv("STRATA_TEST_SMALL_DISK"), Add, 16, FTW_PHYS);
  return g_usage;
}

/* The limit, and whether fd is a file under the small disk's directory. */
static int FdUnder(int fd, uint64_t* limit) {
  char link[64], path[PATH_MAX];
  snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
  const ssize_t len = readlink(link, path, sizeof(path) - 1);
  if (len <= 0) return 0;
  path[len] = '\0';
  return Under(path, limit);
}

/* ENOSPC (returns 1) if writing n bytes at offset off (-1: the file position) of fd would pass
 * the limit. */
static int Full(int fd, size_t n, off_t off) {
  uint64_t limit = 0;
  if (!FdUnder(fd, &limit)) return 0;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
  if (off < 0) off = lseek(fd, 0, SEEK_CUR);
  const uint64_t end = (uint64_t)off + n;
  const uint64_t growth = end > (uint64_t)st.st_size ? end - (uint64_t)st.st_size : 0;
  return growth > 0 && Usage() + growth > limit;
}

ssize_t write(int fd, const void* buf, size_t n) {
  static ssize_t (*real)(int, const void*, size_t);
  if (real == NULL) real = (ssize_t(*)(int, const void*, size_t))dlsym(RTLD_NEXT, "write");
  if (Full(fd, n, -1)) {
    errno = ENOSPC;
    return -1;
  }
  return real(fd, buf, n);
}

ssize_t pwrite(int fd, const void* buf, size_t n, off_t off) {
  static ssize_t (*real)(int, const void*, size_t, off_t);
  if (real == NULL) real = (ssize_t(*)(int, const void*, size_t, off_t))dlsym(RTLD_NEXT, "pwrite");
  if (Full(fd, n, off)) {
    errno = ENOSPC;
    return -1;
  }
  return real(fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void* buf, size_t n, off_t off) { return pwrite(fd, buf, n, off); }

int posix_fallocate(int fd, off_t off, off_t len) {
  static int (*real)(int, off_t, off_t);
  if (real == NULL) real = (int (*)(int, off_t, off_t))dlsym(RTLD_NEXT, "posix_fallocate");
  if (len <= 0 || !Full(fd, (size_t)len, off)) return real(fd, off, len);
  /* What fits is allocated, the rest is not: the file grows to the limit. */
  struct stat st;
  uint64_t limit = 0;
  if (FdUnder(fd, &limit) && fstat(fd, &st) == 0) {
    const uint64_t used = Usage();
    if (used < limit) real(fd, st.st_size, (off_t)(limit - used));
  }
  return ENOSPC;
}

int posix_fallocate64(int fd, off_t off, off_t len) { return posix_fallocate(fd, off, len); }

int statvfs(const char* path, struct statvfs* out) {
  static int (*real)(const char*, struct statvfs*);
  if (real == NULL) real = (int (*)(const char*, struct statvfs*))dlsym(RTLD_NEXT, "statvfs");
  const int rc = real(path, out);
  char abs[PATH_MAX];
  uint64_t limit = 0;
  if (rc != 0 || realpath(path, abs) == NULL || !Under(abs, &limit)) return rc;
  const uint64_t used = Usage();
  const uint64_t left = used < limit ? limit - used : 0;
  out->f_blocks = limit / out->f_frsize;
  out->f_bfree = out->f_bavail = left / out->f_frsize;
  return rc;
}

/* On 64-bit Linux the *64 structs are the same as the plain ones. */
int statvfs64(const char* path, struct statvfs64* out) {
  return statvfs(path, (struct statvfs*)out);
}

/* A separate filesystem has its own device number: what tells strata train's space check that
 * needs there do not add up with those elsewhere on the real disk. */
int stat(const char* path, struct stat* out) {
  static int (*real)(const char*, struct stat*);
  if (real == NULL) real = (int (*)(const char*, struct stat*))dlsym(RTLD_NEXT, "stat");
  const int rc = real(path, out);
  char abs[PATH_MAX];
  uint64_t limit = 0;
  if (rc == 0 && realpath(path, abs) != NULL && Under(abs, &limit)) out->st_dev ^= 0x5a5a5a;
  return rc;
}

int stat64(const char* path, struct stat64* out) { return stat(path, (struct stat*)out); }
