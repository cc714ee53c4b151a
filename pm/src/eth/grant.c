/* SPDX-License-Identifier: MIT */
/*
 * grant.c - pm_eth_grant: the eth device's sockets opened by a privileged
 * launcher for a process it starts (pm.h, "Raw Ethernet for unprivileged
 * processes"); link.c's eth_link_open takes them in that process.
 */
#include "pm.h"
#include "link.h"
#include "udp/nic.h"

#include <errno.h>
#include <stdio.h>
#include <unistd.h>

int pm_eth_grant(const char *nics, const char *conf, int *fds, int max_fds, char *env,
		 size_t envlen, char *err, size_t errlen)
{
	struct udp_nic nic[UDP_MAX_NICS];
	int n, got = 0, e = 0;
	size_t used = 0;

	if (!fds || !env || !envlen || !err || !errlen)
		return -EINVAL;
	*env = '\0';
	n = udp_nics_configure_from(nics, conf, nic, err, errlen);
	if (n < 0)
		return n;
	if (max_fds < 2 * n) {
		snprintf(err, errlen, "%d NICs need %d descriptors, room for %d", n, 2 * n, max_fds);
		return -ENOSPC;
	}
	for (int i = 0; i < n && !e; i++) {
		int fd, port_fd;

		e = eth_link_grant(&nic[i], &fd, &port_fd, err, errlen);
		if (e)
			break;
		fds[got++] = fd;
		fds[got++] = port_fd;
		int w = snprintf(env + used, envlen - used, "%s%s=%d/%d", i ? "," : "", nic[i].name,
				 fd, port_fd);

		if (w < 0 || (size_t)w >= envlen - used) {
			snprintf(err, errlen, "PM_ETH_GRANT's value needs more than %zu bytes", envlen);
			e = -ENOSPC;
		} else {
			used += (size_t)w;
		}
	}
	if (e) {
		while (got > 0)
			close(fds[--got]);
		*env = '\0';
		return e;
	}
	return got;
}
