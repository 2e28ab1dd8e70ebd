/* The doctor's side protocol: plain text lines over TCP, so a capture or a
 * `nc` session can read it.
 *
 *   client: "wimm-doctor <version> <fabric>"
 *   server: "wimm-doctor <version> ok <device or provider>"
 *         | "wimm-doctor <version> error <why>"
 *
 * then one request line, one reply line ("error <why>" for a failed
 * request), until "bye" or the end of the connection. A peer whose version
 * differs is refused by both sides with a message naming both versions.
 *
 * verbs requests (the server is the receiving end of the probe pair):
 *   rx <qpn> <psn> <gid> <mtu>  -> rx <qpn> <psn> <gid> <mtu> <addr> <rkey> <len> <dev>
 *   qp                          -> qp <ok> <state> <mtu> <retry> <rnr_retry> <timeout>
 *                                     <min_rnr> <access>
 *   key <addr> <rkey> <len>     -> key <live> <in_bounds> <access> <mr_addr> <mr_len> <nlive>
 *   cq                          -> cq <cqe> <recv_posted> <outstanding> <cq_err> <events|->
 *   poll <ms> <want>            -> wc <n> {<status> <opcode> <with_imm> <imm> <len>}*n
 *   counters                    -> counters <n|-1> {<name>=<value>}*n
 * ofi requests:
 *   info                        -> info <found> <caps> <mode> <mr_mode> <cq_data_size>
 *                                     <msg_order> <ep_type> <mr_key_size>
 *   probe                       -> listen <port>, then, once the probes are in or the
 *                                  time is up: events <n> {<imm> <len> <ok>}*n
 */
#ifndef WIMM_DOCTOR_PROTO_H
#define WIMM_DOCTOR_PROTO_H

#include <stdio.h>

#include "doctor.h"

#define DP_LINE 4096

struct dp_conn {
	FILE *in, *out;
	char peer[64]; /* the peer's device or provider */
};

/* Connect and greet; -1 with err set (no answer, refused, other version). */
int dp_connect(const char *host, int port, const char *fabric, int timeout_ms, struct dp_conn *c,
	       char *err, size_t errlen);
/* Send one request (printf-style), read the reply into line; -1 with err
 * set on a broken connection or an "error" reply. */
int dp_call(struct dp_conn *c, char *line, size_t cap, char *err, size_t errlen, const char *fmt,
	    ...) __attribute__((format(printf, 6, 7)));
/* Read one more line (the ofi probe's second reply). */
int dp_read(struct dp_conn *c, char *line, size_t cap, int timeout_ms, char *err, size_t errlen);
void dp_close(struct dp_conn *c);

/* The server's handlers for one request line: 1 handled (reply written),
 * 0 not theirs. */
struct dv_serve;
int dv_serve_line(struct dv_serve **s, const char *dev, const struct dr_opts *o, char *line,
		  FILE *out);
void dv_serve_end(struct dv_serve **s);
int do_serve_line(const char *prov, const struct dr_opts *o, char *line, FILE *out);

#endif
