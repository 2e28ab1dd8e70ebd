/* verbs backend: what `wimm info` shows (devices, ports, GIDs, limits) and
 * the `auto` probe. Uses plain libibverbs so it works without rdma_cm.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verbs/verbs_internal.h"

#define VERBS_MAX_GIDS 64

static const char *verbs_port_state(enum ibv_port_state s)
{
	switch (s) {
	case IBV_PORT_DOWN:
		return "DOWN";
	case IBV_PORT_INIT:
		return "INIT";
	case IBV_PORT_ARMED:
		return "ARMED";
	case IBV_PORT_ACTIVE:
		return "ACTIVE";
	case IBV_PORT_ACTIVE_DEFER:
		return "ACTIVE_DEFER";
	default:
		return "NOP";
	}
}

static int verbs_mtu_bytes(enum ibv_mtu m)
{
	return m >= IBV_MTU_256 && m <= IBV_MTU_4096 ? 128 << m : 0;
}

static const char *verbs_link_layer(uint8_t ll)
{
	return ll == IBV_LINK_LAYER_ETHERNET	 ? "Ethernet"
	       : ll == IBV_LINK_LAYER_INFINIBAND ? "InfiniBand"
						 : "unknown";
}

static void verbs_guid_str(__be64 guid, char *buf, size_t len)
{
	uint64_t g = be64toh(guid);

	snprintf(buf, len, "%04x:%04x:%04x:%04x", (unsigned)(g >> 48) & 0xffff,
		 (unsigned)(g >> 32) & 0xffff, (unsigned)(g >> 16) & 0xffff, (unsigned)g & 0xffff);
}

/* max_inline is found by creating a QP, which needs a PD and a CQ. */
static uint32_t verbs_dev_inline(struct ibv_context *ctx)
{
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq;
	uint32_t v = 0;

	if (!pd)
		return 0;
	cq = ibv_create_cq(ctx, 2, NULL, NULL, 0);
	if (cq) {
		v = verbs_probe_inline(pd, cq);
		ibv_destroy_cq(cq);
	}
	ibv_dealloc_pd(pd);
	return v;
}

static void verbs_describe_port(FILE *f, int json, struct ibv_context *ctx, uint8_t p,
				const struct ibv_port_attr *pa)
{
	struct ibv_gid_entry g[VERBS_MAX_GIDS];
	char txt[INET6_ADDRSTRLEN];
	ssize_t ng, i;
	int gfirst = 1;

	if (json)
		fprintf(f,
			"%s{\"port\":%u,\"state\":\"%s\",\"active_mtu\":%d,"
			"\"link_layer\":\"%s\",\"max_msg_sz\":%u,\"gids\":[",
			p > 1 ? "," : "", p, verbs_port_state(pa->state),
			verbs_mtu_bytes(pa->active_mtu), verbs_link_layer(pa->link_layer),
			pa->max_msg_sz);
	else
		fprintf(f, "    port %u: %s, active_mtu %d, link_layer %s, max_msg_sz %u\n", p,
			verbs_port_state(pa->state), verbs_mtu_bytes(pa->active_mtu),
			verbs_link_layer(pa->link_layer), pa->max_msg_sz);
	/* the table holds only valid (non-zero) entries */
	ng = ibv_query_gid_table(ctx, g, VERBS_MAX_GIDS, 0);
	for (i = 0; i < ng; i++) {
		if (g[i].port_num != p)
			continue;
		inet_ntop(AF_INET6, g[i].gid.raw, txt, sizeof(txt));
		if (json)
			fprintf(f, "%s{\"index\":%u,\"gid\":\"%s\",\"type\":\"%s\"}",
				gfirst ? "" : ",", g[i].gid_index, txt,
				g[i].gid_type == IBV_GID_TYPE_ROCE_V2	? "RoCEv2"
				: g[i].gid_type == IBV_GID_TYPE_ROCE_V1 ? "RoCEv1"
									: "IB");
		else
			fprintf(f, "      gid[%u] %s%s\n", g[i].gid_index, txt,
				g[i].gid_type == IBV_GID_TYPE_ROCE_V2 ? " (RoCEv2)" : "");
		gfirst = 0;
	}
	if (json)
		fputs("]}", f);
}

static void verbs_describe_dev(FILE *f, int json, int *first, struct ibv_device *dev)
{
	struct ibv_context *ctx = ibv_open_device(dev);
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	const char *name = ibv_get_device_name(dev);
	char guid[32];
	uint32_t inl;
	uint8_t p;

	if (!ctx || ibv_query_device(ctx, &da)) {
		if (!json)
			fprintf(f, "verbs:%s  (cannot open)\n", name);
		if (ctx)
			ibv_close_device(ctx);
		return;
	}
	verbs_guid_str(ibv_get_device_guid(dev), guid, sizeof(guid));
	inl = verbs_dev_inline(ctx);
	if (json) {
		fprintf(f,
			"%s{\"fabric\":\"verbs:%s\",\"device\":\"%s\",\"node_guid\":\"%s\","
			"\"max_qp_wr\":%d,\"max_cqe\":%d,\"max_srq_wr\":%d,\"max_sge\":%d,"
			"\"max_inline\":%u,\"ports\":[",
			*first ? "" : ",", name, name, guid, da.max_qp_wr, da.max_cqe,
			da.max_srq_wr, da.max_sge, inl);
		*first = 0;
	} else {
		fprintf(f,
			"verbs:%s  node_guid %s\n    max_qp_wr %d, max_cqe %d, max_srq_wr %d,"
			" max_sge %d, max_inline %u (probed)\n",
			name, guid, da.max_qp_wr, da.max_cqe, da.max_srq_wr, da.max_sge, inl);
	}
	for (p = 1; p <= da.phys_port_cnt; p++) {
		if (ibv_query_port(ctx, p, &pa) == 0)
			verbs_describe_port(f, json, ctx, p, &pa);
	}
	if (json)
		fputs("]}", f);
	ibv_close_device(ctx);
}

int verbs_describe(FILE *f, int json, int *first)
{
	struct ibv_device **list;
	int n = 0, i;

	list = ibv_get_device_list(&n);
	if (!list || n == 0) {
		if (!json)
			fputs("verbs: no RDMA device\n", f);
		if (list)
			ibv_free_device_list(list);
		return 0;
	}
	for (i = 0; i < n; i++)
		verbs_describe_dev(f, json, first, list[i]);
	ibv_free_device_list(list);
	return 0;
}

/* A device qualifies when rdma_cm can use it and a port is ACTIVE. */
int verbs_auto_probe(char *spec, size_t spec_len)
{
	struct ibv_context **devs;
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	int n = 0, i, found = 0;
	uint8_t p;

	devs = rdma_get_devices(&n);
	if (!devs)
		return 0;
	for (i = 0; i < n && !found; i++) {
		if (ibv_query_device(devs[i], &da))
			continue;
		for (p = 1; p <= da.phys_port_cnt && !found; p++) {
			if (ibv_query_port(devs[i], p, &pa) == 0 && pa.state == IBV_PORT_ACTIVE) {
				snprintf(spec, spec_len, "%s",
					 ibv_get_device_name(devs[i]->device));
				found = 1;
			}
		}
	}
	rdma_free_devices(devs);
	return found;
}
