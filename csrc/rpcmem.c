/* libcdsprpc.so for qnnemu: the FastRPC shared-memory API (rpcmem.h, remote.h) on plain Linux.
 *
 * On a Snapdragon, rpcmem_alloc returns ION/DMA-BUF memory that the CPU and the HTP share, and
 * rpcmem_to_fd the buffer's file descriptor, which apps (ONNX Runtime's QNN EP with
 * enable_htp_shared_memory_allocator=1) hand to QnnMem_register. Here every allocation is a
 * memfd (memfd_create), mapped MAP_SHARED: the backend maps the same fd and so sees the very
 * pages the app writes, with no copies.
 *
 * - rpcmem_init / rpcmem_deinit: accepted (no global state needs them);
 * - rpcmem_alloc(heapid, flags, int size) / rpcmem_alloc2(heapid, flags, size_t size):
 *   page-aligned, zero-filled memory; NULL for size <= 0 or when the system refuses;
 * - rpcmem_free(po): frees an allocation (ignores NULL and unknown pointers, as rpcmem does);
 * - rpcmem_to_fd(po): the fd of the allocation containing po (-1 if none);
 * - remote_register_buf / _attr / _attr2(buf, size, fd, attr): with attr
 *   FASTRPC_ATTR_IMPORT_BUFFER (256) an app buffer that rpcmem did not allocate is "imported":
 *   rpcmem_to_fd(buf) then returns a placeholder memfd of the buffer's size, and the qnnemu
 *   backend resolves that fd back to the app's own pages (qnnemu_rpcmem_imported) instead of
 *   mapping it; fd -1 deregisters. Other calls are accepted and ignored (nothing to map on x86);
 * - remote_register_dma_handle(_attr): accepted (0).
 *
 * Thread-safe: one mutex guards the allocation table.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define FASTRPC_ATTR_IMPORT_BUFFER 256

typedef struct {
  void *addr;    /* what the app sees (allocation or imported buffer) */
  size_t size;   /* bytes requested */
  size_t mapped; /* bytes mapped by us (page-rounded); 0 for imports */
  int fd;
  int imported;
} rpcmem_entry;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static rpcmem_entry *table = NULL;
static size_t used = 0, capacity = 0;
static int init_count = 0;

static int make_memfd(const char *name, size_t size) {
#ifdef SYS_memfd_create
  int fd = (int)syscall(SYS_memfd_create, name, 1u /* MFD_CLOEXEC */);
#else
  int fd = -1;
  errno = ENOSYS;
#endif
  if (fd < 0) return -1;
  if (ftruncate(fd, (off_t)size) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

static int table_add(rpcmem_entry e) { /* lock held */
  if (used == capacity) {
    size_t n = capacity ? capacity * 2 : 64;
    rpcmem_entry *t = realloc(table, n * sizeof *t);
    if (!t) return -1;
    table = t;
    capacity = n;
  }
  table[used++] = e;
  return 0;
}

/* Index of the entry containing address p (imports only if want_import), or -1. Lock held. */
static long table_find(const void *p, int exact) {
  const char *c = (const char *)p;
  for (size_t i = 0; i < used; i++) {
    const char *base = (const char *)table[i].addr;
    if (exact ? c == base : (c >= base && c < base + (table[i].size ? table[i].size : 1))) return (long)i;
  }
  return -1;
}

static void table_remove(size_t i) { /* lock held */
  table[i] = table[--used];
}

EXPORT void rpcmem_init(void) {
  pthread_mutex_lock(&lock);
  init_count++;
  pthread_mutex_unlock(&lock);
}

EXPORT void rpcmem_deinit(void) {
  pthread_mutex_lock(&lock);
  if (init_count > 0) init_count--;
  pthread_mutex_unlock(&lock);
}

EXPORT void *rpcmem_alloc2(int heapid, uint32_t flags, size_t size) {
  (void)heapid;
  (void)flags;
  if (size == 0 || size > (size_t)1 << 46) return NULL;
  long page = sysconf(_SC_PAGESIZE);
  size_t mapped = (size + (size_t)page - 1) / (size_t)page * (size_t)page;
  int fd = make_memfd("qnnemu-rpcmem", mapped);
  if (fd < 0) return NULL;
  void *p = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return NULL;
  }
  rpcmem_entry e = {p, size, mapped, fd, 0};
  pthread_mutex_lock(&lock);
  int rc = table_add(e);
  pthread_mutex_unlock(&lock);
  if (rc != 0) {
    munmap(p, mapped);
    close(fd);
    return NULL;
  }
  return p;
}

EXPORT void *rpcmem_alloc(int heapid, uint32_t flags, int size) {
  if (size <= 0) return NULL;
  return rpcmem_alloc2(heapid, flags, (size_t)size);
}

EXPORT void rpcmem_free(void *po) {
  if (!po) return;
  pthread_mutex_lock(&lock);
  long i = table_find(po, 1);
  rpcmem_entry e = {0};
  if (i >= 0 && !table[i].imported) {
    e = table[i];
    table_remove((size_t)i);
  }
  pthread_mutex_unlock(&lock);
  if (e.addr) {
    munmap(e.addr, e.mapped);
    close(e.fd);
  }
}

EXPORT int rpcmem_to_fd(void *po) {
  if (!po) return -1;
  pthread_mutex_lock(&lock);
  long i = table_find(po, 0);
  int fd = i >= 0 ? table[i].fd : -1;
  pthread_mutex_unlock(&lock);
  return fd;
}

static void register_buf(void *buf, size_t size, int fd, int attr) {
  if (!buf) return;
  if (fd == -1) { /* deregistration: drops an import (rpcmem allocations stay) */
    pthread_mutex_lock(&lock);
    long i = table_find(buf, 1);
    rpcmem_entry e = {0};
    if (i >= 0 && table[i].imported) {
      e = table[i];
      table_remove((size_t)i);
    }
    pthread_mutex_unlock(&lock);
    if (e.addr) close(e.fd);
    return;
  }
  if (!(attr & FASTRPC_ATTR_IMPORT_BUFFER) || size == 0) return;
  pthread_mutex_lock(&lock);
  long known = table_find(buf, 0);
  pthread_mutex_unlock(&lock);
  if (known >= 0) return; /* already rpcmem memory or already imported */
  int pfd = make_memfd("qnnemu-rpcmem-import", size);
  if (pfd < 0) return;
  rpcmem_entry e = {buf, size, 0, pfd, 1};
  pthread_mutex_lock(&lock);
  int rc = table_add(e);
  pthread_mutex_unlock(&lock);
  if (rc != 0) close(pfd);
}

EXPORT void remote_register_buf(void *buf, int size, int fd) {
  register_buf(buf, size > 0 ? (size_t)size : 0, fd, 0);
}

EXPORT void remote_register_buf_attr(void *buf, int size, int fd, int attr) {
  register_buf(buf, size > 0 ? (size_t)size : 0, fd, attr);
}

EXPORT void remote_register_buf_attr2(void *buf, size_t size, int fd, int attr) {
  register_buf(buf, size, fd, attr);
}

EXPORT int remote_register_dma_handle(int fd, uint32_t len) {
  (void)fd;
  (void)len;
  return 0;
}

EXPORT int remote_register_dma_handle_attr(int fd, uint32_t len, uint32_t attr) {
  (void)fd;
  (void)len;
  (void)attr;
  return 0;
}

/* ---- qnnemu private: used by the backend (qnnemu/core/mem.py) and the tests ---- */

/* 1 and the app's address/size if fd is the placeholder of an imported buffer, else 0. */
EXPORT int qnnemu_rpcmem_imported(int fd, uint64_t *addr, uint64_t *size) {
  int found = 0;
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < used; i++) {
    if (table[i].imported && table[i].fd == fd) {
      if (addr) *addr = (uint64_t)(uintptr_t)table[i].addr;
      if (size) *size = (uint64_t)table[i].size;
      found = 1;
      break;
    }
  }
  pthread_mutex_unlock(&lock);
  return found;
}

/* Number of live rpcmem allocations (imports excluded). */
EXPORT int qnnemu_rpcmem_live(void) {
  int n = 0;
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < used; i++) n += !table[i].imported;
  pthread_mutex_unlock(&lock);
  return n;
}
