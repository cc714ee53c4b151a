/* SPDX-License-Identifier: MIT */
/*
 * The API in a job of one (no launcher): what a program can get wrong gets
 * a clear error and loses nothing; shared memory works as memory; a touch
 * outside init..finalize ends the process with a message.
 */
#include "check.h"
#include "pmdsm.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

/* Run fn in a child; returns its stderr (static) and its status. */
static const char *in_child(void (*fn)(void *), void *arg, int *status)
{
	static char out[4096];
	int fds[2];

	CHECK(pipe(fds) == 0);
	pid_t pid = fork();

	CHECK(pid >= 0);
	if (pid == 0) {
		dup2(fds[1], STDERR_FILENO);
		close(fds[0]);
		fn(arg);
		_exit(0);
	}
	close(fds[1]);
	size_t n = 0;
	ssize_t r;

	while (n < sizeof(out) - 1 && (r = read(fds[0], out + n, sizeof(out) - 1 - n)) > 0)
		n += (size_t)r;
	out[n] = 0;
	close(fds[0]);
	CHECK(waitpid(pid, status, 0) == pid);
	return out;
}

static void touch(void *p)
{
	*(volatile char *)p = 1;
}

static bool kernel_at_least(int major, int minor)
{
	struct utsname u;
	int ma = 0, mi = 0;

	CHECK_OK(uname(&u));
	CHECK(sscanf(u.release, "%d.%d", &ma, &mi) == 2);
	return ma > major || (ma == major && mi >= minor);
}

/* Calls fn with the contents of /proc/self/task/<tid>/<file> of every
 * thread of this process but this one (the service thread; with uffd-wp
 * also the write-fault thread). */
static void other_threads(const char *file, void (*fn)(const char *text, void *arg), void *arg)
{
	DIR *dir = opendir("/proc/self/task");
	struct dirent *e;
	char path[300], text[4096];

	CHECK(dir != NULL);
	while ((e = readdir(dir))) {
		if (e->d_name[0] == '.' || atol(e->d_name) == (long)gettid())
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/%s", e->d_name, file);
		int fd = open(path, O_RDONLY);
		ssize_t n = fd >= 0 ? read(fd, text, sizeof(text) - 1) : -1;

		if (fd >= 0)
			close(fd);
		text[n > 0 ? n : 0] = 0;
		fn(text, arg);
	}
	closedir(dir);
}

/* "tid (comm) S ...": the state after the comm's ')'. */
static void count_runnable(const char *stat, void *arg)
{
	const char *end = strrchr(stat, ')');

	if (end && end[1] == ' ' && end[2] == 'R')
		++*(int *)arg;
}

/* Of samples looks, 1 ms apart, at the other threads, how many found one
 * runnable ('R'): asleep in pm_wait() the service thread is 'S', polling
 * it is 'R' even while it waits for a core. */
static int service_runnable(int samples)
{
	int runnable = 0;

	for (int i = 0; i < samples; i++) {
		other_threads("stat", count_runnable, &runnable);
		usleep(1000);
	}
	return runnable;
}

/* The "se.slice : N" line of /proc/<tid>/sched. */
static void read_slice(const char *sched, void *arg)
{
	const char *line = strstr(sched, "\nse.slice");

	if (line)
		*(long *)arg = atol(strchr(line, ':') + 1);
}

/* The slice of a thread of this process other than this one, 0 when the
 * kernel does not say (the service thread is the only other thread). */
static long service_slice_ns(void)
{
	long slice = 0;

	other_threads("sched", read_slice, &slice);
	return slice;
}

int main(int argc, char **argv)
{
	/* The write detection to test: segv, uffd-async or uffd-wp. */
	const char *method = argc > 1 ? argv[1] : "segv";

	/* A job of one, whatever launched the test. */
	check_unset_pmix();

	/* Before init. */
	errno = 0;
	CHECK(pmdsm_malloc(4096) == NULL);
	CHECK_EQ(errno, ENXIO);
	CHECK_ERR(pmdsm_barrier(), -ENXIO);
	CHECK_ERR(pmdsm_barrier_with(NULL, 0), -ENXIO);
	CHECK_ERR(pmdsm_barrier_with_notify(NULL, 0), -ENXIO);
	CHECK_ERR(pmdsm_barrier_with_wait(), -ENXIO);
	CHECK_ERR(pmdsm_lock(1), -ENXIO);
	CHECK_ERR(pmdsm_rank(), -ENXIO);
	CHECK_ERR(pmdsm_home((void *)&errno), -ENXIO);
	CHECK(pmdsm_write_detect() == NULL);
	CHECK_ERR(pmdsm_prefetch_mode(PMDSM_PREFETCH_OVERLAP), -ENXIO);

	/* Bad settings are refused. */
	setenv("PMDSM_HEAP_SIZE", "lots", 1);
	CHECK_ERR(pmdsm_init(NULL), -EINVAL);
	setenv("PMDSM_HEAP_SIZE", "16M", 1);
	setenv("PMDSM_WRITE_DETECT", "psychic", 1);
	CHECK_ERR(pmdsm_init(NULL), -EINVAL);
	setenv("PMDSM_WRITE_DETECT", method, 1);
	setenv("PMDSM_READ_AHEAD", "some", 1);
	CHECK_ERR(pmdsm_init(NULL), -EINVAL);
	setenv("PMDSM_READ_AHEAD", "100000", 1);   /* beyond the largest window */
	CHECK_ERR(pmdsm_init(NULL), -EINVAL);
	setenv("PMDSM_READ_AHEAD", "-1", 1);
	CHECK_ERR(pmdsm_init(NULL), -EINVAL);
	unsetenv("PMDSM_READ_AHEAD");
	setenv("PMDSM_SPIN_US", "soon", 1);
	CHECK_ERR(pmdsm_init(NULL), -EINVAL);
	setenv("PMDSM_SPIN_US", "2000000", 1);     /* beyond a second */
	CHECK_ERR(pmdsm_init(NULL), -EINVAL);
	unsetenv("PMDSM_SPIN_US");
	setenv("PMDSM_PUSH", "2", 1);
	CHECK_ERR(pmdsm_init(NULL), -EINVAL);
	unsetenv("PMDSM_PUSH");
	setenv("PMDSM_SERVICE_SCHED", "eager", 1);
	CHECK_ERR(pmdsm_init(NULL), -EINVAL);
	unsetenv("PMDSM_SERVICE_SCHED");
	setenv("PMDSM_PREFETCH_MODE", "later", 1);
	CHECK_ERR(pmdsm_init(NULL), -EINVAL);
	unsetenv("PMDSM_PREFETCH_MODE");

	CHECK_OK(pmdsm_init(NULL));
	/* The method asked for is the one in use (each is on this kernel). */
	CHECK(pmdsm_write_detect() != NULL);
	CHECK_EQ(strcmp(pmdsm_write_detect(), method), 0);
	/* The service thread runs with the shortest slice (by default) where
	 * the kernel takes one (Linux 6.12+; it shows it in /proc). */
	if (kernel_at_least(6, 12))
		CHECK_EQ(service_slice_ns(), 100000);
	CHECK_ERR(pmdsm_init(NULL), -EALREADY);
	CHECK_ERR(pmdsm_prefetch_mode((enum pmdsm_prefetch_mode)7), -EINVAL);
	CHECK_OK(pmdsm_prefetch_mode(PMDSM_PREFETCH_OVERLAP));
	CHECK_OK(pmdsm_prefetch_mode(PMDSM_PREFETCH_WAIT));
	CHECK_EQ(pmdsm_rank(), 0);
	CHECK_EQ(pmdsm_size(), 1);

	/* Memory: zero at first, holds what is written, across barriers. */
	size_t n = 1 << 20;
	uint8_t *p = pmdsm_malloc(n);

	CHECK(p != NULL);
	CHECK(((uintptr_t)p & 4095) == 0);
	for (size_t i = 0; i < n; i++)
		CHECK_EQ(p[i], 0);
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(i * 7);
	CHECK_OK(pmdsm_barrier());
	for (size_t i = 0; i < n; i++)
		CHECK_EQ(p[i], (uint8_t)(i * 7));

	/* A barrier of a few: alone, only with nobody; this rank, a rank out
	 * of range or no array are refused (pmdsm-check meets neighbours). */
	int self = 0, beyond = 1, below = -1;

	CHECK_OK(pmdsm_barrier_with(NULL, 0));
	CHECK_ERR(pmdsm_barrier_with(&self, 1), -EINVAL);
	CHECK_ERR(pmdsm_barrier_with(&beyond, 1), -EINVAL);
	CHECK_ERR(pmdsm_barrier_with(&below, 1), -EINVAL);
	CHECK_ERR(pmdsm_barrier_with(NULL, 1), -EINVAL);
	for (size_t i = 0; i < n; i++)
		CHECK_EQ(p[i], (uint8_t)(i * 7));

	/* Its two halves: a wait needs a notify; between them no other
	 * synchronisation is taken, and the writes made there are the next
	 * release's. */
	CHECK_ERR(pmdsm_barrier_with_wait(), -ENOMSG);
	CHECK_ERR(pmdsm_barrier_with_notify(&self, 1), -EINVAL);
	CHECK_ERR(pmdsm_barrier_with_wait(), -ENOMSG);
	CHECK_OK(pmdsm_barrier_with_notify(NULL, 0));
	p[1] = 99;
	CHECK_ERR(pmdsm_barrier_with_notify(NULL, 0), -EBUSY);
	CHECK_ERR(pmdsm_barrier_with(NULL, 0), -EBUSY);
	CHECK_ERR(pmdsm_barrier(), -EBUSY);
	CHECK_ERR(pmdsm_lock(1), -EBUSY);
	CHECK_ERR(pmdsm_unlock(1), -EBUSY);
	CHECK_ERR(pmdsm_free(p), -EBUSY);
	CHECK_ERR(pmdsm_finalize(), -EBUSY);
	CHECK(strstr(pmdsm_strerror(-EBUSY), "not waited for") != NULL);
	CHECK_OK(pmdsm_barrier_with_wait());
	CHECK_ERR(pmdsm_barrier_with_wait(), -ENOMSG);
	CHECK_OK(pmdsm_barrier());
	CHECK_EQ(p[1], 99);
	p[1] = (uint8_t)7;

	/* Locks. */
	CHECK_OK(pmdsm_lock(5));
	CHECK_ERR(pmdsm_lock(5), -EDEADLK);
	p[0] = 42;
	CHECK_OK(pmdsm_unlock(5));
	CHECK_ERR(pmdsm_unlock(5), -EPERM);
	CHECK_ERR(pmdsm_unlock(6), -EPERM);
	CHECK_ERR(pmdsm_lock(PMDSM_LOCKS), -EINVAL);
	CHECK(strstr(pmdsm_strerror(-EPERM), "not held") != NULL);
	CHECK_OK(pmdsm_lock(5));
	CHECK_EQ(p[0], 42);
	CHECK_OK(pmdsm_unlock(5));

	/* Beyond the heap: NULL, ENOMEM, and the heap still works. */
	errno = 0;
	CHECK(pmdsm_malloc(64 << 20) == NULL);
	CHECK_EQ(errno, ENOMEM);
	errno = 0;
	CHECK(pmdsm_malloc(0) == NULL);
	CHECK_EQ(errno, EINVAL);
	uint8_t *q = pmdsm_alloc(15 << 20, PMDSM_CYCLIC);

	CHECK(q != NULL);
	q[(15 << 20) - 1] = 9;
	CHECK_ERR(pmdsm_free(p + 4096), -EINVAL);
	CHECK_OK(pmdsm_free(q));
	CHECK_EQ(p[1], 7);

	/* Cache colouring (pmdsm.h): q, 15 MiB, took the rest of the heap
	 * whole, having no room for a gap.  With p (1 MiB) allocated, the next
	 * large allocation starts pmdsm_colour_pages(1) pages after p's end,
	 * comes back there when freed and made again, and the gap takes a
	 * smaller one. */
	CHECK(pmdsm_colour_pages(0) == 0 && pmdsm_colour_pages(1) > 0);
	uint8_t *c1 = pmdsm_malloc(2 << 20);

	CHECK(c1 == p + n + (size_t)pmdsm_colour_pages(1) * 4096);
	CHECK_OK(pmdsm_free(c1));
	CHECK(pmdsm_malloc(2 << 20) == c1);
	uint8_t *small = pmdsm_malloc(4096);

	CHECK(small == p + n);
	CHECK_OK(pmdsm_free(small));
	CHECK_OK(pmdsm_free(c1));

	/* First touch: no home until a page is touched (asking does not
	 * touch it), then the toucher's, by a read or a write; a placement
	 * that is none of the three is refused. */
	errno = 0;
	CHECK(pmdsm_alloc(4096, (enum pmdsm_placement)7) == NULL);
	CHECK_EQ(errno, EINVAL);
	uint8_t *ft = pmdsm_alloc(2 * 4096, PMDSM_FIRST_TOUCH);

	CHECK(ft != NULL);
	CHECK_ERR(pmdsm_home(ft), -ENODATA);
	CHECK_ERR(pmdsm_home(ft + 4096), -ENODATA);
	CHECK_EQ(ft[1], 0);
	CHECK_EQ(pmdsm_home(ft), 0);
	CHECK_ERR(pmdsm_home(ft + 4096), -ENODATA);
	ft[4096 + 5] = 3;
	CHECK_EQ(pmdsm_home(ft + 4096), 0);
	CHECK_EQ(ft[4096 + 5], 3);
	CHECK_EQ(pmdsm_home(p), 0);
	CHECK_ERR(pmdsm_home((void *)&errno), -EINVAL);
	CHECK_OK(pmdsm_free(ft));
	CHECK_ERR(pmdsm_home(ft), -EINVAL);

	/* A freed allocation's memory: the process ends with a message. */
	int status;
	const char *err = in_child(touch, q, &status);

	CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 1, "status %#x: %s", status, err);
	CHECK_MSG(strstr(err, "which no allocation holds") != NULL, "%s", err);

	struct pmdsm_stats st;

	CHECK_OK(pmdsm_stats_get(&st, sizeof(st)));
	/* A rank alone homes every page and no other rank copies one: its
	 * writes are never watched, whatever the method (no fault, no scan). */
	CHECK_EQ(st.write_faults, 0);
	CHECK_EQ(st.wp_scans, 0);
	CHECK_EQ(st.home_shared, 0);
	CHECK_EQ(st.barriers, 12);              /* two in each of five pmdsm_free */
	CHECK_EQ(st.peer_barriers, 2);          /* the refused ones not counted; a
	                                           notify and its wait are one */
	CHECK_EQ(st.locks, 2);

	CHECK_OK(pmdsm_finalize());
	CHECK_ERR(pmdsm_finalize(), -ENXIO);

	/* After finalize: a message, not a bare segmentation fault. */
	err = in_child(touch, p, &status);
	CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 1, "status %#x: %s", status, err);
	CHECK_MSG(strstr(err, "outside pmdsm_init()..pmdsm_finalize()") != NULL, "%s", err);

	/* A fault elsewhere is still the program's own: the handler it had
	 * before (a sanitizer's, which reports, then exits or aborts as its
	 * options say) or the default (killed by SIGSEGV); not ours. */
	err = in_child(touch, (void *)16, &status);
	CHECK_MSG(strstr(err, "pmdsm[") == NULL, "%s", err);
	CHECK_MSG((WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV) ||
		  (strstr(err, "Sanitizer") && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)),
		  "status %#x: %s", status, err);

	/* The service thread asleep while the application computes (none, as
	 * short) or polling (poll): what PMDSM_SERVICE_SCHED=poll changes. */
	setenv("PMDSM_SERVICE_SCHED", "none", 1);
	CHECK_OK(pmdsm_init(NULL));
	CHECK(service_runnable(100) <= 20);
	CHECK_OK(pmdsm_finalize());
	setenv("PMDSM_SERVICE_SCHED", "poll", 1);
	CHECK_OK(pmdsm_init(NULL));
	if (kernel_at_least(6, 12))
		CHECK(service_slice_ns() != 100000);
	CHECK(service_runnable(100) >= 80);
	CHECK_OK(pmdsm_finalize());
	unsetenv("PMDSM_SERVICE_SCHED");

	/* And the DSM opens again; PMDSM_STATS=1 logs every counter at
	 * finalize, on one line. */
	setenv("PMDSM_STATS", "yes", 1);
	CHECK_ERR(pmdsm_init(NULL), -EINVAL);
	setenv("PMDSM_STATS", "1", 1);
	setenv("PMDSM_SERVICE_SCHED", "none", 1);
	CHECK_OK(pmdsm_init(NULL));
	/* none: the service thread keeps the slice it was created with. */
	if (kernel_at_least(6, 12))
		CHECK(service_slice_ns() != 100000);
	unsetenv("PMDSM_SERVICE_SCHED");
	p = pmdsm_malloc(4096);
	CHECK(p != NULL);
	CHECK_EQ(p[0], 0);

	char logged[2048] = "";
	int saved = dup(STDERR_FILENO), fd = memfd_create("stderr", 0);

	CHECK(saved >= 0 && fd >= 0);
	CHECK(dup2(fd, STDERR_FILENO) == STDERR_FILENO);
	int fin = pmdsm_finalize();

	CHECK(dup2(saved, STDERR_FILENO) == STDERR_FILENO);
	CHECK_OK(fin);
	CHECK(pread(fd, logged, sizeof(logged) - 1, 0) > 0);
	close(fd);
	close(saved);
	CHECK_MSG(strstr(logged, "pmdsm[0]: counters: read_faults=0 write_faults=") == logged,
		  "%s", logged);
	CHECK_MSG(strstr(logged, " barriers=1 ") && strstr(logged, " read_ahead_pages=0 ") &&
		  strstr(logged, " home_shared=0 ") && strstr(logged, " prefetch_used=0 ") && strstr(logged, " home_asks=0 ") && strstr(logged, " cold_writes=0 ") &&
		  strstr(logged, " prefetch_waits=0 ") && strstr(logged, " peer_barriers=0 ") &&
		  strstr(logged, " peer_barrier_ns=0 ") && strstr(logged, " pushed_pages=0 ") &&
		  strstr(logged, " push_taken=0 ") && strstr(logged, " prefetch_opened=0\n"),
		  "%s", logged);
	unsetenv("PMDSM_STATS");
	return 0;
}
