/* SPDX-License-Identifier: MIT */
/* nic.c - the udp device's NIC configuration (see nic.h). */
#include "nic.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#define DEFAULT_CONF "/etc/score/pm.conf"

uint64_t udp_parse_rate(const char *s)
{
	char *end;
	double v = strtod(s, &end);
	uint64_t mult = 1;

	if (end == s || v <= 0)
		return 0;
	switch (tolower((unsigned char)*end)) {
	case 'k': mult = 1000ull; end++; break;
	case 'm': mult = 1000000ull; end++; break;
	case 'g': mult = 1000000000ull; end++; break;
	case '\0': break;
	default: return 0;
	}
	if (*end && strcmp(end, "bit") != 0 && strcmp(end, "bps") != 0)
		return 0;
	return (uint64_t)(v * (double)mult);
}

int udp_same_network(uint32_t a, uint8_t pa, uint32_t b, uint8_t pb)
{
	uint8_t p = pa < pb ? pa : pb;
	uint32_t mask = p == 0 ? 0 : htonl(~0u << (32 - p));

	return (a & mask) == (b & mask);
}

static int prefix_of(const struct sockaddr *mask)
{
	uint32_t m = ntohl(((const struct sockaddr_in *)mask)->sin_addr.s_addr);
	int p = 0;

	while (m & 0x80000000u) {
		p++;
		m <<= 1;
	}
	return p;
}

static uint16_t mtu_of(const char *name)
{
	struct ifreq ifr;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	uint16_t mtu = 1500;

	if (fd < 0)
		return mtu;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
	if (ioctl(fd, SIOCGIFMTU, &ifr) == 0 && ifr.ifr_mtu > 0)
		mtu = ifr.ifr_mtu > 65535 ? 65535 : (uint16_t)ifr.ifr_mtu;
	close(fd);
	return mtu;
}

/* Find the interface named or addressed by want ("eth0" or "10.0.0.1"). */
static int lookup(const struct ifaddrs *all, const char *want, struct udp_nic *nic)
{
	struct in_addr a;
	int by_addr = inet_pton(AF_INET, want, &a) == 1;

	for (const struct ifaddrs *i = all; i; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !i->ifa_netmask)
			continue;
		const struct sockaddr_in *sin = (const struct sockaddr_in *)i->ifa_addr;

		if (by_addr ? sin->sin_addr.s_addr != a.s_addr : strcmp(i->ifa_name, want) != 0)
			continue;
		snprintf(nic->name, sizeof(nic->name), "%s", i->ifa_name);
		nic->addr = sin->sin_addr.s_addr;
		nic->prefix = (uint8_t)prefix_of(i->ifa_netmask);
		nic->mtu = mtu_of(i->ifa_name);
		return 0;
	}
	return -ENODEV;
}

/* One "NAME[@RATE]" item of PM_UDP_NICS or one config line's words. */
static int add_nic(const struct ifaddrs *all, const char *name, const char *rate,
		   struct udp_nic *nics, int n, char *err, size_t errlen)
{
	if (n == UDP_MAX_NICS) {
		snprintf(err, errlen, "more than %d NICs configured", UDP_MAX_NICS);
		return -E2BIG;
	}
	memset(&nics[n], 0, sizeof(nics[n]));
	if (lookup(all, name, &nics[n])) {
		snprintf(err, errlen, "NIC '%s': no such IPv4 interface or address", name);
		return -ENODEV;
	}
	if (rate && !(nics[n].rate_bps = udp_parse_rate(rate))) {
		snprintf(err, errlen, "NIC '%s': bad rate '%s' (e.g. 1gbit, 100mbit)", name, rate);
		return -EINVAL;
	}
	return 0;
}

static int from_env(const struct ifaddrs *all, const char *list, struct udp_nic *nics,
		    char *err, size_t errlen)
{
	char buf[1024];
	int n = 0;

	snprintf(buf, sizeof(buf), "%s", list);
	for (char *save = NULL, *item = strtok_r(buf, ", ", &save); item;
	     item = strtok_r(NULL, ", ", &save)) {
		char *rate = strchr(item, '@');

		if (rate)
			*rate++ = '\0';
		int e = add_nic(all, item, rate, nics, n, err, errlen);

		if (e)
			return e;
		n++;
	}
	if (n == 0) {
		snprintf(err, errlen, "PM_UDP_NICS is empty");
		return -EINVAL;
	}
	return n;
}

static int from_file(const struct ifaddrs *all, FILE *f, const char *path,
		     struct udp_nic *nics, char *err, size_t errlen)
{
	char line[512];
	int n = 0, lineno = 0;

	while (fgets(line, sizeof(line), f)) {
		char *words[4] = { 0 };
		int nw = 0;

		lineno++;
		char *hash = strchr(line, '#');

		if (hash)
			*hash = '\0';
		for (char *save = NULL, *w = strtok_r(line, " \t\r\n", &save); w && nw < 4;
		     w = strtok_r(NULL, " \t\r\n", &save))
			words[nw++] = w;
		if (nw == 0)
			continue;
		if (strcmp(words[0], "nic") != 0 || nw == 1 || nw == 3 ||
		    (nw == 4 && strcmp(words[2], "rate") != 0)) {
			snprintf(err, errlen, "%s:%d: expected 'nic NAME [rate RATE]'", path, lineno);
			return -EINVAL;
		}
		int e = add_nic(all, words[1], nw == 4 ? words[3] : NULL, nics, n, err, errlen);

		if (e)
			return e;
		n++;
	}
	return n;
}

static int from_system(const struct ifaddrs *all, struct udp_nic *nics)
{
	int n = 0;

	for (const struct ifaddrs *i = all; i && n < UDP_MAX_NICS; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !i->ifa_netmask ||
		    !(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK))
			continue;
		if (lookup(all, i->ifa_name, &nics[n]) == 0)
			n++;
	}
	if (n == 0 && lookup(all, "127.0.0.1", &nics[0]) == 0)
		n = 1;
	return n;
}

int udp_nics_configure(struct udp_nic *nics, char *err, size_t errlen)
{
	return udp_nics_configure_from(getenv("PM_UDP_NICS"), getenv("PM_UDP_CONF"), nics, err,
				       errlen);
}

int udp_nics_configure_from(const char *env, const char *conf, struct udp_nic *nics, char *err,
			    size_t errlen)
{
	struct ifaddrs *all;
	int n;

	if (getifaddrs(&all) < 0) {
		snprintf(err, errlen, "getifaddrs: %s", strerror(errno));
		return -errno;
	}
	if (env && *env) {
		n = from_env(all, env, nics, err, errlen);
	} else {
		const char *path = conf && *conf ? conf : DEFAULT_CONF;
		FILE *f = fopen(path, "re");

		if (f) {
			n = from_file(all, f, path, nics, err, errlen);
			fclose(f);
			if (n == 0)
				n = from_system(all, nics);
		} else if (conf && *conf) {
			snprintf(err, errlen, "PM_UDP_CONF=%s: %s", conf, strerror(errno));
			n = -errno;
		} else {
			n = from_system(all, nics);
		}
	}
	freeifaddrs(all);
	if (n == 0) {
		snprintf(err, errlen, "no IPv4 interface found");
		return -ENODEV;
	}
	return n;
}
