/* SPDX-License-Identifier: MIT */
/*
 * spank_score.c - `srun --score-gang`: a Slurm step's tasks handed to
 * scored, which gang-schedules them beside scrun jobs, with network
 * preemption (docs/admin/slurm.md).
 *
 * In srun (local context, after the allocation): the plugin starts
 * `scrun --adopt --hosts NODES --ppn P`, which submits an adopted job to the
 * scored master and prints SCORE_JOB_ID=N once the job's turn has come and
 * every node's agent made its cgroup.  SCORE_JOB_ID goes into the step's
 * environment.  In slurmstepd (remote context), each task, just before its
 * exec and still root, asks its node's agent over the adoption socket to
 * take it into the job's cgroup; from then on scored freezes and thaws it.
 * When srun's step ends, the plugin tells scrun ("done STATUS"), which ends
 * the job.
 *
 * Without --score-gang the plugin does nothing.  If anything on the way
 * fails (no scrun, no master, no agent on the node), the step fails with a
 * message that says what and where.
 *
 * plugstack.conf arguments (all optional):
 *   socket=PATH   the agent's adoption socket; %h is the node's short host
 *                 name (default /run/score/adopt.sock)
 *   scrun=PATH    the scrun program (default: scrun in PATH)
 *   config=FILE   SCORE_CONFIG for scrun (default: srun's environment)
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

SPANK_PLUGIN(score, 1);

#define SCORE_JOB_VAR "SCORE_JOB_ID"
#define DEFAULT_SOCKET "/run/score/adopt.sock"
/* How long a task waits for its agent's answer. */
#define ADOPT_TIMEOUT_MS 30000

/* The plugin's state within one srun or slurmstepd process. */
static struct {
	int gang;                    /* --score-gang given */
	char socket[PATH_MAX];       /* socket= (may hold %h) */
	char scrun[PATH_MAX];        /* scrun= */
	char config[PATH_MAX];       /* config= */
	pid_t helper;                /* srun: the scrun --adopt process */
	int helper_in;               /* srun: its stdin (we write "done N") */
} plugin = { .socket = DEFAULT_SOCKET, .scrun = "scrun", .helper = -1, .helper_in = -1 };

static int opt_gang(int val, const char *optarg, int remote)
{
	(void)val;
	(void)optarg;
	(void)remote;
	plugin.gang = 1;
	return 0;
}

struct spank_option spank_options[] = {
	{ "score-gang", NULL,
	  "Hand the step's tasks to scored, which gang-schedules them beside scrun "
	  "jobs with network preemption (docs/admin/slurm.md).",
	  0, 0, opt_gang },
	SPANK_OPTIONS_TABLE_END
};

static int copy_arg(char *dst, size_t len, const char *value, const char *name)
{
	if (strlen(value) >= len) {
		slurm_error("score: plugstack.conf: %s= is too long", name);
		return -1;
	}
	snprintf(dst, len, "%s", value);
	return 0;
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	(void)sp;
	for (int i = 0; i < ac; i++) {
		int rc = 0;

		if (!strncmp(av[i], "socket=", 7))
			rc = copy_arg(plugin.socket, sizeof(plugin.socket), av[i] + 7, "socket");
		else if (!strncmp(av[i], "scrun=", 6))
			rc = copy_arg(plugin.scrun, sizeof(plugin.scrun), av[i] + 6, "scrun");
		else if (!strncmp(av[i], "config=", 7))
			rc = copy_arg(plugin.config, sizeof(plugin.config), av[i] + 7, "config");
		else {
			slurm_error("score: plugstack.conf: unknown argument '%s' "
				    "(socket=, scrun=, config=)", av[i]);
			rc = -1;
		}
		if (rc)
			return -1;
	}
	return 0;
}

/* ---- srun: the adopted job ---- */

/* "n1,n2,n3" from Slurm's compressed node list ("n[1-3]"); 0 or -1. */
static int expand_nodes(const char *list, char *out, size_t len, unsigned *count)
{
	hostlist_t hl = slurm_hostlist_create(list);
	char *host;
	size_t used = 0;

	if (!hl)
		return -1;
	*count = 0;
	out[0] = '\0';
	while ((host = slurm_hostlist_shift(hl))) {
		int n = snprintf(out + used, len - used, "%s%s", used ? "," : "", host);

		free(host);
		if (n < 0 || (size_t)n >= len - used) {
			slurm_hostlist_destroy(hl);
			return -1;
		}
		used += (size_t)n;
		(*count)++;
	}
	slurm_hostlist_destroy(hl);
	return *count ? 0 : -1;
}

/* The step's node list: the job environment srun prepared, else its own. */
static int step_nodes(spank_t sp, char *buf, size_t len)
{
	static const char *const vars[] = { "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST",
					    "SLURM_NODELIST" };

	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		if (spank_getenv(sp, vars[i], buf, (int)len) == ESPANK_SUCCESS && buf[0])
			return 0;
		const char *v = getenv(vars[i]);

		if (v && *v && strlen(v) < len) {
			snprintf(buf, len, "%s", v);
			return 0;
		}
	}
	return -1;
}

/* Read the helper's stdout up to "SCORE_JOB_ID=N\n"; N, or 0. */
static unsigned long read_job_id(int fd)
{
	char line[128];
	size_t used = 0;

	for (;;) {
		ssize_t n = read(fd, line + used, sizeof(line) - 1 - used);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return 0;
		used += (size_t)n;
		line[used] = '\0';
		char *nl = strchr(line, '\n');

		if (nl) {
			*nl = '\0';
			if (strncmp(line, SCORE_JOB_VAR "=", sizeof(SCORE_JOB_VAR)))
				return 0;
			return strtoul(line + sizeof(SCORE_JOB_VAR), NULL, 10);
		}
		if (used == sizeof(line) - 1)
			return 0;
	}
}

/* Start `scrun --adopt ...`; its job id, or 0 (helper reaped). */
static unsigned long start_helper(const char *hosts, unsigned ppn, uint32_t slurm_job,
				  uint32_t step)
{
	int in[2], out[2];
	char ppn_s[16], name[64];

	snprintf(ppn_s, sizeof(ppn_s), "%u", ppn);
	snprintf(name, sizeof(name), "slurm-%u.%u", slurm_job, step);
	if (pipe2(in, O_CLOEXEC)) {
		slurm_error("score: --score-gang: pipe: %m");
		return 0;
	}
	if (pipe2(out, O_CLOEXEC)) {
		slurm_error("score: --score-gang: pipe: %m");
		close(in[0]);
		close(in[1]);
		return 0;
	}
	pid_t pid = fork();

	if (pid < 0) {
		slurm_error("score: --score-gang: fork: %m");
		for (int i = 0; i < 2; i++) {
			close(in[i]);
			close(out[i]);
		}
		return 0;
	}
	if (pid == 0) {
		dup2(in[0], STDIN_FILENO);
		dup2(out[1], STDOUT_FILENO);
		if (plugin.config[0])
			setenv("SCORE_CONFIG", plugin.config, 1);
		execlp(plugin.scrun, plugin.scrun, "--adopt", "--quiet", "--hosts", hosts,
		       "--ppn", ppn_s, "--name", name, "slurm-step", (char *)NULL);
		dprintf(STDERR_FILENO, "score: --score-gang: cannot run %s: %s\n", plugin.scrun,
			strerror(errno));
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	unsigned long id = read_job_id(out[0]);

	close(out[0]);
	if (!id) {
		int status = 0;

		close(in[1]);
		waitpid(pid, &status, 0);
		slurm_error("score: --score-gang: scored did not take the step (%s exited %d; "
			    "its message is above)", plugin.scrun,
			    WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
		return 0;
	}
	plugin.helper = pid;
	plugin.helper_in = in[1];
	return id;
}

int slurm_spank_local_user_init(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (!plugin.gang)
		return 0;
	char list[4096], hosts[8192];
	uint32_t ntasks = 0, job = 0, step = 0;
	unsigned count = 0;

	if (step_nodes(sp, list, sizeof(list)) ||
	    expand_nodes(list, hosts, sizeof(hosts), &count)) {
		slurm_error("score: --score-gang: cannot tell the step's nodes");
		return -1;
	}
	spank_get_item(sp, S_JOB_TOTAL_TASK_COUNT, &ntasks);
	spank_get_item(sp, S_JOB_ID, &job);
	spank_get_item(sp, S_JOB_STEPID, &step);
	if (!count || !ntasks || ntasks % count) {
		slurm_error("score: --score-gang: %u tasks on %u nodes: scored runs the same "
			    "number of tasks on every node (use -n a multiple of -N)", ntasks,
			    count);
		return -1;
	}
	unsigned long id = start_helper(hosts, ntasks / count, job, step);

	if (!id)
		return -1;
	char id_s[32];

	snprintf(id_s, sizeof(id_s), "%lu", id);
	/* srun hands its own environment to the step: the tasks' plugin
	 * reads the id from there (spank_setenv works only in slurmstepd). */
	if (setenv(SCORE_JOB_VAR, id_s, 1)) {
		slurm_error("score: --score-gang: cannot pass %s to the tasks: %m", SCORE_JOB_VAR);
		return -1;
	}
	return 0;
}

/* srun's end: the step is over; the helper ends the job and exits. */
int slurm_spank_exit(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (spank_context() != S_CTX_LOCAL || plugin.helper < 0)
		return 0;
	(void)sp;
	dprintf(plugin.helper_in, "done 0\n");
	close(plugin.helper_in);
	int status;

	while (waitpid(plugin.helper, &status, 0) < 0 && errno == EINTR)
		;
	plugin.helper = -1;
	return 0;
}

/* ---- slurmstepd: each task joins the job ---- */

/* socket= with %h replaced by the short host name. */
static int socket_path(char *out, size_t len)
{
	char host[256] = "";
	const char *at = strstr(plugin.socket, "%h");

	if (!at)
		return snprintf(out, len, "%s", plugin.socket) < (int)len ? 0 : -1;
	gethostname(host, sizeof(host) - 1);
	host[strcspn(host, ".")] = '\0';
	int n = snprintf(out, len, "%.*s%s%s", (int)(at - plugin.socket), plugin.socket, host,
			 at + 2);

	return n > 0 && (size_t)n < len ? 0 : -1;
}

/* One request, one answer line, bounded in time; 0 with `answer` set. */
static int ask_agent(const char *path, const char *request, char *answer, size_t len)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0 || strlen(path) >= sizeof(sa.sun_path)) {
		snprintf(answer, len, "socket: %s", fd < 0 ? strerror(errno) : "path too long");
		if (fd >= 0)
			close(fd);
		return -1;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    write(fd, request, strlen(request)) != (ssize_t)strlen(request)) {
		snprintf(answer, len, "no scored agent answers at %s (%s): is it running on "
			 "this node?", path, strerror(errno));
		close(fd);
		return -1;
	}
	size_t used = 0;
	struct timespec t0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	answer[0] = '\0';
	while (used < len - 1 && !memchr(answer, '\n', used)) {
		struct timespec now;

		clock_gettime(CLOCK_MONOTONIC, &now);
		long left = ADOPT_TIMEOUT_MS - ((now.tv_sec - t0.tv_sec) * 1000 +
						(now.tv_nsec - t0.tv_nsec) / 1000000);
		struct pollfd p = { .fd = fd, .events = POLLIN };

		if (left <= 0 || poll(&p, 1, (int)left) <= 0) {
			if (left > 0 && errno == EINTR)
				continue;
			snprintf(answer, len, "the scored agent at %s did not answer within %d s",
				 path, ADOPT_TIMEOUT_MS / 1000);
			close(fd);
			return -1;
		}
		ssize_t n = read(fd, answer + used, len - 1 - used);

		if (n <= 0) {
			if (n < 0 && errno == EINTR)
				continue;
			break;
		}
		used += (size_t)n;
		answer[used] = '\0';
	}
	close(fd);
	answer[strcspn(answer, "\n")] = '\0';
	return 0;
}

int slurm_spank_task_init_privileged(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (!plugin.gang)
		return 0;
	char id[32], path[PATH_MAX], request[96], answer[PATH_MAX + 64];

	if (spank_getenv(sp, SCORE_JOB_VAR, id, sizeof(id)) != ESPANK_SUCCESS || !id[0]) {
		slurm_error("score: --score-gang: the step has no %s (srun's plugin did not "
			    "run: is plugstack.conf the same on every host?)", SCORE_JOB_VAR);
		return -1;
	}
	if (socket_path(path, sizeof(path))) {
		slurm_error("score: --score-gang: plugstack.conf: socket= is too long");
		return -1;
	}
	snprintf(request, sizeof(request), "adopt %s %ld\n", id, (long)getpid());
	if (ask_agent(path, request, answer, sizeof(answer))) {
		slurm_error("score: --score-gang: %s", answer);
		return -1;
	}
	if (strncmp(answer, "ok ", 3)) {
		slurm_error("score: --score-gang: the scored agent refused: %s",
			    strncmp(answer, "error ", 6) ? answer : answer + 6);
		return -1;
	}
	/* PM's statistics pages go where the agent looks for them. */
	spank_setenv(sp, "PM_STATS_DIR", answer + 3, 1);
	return 0;
}
