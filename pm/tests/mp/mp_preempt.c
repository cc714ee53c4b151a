/* SPDX-License-Identifier: MIT */
/*
 * mp_preempt.c - network preemption from outside, the way scored's agent
 * drives it (docs/pm/control.md), with verified traffic going on.
 *
 * Rank 0 forks a controller before opening PM: it plays the agent.  For
 * --seconds it repeats switch cycles over every rank of the job: write
 * control=1 into each statistics page and SIGURG the pid, wait (bounded)
 * until every state word says 2, freeze the ranks (a cgroup v2 child with
 * cgroup.freeze when one can be made, else SIGSTOP), hold them a few ms,
 * write control=0, thaw (or SIGCONT), SIGURG, and wait until every state
 * word says 1 again.
 *
 * Meanwhile the ranks exchange rounds of numbered, patterned messages all
 * to all and check each exactly once and in order.  The last rank also
 * computes for --compute-ms now and then without any PM call (only the
 * signal handler can answer then, and it must have, within the bound).  At
 * the end every rank checks that it quiesced once per cycle, and rank 0
 * that no rank retransmitted anything from the moment all had drained to
 * the moment all ran again (the controller reads the counters).
 *
 * --idle: the same without any preemption (a baseline for the counters).
 *
 * --off: the job runs with PM_CONTROL=0.  The controller then checks that
 * no rank installed a SIGURG handler and that none answers (state stays 1)
 * and freezes them anyway.
 */
#include "mp.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define K            8                  /* messages per peer per round */
#define MAXR         16
#define STATE_AT     312
#define CONTROL_AT   316
#define RETRANSMITS_AT (368 + 12 * 8)   /* counter 12 of docs/pm/stats.md */
#define ANSWER_NS    5000000000ull      /* the agent's bound: 5 s */
#define OFF_WAIT_NS  200000000ull       /* --off: time given to (not) answer */

/* What the controller and rank 0 share (anonymous, mapped before fork). */
struct shared {
	_Atomic int ready;              /* rank 0: every rank has opened */
	_Atomic int done;               /* controller: no more cycles */
	_Atomic int failed;
	uint64_t cycles;
	uint64_t answer_max_ns, answer_sum_ns, resume_max_ns;
	uint64_t switch_rtx;            /* retransmissions while a switch went on */
	char freeze[16];                /* "cgroup" or "sigstop" */
	char why[256];
};

struct msg_hdr {
	uint64_t seq;                   /* per (sender, receiver) */
	uint64_t round;
	uint32_t stop;                  /* rank 0: this is the last round */
	uint32_t len;
	uint64_t cycles;                /* rank 0, with stop */
};

static struct shared *sh;
static int opt_seconds = 3, opt_compute_ms = 600, opt_off, opt_idle;
static const char *opt_freeze = "auto";

/* ---- the controller (plays scored's agent) ---- */

struct target {
	int pid, rank;
	uint8_t *page;
	char orig_cgroup[256];          /* to move it back */
};

static struct target tg[MAXR];
static int ntg;
static char cg_dir[1024], cg_root[256];

static _Atomic uint32_t *word(const struct target *t, size_t at)
{
	return (_Atomic uint32_t *)(t->page + at);
}

__attribute__((noreturn, format(printf, 1, 2)))
static void ctl_fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(sh->why, sizeof(sh->why), fmt, ap);
	va_end(ap);
	fprintf(stderr, "mp_preempt controller: FAIL: %s\n", sh->why);
	atomic_store(&sh->failed, 1);
	/* Leave nobody frozen or asked. */
	for (int i = 0; i < ntg; i++) {
		atomic_store(word(&tg[i], CONTROL_AT), 0);
		kill(tg[i].pid, SIGCONT);
		kill(tg[i].pid, SIGURG);
	}
	if (cg_dir[0]) {
		char p[1100];
		int fd;

		snprintf(p, sizeof(p), "%s/cgroup.freeze", cg_dir);
		if ((fd = open(p, O_WRONLY)) >= 0) {
			(void)!write(fd, "0", 1);
			close(fd);
		}
	}
	atomic_store(&sh->done, 1);
	_exit(1);
}

static uint64_t now_ns(void)
{
	return check_now_ns();
}

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = { .tv_sec = (time_t)(ns / 1000000000u),
			       .tv_nsec = (long)(ns % 1000000000u) };

	while (nanosleep(&ts, &ts) < 0)
		;
}

/* The pages of this job: pm-stats.* files naming the job's namespace. */
static void find_targets(const char *job, int size)
{
	uint64_t until = now_ns() + 20000000000ull;

	while (ntg < size) {
		DIR *d = opendir(mp_stats_dir());
		struct dirent *e;

		if (now_ns() > until)
			ctl_fail("found %d of %d statistics pages of job %s", ntg, size, job);
		ntg = 0;
		while (d && (e = readdir(d)) && ntg < MAXR) {
			char path[4096];
			struct stat st;

			if (strncmp(e->d_name, "pm-stats.", 9) != 0)
				continue;
			snprintf(path, sizeof(path), "%s/%s", mp_stats_dir(), e->d_name);

			int fd = open(path, O_RDWR);

			if (fd < 0)
				continue;
			if (fstat(fd, &st) < 0 || st.st_size < 976) {
				close(fd);
				continue;
			}
			uint8_t *p = mmap(NULL, 976, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

			close(fd);
			if (p == MAP_FAILED)
				continue;
			if (memcmp(p, "PMSTATS1", 8) != 0 || strcmp((char *)p + 32, job) != 0 ||
			    *(int32_t *)(p + 16) <= 0 || kill(*(int32_t *)(p + 16), 0) < 0) {
				munmap(p, 976);
				continue;
			}
			tg[ntg++] = (struct target){ .pid = *(int32_t *)(p + 16),
						     .rank = *(int32_t *)(p + 20), .page = p };
		}
		if (d)
			closedir(d);
		if (ntg < size) {
			for (int i = 0; i < ntg; i++)
				munmap(tg[i].page, 976);
			sleep_ns(10000000);
		}
	}
}

/* SigCgt of /proc/pid/status: is SIGURG caught? */
static bool catches_sigurg(int pid)
{
	char path[64], line[256];
	bool caught = false;

	snprintf(path, sizeof(path), "/proc/%d/status", pid);

	FILE *f = fopen(path, "r");

	if (!f)
		return false;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "SigCgt:", 7) == 0)
			caught = (strtoull(line + 7, NULL, 16) >> (SIGURG - 1)) & 1;
	fclose(f);
	return caught;
}

static int write_file(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	int ok;

	if (fd < 0)
		return -1;
	ok = write(fd, s, strlen(s)) == (ssize_t)strlen(s);
	close(fd);
	return ok ? 0 : -1;
}

/* A cgroup v2 child of ours holding every rank, or false (SIGSTOP then). */
static bool cgroup_setup(void)
{
	char line[1024], mnt[256] = "", self[256] = "";
	FILE *f = fopen("/proc/mounts", "r");

	while (f && fgets(line, sizeof(line), f)) {
		char dev[64], dir[256], type[64];

		if (sscanf(line, "%63s %255s %63s", dev, dir, type) == 3 &&
		    strcmp(type, "cgroup2") == 0 && !mnt[0])
			snprintf(mnt, sizeof(mnt), "%s", dir);
	}
	if (f)
		fclose(f);
	f = fopen("/proc/self/cgroup", "r");
	while (f && fgets(line, sizeof(line), f))
		if (strncmp(line, "0::", 3) == 0)
			snprintf(self, sizeof(self), "%s", strtok(line + 3, "\n"));
	if (f)
		fclose(f);
	if (!mnt[0] || !self[0])
		return false;
	snprintf(cg_root, sizeof(cg_root), "%s", mnt);
	snprintf(cg_dir, sizeof(cg_dir), "%s%s/pm-preempt-%d", mnt,
		 strcmp(self, "/") == 0 ? "" : self, (int)getpid());
	if (mkdir(cg_dir, 0755) < 0) {
		cg_dir[0] = 0;
		return false;
	}
	for (int i = 0; i < ntg; i++) {
		char path[1400], pid[32];

		snprintf(path, sizeof(path), "/proc/%d/cgroup", tg[i].pid);
		f = fopen(path, "r");
		while (f && fgets(line, sizeof(line), f))
			if (strncmp(line, "0::", 3) == 0)
				snprintf(tg[i].orig_cgroup, sizeof(tg[i].orig_cgroup), "%s",
					 strtok(line + 3, "\n"));
		if (f)
			fclose(f);
		snprintf(path, sizeof(path), "%s/cgroup.procs", cg_dir);
		snprintf(pid, sizeof(pid), "%d", tg[i].pid);
		if (!tg[i].orig_cgroup[0] || write_file(path, pid) < 0) {
			for (int j = 0; j < i; j++) {
				snprintf(path, sizeof(path), "%s%s/cgroup.procs", cg_root,
					 tg[j].orig_cgroup);
				snprintf(pid, sizeof(pid), "%d", tg[j].pid);
				write_file(path, pid);
			}
			rmdir(cg_dir);
			cg_dir[0] = 0;
			return false;
		}
	}
	return true;
}

static void cgroup_teardown(void)
{
	char path[1400], pid[32];

	if (!cg_dir[0])
		return;
	for (int i = 0; i < ntg; i++) {
		snprintf(path, sizeof(path), "%s%s/cgroup.procs", cg_root, tg[i].orig_cgroup);
		snprintf(pid, sizeof(pid), "%d", tg[i].pid);
		write_file(path, pid);
	}
	for (int n = 0; rmdir(cg_dir) < 0 && n < 100; n++)
		sleep_ns(10000000);
	cg_dir[0] = 0;
}

/* The start of a small file (a cgroup or /proc file) as a string. */
static bool read_text(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY);
	ssize_t n;

	if (fd < 0)
		return false;
	n = read(fd, buf, len - 1);
	close(fd);
	buf[n > 0 ? n : 0] = 0;
	return true;
}

static bool cgroup_frozen(void)
{
	char path[1400], buf[256];

	snprintf(path, sizeof(path), "%s/cgroup.events", cg_dir);
	return read_text(path, buf, sizeof(buf)) && strstr(buf, "frozen 1") != NULL;
}

static bool stopped(int pid)
{
	char path[64], buf[512];

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	if (!read_text(path, buf, sizeof(buf)))
		return false;

	char *rp = strrchr(buf, ')');

	return rp && (rp[2] == 'T' || rp[2] == 't');
}

static void freeze(bool on)
{
	char path[1400];

	if (cg_dir[0]) {
		snprintf(path, sizeof(path), "%s/cgroup.freeze", cg_dir);
		if (write_file(path, on ? "1" : "0") < 0)
			ctl_fail("cannot write %s", path);
		uint64_t until = now_ns() + ANSWER_NS;

		while (on && !cgroup_frozen())
			if (now_ns() > until)
				ctl_fail("cgroup %s did not freeze", cg_dir);
		return;
	}
	for (int i = 0; i < ntg; i++)
		kill(tg[i].pid, on ? SIGSTOP : SIGCONT);
	for (int i = 0; on && i < ntg; i++) {
		uint64_t until = now_ns() + ANSWER_NS;

		while (!stopped(tg[i].pid))
			if (now_ns() > until)
				ctl_fail("rank %d (pid %d) did not stop", tg[i].rank, tg[i].pid);
	}
}

/* Wait until every state word says want; the time it took. */
static uint64_t wait_state(uint32_t want, const char *what)
{
	uint64_t t0 = now_ns();

	for (int i = 0; i < ntg; i++) {
		uint32_t s;

		while ((s = atomic_load(word(&tg[i], STATE_AT))) != want) {
			if (now_ns() - t0 > ANSWER_NS)
				ctl_fail("cycle %llu: rank %d (pid %d) did not %s within %llu ms "
					 "(state %u)", (unsigned long long)sh->cycles, tg[i].rank,
					 tg[i].pid, what, (unsigned long long)(ANSWER_NS / 1000000),
					 s);
			sleep_ns(50000);
		}
	}
	return now_ns() - t0;
}

static uint64_t retransmits(void)
{
	uint64_t sum = 0;

	for (int i = 0; i < ntg; i++)
		sum += atomic_load((_Atomic uint64_t *)(tg[i].page + RETRANSMITS_AT));
	return sum;
}

static void controller(const char *job, int size)
{
	while (!atomic_load(&sh->ready))
		sleep_ns(1000000);
	find_targets(job, size);

	bool cg = strcmp(opt_freeze, "sigstop") != 0 && cgroup_setup();

	if (strcmp(opt_freeze, "cgroup") == 0 && !cg)
		ctl_fail("--freeze cgroup: no cgroup v2 child could be made");
	snprintf(sh->freeze, sizeof(sh->freeze), "%s", cg ? "cgroup" : "sigstop");
	if (opt_off)
		for (int i = 0; i < ntg; i++)
			if (catches_sigurg(tg[i].pid))
				ctl_fail("PM_CONTROL=0 but rank %d catches SIGURG", tg[i].rank);

	uint64_t end = now_ns() + (uint64_t)opt_seconds * 1000000000u;
	unsigned x = (unsigned)getpid();

	if (opt_idle)
		sleep_ns((uint64_t)opt_seconds * 1000000000u);
	while (!opt_idle && now_ns() < end) {
		/* Preempt: ask, poke, wait for every answer. */
		for (int i = 0; i < ntg; i++) {
			atomic_store(word(&tg[i], CONTROL_AT), 1);
			kill(tg[i].pid, SIGURG);
		}
		if (opt_off) {
			sleep_ns(OFF_WAIT_NS);
			for (int i = 0; i < ntg; i++)
				if (atomic_load(word(&tg[i], STATE_AT)) != 1)
					ctl_fail("PM_CONTROL=0 but rank %d answered (state %u)",
						 tg[i].rank, atomic_load(word(&tg[i], STATE_AT)));
		}
		uint64_t rtx = retransmits();

		if (!opt_off) {
			uint64_t t = wait_state(2, "quiesce");

			rtx = retransmits();
			sh->answer_sum_ns += t;
			if (t > sh->answer_max_ns)
				sh->answer_max_ns = t;
		}
		/* Switch out: freeze, stay out a few ms. */
		freeze(true);
		sleep_ns(2000000 + (x = x * 1103515245u + 12345u) % 8000000);
		/* Switch in: RUN, thaw, poke. */
		for (int i = 0; i < ntg; i++)
			atomic_store(word(&tg[i], CONTROL_AT), 0);
		freeze(false);
		for (int i = 0; i < ntg; i++)
			kill(tg[i].pid, SIGURG);
		if (!opt_off) {
			uint64_t t = wait_state(1, "resume");

			if (t > sh->resume_max_ns)
				sh->resume_max_ns = t;
			/* From "all drained" to "all running again": hold, freeze,
			 * thaw and the first passes after it.  A retransmission in
			 * here is the switch's doing. */
			sh->switch_rtx += retransmits() - rtx;
		}
		sh->cycles++;
		/* The job's quantum. */
		sleep_ns(5000000 + (x = x * 1103515245u + 12345u) % 30000000);
	}
	cgroup_teardown();
	atomic_store(&sh->done, 1);
	_exit(0);
}

/* ---- the ranks ---- */

static size_t len_of(uint64_t seq, int from, int to)
{
	uint64_t v = (seq * 31 + (uint64_t)from * 7 + (uint64_t)to) * 0x9E3779B97F4A7C15ull;

	return sizeof(struct msg_hdr) + (size_t)((v >> 40) % 3000);
}

static uint64_t seed_of(uint64_t seq, int from, int to)
{
	return ((uint64_t)from << 48) ^ ((uint64_t)to << 40) ^ seq;
}

/* Something the optimizer cannot drop, and no PM call. */
static void compute(int ms)
{
	volatile uint64_t acc = 1;
	uint64_t until = check_now_ns() + (uint64_t)ms * 1000000u;

	while (check_now_ns() < until)
		for (int i = 0; i < 10000; i++)
			acc = acc * 6364136223846793005ull + 1442695040888963407ull;
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
			opt_seconds = atoi(argv[++i]);
		else if (strcmp(argv[i], "--compute-ms") == 0 && i + 1 < argc)
			opt_compute_ms = atoi(argv[++i]);
		else if (strcmp(argv[i], "--freeze") == 0 && i + 1 < argc)
			opt_freeze = argv[++i];
		else if (strcmp(argv[i], "--off") == 0)
			opt_off = 1;
		else if (strcmp(argv[i], "--idle") == 0)
			opt_idle = 1;   /* the baseline: same traffic, no preemption */
		else {
			fprintf(stderr, "usage: mp_preempt [--seconds N] [--compute-ms MS] "
				"[--freeze auto|cgroup|sigstop] [--off] [--idle]\n");
			return 2;
		}
	}
	if (opt_off)
		setenv("PM_CONTROL", "0", 1);

	/* Rank 0 forks the controller before PM exists in this process. */
	const char *rank_env = getenv("OMPI_COMM_WORLD_RANK");
	const char *size_env = getenv("OMPI_COMM_WORLD_SIZE");
	const char *job = getenv("PMIX_NAMESPACE");
	pid_t ctl = -1;

	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(sh != MAP_FAILED);
	if (rank_env && atoi(rank_env) == 0) {
		CHECK_MSG(job && size_env, "needs mpirun (PMIX_NAMESPACE, OMPI_COMM_WORLD_SIZE)");
		ctl = fork();
		CHECK(ctl >= 0);
		if (ctl == 0)
			controller(job, atoi(size_env));
	}

	struct mp m;

	mp_open(&m, NULL, 0, 60);
	CHECK(m.size >= 2 && m.size <= MAXR);

	struct pm_stats st0, st;
	uint64_t seq_out[MAXR] = { 0 }, seq_in[MAXR] = { 0 };
	uint64_t round = 0, cycles = 0, computes = 0, in_compute = 0;
	bool stop = false;
	uint8_t buf[sizeof(struct msg_hdr) + 3000];

	CHECK_OK(pm_stats_get(m.ctx, &st0));
	CHECK_EQ(st0.quiesces, 0);
	mp_barrier(&m);
	if (m.rank == 0)
		atomic_store(&sh->ready, 1);

	while (!stop) {
		bool last = m.rank == 0 && atomic_load(&sh->done);

		if (last)
			cycles = sh->cycles;
		for (int k = 0; k < K; k++) {
			for (int p = 0; p < m.size; p++) {
				if (p == m.rank)
					continue;

				uint64_t s = seq_out[p]++;
				struct msg_hdr h = { .seq = s, .round = round, .stop = last,
						     .len = (uint32_t)len_of(s, m.rank, p),
						     .cycles = cycles };

				memcpy(buf, &h, sizeof(h));
				check_fill(buf + sizeof(h), h.len - sizeof(h), seed_of(s, m.rank, p));
				mp_send(&m, p, buf, h.len);
			}
		}
		for (int n = 0; n < K * (m.size - 1); n++) {
			struct pm_msg msg;
			struct msg_hdr h;

			mp_recv(&m, &msg);
			CHECK_U64(msg.len, >=, sizeof(h));
			memcpy(&h, msg.data, sizeof(h));
			CHECK_MSG(h.seq == seq_in[msg.peer] && h.round == round,
				  "from rank %d: message %llu of round %llu, expected %llu of "
				  "round %llu (lost, doubled or reordered)", msg.peer,
				  (unsigned long long)h.seq, (unsigned long long)h.round,
				  (unsigned long long)seq_in[msg.peer], (unsigned long long)round);
			CHECK_EQ(msg.len, len_of(h.seq, msg.peer, m.rank));
			CHECK_PATTERN((const uint8_t *)msg.data + sizeof(h), msg.len - sizeof(h),
				      seed_of(h.seq, msg.peer, m.rank));
			seq_in[msg.peer]++;
			if (msg.peer == 0 && h.stop) {
				stop = true;
				cycles = h.cycles;
			}
			mp_release(&m, &msg);
		}
		stop |= last;
		/* The last rank computes without PM now and then, while its peers
		 * wait for it in the barrier: nobody sends to it meanwhile, and a
		 * short pm_wait first sends the acknowledgements it owes, so that
		 * whatever the peers see is the preemption's doing. */
		if (m.rank == m.size - 1 && !stop && round % 40 == 20) {
			struct pm_stats a, b;

			pm_wait(m.ctx, 1);
			CHECK_OK(pm_stats_get(m.ctx, &a));
			compute(opt_compute_ms);
			CHECK_OK(pm_stats_get(m.ctx, &b));
			computes++;
			in_compute += b.quiesces - a.quiesces;
		}
		mp_barrier(&m);
		round++;
	}

	CHECK_OK(pm_stats_get(m.ctx, &st));
	uint64_t q = st.quiesces - st0.quiesces;

	if (opt_off) {
		CHECK_MSG(q == 0, "PM_CONTROL=0 but %llu quiesces", (unsigned long long)q);
	} else {
		CHECK_MSG(q == cycles, "%llu quiesces for %llu preemption cycles",
			  (unsigned long long)q, (unsigned long long)cycles);
		/* Retransmissions outside switches (a rank starved of CPU for
		 * longer than the 10 ms minimum timeout on a loaded machine) are
		 * the scheduler's, not the preemption's: the controller checks
		 * the switch windows; here they are only reported, unless
		 * PM_PREEMPT_STRICT=1 asks for none at all. */
		if (getenv("PM_PREEMPT_STRICT") && atoi(getenv("PM_PREEMPT_STRICT")))
			CHECK_MSG(st.retransmits == 0, "%llu retransmissions over %llu cycles",
				  (unsigned long long)st.retransmits, (unsigned long long)cycles);
		/* The point of it all: answered while computing outside PM. */
		CHECK_MSG(!computes || in_compute > 0, "no preemption during %llu compute phases",
			  (unsigned long long)computes);
	}
	printf("rank %d: %llu rounds, %llu messages in, %llu cycles, %llu quiesces "
	       "(%.3f ms mean drain), %llu retransmits, %llu compute phases (%llu quiesces "
	       "answered in them)\n",
	       m.rank, (unsigned long long)round, (unsigned long long)(st.msgs_recv - st0.msgs_recv),
	       (unsigned long long)cycles, (unsigned long long)q,
	       q ? (double)(st.quiesce_ns - st0.quiesce_ns) / (double)q / 1e6 : 0.0,
	       (unsigned long long)st.retransmits, (unsigned long long)computes,
	       (unsigned long long)in_compute);
	mp_close(&m);

	if (m.rank == 0) {
		int status;

		CHECK(waitpid(ctl, &status, 0) == ctl);
		CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			  "the controller failed: %s", sh->why);
		CHECK_MSG(opt_off || opt_idle || cycles >= 10, "only %llu cycles", (unsigned long long)cycles);
		CHECK_MSG(sh->switch_rtx == 0, "%llu retransmissions during switches",
			  (unsigned long long)sh->switch_rtx);
		printf("controller: %llu cycles (freeze by %s), every rank quiesced within "
		       "%.3f ms (mean %.3f ms), resumed within %.3f ms, %llu retransmissions "
		       "during switches\n",
		       (unsigned long long)sh->cycles, sh->freeze, (double)sh->answer_max_ns / 1e6,
		       sh->cycles ? (double)sh->answer_sum_ns / (double)sh->cycles / 1e6 : 0.0,
		       (double)sh->resume_max_ns / 1e6, (unsigned long long)sh->switch_rtx);
	}
	return 0;
}
