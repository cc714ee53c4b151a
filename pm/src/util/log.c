/* SPDX-License-Identifier: MIT */
/* log.c - libpm's diagnostics (log.h). */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One write(2) of a formatted line, no stdio: devices may log from the
 * preemption procedure, which can run in a signal handler that interrupted
 * the application inside stdio (docs/pm/control.md). */
void pm_log(int rank, const char *fmt, ...)
{
	const char *v = getenv("PM_VERBOSE");
	char line[512];
	va_list ap;
	int n, m;

	if (v && strcmp(v, "0") == 0)
		return;
	n = snprintf(line, sizeof(line), "pm[%d]: ", rank);
	va_start(ap, fmt);
	m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	n = m < 0 ? n : n + m > (int)sizeof(line) - 2 ? (int)sizeof(line) - 2 : n + m;
	line[n++] = '\n';
	while (write(STDERR_FILENO, line, (size_t)n) < 0 && errno == EINTR)
		;
}
