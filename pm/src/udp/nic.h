/* SPDX-License-Identifier: MIT */
/*
 * nic.h - which NICs the udp device uses, and how two processes' NICs
 * pair up into paths.
 *
 * Each NIC is on its own network (its own switch).  A process opens one UDP
 * socket per NIC; a *path* to a peer is a pair (our NIC, the peer's NIC) on
 * the same IPv4 network.  Configuration, in order of precedence:
 *   PM_UDP_NICS="eth0,eth1@1gbit,10.0.0.5"     names or IPv4 addresses
 *   the file PM_UDP_CONF (default /etc/score/pm.conf), lines
 *       nic eth0 [rate 1gbit]
 *   every IPv4 interface that is up and not loopback; loopback if none.
 * See docs/pm/udp.md.
 */
#ifndef PM_UDP_NIC_H
#define PM_UDP_NIC_H

#include <net/if.h>
#include <stdint.h>

#define UDP_MAX_NICS 8

struct udp_nic {
	char name[IF_NAMESIZE];
	uint32_t addr;          /* IPv4, network byte order */
	uint8_t prefix;         /* netmask length */
	uint16_t mtu;
	uint64_t rate_bps;      /* configured rate, 0 when unknown */
};

/* What a process publishes about one NIC (little-endian on the wire). */
struct udp_nic_addr {
	uint32_t addr;          /* network byte order, as in sockaddr_in */
	uint16_t port;          /* network byte order */
	uint16_t mtu;
	uint8_t prefix;
	uint8_t mac[6];         /* the eth device's; zero for udp */
	uint8_t _pad;
};

/*
 * Fill nics (at most UDP_MAX_NICS) from the configuration.  Returns the
 * count, or a negative errno with a message in err (a named NIC that does
 * not exist, a bad rate, a malformed line).
 */
int udp_nics_configure(struct udp_nic *nics, char *err, size_t errlen);

/* The same from the values PM_UDP_NICS and PM_UDP_CONF would have (NULL or
 * empty: unset), for another process's environment (pm_eth_grant). */
int udp_nics_configure_from(const char *list, const char *conf, struct udp_nic *nics, char *err,
			    size_t errlen);

/* Parse "1gbit", "100mbit", "10g", "500k", plain bits/s; 0 on error. */
uint64_t udp_parse_rate(const char *s);

/* true when a and b are on the same IPv4 network (the shorter prefix). */
int udp_same_network(uint32_t a, uint8_t pa, uint32_t b, uint8_t pb);

#endif /* PM_UDP_NIC_H */
