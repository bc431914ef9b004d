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

// CPU affinity by raw system calls (the cpu_set_t macros need _GNU_SOURCE before Glibc's first
// header, which a module's shim cannot arrange). Masks of up to 1,024 CPUs.

/// The CPUs the process may run on (its main thread's affinity mask, which no pool changes) into
/// `mask`; returns the bytes the kernel wrote, or -1.
static inline long pk_process_cpu_mask(unsigned long mask[16]) {
    for (int i = 0; i < 16; i++) mask[i] = 0;
    return syscall(SYS_sched_getaffinity, getpid(), 16 * sizeof(unsigned long), mask);
}

/// How many CPUs the process may run on, or -1.
static inline int pk_allowed_cpus(void) {
    unsigned long mask[16];
    long bytes = pk_process_cpu_mask(mask);
    if (bytes < 0) return -1;
    int count = 0;
    for (long i = 0; i < bytes / (long)sizeof(unsigned long); i++) count += __builtin_popcountl(mask[i]);
    return count;
}

/// Pins the calling thread to the `n`-th (from 0) of the CPUs the process may run on (as
/// `pk_allowed_cpus` counts them). Returns that CPU's number, or -1 (no such CPU, or the kernel
/// refused).
static inline int pk_thread_pin_to_allowed(int n) {
    unsigned long mask[16];
    long bytes = pk_process_cpu_mask(mask);
    if (bytes < 0 || n < 0) return -1;
    const long width = 8 * (long)sizeof(unsigned long);
    for (long cpu = 0; cpu < bytes * 8; cpu++) {
        if (!(mask[cpu / width] & (1UL << (cpu % width)))) continue;
        if (n-- > 0) continue;
        unsigned long one[16] = {0};
        one[cpu / width] = 1UL << (cpu % width);
        return syscall(SYS_sched_setaffinity, 0, sizeof one, one) == 0 ? (int)cpu : -1;
    }
    return -1;
}

/// Raises the soft limit on open files to the hard limit. Writes the soft limit found and the
/// hard limit; returns the soft limit now in force (the one found when the raise was refused).
static inline long pk_raise_open_files(long *soft_before, long *hard) {
    struct rlimit limit;
    if (getrlimit(RLIMIT_NOFILE, &limit) != 0) { *soft_before = -1; *hard = -1; return -1; }
    *soft_before = limit.rlim_cur == RLIM_INFINITY ? -1 : (long)limit.rlim_cur;
    *hard = limit.rlim_max == RLIM_INFINITY ? -1 : (long)limit.rlim_max;
    if (limit.rlim_cur == limit.rlim_max) return *soft_before;
    limit.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0) return *soft_before;
    return *hard;
}
