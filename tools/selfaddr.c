/* --self without HOST: an address both ends can use on the opened fabric.
 *
 * libfabric's tcp and shm reach 127.0.0.1. An RDMA device does not: rdma_cm
 * resolves a route to 127.0.0.1 through lo, which has no RDMA device ("No
 * such device"). On verbs the address is the one of the netdev under the
 * device, found through sysfs: /sys/class/infiniband/<dev>/ports/1/
 * gid_attrs/ndevs/<i> names the netdev of GID i (RoCE), then getifaddrs()
 * gives its IPv4 address (else a global IPv6 one).
 */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

#define SELF_LOOPBACK "127.0.0.1"
#define SYSFS_IB "/sys/class/infiniband"
#define MAX_GIDS 16

/* The netdev under port 1 of dev, or 0 if sysfs names none. */
static int device_netdev(const char *dev, char *out, size_t len)
{
	for (int i = 0; i < MAX_GIDS; i++) {
		char path[256];
		snprintf(path, sizeof(path), SYSFS_IB "/%s/ports/1/gid_attrs/ndevs/%d", dev, i);
		FILE *f = fopen(path, "r");
		if (f == NULL)
			continue;
		/* Reading an unused GID's entry fails (EINVAL): try the next. */
		char *line = fgets(out, (int)len, f);
		fclose(f);
		if (line == NULL)
			continue;
		out[strcspn(out, "\n")] = '\0';
		if (out[0] != '\0')
			return 1;
	}
	return 0;
}

/* An IPv4 address of netdev, else a global IPv6 one; 0 if it has neither. */
static int netdev_address(const char *netdev, char *out, size_t len)
{
	struct ifaddrs *all;
	if (getifaddrs(&all) != 0)
		return 0;
	int found = 0;
	for (int want = AF_INET; !found && want != 0; want = want == AF_INET ? AF_INET6 : 0) {
		for (struct ifaddrs *a = all; a != NULL && !found; a = a->ifa_next) {
			if (a->ifa_addr == NULL || a->ifa_addr->sa_family != want ||
			    strcmp(a->ifa_name, netdev) != 0)
				continue;
			const void *bytes;
			if (want == AF_INET) {
				bytes = &((const struct sockaddr_in *)(const void *)a->ifa_addr)
					     ->sin_addr;
			} else {
				const struct in6_addr *a6 =
				    &((const struct sockaddr_in6 *)(const void *)a->ifa_addr)
					 ->sin6_addr;
				/* A link-local address needs a scope id in the URI. */
				if (IN6_IS_ADDR_LINKLOCAL(a6))
					continue;
				bytes = a6;
			}
			found = inet_ntop(want, bytes, out, (socklen_t)len) != NULL;
		}
	}
	freeifaddrs(all);
	return found;
}

const char *cli_self_host(const char *fabric, char *buf, size_t len)
{
	if (strncmp(fabric, "verbs:", 6) != 0)
		return SELF_LOOPBACK;
	const char *dev = fabric + 6;
	char netdev[IF_NAMESIZE + 1];
	if (!device_netdev(dev, netdev, sizeof(netdev)))
		cli_die("--self: %s names no network device under %s/%s/ports/1/gid_attrs/ndevs"
			" (an InfiniBand port has none): pass the address to use as HOST,"
			" e.g. wimm pingpong --self -f %s <ipoib-address>",
			fabric, SYSFS_IB, dev, fabric);
	if (!netdev_address(netdev, buf, len))
		cli_die("--self: %s sits on %s, which has no IP address: give it one"
			" (ip addr add 192.0.2.1/24 dev %s) or pass the address as HOST",
			fabric, netdev, netdev);
	return buf;
}
