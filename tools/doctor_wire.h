/* AF_PACKET capture for step 5 of `wimm doctor`. */
#ifndef WIMM_DOCTOR_WIRE_H
#define WIMM_DOCTOR_WIRE_H

#include <stdio.h>

#include "doctor_roce.h"

struct dw_cap {
	int fd;
};

/* Start queueing every frame passing netdev; -1 with err set if not. */
int dw_open(struct dw_cap *c, const char *netdev, char *err, size_t errlen);
/* Decode what was queued: RoCEv2 packets into pkts (at most max), the rest
 * counted in *other; each RoCE frame's first bytes hex-dumped to dump if
 * not NULL. */
int dw_drain(struct dw_cap *c, struct roce_pkt *pkts, int max, int *other, FILE *dump);
void dw_close(struct dw_cap *c);

#endif
