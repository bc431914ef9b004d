// Linux calls that Swift's Glibc module does not export: extended attributes (getxattr,
// setxattr), where the local destination records each output's fingerprint, and mallinfo2,
// with which the tests count heap bytes in use.
#include <sys/xattr.h>
#include <malloc.h>

// Thread priority: on Linux the nice value belongs to each thread (a thread's id names it to
// setpriority). `pipelinectl serve` lowers the threads that answer HTTP so image work keeps the
// cores under overload.
#include <errno.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

/// Raises the calling thread's nice value to `nice` (lower priority) unless it is already at least
/// that. Returns the thread's nice value afterwards, or -100 when the kernel refused.
static inline int pk_thread_nice_at_least(int nice) {
    pid_t tid = (pid_t)syscall(SYS_gettid);
    errno = 0;
    int now = getpriority(PRIO_PROCESS, (id_t)tid);
    if (now == -1 && errno != 0) return -100;
    if (now >= nice) return now;
    if (setpriority(PRIO_PROCESS, (id_t)tid, nice) != 0) return -100;
    return nice;
}

#include <sys/prctl.h>
/// Names the calling thread as top -H and /proc show it (at most 15 characters are kept).
static inline void pk_thread_set_name(const char *name) { (void)prctl(PR_SET_NAME, name, 0, 0, 0); }
