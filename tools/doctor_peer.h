/* The receiving end of the verbs probe pair, local or behind --serve. */
#ifndef WIMM_DOCTOR_PEER_H
#define WIMM_DOCTOR_PEER_H

#include "doctor_proto.h"
#include "doctor_verbs.h"

struct dv_peer {
	struct dv_end *local;	  /* loopback: the receiver in this process */
	struct dp_conn *remote;	  /* else: the doctor peer */
	char dev[64], netdev[32]; /* the receiver's device and its netdev */
};

int pe_setup(struct dv_peer *p, enum dr_fault fault, const struct dv_id *tx, struct dv_id *id,
	     struct dv_target *t, char *err, size_t errlen);
int pe_qp(struct dv_peer *p, struct dv_qp_attr *a, char *err, size_t errlen);
int pe_key(struct dv_peer *p, const struct dv_target *t, struct dv_key *k, char *err,
	   size_t errlen);
int pe_cq(struct dv_peer *p, struct dv_cq *c, char *err, size_t errlen);
/* Completions (n >= 0) or -1. */
int pe_poll(struct dv_peer *p, int timeout_ms, int want, struct dv_wc *wc, int max, char *err,
	    size_t errlen);
int pe_counters(struct dv_peer *p, struct hw_counters *c, char *err, size_t errlen);

#endif
